"""A framework's agent without host root: a user in the `docker` group runs the ADK example
(examples/table_reservation, unmodified, from a copy in its own home) through control with the
default topology, which must be Compose, and the framework runs from the client image.

The user and its venv are test_nonroot's (same fixtures); the framework image is built first, as
root, under this test's tag (the user's run then finds it cached).
"""
import json
import shutil
import subprocess

import pytest

from lab.events import read_events
from tests.e2e.test_nonroot import REPO, RUNUSER, _env, docker_user, ensure_docker  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TAG = "frameworks-nonroot-e2e"


def test_docker_group_user_runs_an_adk_agent_in_compose(docker_user, user_python, monkeypatch):
    from lab.topology.compose import ComposeTopology
    name, uid, home = docker_user
    env = {**_env(home, user_python), "LAB_IMAGE_TAG": TAG}
    ensure_docker(log=None)
    monkeypatch.setenv("LAB_IMAGE_TAG", TAG)
    ComposeTopology.preflight(framework="adk")         # as root: the wheelhouse and the image, cached
    app = home / "table_reservation"
    shutil.copytree(REPO / "examples" / "table_reservation", app)
    subprocess.run(["chown", "-R", f"{uid}:{uid}", str(app)], check=True)
    batch = home / "batch"
    p = subprocess.run([RUNUSER, "-u", name, "--", str(user_python), "-m", "lab", "run", "control", "--client",
                        "adk:table_reservation", "--conversation", "lines.txt", "--out", str(batch)],
                       cwd=app, env=env, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert "using --topology compose" in out, out[-2000:]
    runs = sorted(d for d in batch.iterdir() if d.is_dir()) if batch.is_dir() else []
    assert runs, f"exit {p.returncode}, no run folder: {out[-2000:]}"
    run = runs[0]
    assert "table_reservation:root_agent (table_reservation)" in (run / "client.log").read_text(), out[-2000:]
    ended = [e for e in read_events(run / "events.jsonl") if e.kind == "run.end"]
    assert ended and ended[0].get("status") == "ok", out[-2000:]
    twin = [json.loads(ln) for ln in (run / "twin.jsonl").read_text().splitlines() if ln.strip()]
    assert {t["name"] for t in next(r["tools"] for r in twin if r["kind"] == "twin.conversation")} == \
        {"check_slot", "reserve_table"}
    assert not [str(q) for q in run.rglob("*") if q.stat().st_uid != uid]
