"""A framework's venv with the user's own requirements: `lab run --requirements FILE`.

The shared venv (scripts/peers-setup.sh, the framework's pins) stays as it is: the user's
requirements go into a copy of it, `.venv-<build>-req-<hash>`, keyed by the file's content and the
build it extends, made once and reused while neither changes. The copy is made in a temporary
folder beside it and renamed into place only once pip succeeded, so a failed install leaves
nothing behind and the next run starts clean. pip reads the file as it would for the user
(`pip install -r FILE`, from the file's own folder, so its relative lines mean what they say there).

    digest(path, build)                 the key: sha256 of the requirements and the build's name
    ensure(build, path, repo, out)      the Build that runs in that copy (made if missing); LabError
                                        (one line) for a missing file or a failed install
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from lab.errors import LabError

DONE = ".lab-requirements"       # written last, with the requirements, once pip succeeded
INSTALL_TIMEOUT_S = 1200


def digest(path: Path, build) -> str:
    h = hashlib.sha256()
    h.update(build.venv_label.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def ensure(build, path: str | Path, repo: Path, out=print):
    path = Path(path)
    if not path.is_file():
        raise LabError(f"--requirements {path}: no such file")
    build.check(repo)            # the framework's own venv first: the copy starts from it
    made = build.with_requirements(digest(path, build))
    target = repo / made.venv
    if (target / DONE).is_file():
        return made
    base = (repo / build.base_venv).resolve()
    out(f"  installing {path} into {made.venv} (a copy of {build.base_venv}; made once)")
    tmp = Path(tempfile.mkdtemp(prefix=f"{made.venv}.", dir=repo))
    try:
        subprocess.run(["cp", "-a", f"{base}/.", str(tmp)], check=True, capture_output=True, text=True)
        p = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "-r", str(path.resolve())], cwd=path.resolve().parent, capture_output=True, text=True,
                           timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            said = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
            raise LabError(f"--requirements {path}: pip could not install it into {build.name}'s venv: {said}")
        (tmp / DONE).write_text(path.read_text())
        shutil.rmtree(target, ignore_errors=True)      # a half-made copy of an older try
        tmp.rename(target)
    except subprocess.CalledProcessError as e:
        raise LabError(f"--requirements {path}: could not copy {build.base_venv}: "
                       f"{(e.stderr or '').strip().splitlines()[-1:] or e}") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"--requirements {path}: pip took over {INSTALL_TIMEOUT_S} s") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return made
