"""The twin over real loopback sockets, driven by the UNMODIFIED google-genai SDK (and raw websockets
where the SDK cannot express the case: holding a connection open, malformed frames, no key).

A delay is checked against the recorded range the twin draws it from (tests/integration/
record_windows.py): never below the record's minimum, at most its maximum plus the test machine's
load allowance.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time

import pytest
import websockets
from google import genai
from google.genai import errors, types
from websockets.asyncio.client import connect as ws_connect

from lab import speech
from lab.events import read_events
from lab.twin import model as M
from lab.twin.model import tone
from lab.twin.server import TwinServer
from tests.integration.record_windows import assert_within

MODEL = "gemini-3.8-live"
FAST = {"reply_delay_s": 0.1, "tool_call_delay_s": 0.1, "speech_ms_per_char": 10}
BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
REFUSED = "Internal error encountered."


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def twin_server(**kw):
    kw.setdefault("seed", 11)
    # the handle comes ~120 ms after setupComplete, as recorded; the tests' fast replies (0.1 s) would
    # overtake it, which the real service (replies >= 0.43 s) never does: keep the recorded order
    kw["overrides"] = {"handle_update_delay_s": 0.05, **(kw.get("overrides") or {})}
    twin = TwinServer(**kw)
    await twin.start()
    try:
        yield twin
    finally:
        await twin.stop()


def sdk(twin: TwinServer, api_key: str = "test", vertex: bool = False) -> genai.Client:
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    return genai.Client(api_key=api_key, vertexai=vertex or None,
                        http_options={"base_url": twin.base_url,
                                      "async_client_args": {"ssl": ctx, "ping_interval": None}})


def cfg(handle: str | None = None, **kw) -> types.LiveConnectConfig:
    return types.LiveConnectConfig(response_modalities=["AUDIO"],
                                   session_resumption=types.SessionResumptionConfig(handle=handle),
                                   output_audio_transcription=types.AudioTranscriptionConfig(),
                                   input_audio_transcription=types.AudioTranscriptionConfig(), **kw)


class Live:
    """An SDK session opened by hand so a test can abort it, hold it, or leave it."""

    def __init__(self, client: genai.Client, config: types.LiveConnectConfig):
        self.cm = client.aio.live.connect(model=MODEL, config=config)
        self.s = None
        self.handles: list[str] = []
        self.msgs: list = []
        self.setup_s = None

    async def __aenter__(self) -> "Live":
        t0 = time.monotonic()
        self.s = await self.cm.__aenter__()
        self.setup_s = time.monotonic() - t0
        return self

    async def __aexit__(self, *exc):
        with contextlib.suppress(Exception):
            await self.cm.__aexit__(None, None, None)

    async def turn(self, stop=None) -> list:
        """Messages up to turnComplete (or until stop(msg) is true)."""
        out = []
        async for m in self.s.receive():
            out.append(m)
            self.msgs.append(m)
            u = m.session_resumption_update
            if u and u.resumable and u.new_handle:
                self.handles.append(u.new_handle)
            if stop and stop(m):
                break
        return out

    async def next_turn(self, stop=None) -> list:
        return await self.turn(stop)

    def abort(self) -> None:
        self.s._ws.transport.abort()     # no close frame: the server sees the socket end

    @staticmethod
    def said(msgs) -> list[str]:
        """The model's sentences: the pieces of outputTranscription of one turn joined."""
        out, cur = [], ""
        for m in msgs:
            sc = m.server_content
            if sc and sc.output_transcription:
                cur += sc.output_transcription.text or ""
            if sc and (sc.turn_complete or sc.interrupted) and cur:
                out.append(cur)
                cur = ""
        return out + ([cur] if cur else [])

    @staticmethod
    def calls(msgs):
        return [fc for m in msgs if m.tool_call for fc in m.tool_call.function_calls]


async def timed_connect(client, config) -> tuple[float, Live | None, Exception | None]:
    live = Live(client, config)
    t0 = time.monotonic()
    try:
        await live.__aenter__()
        return time.monotonic() - t0, live, None
    except Exception as e:  # noqa: BLE001
        return time.monotonic() - t0, None, e


async def raw_session(twin, setup: dict | None = None):
    """A raw websockets client (no pings): returns (ws, handle)."""
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    ws = await ws_connect(twin.ws_url, ssl=ctx, ping_interval=None, additional_headers={"x-goog-api-key": "test"})
    await ws.send(json.dumps({"setup": setup or {"model": f"models/{MODEL}", "sessionResumption": {}}}))
    first = json.loads(await ws.recv())
    assert list(first) == ["setupComplete"]
    upd = json.loads(await ws.recv())
    return ws, upd["sessionResumptionUpdate"]["newHandle"]


async def raw_until_turn_complete(ws) -> list[dict]:
    out = []
    while True:
        f = json.loads(await ws.recv())
        out.append(f)
        if f.get("serverContent", {}).get("turnComplete"):
            return out


def pcm16(seconds: float, voiced: bool) -> bytes:
    return tone(seconds, 16000, 300, 8000) if voiced else bytes(int(seconds * 16000) * 2)


# ------------------------------------------------------------------------------------------ handshake

def test_handshake_one_handle_and_the_booking_story():
    async def go():
        async with twin_server(overrides=FAST) as twin:
            async with Live(sdk(twin), cfg()) as live:
                assert live.s.setup_complete is not None            # setupComplete was the first frame
                assert_within(live.setup_s, "new_setup_s")
                await live.s.send_realtime_input(text=BOOK)
                msgs = await live.turn()
                calls = Live.calls(msgs)
                assert [(c.name, c.args) for c in calls] == [("book_slot", {"slot": "tomorrow 3pm"})]
                assert calls[0].id.startswith("call_") and calls[0].id[5:].isdigit()    # the real NON_BLOCKING shape
                assert msgs[-1].server_content.turn_complete
                await live.s.send_realtime_input(text=STATUS)
                msgs = await live.turn()
                assert Live.said(msgs) == ["I'm booking the 3 pm slot tomorrow for you now."]
                assert b"".join(m.data for m in msgs if m.data)                 # 24 kHz PCM arrived
                await live.s.send_tool_response(function_responses=[types.FunctionResponse(
                    id=calls[0].id, name="book_slot", response={"status": "booked"})])
                msgs = await live.turn()
                assert Live.said(msgs) == [M.SAY_BOOKED]
                assert len(live.handles) == 1                                   # one per connection
                assert not any(m.tool_call_cancellation for m in live.msgs)
    run(go())


# ------------------------------------------------------------------------------------------ the lock

def test_lockout_held_by_an_open_connection_then_its_close_unlocks():
    # The idle release counts from the session's last data frame either way (the holder's reply, here
    # ~1.3 s before the close); B2 closes 30+ s after it. Shorten it so this test is only about the lock.
    async def go():
        async with twin_server(overrides={**FAST, "idle_release_s": 0.3}) as twin:
            holder, handle = await raw_session(twin)
            await holder.send(json.dumps({"realtime_input": {"text": "hello"}}))
            await raw_until_turn_complete(holder)
            client = sdk(twin)
            for _ in range(2):        # the holder's socket stays open, silent, never closed
                dt, live, err = await timed_connect(client, cfg(handle))
                assert live is None and isinstance(err, errors.APIError)
                assert (err.code, err.details) == (1011, REFUSED)
                assert_within(dt, "refuse_close_s")
            refusals = [e for e in twin.log.events if e.kind == "twin.refuse"]
            assert [e["why"] for e in refusals] == ["old_connection_open"] * 2
            await holder.close()                                                # close 1000, echoed
            await asyncio.sleep(0.05)
            dt, live, err = await timed_connect(client, cfg(handle))
            assert err is None, err
            assert_within(dt, "resume_setup_s")                                 # 000: 0.5-0.6 s after the close
            await live.turn(stop=lambda m: m.session_resumption_update is not None)
            assert len(live.handles) == 1
            await live.__aexit__()
    run(go())


def test_server_sends_nothing_to_an_idle_connection_and_freeze_timeout_kills_the_session():
    async def go():
        async with twin_server(overrides={"freeze_close_s": 1.5}) as twin:
            holder, handle = await raw_session(twin)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(holder.recv(), 1.0)                      # no frames, no goAway
            with pytest.raises(websockets.ConnectionClosed) as ei:
                await asyncio.wait_for(holder.recv(), 3.0)
            assert ei.value.rcvd.code == 1011
            ends = [e for e in twin.log.events if e.kind == "twin.conn.end"]
            assert ends[-1]["how"] == "server_timeout" and ends[-1]["dead"] is True
            dt, live, err = await timed_connect(sdk(twin), cfg(handle))
            assert isinstance(err, errors.APIError) and err.code == 1011
    run(go())


def test_idle_drop_is_refused_at_once_and_a_retry_works():
    async def go():
        async with twin_server() as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.turn(stop=lambda m: m.session_resumption_update is not None)
                handle = live.handles[-1]
                # the mic streams (silence) right up to the drop; the model is idle
                await live.s.send_realtime_input(audio=types.Blob(data=pcm16(0.1, False),
                                                                  mime_type="audio/pcm;rate=16000"))
                await asyncio.sleep(0.05)
                t_drop = time.monotonic()
                live.abort()
            dt, live2, err = await timed_connect(client, cfg(handle))
            assert isinstance(err, errors.APIError) and (err.code, err.details) == (1011, REFUSED)
            assert [e["why"] for e in twin.log.events if e.kind == "twin.refuse"] == ["idle_release"]
            await asyncio.sleep(1.0)                                            # retry 1 s after the refusal
            dt, live2, err = await timed_connect(client, cfg(handle))
            assert err is None, err
            # 000 round 1: 2.0-2.3 s from the drop; here the refusal, the test's 1 s, then the resume
            assert_within(time.monotonic() - t_drop, "refuse_close_s", "resume_setup_s", plus=1.0)
            await live2.__aexit__()
    run(go())


def test_speaking_drop_resumes_at_once():
    async def go():
        async with twin_server(overrides={"reply_delay_s": 0.1}) as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.s.send_realtime_input(text=STATUS)
                await live.turn(stop=lambda m: bool(m.data))                    # the model is speaking
                handle = live.handles[-1]
                live.abort()
            dt, live2, err = await timed_connect(client, cfg(handle))
            assert err is None, err
            assert_within(dt, "resume_setup_s")
            ends = [e for e in twin.log.events if e.kind == "twin.conn.end"]
            assert ends[0]["speaking"] is True
            await live2.__aexit__()
    run(go())


def test_pending_call_is_answerable_after_a_resume():
    async def go():
        async with twin_server(overrides={**FAST, "idle_release_s": 0.2}) as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.s.send_realtime_input(text=BOOK)
                call = Live.calls(await live.turn())[0]
                handle = live.handles[0]
            await asyncio.sleep(0.3)
            async with Live(client, cfg(handle)) as live:
                await live.s.send_tool_response(function_responses=[types.FunctionResponse(
                    id=call.id, name=call.name, response={"status": "booked"})])
                msgs = await live.turn()
                assert Live.said(msgs) == [M.SAY_BOOKED]
                await live.s.send_realtime_input(text=STATUS)
                msgs = await live.turn()
                assert Live.said(msgs) == ["Yes, your 3 pm slot tomorrow is booked."]
                assert not Live.calls(live.msgs)                                # never re-issued
            tr = [e for e in twin.log.events if e.kind == "twin.tool_response"]
            assert tr[0]["known"] is True and tr[0]["id"] == call.id
    run(go())


# ------------------------------------------------------------------------------------------ 1007s

def test_transparent_is_1007_on_the_developer_api_and_works_on_vertex():
    async def go():
        async with twin_server() as twin:
            ctx = ssl.create_default_context(cafile=twin.ca_path)
            async with ws_connect(twin.ws_url, ssl=ctx, ping_interval=None) as ws:
                await ws.send(json.dumps({"setup": {"model": f"models/{MODEL}",
                                                    "sessionResumption": {"transparent": True}}}))
                with pytest.raises(websockets.ConnectionClosed) as ei:
                    await ws.recv()
            assert ei.value.rcvd.code == 1007
            assert ei.value.rcvd.reason == ('Invalid JSON payload received. Unknown name "transparent" at '
                                            "'setup.session_resumption': Cannot find field.")
        async with twin_server(profile="vertex", overrides=FAST) as twin:
            async with Live(sdk(twin, vertex=True), cfg().model_copy(update={
                    "session_resumption": types.SessionResumptionConfig(transparent=True)})) as live:
                await live.turn(stop=lambda m: m.session_resumption_update is not None)
                upd = live.msgs[-1].session_resumption_update
                assert upd.resumable and upd.last_consumed_client_message_index == 0
                await live.s.send_realtime_input(text="hello")
                await live.turn()
                idx = [m.session_resumption_update.last_consumed_client_message_index for m in live.msgs
                       if m.session_resumption_update]
                assert idx == [0, 1]
    run(go())


def test_audio_and_video_history_fails_with_1007_after_resume():
    async def go():
        async with twin_server(overrides={**FAST, "idle_release_s": 0.2}) as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.turn(stop=lambda m: m.session_resumption_update is not None)
                await live.s.send_realtime_input(audio=types.Blob(data=pcm16(0.1, False),
                                                                  mime_type="audio/pcm;rate=16000"))
                await live.s.send_realtime_input(video=types.Blob(data=b"\xff\xd8\xff\xe0fake-jpeg",
                                                                  mime_type="image/jpeg"))
                await asyncio.sleep(0.2)
                handle = live.handles[0]
            await asyncio.sleep(0.3)
            async with Live(client, cfg(handle)) as live:                      # the resume itself works
                await live.s.send_realtime_input(text=STATUS)
                assert Live.said(await live.turn())                             # the first turn after it too
                await live.s.send_realtime_input(text=STATUS)                   # 002: a later one fails
                await live.s.send_realtime_input(audio=types.Blob(data=pcm16(0.1, False),
                                                                  mime_type="audio/pcm;rate=16000"))
                with pytest.raises(errors.APIError) as ei:
                    await live.turn()
                assert ei.value.code == 1007
    run(go())


def test_bad_input_closes_1007_and_other_sessions_are_unaffected():
    async def go():
        async with twin_server(overrides=FAST) as twin:
            client = sdk(twin)
            bad_frames = [
                "{not json",
                json.dumps({"bogus": {}}),
                json.dumps({"realtime_input": {"audio": {"data": "@@@", "mime_type": "audio/pcm"}}}),
                json.dumps({"realtime_input": {"text": "x" * (1024 * 1024 + 10)}}),
            ]
            async with Live(client, cfg()) as good:
                for raw in bad_frames:
                    async with Live(client, cfg()) as bad:
                        await bad.s._ws.send(raw)
                        with pytest.raises(errors.APIError) as ei:
                            await bad.turn()
                        assert ei.value.code == 1007 and ei.value.details
                await good.s.send_realtime_input(text=STATUS)
                msgs = await good.turn()
                assert Live.said(msgs) == ["I haven't made that booking for you."]
            assert not [e for e in twin.log.events if e.kind == "twin.error"]
    run(go())


def test_a_long_unknown_key_closes_1007_promptly():
    # fidelity §6: the key is echoed in the 1007 reason; past 123 bytes websockets refused to send
    # the close frame and the connection hung open and silent
    async def go():
        async with twin_server(overrides=FAST) as twin:
            client = sdk(twin)
            for key in ("k" * 58, "long_unknown_field_" * 20, "ключ" * 40):
                async with Live(client, cfg()) as bad:
                    t0 = time.monotonic()
                    await bad.s._ws.send(json.dumps({key: {}}))
                    with pytest.raises(errors.APIError) as ei:
                        await asyncio.wait_for(bad.turn(), 10)
                    assert ei.value.code == 1007 and time.monotonic() - t0 < 10
                    assert len(ei.value.details.encode()) <= 123
            assert not [e for e in twin.log.events if e.kind == "twin.error"]
    run(go())


# ------------------------------------------------------------------------------------------ upgrade

def test_http_key_refusal_option_refuses_at_the_upgrade_and_unknown_path_is_404():
    # the default refuses a key with a close frame (tests/integration/test_twin_errors.py)
    async def go():
        async with twin_server(api_key="right-key", overrides={"key_refusal": "http"}) as twin:
            with pytest.raises(websockets.InvalidStatus) as ei:
                async with Live(sdk(twin, api_key="wrong-key"), cfg()):
                    pass
            assert ei.value.response.status_code == 403
            ctx = ssl.create_default_context(cafile=twin.ca_path)
            with pytest.raises(websockets.InvalidStatus) as ei:
                await ws_connect(twin.ws_url, ssl=ctx)
            assert ei.value.response.status_code == 401
            with pytest.raises(websockets.InvalidStatus) as ei:
                await ws_connect(f"wss://127.0.0.1:{twin.port}/nope", ssl=ctx)
            assert ei.value.response.status_code == 404
            async with Live(sdk(twin, api_key="right-key"), cfg()) as live:
                assert live.s.setup_complete is not None
            ws = await ws_connect(twin.ws_url + "?key=right-key", ssl=ctx)
            await ws.close()
    run(go())


def test_plain_ws_option():
    async def go():
        async with twin_server(tls=False) as twin:
            assert twin.ca_path is None and twin.base_url.startswith("http://")
            async with ws_connect(twin.ws_url, ping_interval=None) as ws:
                await ws.send(json.dumps({"setup": {"model": f"models/{MODEL}"}}))
                msg = await ws.recv()
                assert isinstance(msg, bytes) and json.loads(msg) == {"setupComplete": {}}
    run(go())


# ------------------------------------------------------------------------------------------ model

def test_speech_input_blocking_stop_reissues_a_call():
    async def go():
        async with twin_server(overrides={**FAST, "script": [BOOK, "Actually, stop. Don't book it."]}) as twin:
            decl = types.FunctionDeclaration(name="book_slot", description="book", behavior="BLOCKING",
                                             parameters={"type": "OBJECT", "properties": {"slot": {"type": "STRING"}}})
            async with Live(sdk(twin), cfg(tools=[types.Tool(function_declarations=[decl])])) as live:
                async def speak(line):
                    # the line itself, spoken: the twin reads a turn by its words (lab.twin.hearing)
                    for chunk in speech.chunks(speech.synth(line)):
                        await live.s.send_realtime_input(audio=types.Blob(data=chunk, mime_type="audio/pcm;rate=16000"))
                    for chunk in range(7):
                        await live.s.send_realtime_input(audio=types.Blob(
                            data=pcm16(0.1, False), mime_type="audio/pcm;rate=16000"))
                await speak(BOOK)
                msgs = await live.turn(stop=lambda m: bool(m.tool_call))
                first = Live.calls(msgs)[0]
                heard = [m.server_content.input_transcription.text for m in live.msgs
                         if m.server_content and m.server_content.input_transcription]
                assert "".join(heard) == BOOK                       # whole, as the turn ends
                await speak("Actually, stop. Don't book it.")
                msgs = []
                while not Live.calls(msgs):     # the interrupted turn ends with its own turnComplete first
                    msgs += await live.turn(stop=lambda m: bool(m.tool_call))
                assert any(m.server_content and m.server_content.interrupted for m in msgs)
                second = Live.calls(msgs)[0]
                assert second.id != first.id and second.args == first.args
                assert not any(m.tool_call_cancellation for m in live.msgs)
    run(go())


def test_new_session_restored_with_a_status_note():
    async def go():
        async with twin_server(overrides={"speech_ms_per_char": 10}) as twin:
            async with Live(sdk(twin), cfg()) as live:
                t0 = time.monotonic()
                await live.s.send_client_content(turns=[
                    types.Content(role="user", parts=[types.Part(text=BOOK)]),
                    types.Content(role="model", parts=[types.Part(text="Booking it now.")]),
                    types.Content(role="user", parts=[types.Part(
                        text="System note: backend status\n- book_slot(slot='tomorrow 3pm'): booked")]),
                    types.Content(role="user", parts=[types.Part(text=STATUS)])], turn_complete=True)
                first_audio = None
                msgs = []
                async for m in live.s.receive():
                    msgs.append(m)
                    if m.data and first_audio is None:
                        first_audio = time.monotonic() - t0
                assert Live.said(msgs) == ["Yes, your 3 pm slot tomorrow has been booked."]
                assert not Live.calls(msgs)
                assert_within(first_audio, "restore_first_audio_s")
    run(go())


# ------------------------------------------------------------------------------------------ record, CLI

def test_twin_jsonl_has_the_kinds_and_no_raw_handles(tmp_path):
    log = tmp_path / "twin.jsonl"

    async def go():
        async with twin_server(log_path=log, overrides={**FAST, "idle_release_s": 0.2}) as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.s.send_realtime_input(text=BOOK)
                call = Live.calls(await live.turn())[0]
                handle = live.handles[0]
            await asyncio.sleep(0.3)
            async with Live(client, cfg(handle)) as live:
                await live.s.send_tool_response(function_responses=[types.FunctionResponse(
                    id=call.id, name=call.name, response={"status": "booked"})])
                await live.turn()
                handles = [handle] + live.handles
        return handles

    handles = run(go())
    text = log.read_text()
    kinds = {e.kind for e in read_events(log)}
    assert {"twin.conn.open", "twin.setup", "twin.accept", "twin.conn.end", "twin.tool_call",
            "twin.tool_response"} <= kinds
    assert all(e.src == "twin" for e in read_events(log))
    for h in handles:
        assert h not in text


def test_cli_serves_until_sigterm(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "lab", "twin", "serve", "--port", "0", "--cert-dir",
                             str(tmp_path), "--set", "idle_release_s=0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        base = [ln.split()[1] for ln in lines if ln.startswith("base_url")][0]
        ca = [ln.split()[1] for ln in lines if ln.startswith("ca_path")][0]
        assert base.startswith("https://127.0.0.1:") and os.path.exists(ca)

        async def go():
            client = genai.Client(api_key="test", http_options={"base_url": base, "async_client_args": {
                "ssl": ssl.create_default_context(cafile=ca), "ping_interval": None}})
            async with client.aio.live.connect(model=MODEL, config=cfg()) as s:
                assert s.setup_complete is not None
        run(go(), 20)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
    assert rc == 0
