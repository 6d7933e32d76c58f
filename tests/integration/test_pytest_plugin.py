"""A team's own test file (examples/pytest/test_my_agent.py) run with pytest, as they would: the
`livelab` fixture from the installed package plays a real B1 against the twin in network
namespaces; with the naive client the test fails with the rule's advice and the run folder printed,
with the reference recovery client it passes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytest" / "test_my_agent.py"


def _pytest(tmp_path: Path, client: str) -> subprocess.CompletedProcess:
    here = tmp_path / client
    here.mkdir()
    shutil.copy(EXAMPLE, here / EXAMPLE.name)
    env = {**os.environ, "MY_AGENT_CLIENT": client, "MY_AGENT_DURATION": "25"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(here / "tmp"), EXAMPLE.name], cwd=here, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def test_the_naive_client_fails_the_users_test_with_the_rules_advice(tmp_path):
    p = _pytest(tmp_path, "naive")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "1 failed" in out
    assert "rule resume_cutoff_fallback: no new session" in out and "What to change: put a short cut-off" in out
    assert "livelab runs" in out and str(tmp_path / "naive" / "tmp") in out


def test_the_recovery_client_passes_it(tmp_path):
    p = _pytest(tmp_path, "recovery")
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "1 passed" in p.stdout
