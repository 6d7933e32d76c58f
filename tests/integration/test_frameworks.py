"""Framework clients under the lab (issue 11, item 2), run for real in network namespaces.

`--client livekit|pipecat|adk` runs the framework's Live client headless (lab/peers/<name>_app.py)
in its own venv inside the client namespace, reaching the twin by the real endpoint name, and is judged
black-box like any `--client-cmd` app. The venv comes from scripts/peers-setup.sh (instant once
stamped); the test skips only when the package index cannot be reached. A run is bounded by the
scenario's own duration (control: 20 s; the orchestrator kills an agent 120 s past it).
"""
import json
import subprocess
from pathlib import Path

import pytest

from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

from lab.events import read_events

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]


def _venv(peer: str) -> None:
    p = subprocess.run(["bash", str(ROOT / "scripts" / "peers-setup.sh"), peer], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200, stdin=subprocess.DEVNULL)
    said = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["(no output)"])[-1]
    if p.returncode == 75:
        pytest.skip(f"cannot install the {peer} venv: {said}")
    assert p.returncode == 0, said


VERSIONS = {"livekit": "livekit-agents 1.8.9", "pipecat": "pipecat-ai 1.14.0", "adk": "google-adk 2.13.0"}


@pytest.mark.parametrize("framework", sorted(VERSIONS))
def test_framework_passes_control_against_the_twin(tmp_path, framework):
    from lab.run import run_batch

    _venv(framework)
    lines = []
    batch = run_batch(["control"], client=framework, topology="netns", out_dir=tmp_path / "b", out=lines.append)
    run = batch / f"control-{framework}-01"
    verdict = json.loads((run / "verdict.json").read_text())
    # judged by what its user got; the study's rows are the probe's, not the framework's
    assert verdict["pass"] and verdict["held_to"] == "user" and verdict["expectations"] == [], "\n".join(lines[-30:])
    assert {n for n, o in verdict["outcomes"].items() if o["status"] == "pass"} >= {
        "effects_once", "truthful_claims", "last_line_answered", "owed_results_delivered"}, verdict["outcomes"]
    events = read_events(run / "events.jsonl")
    calls = [e for e in events if e.kind == "tool.call" and e.src == "twin-observed"]
    answered = [e for e in events if e.kind == "tool.response" and e.src == "twin-observed"]
    # the framework sent the booked result under the twin's own call id
    assert [e.get("id") for e in calls] == [e.get("id") for e in answered] and answered[0].get("status") == "booked"
    assert VERSIONS[framework] in (run / "client.log").read_text()      # the pinned version ran
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns
