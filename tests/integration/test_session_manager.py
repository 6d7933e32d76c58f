"""The SessionManager (seed 004) against the twin over loopback sockets, on the real SDK; and the
twin's replay check driven by a raw websockets client that resends wrongly on purpose.

The manager must never resend wrongly: after a drop, a refused reconnect retried with backoff and a
goAway, the twin's verdict on its resend is `ok`. A wrong resend (from index 0, a gap, a duplicate,
new input first) is closed 1007 by the twin with replay_check=close.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl

import pytest
from google import genai
from google.genai import types
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from lab.clients.session_manager import Backoff, SessionManager, SessionStopped
from lab.twin.server import TwinServer

MODEL = "gemini-3.8-live"
FAST = {"reply_delay_s": 0.1, "tool_call_delay_s": 0.1, "speech_ms_per_char": 10, "handle_update_delay_s": 0.05}
QUICK = Backoff(first_s=0.2, max_s=1.0, max_attempts=20)


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def twin_server(profile: str = "vertex", **overrides):
    twin = TwinServer(profile=profile, overrides={**FAST, **overrides}, seed=5)
    await twin.start()
    try:
        yield twin
    finally:
        await twin.stop()


def sdk(twin: TwinServer, vertex: bool = True) -> genai.Client:
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    return genai.Client(api_key="test", vertexai=vertex or None,
                        http_options={"base_url": twin.base_url, "async_client_args": {"ssl": ctx, "ping_interval": None}})


def quiet(i: int) -> types.Blob:
    return types.Blob(data=bytes([i, 0]) * 320, mime_type="audio/pcm;rate=16000")


def twin_events(twin: TwinServer, kind: str) -> list:
    return [e for e in twin.log.events if e.kind == kind]


async def turn(sm: SessionManager) -> list:
    out = []
    async for m in sm.receive():
        out.append(m)
        if m.server_content is not None and m.server_content.turn_complete:
            return out
    return out


async def consumed_turn(sm: SessionManager, events: list) -> None:
    """A text turn the twin consumes (its update after turnComplete prunes the manager's buffer)."""
    await sm.send_realtime_input(text="hello")
    await turn(sm)
    for _ in range(50):
        if sm.buffered == 0 and any(k == "consumed" and kw["index"] >= 1 for k, kw in events):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the update never pruned the buffer: {events}")


def manager(twin, events, vertex=True, **kw) -> SessionManager:
    cfg = types.LiveConnectConfig(response_modalities=["AUDIO"], output_audio_transcription=types.AudioTranscriptionConfig())
    return SessionManager(sdk(twin, vertex), MODEL, cfg, backoff=QUICK, seed=1,
                          on_event=lambda kind, **f: events.append((kind, f)), **kw)


def replay_verdicts(twin) -> list[tuple[str, int | None]]:
    return [(e.get("verdict"), e.get("owed")) for e in twin_events(twin, "twin.replay")]


def test_a_drop_whose_reconnect_is_refused_then_retried_resends_exactly_what_is_owed():
    async def go():
        async with twin_server(idle_release_s=1.0, speaking_release_immediate=False) as twin:
            events: list = []
            sm = manager(twin, events)
            await sm.start()
            await consumed_turn(sm, events)
            for i in (1, 2, 3):
                await sm.send_realtime_input(audio=quiet(i))
            await asyncio.sleep(0.2)
            sm.session._ws.transport.abort()        # an abrupt drop: no close frame (1006)
            for _ in range(100):
                if sm.connections == 2 and sm._ready.is_set():
                    break
                await asyncio.sleep(0.05)
            await sm.send_realtime_input(audio=quiet(9))     # new input, after the replay
            await asyncio.sleep(0.3)
            kinds = [k for k, _ in events]
            assert "reconnect_failed" in kinds, kinds          # the idle-release rule refused the first
            assert replay_verdicts(twin)[-2:] == [("owed", 3), ("ok", 3)]
            assert ("replayed", {"conn": 2, "messages": 3}) in events
            await sm.close()
    run(go())


def test_a_goaway_reconnects_with_the_latest_handle_and_resends_the_unconsumed_tail():
    async def go():
        async with twin_server() as twin:
            events: list = []
            sm = manager(twin, events)
            await sm.start()
            await consumed_turn(sm, events)
            await sm.send_realtime_input(audio=quiet(4))
            await sm.send_realtime_input(audio=quiet(5))
            await asyncio.sleep(0.2)
            twin.go_away(5)
            for _ in range(100):
                if sm.connections == 2 and sm._ready.is_set():
                    break
                await asyncio.sleep(0.05)
            await sm.send_realtime_input(text="Book me the 3pm slot tomorrow, please.")
            msgs = await turn(sm)
            assert any(m.tool_call for m in msgs) or msgs      # the conversation goes on
            assert ("go_away", {"time_left": "5s"}) in events
            assert replay_verdicts(twin)[-2:] == [("owed", 2), ("ok", 2)]
            assert not [e for e in twin_events(twin, "twin.refuse")]
            await sm.close()
    run(go())


def test_on_the_developer_api_the_manager_falls_back_to_plain_resumption():
    async def go():
        async with twin_server(profile="developer-api") as twin:
            events: list = []
            sm = manager(twin, events, vertex=False)
            await sm.start()
            assert sm.mode == "plain" and "transparent" in sm.fallback_reason
            await sm.send_realtime_input(text="Book me the 3pm slot tomorrow, please.")
            msgs = []
            while not any(m.tool_call for m in msgs):
                msgs += await turn(sm)
            assert sm.buffered == 0                 # no index will come: nothing kept to resend
            assert not twin_events(twin, "twin.replay")
            await sm.close()
    run(go())


def test_a_server_that_closes_transparent_1007_gets_plain_resumption_too():
    async def go():
        async with twin_server(profile="developer-api") as twin:     # the SDK (Vertex mode) lets it through
            events: list = []
            sm = manager(twin, events, vertex=True)
            await sm.start()
            assert sm.mode == "plain" and sm.fallback_reason.startswith("the server refused transparent: 1007")
            assert [e["why"] for e in twin_events(twin, "twin.refuse")] == ["transparent"]
            await sm.send_realtime_input(text="hello")
            assert await turn(sm)
            await sm.close()
    run(go())


def test_any_other_close_stops_the_manager_and_later_calls_raise_the_reason():
    async def go():
        async with twin_server(freeze_close_s=1.0) as twin:     # the server's own 1011 close
            sm = manager(twin, [])
            await sm.start()
            await asyncio.sleep(2.0)
            with pytest.raises(SessionStopped, match="1011"):
                await sm.send_realtime_input(text="hello")
            with pytest.raises(SessionStopped, match="1011"):
                async for _ in sm.receive():
                    pass
            await sm.close()
    run(go())


# ---- the twin catches each wrong resend, over real sockets ---------------------------------------

def _audio(i: int) -> str:
    return json.dumps({"realtime_input": {"audio": {"data": base64.urlsafe_b64encode(bytes([i, 0]) * 320).decode(),
                                                    "mime_type": "audio/pcm;rate=16000"}}})


async def _raw(twin, handle=None):
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    ws = await ws_connect(twin.ws_url, ssl=ctx, ping_interval=None, additional_headers={"x-goog-api-key": "test"})
    sr = {"transparent": True, **({"handle": handle} if handle else {})}
    await ws.send(json.dumps({"setup": {"model": f"models/{MODEL}", "sessionResumption": sr}}))
    return ws


async def _until(ws, pred):
    while True:
        f = json.loads(await ws.recv())
        if pred(f):
            return f


HELLO = json.dumps({"realtime_input": {"text": "hello"}})


@pytest.mark.parametrize("order,verdict", [
    ([HELLO, _audio(1), _audio(2)], "resent_consumed"),       # from index 0
    ([_audio(2)], "gap"),
    ([_audio(1), _audio(1)], "duplicate"),
    ([_audio(7), _audio(1), _audio(2)], "new_input_first"),
])
def test_the_twin_closes_a_wrong_resend_1007(order, verdict):
    async def go():
        async with twin_server(replay_check="close", idle_release_s=0.2) as twin:
            ws = await _raw(twin)
            await _until(ws, lambda f: "sessionResumptionUpdate" in f)
            await ws.send(HELLO)
            seen: list = []         # the update comes with the turnComplete, just before it
            await _until(ws, lambda f: seen.append(f) or f.get("serverContent", {}).get("turnComplete"))
            upd = [f for f in seen if "sessionResumptionUpdate" in f][-1]
            assert upd["sessionResumptionUpdate"]["lastConsumedClientMessageIndex"] == "1"
            await ws.send(_audio(1))
            await ws.send(_audio(2))
            await asyncio.sleep(0.1)
            await ws.close()
            await asyncio.sleep(0.5)
            ws2 = await _raw(twin, upd["sessionResumptionUpdate"]["newHandle"])
            await _until(ws2, lambda f: "setupComplete" in f)
            with pytest.raises(ConnectionClosed) as ei:
                for m in order:
                    await ws2.send(m)
                while True:
                    await ws2.recv()
            assert ei.value.rcvd.code == 1007
            assert replay_verdicts(twin)[-2:] == [("owed", 2), (verdict, 2)]
    run(go())


# ---- the lab client around it ----------------------------------------------------------------------

def test_the_lab_client_books_survives_an_abort_and_tells_the_truth(tmp_path):
    from lab.backend import Backend                 # the lab client's own pieces (the rest of the file
    from lab.clients import get                     # needs only the library and the twin)
    from lab.clients.base import ClientContext, Endpoint
    from lab.events import EventLog

    async def go():
        async with twin_server(idle_release_s=0.5) as twin:
            log = EventLog(tmp_path / "events.jsonl")
            be = Backend(log, commit_after_s=1.0)
            ep = Endpoint(base_url=twin.base_url, api_key="test", ca_path=twin.ca_path, model=MODEL)
            cl = get("session-manager")(ClientContext(endpoint=ep, log=log, backend=be,
                                                      params={"backoff_first_s": 0.2}))
            try:
                await cl.start()
                assert cl.flow()[0] == "127.0.0.1"
                await cl.say("Book me the 3pm slot tomorrow, please.", 0)
                await log.wait_for("tool.call", timeout=5)
                await cl.action("abort")
                await log.wait_for("resume.result", timeout=10, ok=True)
                await log.wait_for("backend.commit", timeout=10)
                await asyncio.sleep(1.0)
                asked_ms = log.now_ms()
                await cl.say("Did you book it?", 1)
                ans = await log.wait_for("model.text", timeout=10, after_ms=asked_ms)
                assert "booked" in ans["text"] and "not" not in ans["text"], ans["text"]
                assert be.bookings() == 1
                assert [v for v, _ in replay_verdicts(twin) if v not in ("owed", "ok")] == []
            finally:
                await cl.stop()
                await be.aclose()
                log.close()
    run(go())
