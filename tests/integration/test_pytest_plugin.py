"""A team's own test file (examples/pytest/test_my_agent.py) run with pytest, as they would: the
`livelab` fixture from the installed package plays a real B1 against the twin in network
namespaces; with the naive client the test fails with the user outcome that failed, the rule behind
it and the run folder printed, with the reference recovery client it passes. And B2 through the
fixture: the recovery client passes for its user, with no reproduction rows (the study's are the
probe's)."""
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
    # what the user got first, the rule behind it with its how-to after
    assert "FAILED for the user" in out and "user outcome conversation_back: no model reply" in out
    assert "rule resume_cutoff_fallback (behind the outcomes): no new session" in out
    assert "What to change: put a short cut-off" in out
    assert "livelab runs" in out and str(tmp_path / "naive" / "tmp") in out


def test_the_recovery_client_passes_it(tmp_path):
    p = _pytest(tmp_path, "recovery")
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "1 passed" in p.stdout


B2_TEST = """
def test_b2_for_my_agent(livelab):
    run = livelab.run("b2-path-return", client="recovery", duration=40)
    assert run.passed, run.explain()
    assert run.reproduces is None and run.verdict["expectations"] == []
    assert run.outcomes["effects_once"]["status"] == "pass", run.explain()
"""


def test_b2_through_the_fixture_passes_the_recovery_client_by_its_users_outcomes(tmp_path):
    (tmp_path / "test_b2.py").write_text(B2_TEST)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "tmp"), "test_b2.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and "1 passed" in p.stdout, (p.stdout + p.stderr)[-3000:]
