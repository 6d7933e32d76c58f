"""A recorded conversation replays to the same verdict: a twin run in network namespaces, its
conversation recorded (`lab conversation record`), then the same scenario played from the recording
(`--conversation`), check by check."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns


def _verdict(batch):
    run = next(p for p in batch.iterdir() if (p / "verdict.json").is_file())
    v = json.loads((run / "verdict.json").read_text())
    return run, v["pass"], {c["name"]: (c["held"], c["observed"]) for c in v["expectations"]}


def test_a_recorded_conversation_replays_to_the_same_verdict(tmp_path):
    from lab.run import run_batch
    lines: list[str] = []
    run, passed, checks = _verdict(run_batch(["control"], client="probe", topology="netns",
                                             out_dir=tmp_path / "first", out=lines.append))
    recorded = tmp_path / "recorded.yaml"
    p = subprocess.run([sys.executable, "-m", "lab", "conversation", "record", str(run), "--out", str(recorded)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    replay, passed2, checks2 = _verdict(run_batch(["control"], client="probe", topology="netns",
                                                  conversation=str(recorded), out_dir=tmp_path / "replay",
                                                  out=lines.append))
    assert passed and (passed2, checks2) == (passed, checks), lines[-20:]
    played = json.loads((replay / "conversation.json").read_text())
    assert played["name"] == f"recorded-{run.name}" and played["lines"] == json.loads(
        (run / "conversation.json").read_text())["lines"]
