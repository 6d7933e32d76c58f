"""Fixtures the Docker end-to-end files share (a fixture imported into two test files would be two
fixtures, each made once per file)."""
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest

from lab.topology.compose import REPO


@pytest.fixture(scope="session")
def user_python():
    """A Python any user can run, with the project's dependencies (not the project: PYTHONPATH).
    Made once per worker: test_nonroot.py and test_frameworks_nonroot.py use it, and tests/conftest.py
    puts both files on one worker."""
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("needs the system's python3 (with venv) for the non-root user")
    venv = Path(tempfile.mkdtemp(prefix="livelab-nonroot-venv-"))
    try:
        venv.chmod(0o755)
        subprocess.run([str(system), "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
        # as the set-up installs a venv: uv when it is here (~4x pip's time), else pip
        r = subprocess.run([str(REPO / "scripts" / "venv-install.sh"), str(venv), "-q",
                            "--find-links", str(REPO / "docker" / "wheels" / "deps"), *deps],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-1000:]
        yield venv / "bin" / "python"
    finally:
        shutil.rmtree(venv, ignore_errors=True)
