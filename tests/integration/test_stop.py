"""The stop study's text set (001 A-F), one run each for the probe and the guard, in network
namespaces against the twin with the unmodified SDK. Each scenario's own `expect` block is the
verdict; the signatures below are read from the record itself, so a broken report cannot hide a
broken twin or client. About 4 minutes.
"""
import json

import pytest

from lab.events import read_events

pytestmark = pytest.mark.netns

TEXT_SET = ["stop-a-pending", "stop-b-pending-late", "stop-c-blocking", "stop-d-after-commit", "stop-e-silent",
            "stop-f-early"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from lab.report import stop
    from lab.run import run_batch

    out = tmp_path_factory.mktemp("stop")
    lines: list[str] = []
    # all side by side (lab.parallel spaces their starts): each run has its own namespaces, and a
    # cell's verdict is the same either way
    # (tests/integration/test_parallel_matrix.py)
    for client in ("probe", "guard"):
        run_batch(TEXT_SET, n=1, client=client, topology="netns", out_dir=out, out=lines.append,
                  jobs=len(TEXT_SET))
    stop.write(out)
    return out, lines


def _run(batch, scenario, client):
    out, _ = batch
    run = out / f"{scenario}-{client}-01"
    return json.loads((run / "verdict.json").read_text()), read_events(run / "events.jsonl")


@pytest.mark.parametrize("client", ["probe", "guard"])
@pytest.mark.parametrize("scenario", TEXT_SET)
def test_each_scenario_holds_its_expectations(batch, scenario, client):
    verdict, events = _run(batch, scenario, client)
    failed = [c for c in verdict["expectations"] if not c["held"]]
    assert verdict["met"], f"{scenario}/{client}: {failed}\n" + "\n".join(batch[1][-20:])
    assert not [e for e in events if e.kind == "tool.cancellation"], "the API never cancels a call"


def test_a_probe_the_claim_comes_before_the_commit(batch):
    _, events = _run(batch, "stop-a-pending", "probe")
    stop = next(e for e in events if e.kind == "user.say" and "stop" in e["text"].lower())
    claim = next(e for e in events if e.kind == "model.audio" and e.ms > stop.ms)
    commit = next(e for e in events if e.kind == "backend.commit")
    assert 400 <= claim.ms - stop.ms <= 1200 and claim.ms < commit.ms
    assert not [e for e in events if e.kind == "model.interrupted"]


def test_c_probe_interrupted_then_either_a_second_booking_or_a_contradiction(batch):
    verdict, events = _run(batch, "stop-c-blocking", "probe")
    assert [e for e in events if e.kind == "model.interrupted"]
    calls = {e["id"] for e in events if e.kind == "tool.call"}
    commits = [e for e in events if e.kind == "backend.commit"]
    if len(calls) == 2:
        assert len(commits) == 2
    else:
        assert len(commits) == 1 and verdict["metrics"]["told_after_stop"] == "not_booked"


def test_guard_nothing_commits_after_a_stop_and_every_call_is_answered(batch):
    for scenario in TEXT_SET:
        _, events = _run(batch, scenario, "guard")
        stop = next(e for e in events if e.kind == "user.say" and "stop" in e["text"].lower())
        assert not [e for e in events if e.kind == "backend.commit" and e.ms > stop.ms], scenario
        calls = {e["id"] for e in events if e.kind == "tool.call"}
        answered = {e["id"] for e in events if e.kind == "tool.response" and e.get("sent")}
        assert calls <= answered, (scenario, calls - answered)
        assert [e for e in events if e.kind == "user.status" and e.ms >= stop.ms], scenario


def test_the_stop_table_is_written(batch):
    text = (batch[0] / "stop.md").read_text()
    for scenario in TEXT_SET:
        assert f"| {scenario} | guard |" in text and f"| {scenario} | probe |" in text
    assert "claimed booked before the commit" in text
