"""The 004 scenarios (t1-t4), one run each of the session-manager client, in network namespaces
against the twin's vertex profile with the unmodified SDK. Each scenario's own `expect` block is the
verdict; the signatures below are read from the record itself (twin.jsonl, events.jsonl), so a
broken report cannot hide a broken twin or client. About 5 minutes.
"""
import json

import pytest

from lab.events import read_events

pytestmark = pytest.mark.netns

T_SET = ["t1-goaway", "t2-abort-speaking", "t3-silent-loss", "t4-handle-expiry"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from lab.run import run_batch

    out = tmp_path_factory.mktemp("transparent")
    lines: list[str] = []
    # side by side, as in test_stop.py
    run_batch(T_SET, n=1, client="session-manager", topology="netns", out_dir=out, out=lines.append, jobs=len(T_SET))
    return out, lines


def _run(batch, scenario):
    run = batch[0] / f"{scenario}-session-manager-01"
    return (json.loads((run / "verdict.json").read_text()), read_events(run / "events.jsonl"),
            read_events(run / "twin.jsonl"))


@pytest.mark.parametrize("scenario", T_SET)
def test_each_scenario_holds_its_expectations(batch, scenario):
    verdict, _, twin = _run(batch, scenario)
    failed = [c for c in verdict["expectations"] if not c["held"]]
    assert verdict["met"], f"{scenario}: {failed}\n" + "\n".join(batch[1][-20:])
    assert not [e for e in twin if e.kind == "twin.replay" and e["verdict"] not in ("owed", "ok")]


@pytest.mark.parametrize("scenario", ["t1-goaway", "t2-abort-speaking"])
def test_the_resend_was_owed_and_judged_right_on_the_accepted_resume(batch, scenario):
    _, events, twin = _run(batch, scenario)
    owed = [e for e in twin if e.kind == "twin.replay" and e["verdict"] == "owed"]
    ok = [e for e in twin if e.kind == "twin.replay" and e["verdict"] == "ok"]
    assert owed and owed[-1]["owed"] >= 1 and ok and ok[-1]["conn"] == owed[-1]["conn"]
    replay = [e for e in events if e.kind == "session.replay" and e["messages"] >= 1]
    assert replay, "the client says it resent its buffer"


def test_t2_the_first_reconnects_are_refused_and_retried(batch):
    _, events, twin = _run(batch, "t2-abort-speaking")
    results = [e for e in events if e.kind == "resume.result"]
    assert [r["ok"] for r in results][-1] is True and not all(r["ok"] for r in results)
    assert {e["why"] for e in twin if e.kind == "twin.refuse"} == {"idle_release"}
    lines = [e["line"] for e in twin if e.kind == "twin.vad" and e["event"] == "end"]
    assert lines == [0, 1], "the interrupted question is heard once, whole"


def test_t3_the_held_session_forces_a_fresh_one_that_knows_nothing(batch):
    _, events, twin = _run(batch, "t3-silent-loss")
    assert {e["why"] for e in twin if e.kind == "twin.refuse"} == {"old_connection_open"}
    assert [e for e in events if e.kind == "conn.open" and e["purpose"] == "new"]


def test_t4_the_expired_handle_is_refused_then_a_fresh_session(batch):
    _, events, twin = _run(batch, "t4-handle-expiry")
    assert "handle_expired" in {e["why"] for e in twin if e.kind == "twin.refuse"}
    assert [e for e in events if e.kind == "fallback.start"]
