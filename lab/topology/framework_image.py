"""A framework client in Compose: the framework's venv inside the client image.

Dockerfile.client builds it when the build argument LAB_FRAMEWORK names a framework (compose.yaml
passes $LAB_FRAMEWORK and tags that image `livelab-client:<tag>-<framework>`): scripts/peers-setup.sh,
the one place the framework's pins are written, makes `/opt/lab/.venv-<name>` in a layer of its own
that stays cached while the lab's code changes. On the public image path pip reads PyPI; on the
offline path (no registry, this lab's machines) it reads the wheelhouse docker/wheels/frameworks/<name>,
which `wheelhouse(name)` downloads once for the pins (`peers-setup.sh --pins NAME`), for the image's
Python (cp311, glibc Linux x86_64).

    IMAGE_REPO               where the image holds the framework venvs and lab/peers (a Build's repo there)
    environment(name)        the variables compose reads for that image
    wheelhouse(name, log)    the offline wheelhouse, downloaded when its pins changed; CapabilityError
                             (one line) when pip cannot
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.errors import CapabilityError

REPO = Path(__file__).resolve().parents[2]
IMAGE_REPO = Path("/opt/lab")
WHEELS = REPO / "docker" / "wheels" / "frameworks"
PEERS_SETUP = REPO / "scripts" / "peers-setup.sh"
STAMP = ".pins"
# the image's interpreter and libc: bookworm's CPython 3.11 (glibc 2.36) on x86_64
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "manylinux_2_36_x86_64")
DOWNLOAD_TIMEOUT_S = 1200


def environment(name: str) -> dict[str, str]:
    return {"LAB_FRAMEWORK": name}


def pins(name: str) -> list[str]:
    r = subprocess.run(["bash", str(PEERS_SETUP), "--pins", name], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise CapabilityError(f"compose: no pins for framework {name!r}: {r.stderr.strip()}")
    return r.stdout.split()


def wheelhouse(name: str, log=print) -> Path:
    want = pins(name)
    folder = WHEELS / name
    stamp = folder / STAMP
    if stamp.is_file() and stamp.read_text().split() == want:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    if log:
        log(f"compose: downloading the {name} wheelhouse for the client image ({' '.join(want)}; once)")
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--only-binary=:all:", *plat, "--python-version", "3.11", "--implementation", "cp",
                        "-d", str(folder), *want], capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR")] or r.stderr.strip().splitlines() \
            or ["no output"]
        raise CapabilityError(f"compose: cannot download the {name} wheelhouse for the client image: {said[-1]}")
    stamp.write_text("\n".join(want) + "\n")
    return folder
