"""The frameworks' OpenAI Realtime integrations as lab clients, by the real hostname, in network namespaces.

`lab run ... --protocol openai --client livekit` runs lab/peers/livekit_app.py in .venv-livekit with
only $OPENAI_API_KEY (no base URL): it builds livekit-plugins-openai's RealtimeModel, which dials
api.openai.com on 443; in the app's own mount namespace that name is the twin, whose certificate names
it. The ClientHello's server name in the run's capture shows the name the app dialled. A user's Agent
(`livekit:agent:OrderSupport`, examples/order_support, unmodified) is hosted the same way, and pipecat's
app runs OpenAIRealtimeLLMService. Each run is short (control ends once answered; B1 at 25 s), and the
venvs come from scripts/peers-setup.sh (skipped only when the package index cannot be reached).
"""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.events import read_events
from lab.run import topology_id
from tests.integration.test_frameworks import _venv    # builds a framework venv, skips with no network

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]


def _batch(tmp_path, scenario, client, duration=None, conversation=None):
    from lab.run import run_batch

    lines: list[str] = []
    batch = run_batch([scenario], client=client, topology="netns", out_dir=tmp_path / "b", out=lines.append,
                      duration=duration, conversation=conversation, protocol="openai")
    runs = sorted(p for p in batch.iterdir() if (p / "run.json").is_file())
    assert len(runs) == 1, "\n".join(lines[-20:])
    return runs[0], lines


def _server_names(run: Path) -> list[tuple[str, str]]:
    """(server name, port) of every TLS ClientHello in the run's capture: the name the app dialled."""
    if not shutil.which("tshark"):
        pytest.skip("tshark is missing (scripts/setup.sh installs it)")
    p = subprocess.run(["tshark", "-n", "-r", str(run / "capture.pcapng"), "-Y", "tls.handshake.type == 1", "-T",
                        "fields", "-e", "tls.handshake.extensions_server_name", "-e", "tcp.dstport"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [tuple(ln.split("\t")) for ln in p.stdout.splitlines() if ln.strip()]


def _twin(run: Path) -> list:
    return read_events(run / "twin.jsonl")


def _by_hostname(run: Path, model: str = "gpt-realtime") -> None:
    """The app reached the OpenAI twin as api.openai.com:443 on the integration's own route (its default
    model), with no base URL."""
    twin = _twin(run)
    start = next(e for e in twin if e.kind == "twin.start")
    assert start["profile"] == "openai-realtime" and start["port"] == 443
    assert {e["route"] for e in twin if e.kind == "twin.conn.open"} == {f"v1/realtime?model={model}"}
    assert set(_server_names(run)) == {("api.openai.com", "443")}


def _no_leftovers(run: Path) -> None:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns, ns


def test_livekit_openai_plugin_passes_control_by_hostname_with_a_booking_by_tool_call(tmp_path):
    _venv("livekit")
    run, lines = _batch(tmp_path, "control", "livekit")
    verdict = json.loads((run / "verdict.json").read_text())
    got = {n: o["status"] for n, o in verdict["outcomes"].items()}
    assert verdict["protocol"] == "openai" and verdict["pass"] and verdict["held_to"] == "user", \
        (got, "\n".join(lines[-30:]))
    assert got["effects_once"] == got["last_line_answered"] == got["owed_results_delivered"] == "pass", got
    _by_hostname(run)
    twin = _twin(run)
    call, = [e for e in twin if e.kind == "twin.tool_call"]
    assert (call["name"], call["args"]) == ("book_slot", {"slot": "tomorrow 3pm"})
    answered, = [e for e in twin if e.kind == "twin.tool_response"]
    assert (answered["id"], answered["known"], answered["status"]) == (call["id"], True, "booked")
    # the app asked for the reply to the output itself (OpenAI never continues after one), and got it
    said = [e["text"] for e in twin if e.kind == "twin.say" and e.ms > answered.ms]
    assert said and "booking" in said[0], said
    events = read_events(run / "events.jsonl")
    assert [e.get("call_id") for e in events if e.kind == "backend.request"] == [call["id"]]
    log = (run / "client.log").read_text()
    assert "livekit-agents 1.8.9 livekit-plugins-openai 1.8.9, model gpt-realtime" in log, log[-2000:]
    meta = json.loads((run / "run.json").read_text())
    assert meta["protocol"] == "openai" and meta["client"] == "livekit"
    _no_leftovers(run)


def test_livekit_openai_plugin_in_b1_never_notices_the_silent_loss(tmp_path):
    """Measured, not wished: the plugin's websocket (aiohttp, no heartbeat) sees nothing of a silent
    loss, opens no new session, and the tool's output never reaches the twin; the booking commits
    once and the user hears nothing more."""
    _venv("livekit")
    run, lines = _batch(tmp_path, "b1-silent-loss", "livekit", duration=25)
    verdict = json.loads((run / "verdict.json").read_text())
    got = {n: o["status"] for n, o in verdict["outcomes"].items()}
    assert verdict["protocol"] == "openai" and not verdict["pass"], (got, "\n".join(lines[-30:]))
    assert got["conversation_back"] == "fail" and got["effects_once"] == "pass", got
    twin = _twin(run)
    assert sum(e.kind == "twin.conn.open" for e in twin) == 1
    assert [e["name"] for e in twin if e.kind == "twin.tool_call"] == ["book_slot"]
    assert not [e for e in twin if e.kind == "twin.tool_response"]
    _by_hostname(run)
    _no_leftovers(run)


def test_a_users_livekit_agent_is_hosted_with_the_openai_realtime_model(monkeypatch, tmp_path):
    """examples/order_support, unmodified (its own entrypoint names Google's model; the lab's host gives
    the Agent an AgentSession with the OpenAI realtime model, as the run speaks OpenAI): its own
    request_refund runs, and its result reaches the twin under the call's id."""
    _venv("livekit")
    monkeypatch.chdir(ROOT / "examples" / "order_support")
    run, lines = _batch(tmp_path, "control", "livekit:agent:OrderSupport", conversation="lines.txt")
    meta = json.loads((run / "run.json").read_text())
    assert meta["protocol"] == "openai" and meta["framework"]["agent"] == "agent:OrderSupport"
    ended = [e for e in read_events(run / "events.jsonl") if e.kind == "run.end"]
    assert ended and ended[0].get("status") == "ok", "\n".join(lines[-20:])
    _by_hostname(run)
    twin = _twin(run)
    declared = {t for e in twin if e.kind == "twin.client_event" for t in e.get("tools") or ()}
    assert declared == {"look_up_order", "request_refund"}, declared
    calls = [e for e in twin if e.kind == "twin.tool_call" and e["name"] == "request_refund"]
    assert len(calls) == 1 and calls[0]["args"]["order_id"] == "A1002", calls
    answered = [e for e in twin if e.kind == "twin.tool_response" and e["id"] == calls[0]["id"]]
    assert answered and answered[0]["known"], answered
    log = (run / "client.log").read_text()
    assert "livekit-plugins-openai 1.8.9: agent:OrderSupport" in log and "'refund_id': 'R-A1002'" in log, log[-2000:]
    _no_leftovers(run)


def test_pipecat_openai_service_books_by_hostname_and_never_sends_a_later_typed_line(tmp_path):
    """pipecat 1.14.0's OpenAIRealtimeLLMService: the first line (its starting context) is sent, the
    call is answered under its id and the reply asked for; a later typed line is appended to the
    context and the service sends nothing for it (it takes the user's later turns as audio), so the
    status question goes unanswered."""
    _venv("pipecat")
    run, lines = _batch(tmp_path, "control", "pipecat", duration=20)
    verdict = json.loads((run / "verdict.json").read_text())
    got = {n: o["status"] for n, o in verdict["outcomes"].items()}
    assert verdict["protocol"] == "openai", "\n".join(lines[-30:])
    assert got["effects_once"] == got["owed_results_delivered"] == "pass" and got["last_line_answered"] == "fail", got
    _by_hostname(run, model="gpt-realtime-2.1")      # the service's own default in 1.14.0
    twin = _twin(run)
    users = [e for e in twin if e.kind == "twin.client_event" and e.get("role") == "user"]
    assert len(users) == 1, users          # the booking line only, from the starting context
    call, = [e for e in twin if e.kind == "twin.tool_call"]
    answered, = [e for e in twin if e.kind == "twin.tool_response"]
    assert (answered["id"], answered["known"], answered["status"]) == (call["id"], True, "booked")
    assert "pipecat-ai 1.14.0, openai" in (run / "client.log").read_text()
    _no_leftovers(run)
