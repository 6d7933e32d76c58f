"""A framework client in Compose: the framework's venv inside the client image.

Dockerfile.client builds it when the build argument LAB_FRAMEWORK names a framework (compose.yaml
passes $LAB_FRAMEWORK and tags that image `livelab-client:<tag>-<framework>`): scripts/peers-setup.sh,
the one place the framework's pins are written, makes `/opt/lab/.venv-<name>` in a layer of its own
that stays cached while the lab's code changes. On the public image path pip reads PyPI; on the
offline path (no registry, this lab's machines) it reads the wheelhouse docker/wheels/frameworks/<name>,
which `wheelhouse(name)` downloads once for the pins (`peers-setup.sh --pins NAME`), for the image's
Python (cp311, glibc Linux x86_64). A dependency published only as a source archive (pipecat's
docopt) is built into a wheel here, and taken only when that wheel is pure Python (it then fits the
image whatever this host is).

    IMAGE_REPO               where the image holds the framework venvs and lab/peers (a Build's repo there)
    environment(name)        the variables compose reads for that image
    wheelhouse(name, log)    the offline wheelhouse, downloaded when its pins changed; CapabilityError
                             (one line) when the index cannot be reached or a pin cannot be had
"""
from __future__ import annotations

import fcntl
import re
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
    # one download at a time into a folder (two test workers, or two runs, may want it together):
    # the second waits, then finds it stamped; a pip writing a wheel another is reading breaks both
    try:
        held = open(WHEELS / f".{name}.lock", "a")
    except OSError:      # a folder this user cannot write: the download below says so in its own words
        return _download(name, want, folder, stamp, log)
    with held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().split() == want:
            return folder
        return _download(name, want, folder, stamp, log)


def _download(name: str, want: list[str], folder: Path, stamp: Path, log) -> Path:
    if log:
        log(f"compose: downloading the {name} wheelhouse for the client image ({' '.join(want)}; once)")
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    built: set[str] = set()
    while True:
        # --find-links the folder itself: the pure wheels built below count as found
        r = _pip("download", "--only-binary=:all:", *plat, "--python-version", "3.11", "--implementation", "cp",
                 "--find-links", str(folder), "-d", str(folder), *want)
        if r.returncode == 0:
            break
        source_only = _failure(name, r.stderr)
        if source_only in built:
            raise CapabilityError(f"compose: the {name} wheelhouse: {source_only} is still not found after "
                                  "building its wheel")
        built.add(source_only)
        _pure_wheel(name, source_only, folder)
    stamp.write_text("\n".join(want) + "\n")
    return folder


# pip's words for a package index it could not reach (it then also says "no matching distribution",
# which would read as a bad pin)
UNREACHABLE = re.compile(r"Failed to establish a new connection: [^'\")]*|Network is unreachable|Temporary failure in "
                         r"name resolution|Name or service not known|Connection refused|ProxyError|ConnectTimeout"
                         r"|Read timed out")
NO_WHEEL = re.compile(r"No matching distribution found for (\S+)")


def _pip(*args: str) -> subprocess.CompletedProcess:
    # a few retries, not pip's default of 5 with long waits: an index that does not answer is one line soon
    return subprocess.run([sys.executable, "-m", "pip", *args, "-q", "--disable-pip-version-check", "--retries", "2",
                           "--timeout", "60"], capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def _failure(name: str, stderr: str) -> str:
    """The requirement that has no wheel for the image, or CapabilityError with pip's reason."""
    if m := UNREACHABLE.search(stderr):
        raise CapabilityError(f"compose: cannot reach the package index for the {name} wheelhouse of the client "
                              f"image ({m.group(0).strip()}); set pip's index (PIP_INDEX_URL) or use "
                              "LAB_IMAGE_BASE=public")
    if m := NO_WHEEL.search(stderr):
        return m.group(1)
    said = [ln for ln in stderr.splitlines() if ln.startswith("ERROR")] or stderr.strip().splitlines() or ["no output"]
    raise CapabilityError(f"compose: cannot download the {name} wheelhouse for the client image: {said[-1]}")


def _pure_wheel(name: str, requirement: str, folder: Path) -> None:
    """Build `requirement` from its source archive into `folder`; keep it only if it is pure Python."""
    before = set(folder.glob("*.whl"))
    r = _pip("wheel", "--no-deps", "-w", str(folder), requirement)
    if r.returncode != 0:
        missing = _failure(name, r.stderr)      # raises when the index cannot be reached
        raise CapabilityError(f"compose: the {name} wheelhouse: no release of {missing} on the package index")
    new = set(folder.glob("*.whl")) - before
    native = [w for w in new if not w.name.endswith("-none-any.whl")]
    for w in native:
        w.unlink()
    if native or not new:
        raise CapabilityError(f"compose: the {name} wheelhouse: {requirement} has no wheel for the client image "
                              "(cp311 manylinux x86_64) and its source does not build a pure-Python one here")
