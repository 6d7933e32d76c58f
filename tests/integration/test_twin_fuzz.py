"""Fuzz through the real shell: a loopback TwinServer (plain ws) and raw websockets clients.

Several connections at once send seeded random bad frames (random bytes and text, truncated JSON,
oversized frames, unknown fields at several levels, bad base64, long keys); each must end in a close
frame with a code within a deadline, while well-behaved connections beside them complete their turns
as if nothing happened. Bounded: a fixed number of frames, the whole test well under 30 s.
"""
from __future__ import annotations

import asyncio
import base64
import json
import random

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from lab.twin.server import TwinServer

MAX_FRAME = 4096
CLOSE_DEADLINE_S = 3.0      # setup + one bad frame -> the close frame, on a loaded 2-core machine
SETUP = {"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {},
                   "generationConfig": {"responseModalities": ["AUDIO"]}}}
BAD_CONNECTIONS = 24
GOOD_CONNECTIONS = 3


def _bad_frame(rng: random.Random) -> bytes | str:
    """One frame the twin must refuse with a close, whatever the connection did before."""
    long_key = rng.choice("kz\u00e9\u2603") * rng.randint(60, 400)
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 300))
    if kind == 1:
        return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 100)))
    if kind == 2:
        s = json.dumps({"realtimeInput": {"text": "Did you book it?"}})
        return s[:rng.randint(1, len(s) - 1)]
    if kind == 3:
        return json.dumps({"realtimeInput": {"text": "x" * (MAX_FRAME + rng.randint(1, MAX_FRAME))}})
    if kind == 4:
        return json.dumps({long_key: {}})
    if kind == 5:
        return json.dumps({"realtimeInput": {"audio": {"data": "!!not*base64" + "?" * rng.randint(0, 20),
                                                       "mimeType": "audio/pcm;rate=16000"}}})
    if kind == 6:
        return json.dumps({"toolResponse": {}, "unknownField": {long_key: [1, 2]}})
    return json.dumps(rng.choice([[1, 2], "text", 3, None]))


async def _bad_connection(url: str, rng: random.Random) -> tuple[int | None, float]:
    """Setup, then random bad frames until the twin closes: (close code, seconds to it)."""
    loop = asyncio.get_running_loop()
    async with connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps(SETUP))
        if rng.random() < 0.5:                  # half wait for the live phase, half fire during setup
            await asyncio.wait_for(ws.recv(), CLOSE_DEADLINE_S)
        t0 = loop.time()
        try:
            for _ in range(3):
                await ws.send(_bad_frame(rng))
            while True:
                await asyncio.wait_for(ws.recv(), CLOSE_DEADLINE_S)
        except ConnectionClosed:
            pass
        rcvd = ws.protocol.close_rcvd       # the close frame the twin sent, None if the socket just ended
        return (rcvd.code if rcvd is not None else None), loop.time() - t0


async def _good_connection(url: str) -> list[str]:
    """A normal turn: setupComplete, then audio and turnComplete for a question."""
    seen: list[str] = []
    async with connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps(SETUP))
        await ws.send(json.dumps({"realtimeInput": {"text": "Did you book it?"}}))
        while "turnComplete" not in seen:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            seen += list(msg) + list(msg.get("serverContent") or {})
            for part in (msg.get("serverContent") or {}).get("modelTurn", {}).get("parts", []):
                base64.b64decode(part["inlineData"]["data"], validate=True)
    return seen


def test_random_bad_frames_close_their_connections_and_leave_the_others_alone():
    async def main():
        async with TwinServer(tls=False, port=0, seed=5,
                              overrides={"max_client_frame_bytes": MAX_FRAME, "reply_delay_s": 0.1,
                                         "speech_ms_per_char": 10}) as twin:
            rngs = [random.Random(1000 + i) for i in range(BAD_CONNECTIONS)]
            bad = [asyncio.create_task(_bad_connection(twin.ws_url, r)) for r in rngs]
            good = [asyncio.create_task(_good_connection(twin.ws_url)) for _ in range(GOOD_CONNECTIONS)]
            results = await asyncio.wait_for(asyncio.gather(*bad), 20)
            turns = await asyncio.wait_for(asyncio.gather(*good), 20)
            await asyncio.sleep(0.2)
            return results, turns, twin.open_connections()

    results, turns, still_open = asyncio.run(main())
    for code, took in results:
        assert code == 1007 and took <= CLOSE_DEADLINE_S, (code, took)
    for seen in turns:
        assert seen[0] == "setupComplete" and "modelTurn" in seen and seen[-1] == "turnComplete"
    assert still_open == 0
