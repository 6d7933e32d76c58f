"""`lab bench twin`'s baseline answers a question with the twin's frames, at the twin's times.

The load asks its next question once a turn completes, so a baseline that completed its turns sooner
than the twin would be asked more questions over the same microphone stream, and the CPU per client
frame would compare two mixes of work. Both servers run here as the bench runs them (own process,
TLS on loopback, the bench's twin settings) and answer the same three questions.
"""
import asyncio
import ssl
import tempfile
import time

import orjson
from websockets.asyncio.client import connect

from lab.bench import echo
from lab.bench.load import QUESTION, SETUP
from lab.bench.twin import _baseline_argv, _Server, _twin_argv


def _kinds(frame: dict) -> tuple[str, ...]:
    return tuple(sorted(frame.get("serverContent", {}))) or tuple(sorted(frame))


async def _turns(url: str, ca: str, n: int) -> list[list[tuple[float, tuple[str, ...]]]]:
    """Each question's frames up to its turnComplete: (ms after the question, the frame's keys)."""
    turns = []
    async with connect(url, ssl=ssl.create_default_context(cafile=ca), max_size=None) as ws:
        await ws.send(SETUP)
        assert "setupComplete" in orjson.loads(await ws.recv())
        await ws.recv()                                     # the first sessionResumptionUpdate
        for _ in range(n):
            t0, frames = time.monotonic(), []
            await ws.send(QUESTION)
            while not frames or "turnComplete" not in frames[-1][1]:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                if "sessionResumptionUpdate" not in frame:
                    frames.append(((time.monotonic() - t0) * 1000, _kinds(frame)))
            turns.append(frames)
    return turns


def _serve_and_ask(argv: list[str], n: int = 3):
    srv = _Server(argv, None)
    try:
        return asyncio.run(_turns(srv.url, srv.ca, n))
    finally:
        srv.stop()


def test_the_baseline_sends_the_twins_frames_and_completes_its_turns_when_the_twin_does():
    with tempfile.TemporaryDirectory() as d:
        base = _serve_and_ask(_baseline_argv(d))
        twin = _serve_and_ask(_twin_argv("developer-api", d, []))
    for b, t in zip(base, twin):
        # the same frames, ignoring the usage the twin adds to its turnComplete
        assert [k for _, k in b] == [tuple(x for x in k if x != "usageMetadata") for _, k in t], (b, t)
        # the audio at once, the turn complete no sooner than the chunk has played
        assert b[-1][0] >= echo.REPLY_CHUNK_S * 1000 and t[-1][0] >= echo.REPLY_CHUNK_S * 1000, (b, t)
