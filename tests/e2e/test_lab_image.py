"""The lab image (Dockerfile.lab): the orchestrator in a container, the netns topology inside it.

Builds the chain docs/compose.md shows, under this test's own tag (the client image by compose, the report
image on top with matplotlib from a wheels/ folder as the offline path does, the lab image on top),
then runs its command for one short B1 run: `docker run <PRIVILEGE> -v <folder>:/lab/captures
livelab-lab:<tag> lab run b1-silent-loss`. PRIVILEGE is its alternative to --privileged: this
machine's Docker runs inside a container that lacks CAP_SYS_RESOURCE, so runc refuses --privileged
("unable to apply caps"); the namespaces and faults need only what it lists. The run must pass with the probe client's B1 record
(every resume refused with 1011, the dropped packets in the capture), and every file must belong
to the owner of the mounted folder (a uid that is not root's), not to the container's root.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lab.events import read_events
from lab.topology.compose import REPO
from tests.e2e.docker_needed import docker_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TAG = "lab-image-e2e"
OWNER = 4242                    # the mounted folder's owner: anyone but root
DURATION = "25"
# ip netns (mounts, setns), iptables, and a writable /proc/sys for the namespaces' sysctls
PRIVILEGE = ["--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp=unconfined",
             "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined"]


def _docker(*args, timeout=900, **kw):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def lab_image(tmp_path_factory):
    docker_or_skip()                        # and the offline path's wheelhouse, as fresh as the sources
    r = subprocess.run(["docker", "compose", "-p", "livelab-lab-image-build", "build", "client"], cwd=REPO,
                       env={**os.environ, "LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"},
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-1000:]
    ctx = tmp_path_factory.mktemp("report-image")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(ctx / "wheels"), "matplotlib>=3.8"],
                   check=True, capture_output=True, timeout=600)
    r = _docker("build", "-q", "-f", str(REPO / "deploy" / "kubernetes" / "Dockerfile.report"),
                "--build-arg", f"IMAGE=livelab-client:{TAG}", "-t", f"livelab-report:{TAG}", str(ctx))
    assert r.returncode == 0, r.stderr[-1000:]
    r = _docker("build", "-q", "-f", str(REPO / "Dockerfile.lab"), "--build-arg", f"REPORT_IMAGE=livelab-report:{TAG}",
                "-t", f"livelab-lab:{TAG}", str(REPO))
    assert r.returncode == 0, r.stderr[-1000:]
    return f"livelab-lab:{TAG}"


def test_the_lab_image_runs_b1_in_its_own_namespaces(lab_image):
    captures = Path(tempfile.mkdtemp(prefix="livelab-lab-image-"))
    os.chown(captures, OWNER, OWNER)
    name = f"livelab-lab-e2e-{os.getpid()}"
    try:
        r = _docker("run", "--rm", *PRIVILEGE, "--name", name, "-v", f"{captures}:/lab/captures", lab_image,
                    "lab", "run", "b1-silent-loss", "--duration", DURATION, timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-3000:]
        assert "b1-silent-loss (probe, netns, twin, gemini)" in out, "the netns topology, inside the container"
        batch = next(captures.iterdir())
        run = next(d for d in batch.iterdir() if d.is_dir())
        verdict = json.loads((run / "verdict.json").read_text())
        assert verdict["met"], verdict.get("expectations")
        results = [e for e in read_events(run / "events.jsonl") if e.kind == "resume.result"]
        assert results and all(e["code"] == 1011 for e in results)
        from lab.capture import dropped
        assert dropped(run / "capture.pcapng"), "the dropped packets are in the capture"
        not_theirs = [str(p) for p in captures.rglob("*") if p.stat().st_uid != OWNER]
        assert not not_theirs, f"files left to the container's root: {not_theirs[:5]}"
    finally:
        _docker("rm", "-f", name, timeout=60)
        shutil.rmtree(captures, ignore_errors=True)
