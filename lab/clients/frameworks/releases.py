"""Release sweeps: `livekit@1.8.0..1.8.9` and `pipecat@latest` as the releases the package index serves.

    expand(["probe", "livekit@1.8.7..1.8.9", "pipecat@latest"])
        -> ["probe", "livekit@1.8.7", "livekit@1.8.8", "livekit@1.8.9", "pipecat@1.14.0"]
    is_sweep("livekit@1.8.7..1.8.9")  True (a range or @latest)
    ensure_venvs(["livekit@1.8.7", ...])   builds each missing venv with scripts/peers-setup.sh, a
                                           few at a time

The releases are pip's own answer (`pip index versions PACKAGE`, through the index pip is
configured with, pre-releases left out as pip leaves them), asked once per framework package and
kept for the day in ~/.cache/livelab/index/ ($LAB_INDEX_CACHE): a sweep of ten releases asks once,
and the nightly run asks afresh each day. A range is inclusive at both ends and ordered by PEP 440
(packaging), so 1.8.10 comes after 1.8.9. A build suffix (+pr003) is not swept: it names a patch
of ours at one release.

The venvs are scripts/peers-setup.sh's (`.venv-livekit-1.8.8`), built once and kept: a venv whose
stamp matches is not touched. Several build at once (each venv under its own lock in the script;
pip's download cache is safe to share), at most BUILDS_AT_ONCE: each is a pip resolve and
install, CPU and disk bound.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from lab.clients.frameworks import FRAMEWORKS, REPO, SETUP, resolve
from lab.errors import LabError

BUILDS_AT_ONCE = 2
NO_INDEX = 75          # scripts/peers-setup.sh: the package index cannot be reached
_SWEEP = re.compile(r"^(?P<name>[a-z]+)@(?:(?P<lo>[0-9][0-9A-Za-z.]*)\.\.(?P<hi>[0-9][0-9A-Za-z.]*)|(?P<latest>latest))$")
_AVAILABLE = re.compile(r"^Available versions:\s*(?P<list>.*)$", re.M)


def is_sweep(spec: str) -> bool:
    return _SWEEP.match(spec) is not None


def cache_dir() -> Path:
    return Path(os.environ.get("LAB_INDEX_CACHE") or Path.home() / ".cache" / "livelab" / "index")


def parse_index(text: str, package: str) -> list[str]:
    """The releases in `pip index versions` output, newest first as pip lists them."""
    m = _AVAILABLE.search(text)
    if not m:
        raise LabError(f"pip index versions {package}: no 'Available versions' line in its answer")
    return [v.strip() for v in m["list"].split(",") if v.strip()]


def _ask_pip(package: str) -> str:
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True,
                       timeout=180, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabError(f"pip index versions {package} failed: {why}")
    return p.stdout


def index_releases(package: str, ask: Callable[[str], str] = _ask_pip, today: _dt.date | None = None) -> list[str]:
    """Every release of `package` the index serves, newest first; asked once a day, then cached."""
    day = (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat()
    cached = cache_dir() / f"{package}-{day}.json"
    try:
        return json.loads(cached.read_text())["releases"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    releases = parse_index(ask(package), package)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"package": package, "asked": day, "releases": releases}) + "\n")
    os.replace(tmp, cached)
    return releases


def _version(v: str, spec: str):
    from packaging.version import InvalidVersion, Version   # here: host-only (tests/unit/test_image_requirements.py)
    try:
        return Version(v)
    except InvalidVersion:
        raise LabError(f"client {spec!r}: {v!r} is not a release number") from None


def sweep(spec: str, releases_of: Callable[[str], list[str]] = index_releases) -> list[str]:
    """The client names a sweep spec stands for, oldest release first; [spec] for any other name."""
    m = _SWEEP.match(spec)
    if not m:
        return [spec]
    fw = FRAMEWORKS.get(m["name"])
    if fw is None:
        raise LabError(f"client {spec!r}: no framework {m['name']!r} to sweep ({', '.join(FRAMEWORKS)})")
    # here, not at the top: sweeps run on the host only (a framework runs in netns), and the lab
    # image, which loads this module with the CLI, leaves packaging out (HOST_ONLY in tests/unit/test_image_requirements.py)
    from packaging.version import InvalidVersion, Version
    served = []
    for v in releases_of(fw.package):
        try:
            served.append(Version(v))
        except InvalidVersion:
            continue        # an old non-PEP 440 release: not one a range can name
    if not served:
        raise LabError(f"client {spec!r}: the package index serves no release of {fw.package}")
    if m["latest"]:
        picked = [max(served)]
    else:
        lo, hi = _version(m["lo"], spec), _version(m["hi"], spec)
        if lo > hi:
            raise LabError(f"client {spec!r}: the range runs backwards ({lo} is after {hi})")
        picked = sorted(v for v in served if lo <= v <= hi)
        if not picked:
            raise LabError(f"client {spec!r}: the package index serves no {fw.package} release from {lo} to {hi} "
                           f"(newest it serves: {max(served)})")
    return [f"{fw.name}@{v}" for v in picked]


def expand(clients: list[str], releases_of: Callable[[str], list[str]] = index_releases) -> list[str]:
    """Every client name with the sweeps expanded, each once, in order."""
    out: list[str] = []
    for c in clients:
        for name in sweep(c, releases_of):
            if name not in out:
                out.append(name)
    return out


def ensure_venvs(clients: list[str], out=print, run=subprocess.run, at_once: int = BUILDS_AT_ONCE) -> None:
    """Build the missing venv of every framework release among `clients` (scripts/peers-setup.sh),
    up to `at_once` together; one LabError line for the first that cannot be built."""
    missing = []
    for c in clients:
        build = resolve(c)
        # a plain name's venv is `make peers-setup`'s, as before; a release's is the sweep's to build
        if build is not None and not build.pinned and not build.python(REPO).is_file() and build.spec not in missing:
            missing.append(build.spec)
    if not missing:
        return
    out(f"== venvs: building {len(missing)} ({', '.join(missing)}), {min(at_once, len(missing))} at a time")
    errors: list[str] = []
    todo = list(missing)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                spec = todo.pop(0)
            p = run(["bash", str(REPO / SETUP), spec], cwd=REPO, capture_output=True, text=True,
                    stdin=subprocess.DEVNULL, timeout=1800)
            said = (p.stdout.strip().splitlines() or [""])[-1]
            with lock:
                if p.returncode == 0:
                    out(f"   {said}")
                elif p.returncode == NO_INDEX:
                    errors.append(f"{spec}: no package index to build its venv from ({SETUP} {spec})")
                else:
                    errors.append((p.stderr.strip().splitlines() or [f"{SETUP} {spec} exited {p.returncode}"])[-1])
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(at_once, len(missing)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise LabError(errors[0])
