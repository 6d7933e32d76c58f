"""The Compose lab without host root: a user in the `docker` group runs B1 and gets root's verdict.

A throw-away user (in the docker group, nothing else) runs `lab run b1-silent-loss` with the default
topology (auto: network namespaces need root, so it must pick compose and say so) from this
checkout, which is world-readable, with a venv of its own on the system's Python (the project's
venv is on an interpreter under /root, which only root can run; the lab's code comes from the
checkout by PYTHONPATH, its dependencies from the offline wheelhouse and PyPI); root runs the same
scenario in the same topology at the same time.
Both verdicts must agree check by check, and the non-root user must own and be able to read every
file of its run folder, capture.pcapng first (the client container writes them as root;
ComposeTopology.down hands them back). The user, its folders and its groups go even when the test
fails. The image is built under this test's own tag, so other runs' livelab-client:dev stays theirs.
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lab.topology.compose import REPO, ensure_docker
from tests.e2e.docker_needed import docker_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DURATION = "25"  # B1 holds at 25 s, as test_compose_scenario runs it
TAG = "nonroot-e2e"            # LAB_IMAGE_TAG: never the shared :dev image
LAB = str(Path(sys.executable).parent / "lab")
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@pytest.fixture
def docker_user():
    """(name, uid, home) of a fresh user in the docker group; removed afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or not Path(RUNUSER).exists():
        pytest.skip("needs root with useradd and runuser to make the non-root user")
    docker_or_skip()
    name = f"llnr{os.getpid() % 100000}"
    home = Path(tempfile.mkdtemp(prefix=f"livelab-{name}-"))
    subprocess.run(["useradd", "-M", "-d", str(home), "-G", "docker", "-s", "/bin/sh", name], check=True,
                   capture_output=True)
    try:
        pw = pwd.getpwnam(name)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        home.chmod(0o755)
        yield name, pw.pw_uid, home
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def _env(home: Path, python: Path) -> dict[str, str]:
    return {"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(REPO),
            "LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


def _checks(batch: Path) -> dict[str, bool]:
    run = next(d for d in batch.iterdir() if d.is_dir())
    verdict = json.loads((run / "verdict.json").read_text())
    return {c["name"]: bool(c.get("held")) for c in verdict.get("checks", [])} | {"pass": bool(verdict["met"])}


def test_docker_group_user_runs_b1_in_compose_with_roots_verdict(docker_user, user_python):
    name, uid, home = docker_user
    env = _env(home, user_python)
    user_batch, root_batch = home / "batch", home / "root-batch"
    ensure_docker(log=None)         # as root: a wheelhouse as fresh as the sources (the offline path)
    # the images first, as root, under this test's tag: both runs then find them built
    subprocess.run(["docker", "compose", "-p", "livelab-nonroot-build", "build", "client", "endpoint"], cwd=REPO,
                   env={**os.environ, "LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"}, check=True,
                   capture_output=True, timeout=1200)
    as_user = subprocess.Popen([RUNUSER, "-u", name, "--", str(user_python), "-m", "lab", "run", "b1-silent-loss",
                                "--duration", DURATION, "--out", str(user_batch)], cwd=home, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    as_root = subprocess.Popen([LAB, "run", "b1-silent-loss", "--topology", "compose", "--duration", DURATION,
                                "--out", str(root_batch)], cwd=REPO,
                               env={**os.environ, "LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        user_out, _ = as_user.communicate(timeout=900)
        root_out, _ = as_root.communicate(timeout=900)
    finally:
        for p in (as_user, as_root):
            if p.poll() is None:
                p.kill()
    assert "network namespaces are not available (not root): using --topology compose" in user_out, user_out[-2000:]
    assert as_root.returncode == 0, root_out[-2000:]
    assert as_user.returncode == 0, user_out[-2000:]
    assert _checks(user_batch) == _checks(root_batch)

    run = next(d for d in user_batch.iterdir() if d.is_dir())
    not_theirs = [str(p) for p in run.rglob("*") if p.stat().st_uid != uid]
    assert not not_theirs, f"files the user does not own: {not_theirs}"
    # the user reads the capture, with the lab's own reader, and finds the dropped packets in it
    probe = ("import sys; from lab.capture import dropped; "
             "sys.exit(0 if dropped(sys.argv[1]) else 3)")
    r = subprocess.run([RUNUSER, "-u", name, "--", str(user_python), "-c", probe, str(run / "capture.pcapng")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-1000:]
