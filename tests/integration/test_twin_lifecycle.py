"""Session lifecycle over loopback TLS through the UNMODIFIED google-genai SDK (raw websockets for
pings and for a peer that never answers a close): the connection cap after goAway, the resume after
the twin's own goAway, session caps and context compression, the server's own faults switched over
the control channel, the TCP give-up on accepted sockets and no FIN after the twin's close frame.
Caps are overridden small; bounds are loose for a loaded 2-core machine."""
from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from google.genai import errors, types
from websockets.asyncio.client import connect as ws_connect

# the SDK harness of test_twin_sdk.py, shared (pytest runs with --import-mode=importlib: no sys.path entry)
sys.path.insert(0, str(Path(__file__).parent))
from test_twin_sdk import FAST, MODEL, Live, cfg, run, sdk, twin_server  # noqa: E402

DEADLINE = "Deadline expired before operation could complete."
SLACK = 1.5     # a loaded machine's scheduling, on top of each timer


async def post(url: str, body: dict) -> dict:
    def call():
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
            return json.loads(r.read())
    return await asyncio.to_thread(call)


async def until_closed(live: Live) -> tuple[list, errors.APIError, float]:
    """Every message until the server's close; (messages with their times, the APIError, its time)."""
    got, t0 = [], time.monotonic()
    with pytest.raises(errors.APIError) as ei:
        while True:
            async for m in live.s.receive():
                got.append((time.monotonic() - t0, m))
    return got, ei.value, time.monotonic() - t0


def test_connection_cap_goaway_then_1011_deadline_expired():
    async def go():
        async with twin_server(overrides={"connection_max_s": 4, "goaway_lead_s": 2}) as twin:
            t0 = time.monotonic()
            async with Live(sdk(twin), cfg()) as live:
                got, e, _ = await until_closed(live)
                closed_at = time.monotonic() - t0
            goaways = [(t, m.go_away) for t, m in got if m.go_away]
            assert len(goaways) == 1 and goaways[0][1].time_left == "2s"
            assert (e.code, e.details) == (1011, DEADLINE)
            assert 4.0 - 0.05 <= closed_at <= 4.0 + SLACK
            assert closed_at - (goaways[0][0] + live.setup_s) >= 2.0 - 0.5
    run(go())


def test_vertex_connection_cap_closes_1000_cancelled():
    async def go():
        async with twin_server(profile="vertex", overrides={"connection_max_s": 2, "goaway_lead_s": 1}) as twin:
            async with Live(sdk(twin, vertex=True), cfg()) as live:
                _, e, _ = await until_closed(live)
            assert (e.code, e.details) == (1000, "The operation was cancelled.")
    run(go())


def test_a_client_leaving_on_goaway_resumes_at_once_like_livekit():
    async def go():
        async with twin_server(overrides={**FAST, "connection_max_s": 30, "goaway_lead_s": 28}) as twin:
            client = sdk(twin)
            async with Live(client, cfg()) as live:
                await live.turn(stop=lambda m: m.go_away is not None)
                handle = live.handles[-1]
            # left with 1000 at once, then the resume with the handle: accepted, not the idle-release 1011
            t0 = time.monotonic()
            async with Live(client, cfg(handle)) as again:
                assert again.s.setup_complete is not None
                await again.s.send_realtime_input(text="Did you book it?")
                assert Live.said(await again.turn())
            assert time.monotonic() - t0 < 5
    run(go())


def test_goaway_now_over_the_control_channel():
    async def go():
        async with twin_server(control=("127.0.0.1", 0), overrides={"connection_max_s": None}) as twin:
            async with Live(sdk(twin), cfg()) as live:
                await post(twin.control.url + "/goaway", {"time_left_s": 1})
                got, e, t = await until_closed(live)
            assert [m.go_away.time_left for _, m in got if m.go_away] == ["1s"]
            assert (e.code, e.details) == (1011, DEADLINE) and 0.9 <= t <= 1 + SLACK
    run(go())


def test_audio_session_cap_without_compression_and_none_with_sliding_window():
    async def go():
        prm = {**FAST, "connection_max_s": None, "session_max_audio_s": 2}
        async with twin_server(overrides=prm) as twin:
            t0 = time.monotonic()
            async with Live(sdk(twin), cfg()) as live:
                _, e, _ = await until_closed(live)
            assert e.code == 1011 and 2 - 0.05 <= time.monotonic() - t0 <= 2 + SLACK
            compress = types.ContextWindowCompressionConfig(sliding_window=types.SlidingWindow())
            async with Live(sdk(twin), cfg(context_window_compression=compress)) as live:
                await asyncio.sleep(3)                  # past the cap
                await live.s.send_realtime_input(text="Did you book it?")
                assert Live.said(await live.turn())
    run(go())


async def raw(twin):
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    ws = await ws_connect(twin.ws_url, ssl=ctx, ping_interval=None, additional_headers={"x-goog-api-key": "test"})
    await ws.send(json.dumps({"setup": {"model": f"models/{MODEL}", "sessionResumption": {}}}))
    assert "setupComplete" in json.loads(await ws.recv())
    return ws


async def pong_s(ws, timeout: float) -> float | None:
    t0 = time.monotonic()
    waiter = await ws.ping()
    try:
        await asyncio.wait_for(waiter, timeout)
    except asyncio.TimeoutError:
        return None
    return time.monotonic() - t0


def test_slow_pongs_and_the_silent_stall_switched_at_run_time():
    async def go():
        async with twin_server(control=("127.0.0.1", 0), overrides={**FAST, "pong_delay_s": 1.5}) as twin:
            ws = await raw(twin)
            await ws.recv()                                     # the handle update
            assert await pong_s(ws, 5) < 1.0
            await post(twin.control.url + "/fault", {"name": "slow_pongs", "on": True})
            assert 1.5 - 0.05 <= await pong_s(ws, 10) <= 1.5 + SLACK
            await post(twin.control.url + "/fault", {"name": "slow_pongs", "on": False})
            await post(twin.control.url + "/fault", {"name": "stall", "on": True})
            assert await pong_s(ws, 2.5) is None                 # no pong
            await ws.send(json.dumps({"realtimeInput": {"text": "Did you book it?"}}))
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(ws.recv(), 2.0)           # no frame either
            assert twin.open_connections() == 1                 # and the socket stays open
            await ws.close()
    run(go())


def test_unresumable_updates_reach_the_sdk():
    async def go():
        async with twin_server(control=("127.0.0.1", 0)) as twin:
            async with Live(sdk(twin), cfg()) as live:
                await live.turn(stop=lambda m: m.session_resumption_update is not None)
                await post(twin.control.url + "/fault", {"name": "unresumable", "on": True})
                (m,) = await live.turn(stop=lambda m: m.session_resumption_update is not None)
                assert m.session_resumption_update.resumable is False and not m.session_resumption_update.new_handle
    run(go())


def test_accepted_sockets_give_up_like_the_records():
    async def go():
        async with twin_server() as twin:
            ws = await raw(twin)
            (io,) = twin._conns.values()
            sock = io.ws.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 117_000
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
            await ws.close()
    run(go())


def test_no_fin_after_the_twins_close_frame_while_the_peer_stays_silent():
    async def silent_peer_after_close(fin_after_close: bool) -> tuple[int, bool]:
        async with twin_server(overrides={"fin_after_close": fin_after_close}) as twin:
            ws = await raw(twin)
            (io,) = twin._conns.values()
            ws.transport.pause_reading()        # the peer hears nothing: it never answers the close
            await ws.send("{not json")          # the twin closes 1007
            await asyncio.sleep(12)             # websockets alone drops TCP 10 s after its close frame
            held = twin.open_connections(), not io.ws.transport.is_closing()
            ws.transport.abort()
            return held

    async def go():
        recorded, websockets_default = await asyncio.gather(silent_peer_after_close(False),
                                                            silent_peer_after_close(True))
        assert recorded == (1, True)            # still established: no FIN, as the real server
        assert websockets_default == (0, False)
    run(go(), timeout=40)
