"""`lab down` typed while runs are live: it spares them, and takes only a run whose orchestrator died.

Three short `lab run b1-silent-loss` batches run at once in network namespaces, each its own `lab run`
process (an orchestrator). `lab down` during them leaves all three alone; after a `kill -9` of the
third's orchestrator, `lab down` removes that run's namespaces, processes and records, and the other
two finish and pass.

Other engineers' runs and tests share this machine, so this test must only ever remove what it
created. Two fences make sure of that: every `lab down` here is given `--owner` with the pids of the
three orchestrators this test started (a machine-wide `lab down` without it would take any
namespace that carries no owner record, as an older lab's runs do), and the runs and `lab down`
share a pid folder of the test's own (LIVELAB_PID_DIR), so no owner record or pidfile of another run
is even read. That is why it is not marked `serial`: nothing it does reaches past its own runs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netem import cleanup
from netem.kernel import list_netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# b1: the path never returns, so a run lasts its whole duration (a control run ends with its
# conversation, which on a quiet machine can be before the second `lab down`); 25 s passes for probe
SCENARIO, DURATION = "b1-silent-loss", "25"


def _lab(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "lab", *args], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _down(env, pids) -> str:
    p = subprocess.run([sys.executable, "-m", "lab", "down", *(f"--owner={pid}" for pid in pids)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _wait_for_agents(pid_dir: Path, runs: dict, timeout: float = 90.0) -> dict[int, str]:
    """orchestrator pid -> its run id, once each has brought its topology up and started its agent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {cleanup.token_pid(t): r for r, t in cleanup.owners(pid_dir).items()}
        ids = {pid: found.get(pid) for pid in runs}
        if all(r and list(pid_dir.glob(f"{r}.agent.*.pid")) for r in ids.values()):
            return ids
        dead = [pid for pid, p in runs.items() if p.poll() is not None]
        assert not dead, f"a run ended before its agent started: {[runs[d].stdout.read() for d in dead]}"
        time.sleep(0.2)
    raise AssertionError(f"the runs did not start their agents in {timeout:.0f} s")


def _namespaces(run_id: str) -> list[str]:
    return [n for n in list_netns() if cleanup.run_of(n) == run_id]


def test_lab_down_spares_live_runs_and_takes_a_killed_ones(tmp_path):
    pid_dir = tmp_path / "run"
    env = {**os.environ, "LIVELAB_PID_DIR": str(pid_dir), "PYTHONPATH": str(REPO)}
    runs: dict[int, subprocess.Popen] = {}
    try:
        for name in ("a", "b", "c"):
            p = _lab(["run", SCENARIO, "--topology", "netns", "--duration", DURATION,
                      "--out", str(tmp_path / name)], env)
            runs[p.pid] = p
        ids = _wait_for_agents(pid_dir, runs)
        a, b, c = runs

        said = _down(env, runs)                          # all three live: nothing goes
        assert "left 3 live runs alone" in said and "removed 0 processes" in said, said
        assert all(_namespaces(r) for r in ids.values())

        os.kill(c, signal.SIGKILL)                       # the third's orchestrator, mid-run
        runs[c].wait(timeout=10)
        said = _down(env, runs)
        assert "left 2 live runs alone" in said, said
        assert _namespaces(ids[c]) == [], said           # the killed run's namespaces ...
        assert not list(pid_dir.glob(f"{ids[c]}.*"))     # ... processes and owner record went
        for pid in (a, b):                               # the live ones kept theirs
            assert runs[pid].poll() is None and _namespaces(ids[pid])

        for pid in (a, b):
            out, _ = runs[pid].communicate(timeout=180)
            assert runs[pid].returncode == 0, out[-3000:]
            name = "a" if pid == a else "b"
            verdicts = [json.loads(v.read_text()) for v in (tmp_path / name).glob("*/verdict.json")]
            assert verdicts and all(v["met"] for v in verdicts), out[-3000:]
            assert _namespaces(ids[pid]) == []           # and took them down themselves
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        if runs:
            _down(env, runs)                             # only this test's three runs
