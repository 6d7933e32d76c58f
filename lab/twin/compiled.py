"""The twin's hot rooms compiled with mypyc, opt-in: the .py files stay the reference and what runs by default.

mypyc compiles the same typed Python the interpreter runs, so there is one source: the build is a
cache of it, kept outside the source tree under `~/.cache/livelab/mypyc/<key>`, where the key hashes
the compiled modules and every module their types follow (`sources()`), the Python and the mypy
versions and the build's flags. An edit to any of them makes a new key, so a build never runs code
the sources no longer say.

    lab twin compile                       build it (about a minute; needs mypy and a C compiler)
    LAB_TWIN_COMPILED=1 lab twin serve ... run with it (lab/__init__.py reads the switch: one line
                                           and exit 1 when the build is missing or stale)
    lab bench twin -- --compiled           the bench's twin and shell servers with it

With the switch on, an import finder placed first answers for the compiled modules only (the rooms a
microphone chunk and a question pass through, MODULES); every other module of the lab is imported
from its .py as usual.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SWITCH = "LAB_TWIN_COMPILED"
# what a microphone chunk and a question pass through (lab bench twin --breakdown, lab bench
# twin-core): the core, its rooms, the scripted model and the conversation engine it plays; and the
# OpenAI rooms, whose model is a subclass of the engine (an interpreted class cannot subclass a
# compiled one, and a compiled one cannot subclass an interpreted dataclass: hence io_actions, whose
# TimerKey every room's timers subclass). lab.twin.hearing stays interpreted: its Match comes back
# from the recognizer's worker process pickled, and a compiled frozen dataclass cannot be unpickled
MODULES = (
    "lab.twin.core", "lab.twin.session", "lab.twin.turns", "lab.twin.wire", "lab.twin.modalities",
    "lab.twin.activity", "lab.twin.pieces", "lab.twin.io_actions", "lab.twin.model", "lab.twin.usage",
    "lab.twin.spoken", "lab.twin.transparent",
    "lab.twin.openai_core", "lab.twin.openai_session", "lab.twin.openai_wire", "lab.twin.openai_model",
    "lab.conversation.engine", "lab.conversation.intents", "lab.stats.distributions",
)
# the packages (under lab/) whose modules the compiled ones import, beside lab's top-level modules
FOLLOWED = ("twin", "conversation", "stats")
# the mypyc runtime library's module, beside the modules in the build
GROUP = "lab_twin_compiled"
# mypy's checks that the sources do not pass as written, where the code is right at run time: an
# Optional attribute set after construction (Turns.outlet, a Playback's usage) read without a
# narrowing, a `str | None` handed on where the rule above it guarantees a str. Compiled, such a
# value is checked when it crosses into a typed call, so a wrong one raises TypeError: the tests
# that run against the build would show it.
MYPY_FLAGS = ("--ignore-missing-imports", "--follow-imports=silent", "--disable-error-code=union-attr",
              "--disable-error-code=arg-type", "--disable-error-code=index")
KEEP_BUILDS = 6          # about 3 MiB each
ROOT = Path(__file__).resolve().parents[2]      # the folder holding the lab package


class BuildMissing(Exception):
    """The switch is on and no build for these sources exists (or it cannot be made here)."""


def _mypy_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("mypy")
    except Exception:       # not installed: no build can be made or used
        return None


def sources() -> list[Path]:
    """What a build is made from: the compiled modules and every module their types follow (those
    packages whole, and the lab's top-level modules: lab.errors, lab.events, lab.backend, ...)."""
    lab = ROOT / "lab"
    return sorted([*lab.glob("*.py"), *(p for pkg in FOLLOWED for p in (lab / pkg).rglob("*.py"))])


def key() -> str:
    """The hash the build's folder is named by: its sources, the interpreter, mypy and the flags (a
    build follows the types of modules it does not compile, so an edit to any of them makes a new key)."""
    h = hashlib.sha256()
    h.update(f"{sys.version}|{sysconfig.get_platform()}|{_mypy_version()}|{MODULES}|{MYPY_FLAGS}".encode())
    for path in sources():
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "livelab" / "mypyc"


def build_dir(k: str | None = None) -> Path:
    return cache_root() / (k or key())


def _module_files(folder: Path) -> dict[str, Path]:
    """module name -> its extension file in a build folder."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    out = {}
    for path in folder.rglob("*"):
        for suffix in suffixes:
            if path.name.endswith(suffix):
                rel = path.relative_to(folder).as_posix()[: -len(suffix)]
                out[rel.replace("/", ".")] = path
                break
    return out


def problem(k: str | None = None) -> str | None:
    """Why the build cannot be used (missing, or stale: built from other sources), else None."""
    folder = build_dir(k)
    if folder.is_dir() and set(MODULES) <= set(_module_files(folder)):
        return None
    old = [p.name for p in cache_root().glob("*") if p.is_dir()] if cache_root().is_dir() else []
    how = "run `lab twin compile`"
    if old:
        return f"the compiled twin core is stale (built from other sources; {folder} missing): {how}"
    return f"the compiled twin core is missing ({folder}): {how}"


class _Finder:
    """A meta-path finder for the compiled modules only: their extension files from the build."""

    def __init__(self, files: dict[str, Path]):
        self.files = files

    def find_spec(self, name, path=None, target=None):
        f = self.files.get(name)
        if f is None:
            return None
        return importlib.util.spec_from_file_location(name, f, loader=importlib.machinery.ExtensionFileLoader(name, str(f)))


def use(k: str | None = None) -> Path:
    """Import the compiled modules from the build from now on; BuildMissing (one line) if it is not there.
    Called before any of MODULES is imported (lab/__init__.py, when the switch is on)."""
    why = problem(k)
    if why:
        raise BuildMissing(why)
    folder = build_dir(k)
    early = [m for m in MODULES if m in sys.modules and not is_compiled(sys.modules[m])]
    if early:
        raise BuildMissing(f"the compiled twin core came too late: {', '.join(early)} already imported")
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(_module_files(folder)))
    return folder


def is_compiled(module) -> bool:
    return any(str(getattr(module, "__file__", "")).endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)


def which() -> str:
    """One word for a report line: which core this process runs."""
    return "compiled" if any(isinstance(f, _Finder) for f in sys.meta_path) else "interpreted"


def can_build() -> str | None:
    """Why no build can be made here (no mypy, no C compiler, no Python headers), else None."""
    if _mypy_version() is None:
        return "mypy is not installed (pip install mypy)"
    if not (shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")):
        return "no C compiler (cc, gcc)"
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return f"no Python headers ({sysconfig.get_paths()['include']}/Python.h)"
    return None


# run in a child process, in a scratch folder: mypycify prints and writes into the working folder,
# and setuptools there must not read the project's own pyproject.toml
_BUILD = """
import sys
from setuptools import setup
from mypyc.build import mypycify
out, tmp, group, *paths = sys.argv[1:]
setup(name=group, ext_modules=mypycify(paths, opt_level="3", target_dir=tmp, group_name=group),
      script_args=["build_ext", "--build-lib", out, "--build-temp", tmp, "--parallel", "2"])
"""


def build(log=print) -> Path:
    """Compile MODULES into the build folder for the current sources (a no-op when it exists)."""
    k = key()
    folder = build_dir(k)
    if problem(k) is None:
        log(f"compiled twin core: up to date in {folder}")
        return folder
    why = can_build()
    if why:
        raise BuildMissing(f"cannot compile the twin core: {why}")
    cache_root().mkdir(parents=True, exist_ok=True)
    paths = [str(ROOT / (m.replace(".", "/") + ".py")) for m in MODULES]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".build-") as tmp:
        out = Path(tmp) / "out"
        r = subprocess.run([sys.executable, "-c", _BUILD, str(out), str(Path(tmp) / "c"), GROUP, *MYPY_FLAGS,
                            "--cache-dir", str(Path(tmp) / "mypy-cache"), *paths],
                           cwd=tmp, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stdout + r.stderr).strip().splitlines()[-15:]
            raise BuildMissing("mypyc could not compile the twin core:\n" + "\n".join(tail))
        if key() != k:
            raise BuildMissing("the sources changed while the twin core compiled: run it again")
        try:
            out.rename(folder)       # whole, or not at all (another build of the same key may have won)
        except OSError:
            if problem(k) is not None:
                raise
    log(f"compiled twin core: {len(MODULES)} modules in {time.monotonic() - t0:.0f} s -> {folder}")
    _prune(keep=KEEP_BUILDS)
    return folder


def _prune(keep: int) -> None:
    """Remove all but the newest `keep` builds (other worktrees' sources have builds of their own)."""
    builds = sorted((p for p in cache_root().iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[keep:]:
        shutil.rmtree(old, ignore_errors=True)
