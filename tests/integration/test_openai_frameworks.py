"""Frameworks' OpenAI Realtime integrations against the OpenAI twin, over loopback TLS.

- LiveKit Agents with its OpenAI Realtime model (livekit-plugins-openai, `openai.realtime.RealtimeModel`)
  in an AgentSession, headless, in the livekit venv: tests/peers/livekit_openai_session.py;
- pipecat's OpenAIRealtimeLLMService in a headless pipeline with its context aggregators, in the
  pipecat venv: tests/peers/pipecat_openai_session.py.

Each peer takes the user's lines on its stdin one at a time and prints one JSON line per thing that
happens (the tool ran, the agent said something, an error), so the test can act between lines (drop
the socket, then ask the next one). What the framework sent is read from the twin's own record
(twin.jsonl: `twin.client_event` per client event, the model's decisions, the calls and their outputs).

Skipped, saying why, when a framework's venv (scripts/peers-setup.sh) is missing or lacks its OpenAI
integration. Loopback only: no key exists for the real service and none is needed.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.events import read_events
from lab.twin.server import TwinServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "peers"
KEY = "sk-livelab-peer"
BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
# the engine's delays drawn short: these tests are about what goes on the wire, not the timings
FAST = {"reply_delay_s": 0.05, "tool_call_delay_s": 0.05, "response_reply_delay_s": 0.05}
START_S = 90         # importing a framework on a loaded 2-core machine
TURN_S = 20
# the twin's 1011 reason, as the Gemini twin's internal-error closes word it
INTERNAL = "Internal error encountered."


@dataclass(frozen=True)
class Framework:
    name: str
    module: str         # its OpenAI Realtime integration, imported to tell a venv made before it was pinned
    script: str

    @property
    def python(self) -> Path:
        return ROOT / f".venv-{self.name}" / "bin" / "python"

    def url(self, twin: TwinServer) -> str:
        # LiveKit's plugin takes the HTTP base and builds the websocket URL; pipecat's service takes
        # the websocket URL itself; each appends ?model=M
        if self.name == "livekit":
            return f"{twin.base_url}/v1"
        return f"wss://{twin.url_host}:{twin.port}/v1/realtime"


LIVEKIT = Framework("livekit", "livekit.plugins.openai", "livekit_openai_session.py")
PIPECAT = Framework("pipecat", "pipecat.services.openai.realtime.llm", "pipecat_openai_session.py")


def _ready(fw: Framework) -> Framework:
    if not fw.python.is_file():
        pytest.skip(f"the {fw.name} venv (.venv-{fw.name}) is missing: run scripts/peers-setup.sh {fw.name}")
    p = subprocess.run([str(fw.python), "-c", f"import {fw.module}"], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        pytest.skip(f"the {fw.name} venv cannot import {fw.module} (made before it was pinned?): "
                    f"run scripts/peers-setup.sh {fw.name}")
    return fw


@pytest.fixture(scope="module")
def livekit() -> Framework:
    return _ready(LIVEKIT)


@pytest.fixture(scope="module")
def pipecat() -> Framework:
    return _ready(PIPECAT)


def pinned(framework: str, package: str) -> str:
    from lab.topology.framework_image import pins
    return next(p.split("==")[1] for p in pins(framework) if p.split("==")[0].split("[")[0] == package)


class Peer:
    """The framework's session in its own venv: lines in on stdin, its JSON lines out."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.seen: list[dict] = []
        self._new = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            if line.startswith(b"{"):
                self.seen.append(json.loads(line))
                self._new.set()
        self._new.set()

    async def until(self, ev: str, n: int = 1, timeout: float = TURN_S) -> dict:
        """The n-th `ev` line (waiting for it)."""
        async def wait() -> dict:
            while True:
                hits = [s for s in self.seen if s["ev"] == ev]
                if len(hits) >= n:
                    return hits[n - 1]
                if self._reader.done():
                    raise AssertionError(f"the peer ended before its {ev!r} #{n}: {self.seen[-3:]}\n"
                                         f"{await self.stderr_tail()}")
                self._new.clear()
                await self._new.wait()
        try:
            return await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"no {ev!r} #{n} from the peer in {timeout} s; it said {self.seen}\n"
                                 f"{await self.stderr_tail()}") from None

    async def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def end(self) -> dict:
        """Close its stdin (the session ends) and return its summary line."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 30)
        await self._reader
        return await self.until("end", timeout=1)

    async def stderr_tail(self) -> str:
        if self.proc.returncode is None or self.proc.stderr is None:
            return ""
        return "stderr:\n" + "\n".join((await self.proc.stderr.read()).decode(errors="replace").splitlines()[-20:])


@contextlib.asynccontextmanager
async def session(fw: Framework, tmp_path: Path, *extra: str):
    """A twin on loopback speaking OpenAI Realtime, and the framework's session started against it."""
    twin = TwinServer(protocol="openai", api_key=KEY, seed=5, overrides=FAST, log_path=tmp_path / "twin.jsonl",
                      cert_dir=tmp_path / "certs")
    await twin.start()
    # the framework's venv only: keep the project venv's packages off its path
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OPENAI_BASE_URL",
                                                            "OPENAI_API_KEY", "SSL_CERT_FILE")}
    proc = await asyncio.create_subprocess_exec(
        str(fw.python), str(PEERS / fw.script), "--base-url", fw.url(twin), "--ca", str(twin.ca_path),
        "--api-key", KEY, *extra, cwd=str(tmp_path), env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peer = Peer(proc)
    try:
        await peer.until("started", timeout=START_S)
        yield twin, peer
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await twin.stop()


async def drop(twin: TwinServer, how: str) -> None:
    """The twin drops every open socket: a close frame 1011, or an abort (no close frame, a TCP reset).
    (The twin's sockets have no public handle: the test reaches into the server for them.)"""
    for io in list(twin._conns.values()):
        if how == "abort":
            io.ws.transport.abort()
        else:
            await io.ws.close(1011, INTERNAL)


def record(tmp_path: Path) -> list:
    return read_events(tmp_path / "twin.jsonl")


def sent(events: list, conn: int) -> list[dict]:
    """What the framework sent on one connection, in order (type, and its gist)."""
    return [{k: v for k, v in e.data.items() if k not in ("conn", "session")}
            for e in events if e.kind == "twin.client_event" and e["conn"] == conn]


def of(events: list, kind: str, conn: int | None = None) -> list:
    return [e for e in events if e.kind == kind and (conn is None or e["conn"] == conn)]


def booked(ev: list, said: dict) -> object:
    """The booking turn as the twin recorded it, on one connection at the twin's route: the model read
    the slot from the user's line and called book_slot with it, the framework answered that call id
    with the booked result, no error event went out, and what the framework said is the twin's reply.
    Returns the twin's call."""
    assert [e["route"] for e in of(ev, "twin.conn.open")] == ["v1/realtime?model=gpt-realtime"]
    model = of(ev, "twin.model")
    assert [(m["text"], m["tool"], m["args"]) for m in model] == [(BOOK, "book_slot", {"slot": "tomorrow 3pm"})]
    call, = of(ev, "twin.tool_call")
    answered, = of(ev, "twin.tool_response")
    assert (answered["id"], answered["known"], answered["status"], answered["history"]) == \
        (call["id"], True, "booked", False)
    assert said["text"] == of(ev, "twin.say")[-1]["text"] == "I'm booking the 3 pm slot tomorrow for you."
    assert not of(ev, "twin.error_event")
    return call


def run(coro, timeout: float = START_S + 90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.mark.parametrize("via", ["env", "args"])
def test_livekit_openai_realtime_holds_a_tool_conversation_with_the_twin(livekit, tmp_path, via):
    """The user's line goes in; the twin's model calls book_slot with the slot from the line; the
    AgentSession runs the tool and sends its output under the twin's call id, then asks for the reply
    itself (response.create: OpenAI never continues on its own); the agent says the twin's sentence.
    `env`: an unmodified RealtimeModel() reaching the twin through $OPENAI_BASE_URL and $SSL_CERT_FILE;
    `args`: base_url= and an aiohttp session whose connector trusts the twin's CA."""
    async def body():
        async with session(livekit, tmp_path, "--via", via) as (twin, peer):
            await peer.say(BOOK)
            asked = await peer.until("user")
            said = await peer.until("said")
            summary = await peer.end()
        return asked, said, summary

    asked, said, summary = run(body())
    # each response is matched to the generate_reply that asked for it (the twin echoes the request's
    # metadata.client_event_id on response.created); unmatched, the plugin waits out 10 s per reply
    assert said["at_s"] - asked["at_s"] < 5, (asked, said)
    assert summary["versions"]["livekit-plugins-openai"] == pinned("livekit", "livekit-plugins-openai")
    assert summary["versions"]["livekit-agents"] == pinned("livekit", "livekit-agents")
    assert summary["tool_calls"] == [{"name": "book_slot", "args": {"slot": "tomorrow 3pm"}}], summary
    assert summary["errors"] == [] and not summary["fatal"], summary
    ev = record(tmp_path)
    # the plugin's URL: base_url + /realtime, the model as a query parameter
    call = booked(ev, said)
    wire = sent(ev, 1)
    # the session's config, then its tools, then the user's line and the request for a response
    declared = next(i for i, w in enumerate(wire) if w.get("tools") == ["book_slot"])
    assert all(w["type"] == "session.update" for w in wire[:declared + 1])
    assert wire[declared + 1:] == [
        {"type": "conversation.item.create", "item": "message", "role": "user"},
        {"type": "response.create"},
        {"type": "conversation.item.create", "item": "function_call_output", "call_id": call["id"]},
        {"type": "response.create"},            # the framework asks for the reply to the tool's output
    ]


@pytest.mark.parametrize("how", ["close-1011", "abort"])
def test_livekit_openai_reconnects_after_a_drop_and_replays_its_history_with_the_calls(livekit, tmp_path, how):
    """The twin drops the socket after the booking was answered. The plugin reconnects at once (its
    first retry 0.1 s later) into a new, empty session, sends session.update again and then its tools,
    and replays the conversation as items: the user's line, the function_call under its old call id,
    the output, the agent's reply. It asks for no response of its own; the status question that
    follows is answered from the replayed history ("booked"), and the tool never runs again."""
    async def body():
        async with session(livekit, tmp_path) as (twin, peer):
            await peer.say(BOOK)
            await peer.until("said")
            await drop(twin, "abort" if how == "abort" else "close")
            await peer.until("error")
            # the replay is done once the agent's own reply is back in the new session
            deadline = asyncio.get_running_loop().time() + TURN_S
            while not any(e.kind == "twin.client_event" and e["conn"] == 2 and e.data.get("role") == "assistant"
                          for e in twin.log.events):
                assert asyncio.get_running_loop().time() < deadline, "no replay into a second connection"
                await asyncio.sleep(0.05)
            await peer.say(STATUS)
            second = await peer.until("said", n=2)
            summary = await peer.end()
        return second, summary

    second, summary = run(body())
    ev = record(tmp_path)
    ended, = of(ev, "twin.conn.end", 1)
    reopened, = of(ev, "twin.conn.open", 2)
    assert reopened.ms - ended.ms < 2000, (ended.data, reopened.data)
    sessions = [a["session"] for a in of(ev, "twin.accept")]
    assert len(sessions) == 2 and sessions[0] != sessions[1]
    call, = of(ev, "twin.tool_call")                        # called once, on the first connection
    assert call["conn"] == 1 and summary["tool_calls"] == [{"name": "book_slot", "args": {"slot": "tomorrow 3pm"}}]
    assert sent(ev, 2)[:7] == [
        {"type": "session.update"},                                     # options and instructions
        {"type": "session.update", "tools": ["book_slot"]},             # then the tools
        {"type": "conversation.item.create", "item": "message", "role": "user"},
        {"type": "conversation.item.create", "item": "function_call", "call_id": call["id"]},
        {"type": "conversation.item.create", "item": "function_call_output", "call_id": call["id"]},
        {"type": "conversation.item.create", "item": "message", "role": "assistant"},
        {"type": "conversation.item.create", "item": "message", "role": "user"},   # the status question
    ]
    # the replayed output names a call the replay declared first: no orphan error
    assert not of(ev, "twin.error_event")
    replayed, = of(ev, "twin.tool_response", 2)
    assert (replayed["id"], replayed["known"], replayed["history"]) == (call["id"], True, True)
    # the same call answered on both connections: the first answer, then its replay
    assert [(r["conn"], r["history"]) for r in of(ev, "twin.tool_response")] == [(1, False), (2, True)]
    asked, = of(ev, "twin.model", 2)
    assert (asked["text"], asked["plan"]) == (STATUS, "status-booked")
    assert second["text"] == of(ev, "twin.say", 2)[-1]["text"] == "Yes, your 3 pm slot tomorrow is booked."
    # the drop is told to the app as one recoverable error; the session lives on
    assert [e["recoverable"] for e in summary["errors"]] == [True], summary["errors"]
    assert "connection closed unexpectedly" in summary["errors"][0]["error"] and not summary["fatal"]


def test_livekit_openai_drop_while_its_tool_runs_sends_the_output_into_the_new_session_after_the_call(
        livekit, tmp_path):
    """The socket drops while the tool runs (its output is not sent yet). The plugin's replay puts the
    function_call into the new session before the output arrives, so the output is not an orphan
    there; the framework then asks for the reply, which is heard."""
    async def body():
        async with session(livekit, tmp_path, "--tool-s", "1.5") as (twin, peer):
            await peer.say(BOOK)
            await peer.until("tool")
            await drop(twin, "close")
            said = await peer.until("said")
            summary = await peer.end()
        return said, summary

    said, summary = run(body())
    ev = record(tmp_path)
    call, = of(ev, "twin.tool_call")
    assert call["conn"] == 1 and len(summary["tool_calls"]) == 1
    assert not [w for w in sent(ev, 1) if w.get("item") == "function_call_output"]
    wire = sent(ev, 2)
    replay = [w for w in wire if w["type"] == "conversation.item.create"]
    assert replay == [
        {"type": "conversation.item.create", "item": "message", "role": "user"},
        {"type": "conversation.item.create", "item": "function_call", "call_id": call["id"]},
        {"type": "conversation.item.create", "item": "function_call_output", "call_id": call["id"]},
    ]
    assert wire[-1] == {"type": "response.create"} and wire.index(replay[-1]) == len(wire) - 2
    answered, = of(ev, "twin.tool_response")      # its only answer, into the session the replay declared it in
    assert (answered["conn"], answered["known"], answered["status"], answered["history"]) == (2, True, "booked", True)
    assert not of(ev, "twin.error_event")
    # the reply answers the output (the user's request was answered by the replayed call)
    assert not of(ev, "twin.model", 2)
    assert said["text"] == of(ev, "twin.say", 2)[-1]["text"] == "I'm booking the 3 pm slot tomorrow for you."


def test_pipecat_openai_realtime_holds_a_tool_conversation_with_the_twin(pipecat, tmp_path):
    """The first line in the context, an LLMRunFrame: the service sends the context's user message
    as an item, then its tools, and asks for a response; the twin's model calls book_slot with the
    slot from the line; the registered function runs, the service sends its output under the twin's
    call id, and the assistant aggregator's context frame makes the service ask for the reply."""
    async def body():
        async with session(pipecat, tmp_path) as (twin, peer):
            await peer.say(BOOK)
            said = await peer.until("said")
            summary = await peer.end()
        return said, summary

    said, summary = run(body())
    assert summary["versions"]["pipecat-ai"] == pinned("pipecat", "pipecat-ai")
    assert summary["tool_calls"] == [{"name": "book_slot", "args": {"slot": "tomorrow 3pm"}}], summary
    assert summary["errors"] == [] and summary["logged_errors"] == [], summary
    ev = record(tmp_path)
    # the service's URL: base_url with ?model=M appended
    call = booked(ev, said)
    assert sent(ev, 1) == [
        {"type": "session.update"},                                     # on session.created
        {"type": "conversation.item.create", "item": "message", "role": "user"},   # the context's line
        {"type": "session.update", "tools": ["book_slot"]},
        {"type": "response.create"},
        {"type": "conversation.item.create", "item": "function_call_output", "call_id": call["id"]},
        {"type": "response.create"},            # the framework asks for the reply to the tool's output
    ]


@pytest.mark.parametrize("how", ["close-1011", "abort"])
def test_pipecat_openai_does_not_reconnect_after_a_drop_and_its_tool_output_is_lost(pipecat, tmp_path, how):
    """The twin drops the socket while the tool runs. The service's receive task ends on the closed
    socket (logged as an unexpected exception, nothing pushed to the pipeline); it never reconnects:
    the tool's output and the response.create after it fail to send (an ErrorFrame each, not fatal),
    the twin never gets the output, and the user hears nothing more."""
    async def body():
        async with session(pipecat, tmp_path, "--tool-s", "1.0") as (twin, peer):
            await peer.say(BOOK)
            await peer.until("tool")
            await drop(twin, "abort" if how == "abort" else "close")
            await peer.until("error", n=2)
            await asyncio.sleep(3)          # time enough for a reconnect (LiveKit's is 0.1 s after a drop)
            summary = await peer.end()
        return summary

    summary = run(body())
    ev = record(tmp_path)
    assert len(of(ev, "twin.conn.open")) == 1, [e.data for e in of(ev, "twin.conn.open")]
    call, = of(ev, "twin.tool_call")
    assert len(summary["tool_calls"]) == 1 and not of(ev, "twin.tool_response")
    assert [w for w in sent(ev, 1) if w["type"] != "session.update"] == [
        {"type": "conversation.item.create", "item": "message", "role": "user"},
        {"type": "response.create"},
    ]
    assert summary["said"] == []
    errors = summary["errors"]
    assert len(errors) == 2 and all(e["error"].startswith("Error sending client event") and not e["fatal"]
                                    for e in errors), errors
    assert any("_receive_task_handler unexpected exception" in e for e in summary["logged_errors"]), summary


def test_pipecat_openai_holds_the_conversation_when_the_user_speaks_the_later_line(pipecat, tmp_path):
    """The service's way for the user's later turns is audio: the typed first line books as above, then
    the status question is spoken (InputAudioRawFrames, as a transport's microphone pushes them). The
    service appends it to the input audio buffer, the twin's server VAD commits the turn and creates
    the response, the twin hears the words, and pipecat says the status: the conversation goes on."""
    from lab import speech
    from lab.twin import recognizer
    if recognizer.missing():
        pytest.skip(recognizer.missing())
    clip = tmp_path / "status.pcm"
    clip.write_bytes(speech.silence(300) + speech.synth(STATUS) + speech.silence(1000))

    async def body():
        # the twin's VAD runs on the audio's clock: frames faster than real time keep the test short
        async with session(pipecat, tmp_path, "--audio-pace-s", "0.01") as (twin, peer):
            await peer.say(BOOK)
            await peer.until("said")
            await peer.say(f"speak {clip}")
            said = await peer.until("said", n=2)
            summary = await peer.end()
        return said, summary

    said, summary = run(body())
    assert summary["tool_calls"] == [{"name": "book_slot", "args": {"slot": "tomorrow 3pm"}}], summary
    assert summary["errors"] == [] and summary["logged_errors"] == [], summary
    ev = record(tmp_path)
    spoken = [e for e in of(ev, "twin.model") if e.get("source") == "audio"]
    assert [(e["heard"]["by"], e["heard"]["match"]) for e in spoken] == [("recognizer", STATUS)], spoken
    assert spoken[0]["match"]["intent"] == "STATUS" and spoken[0]["tool"] is None
    assert "booked" in said["text"].lower(), said
    # the spoken turn reached the twin as audio alone (appends are not recorded one by one): no item,
    # no response.create of the service's; on speech_started it truncates the model's last audio item
    # (headless, it never played it: read in its source as _truncate_current_audio_response)
    assert [w["type"] for w in sent(ev, 1)][6:] == ["conversation.item.truncate"], sent(ev, 1)
