"""OpenAI Realtime runs through Docker Compose: the twin in the endpoint container served with
--protocol openai, the reference client `openai-recovery` in the client container, its packets
dropped by the client container's own kernel, judged by the same user outcomes as in network
namespaces (tests/integration/test_openai_runs.py).

Control and B1 shortened to 30 s (the reference client is back in a new session about 4 s after the
loss, well inside conversation_back's 20 s bound), in one batch; then a plain openai SDK app
(`--client-cmd`) reaching the twin by api.openai.com from the client container.
"""
import json

import pytest

from lab.events import read_events

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from lab.run import run_batch

    lines: list[str] = []
    out = run_batch(["control", "b1-silent-loss"], client="openai-recovery", topology="compose", duration=30,
                    out_dir=tmp_path_factory.mktemp("openai-compose") / "batch", out=lines.append,
                    protocol="openai")
    runs = {}
    for name in ("control", "b1-silent-loss"):
        run = out / f"{name}-openai-recovery-01"
        assert (run / "verdict.json").exists(), "\n".join(lines[-40:])
        runs[name] = (run, json.loads((run / "verdict.json").read_text()), lines)
    return runs


def _status(verdict) -> dict[str, str]:
    return {name: o["status"] for name, o in verdict["outcomes"].items()}


def _in_containers(run, verdict):
    """The run was Compose's, the twin the OpenAI one, dialled at the endpoint container's name."""
    meta = json.loads((run / "run.json").read_text())
    plan = json.loads((run / "plan.json").read_text())
    assert meta["topology"] == "compose"
    assert meta["protocol"] == plan["protocol"] == verdict["protocol"] == "openai"
    assert plan["base_url"].startswith("wss://endpoint:") and plan["base_url"].endswith("/v1")
    twin = read_events(run / "twin.jsonl")
    assert next(e for e in twin if e.kind == "twin.start")["profile"] == "openai-realtime"
    opened = [e for e in twin if e.kind == "twin.conn.open"]
    assert opened and all(e["route"].startswith("v1/realtime") for e in opened)
    assert any(e.kind == "twin.accept" and str(e.get("session", "")).startswith("sess_") for e in twin)
    return twin


def test_control_passes_through_compose(batch):
    run, v, lines = batch["control"]
    _in_containers(run, v)
    got = _status(v)
    assert v["pass"], (got, "\n".join(lines[-30:]))
    assert got["effects_once"] == got["truthful_claims"] == got["last_line_answered"] == "pass", got
    assert got["owed_results_delivered"] == got["no_invented_turn"] == "pass", got


def test_b1_the_recovery_client_restores_a_new_session_through_compose(batch):
    run, v, lines = batch["b1-silent-loss"]
    twin = _in_containers(run, v)
    got = _status(v)
    assert v["pass"], (got, "\n".join(lines[-30:]))
    assert got["conversation_back"] == got["truthful_claims"] == got["effects_once"] == "pass", got
    assert got["last_line_answered"] == got["no_invented_turn"] == "pass", got
    evs = read_events(run / "events.jsonl")
    assert [e.get("purpose") for e in evs if e.kind == "conn.open"] == ["initial", "new"]
    assert sum(1 for e in evs if e.kind == "backend.commit") == 1
    # two sessions on the twin's side, and never the old call_id's result sent into the new one
    assert len({e["session"] for e in twin if e.kind == "twin.accept"}) == 2
    assert not [e for e in twin if e.kind == "twin.tool_response" and e.get("known") is False]

    from lab.capture import dropped
    assert dropped(run / "capture.pcapng"), "the client container's dropped packets are in the capture"


def test_a_plain_openai_app_reaches_the_twin_as_api_openai_com_through_compose(tmp_path, monkeypatch):
    """`--protocol openai --client-cmd` in Compose: the app (tests/fixtures/openai_app.py, the openai SDK
    with no base URL) runs in the client container, whose own /etc/hosts and CA store send
    api.openai.com to the twin in the endpoint container; its call, the output under that call's id
    and the reply are on the twin's record, as in netns (tests/integration/test_client_cmd.py)."""
    from pathlib import Path

    from lab.run import run_batch
    from lab.topology.compose import REPO

    monkeypatch.chdir(REPO)
    hosts_before = Path("/etc/hosts").read_text()
    lines: list[str] = []
    batch = run_batch(["control"], topology="compose", duration=30, out_dir=tmp_path / "batch", out=lines.append,
                      client_cmd="python tests/fixtures/openai_app.py", protocol="openai")
    assert Path("/etc/hosts").read_text() == hosts_before       # the container's files, not the host's
    run = batch / "control-cmd-01"
    verdict = json.loads((run / "verdict.json").read_text())
    got = _status(verdict)
    assert verdict["protocol"] == "openai" and verdict["pass"], "\n".join([repr(got)] + lines[-40:])
    assert got["effects_once"] == got["truthful_claims"] == got["last_line_answered"] == "pass", got
    twin = read_events(run / "twin.jsonl")
    assert next(e for e in twin if e.kind == "twin.start")["port"] == 443
    assert [e["route"] for e in twin if e.kind == "twin.conn.open"] == ["v1/realtime?model=gpt-realtime"]
    calls = [e for e in twin if e.kind == "twin.tool_call"]
    assert [(e["name"], e["args"]) for e in calls] == [("book_slot", {"slot": "tomorrow 3pm"})]
    answered = next(e for e in twin if e.kind == "twin.tool_response")
    assert answered["id"] == calls[0]["id"] and answered["known"] and answered["status"] == "booked"
    assert [e["text"] for e in twin if e.kind == "twin.say" and e.ms > answered.ms]
    assert "openai_app: connected sess_" in (run / "client.log").read_text()
