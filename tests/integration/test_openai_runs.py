"""OpenAI Realtime runs through the lab itself: the twin served with --protocol openai in network
namespaces, real packets dropped by the client namespace's kernel, judged by the same user outcomes
as a Gemini run.

One batch per client (control, B1 shortened, B2 shortened; the session cap; for the SDK client also
control spoken, which the twin hears by its words), run once per module, and
each verdict's user outcomes asserted: the naive `openai` client (the unmodified SDK, no recovery of
its own) loses the conversation after a silent loss; `openai-recovery` (a new session restored from
its transcript and a backend status note) gets it back, tells the truth and does the booking once.
"""
import json
import subprocess

import pytest

from lab.events import read_events
from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours
from tests.integration.openai_batch import RUNS_SCENARIOS, RUNS_SPOKEN, run_batch, status as _status

pytestmark = pytest.mark.netns

SCENARIOS = RUNS_SCENARIOS
SPOKEN = RUNS_SPOKEN       # one client is enough: the client's audio path is the SDK's own
# B1's path never returns (900 s in the catalogue) and B2's naive run waits out its 100 s: 40 s and 45 s
# leave the 20 s bound of conversation_back behind the loss, so the naive client's FAIL is a real one
SHORT = {"b1-silent-loss": 40, "b2-path-return": 45}


def _batch(tmp_path_factory, client: str, extra: tuple[str, ...] = ()) -> dict[str, tuple]:
    return run_batch(tmp_path_factory, client, [*SCENARIOS, *extra], SHORT)


@pytest.fixture(scope="module")
def naive(tmp_path_factory):
    return _batch(tmp_path_factory, "openai", tuple(SPOKEN))


@pytest.fixture(scope="module")
def recovery(tmp_path_factory):
    return _batch(tmp_path_factory, "openai-recovery")


def _common(run, verdict):
    meta = json.loads((run / "run.json").read_text())
    plan = json.loads((run / "plan.json").read_text())
    assert meta["protocol"] == plan["protocol"] == verdict["protocol"] == "openai"
    assert plan["base_url"].startswith("wss://") and plan["base_url"].endswith("/v1")   # the SDK's form
    twin = read_events(run / "twin.jsonl")
    assert any(e.kind == "twin.accept" and str(e.get("session", "")).startswith("sess_") for e in twin)
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns, f"namespaces left behind: {ns}"


@pytest.mark.parametrize("client", ["naive", "recovery"])
def test_control_passes_for_both_clients(request, client):
    run, v, lines = request.getfixturevalue(client)["control"]
    _common(run, v)
    got = _status(v)
    assert v["pass"] and got["effects_once"] == got["truthful_claims"] == got["last_line_answered"] == "pass", got
    assert got["owed_results_delivered"] == got["no_invented_turn"] == "pass", got
    assert "Protocol: openai" in (run.parent / "summary.md").read_text()


def test_b1_the_naive_client_never_gets_the_conversation_back_and_is_told_what_to_change(naive):
    run, v, lines = naive["b1-silent-loss"]
    _common(run, v)
    got = _status(v)
    assert not v["pass"] and got["conversation_back"] == "fail" and got["effects_once"] == "pass", got
    advice = v["outcomes"]["conversation_back"]["advice"]
    assert "What to change" in advice and "no resume" in advice and "call_id" in advice
    evs = read_events(run / "events.jsonl")
    assert [e.get("purpose") for e in evs if e.kind == "conn.open"] == ["initial"]      # it never reconnected


def test_b1_the_recovery_client_restores_a_new_session_and_tells_the_truth(recovery):
    run, v, lines = recovery["b1-silent-loss"]
    _common(run, v)
    got = _status(v)
    assert v["pass"], (got, "\n".join(lines[-30:]))
    assert got["conversation_back"] == got["truthful_claims"] == got["effects_once"] == "pass", got
    assert got["last_line_answered"] == got["no_invented_turn"] == "pass", got
    assert v["rules"]["status_from_backend"]["status"] == "pass" and v["rules"]["own_loss_detection"]["status"] == "pass"
    evs = read_events(run / "events.jsonl")
    twin = read_events(run / "twin.jsonl")
    # never the old call_id in the new session: no orphan error, no tool response the twin did not know
    assert not [e for e in twin if e.kind == "twin.tool_response" and e.get("known") is False]
    assert [e.get("purpose") for e in evs if e.kind == "conn.open"] == ["initial", "new"]
    assert sum(1 for e in evs if e.kind == "backend.commit") == 1


def test_b2_the_naive_client_fails_and_the_recovery_client_passes(naive, recovery):
    run, v, _ = naive["b2-path-return"]
    _common(run, v)
    assert not v["pass"] and _status(v)["conversation_back"] == "fail", _status(v)
    run, v, lines = recovery["b2-path-return"]
    _common(run, v)
    got = _status(v)
    assert v["pass"] and got["conversation_back"] == got["effects_once"] == got["truthful_claims"] == "pass", got
    # the scripted resumes are the Live API's: an OpenAI run skips them and records no step error
    evs = read_events(run / "events.jsonl")
    assert not [e for e in evs if e.kind == "step.error"] and not [e for e in evs if e.kind == "resume.attempt"]


def test_the_session_cap_ends_the_naive_conversation_and_the_recovery_client_goes_on(naive, recovery):
    run, v, _ = naive["l1-session-cap"]
    twin = read_events(run / "twin.jsonl")
    assert any(e.kind == "twin.session_cap" for e in twin)
    assert not v["pass"] and _status(v)["last_line_answered"] == "fail", _status(v)
    run, v, lines = recovery["l1-session-cap"]
    assert v["met"] and v["pass"] and v["reproduces"], (_status(v), "\n".join(lines[-30:]))
    assert _status(v)["truthful_claims"] == "pass"


def test_spoken_control_is_heard_by_its_words_and_passes(naive):
    run, v, lines = naive["control-speech"]
    _common(run, v)
    got = _status(v)
    assert v["pass"] and got["effects_once"] == got["truthful_claims"] == got["last_line_answered"] == "pass", got
    script = ["Book me the 3pm slot tomorrow, please.", "Did you book it?"]
    heard = [e["heard"] for e in read_events(run / "twin.jsonl") if e.kind == "twin.model" and e.get("source") == "audio"]
    assert [h["by"] for h in heard] == ["recognizer", "recognizer"] and [h["match"] for h in heard] == script
    # the client asked for transcription and got back what the twin heard
    assert [e["text"] for e in read_events(run / "events.jsonl") if e.kind == "user.transcript"] == script
