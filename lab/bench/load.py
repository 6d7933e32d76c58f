"""The load side of `lab bench twin`: N raw websockets sessions against one server, and what they saw.

Each session connects over TLS, sends a setup and waits for setupComplete and the first
sessionResumptionUpdate, then, by mode:

- `text`:   asks "Did you book it?" at random 50-300 ms gaps, waiting for each reply's turnComplete;
- `stream`: the same questions, while its microphone streams 16 kHz silence in 100 ms chunks on a
            real-time schedule (chunk k due at start + phase + k * 100 ms), and it plays the server's
            audio. Each session's phase is its own (uniform in one chunk period, from its seed): phones
            are not in step, and 200 in step would bring the server one 200-frame burst every 100 ms,
            so that a question's latency measured the burst's length more than the server's answer.
            `mic_in_step=True` starts every microphone at once, the burst on purpose;
- `idle`:   sends nothing until the end, then asks one question: a session is held if it answers.

Latency is a question's send -> the first frame of its reply (serverContent or toolCall; a
sessionResumptionUpdate left over from the turn before is skipped). The audio it receives is played at real
time from each turn's first chunk: an underrun is a chunk that arrives after everything before it has
finished playing (the listener would hear a gap). `mic_late_ms` is how far behind its schedule the
microphone fell: if it grows, the load generator itself is short of CPU and the figures say so.
"""
from __future__ import annotations

import asyncio
import base64
import random
import ssl
import time
from dataclasses import dataclass, field
from typing import Callable

import orjson
from websockets.asyncio.client import connect

from lab.model_id import DEFAULT_MODEL

MODES = ("text", "stream", "idle")
PATH = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"
SETUP = orjson.dumps({"setup": {"model": f"models/{DEFAULT_MODEL}", "sessionResumption": {},
                                "generationConfig": {"responseModalities": ["AUDIO"]}}})
QUESTION = orjson.dumps({"realtime_input": {"text": "Did you book it?"}}).decode()
MIC_CHUNK_S = 0.1
MIC_CHUNK = orjson.dumps({"realtime_input": {"audio": {"data": base64.b64encode(bytes(3200)).decode(),
                                                       "mime_type": "audio/pcm;rate=16000"}}}).decode()
PLAY_RATE = 24000        # the server's audio: 16-bit mono at 24 kHz (protocol.md, output audio)
OPEN_AT_ONCE = 25        # TLS handshakes in flight at a time (the load generator's own CPU)


@dataclass
class Tally:
    """What every session of one level saw, summed."""
    opened: int = 0
    held: int = 0
    lats_ms: list[float] = field(default_factory=list)   # one per question asked
    audio_chunks: int = 0
    underruns: int = 0
    mic_chunks: int = 0
    mic_late_ms: float = 0.0
    open_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def frames(self) -> int:
        """The client frames the sessions sent: every question and microphone chunk."""
        return len(self.lats_ms) + self.mic_chunks


def _is_reply(frame: dict) -> bool:
    return "serverContent" in frame or "toolCall" in frame


def _audio_s(frame: dict) -> float:
    """Seconds of audio in a serverContent frame (base64 length, not decoded: the load's CPU)."""
    parts = ((frame.get("serverContent") or {}).get("modelTurn") or {}).get("parts") or []
    n = 0
    for part in parts:
        data = (part.get("inlineData") or {}).get("data")
        if data:
            n += len(data) * 3 // 4 - data[-2:].count("=")
    return n / 2 / PLAY_RATE


class _Session:
    def __init__(self, i: int, tally: Tally, mic_in_step: bool = False):
        self.rng = random.Random(i)
        self.tally = tally
        self.ws = None
        self.mic_phase_s = 0.0 if mic_in_step else self.rng.uniform(0.0, MIC_CHUNK_S)

    async def open(self, url: str, ctx: ssl.SSLContext) -> None:
        self.ws = await connect(url, ssl=ctx, ping_interval=None, compression=None, open_timeout=60,
                                max_size=None, additional_headers={"x-goog-api-key": "bench"})
        await self.ws.send(SETUP)
        first = orjson.loads(await self.ws.recv())
        if "setupComplete" not in first:
            raise RuntimeError(f"first frame {list(first)}")
        await self.ws.recv()    # the first sessionResumptionUpdate
        self.tally.opened += 1

    async def ask(self) -> None:
        """One question: its latency, and its reply's audio played in real time."""
        t0 = time.perf_counter()
        await self.ws.send(QUESTION)
        frame = orjson.loads(await self.ws.recv())
        while not _is_reply(frame):   # a resumption update of the turn before is not this reply
            frame = orjson.loads(await self.ws.recv())
        self.tally.lats_ms.append((time.perf_counter() - t0) * 1000)
        play_from = None    # when this turn's audio started playing
        queued_s = 0.0      # seconds of it received so far
        while True:
            a = _audio_s(frame)
            if a:
                now = time.perf_counter()
                if play_from is None:
                    play_from = now
                elif now > play_from + queued_s:
                    self.tally.underruns += 1
                    play_from = now - queued_s   # the gap was heard; playback resumes from here
                queued_s += a
                self.tally.audio_chunks += 1
            if (frame.get("serverContent") or {}).get("turnComplete"):
                return
            frame = orjson.loads(await self.ws.recv())

    async def mic(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time() + self.mic_phase_s
        k = 0
        while True:
            due = start + k * MIC_CHUNK_S
            if due >= until:
                return
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.tally.mic_late_ms = max(self.tally.mic_late_ms, -delay * 1000)
            await self.ws.send(MIC_CHUNK)
            self.tally.mic_chunks += 1
            k += 1

    async def talk(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            gap = self.rng.uniform(0.05, 0.3)
            if loop.time() + gap >= until:
                return
            await asyncio.sleep(gap)
            await self.ask()


async def open_all(url: str, ca_path: str, n: int, tally: Tally,
                   progress: Callable[[str], None], mic_in_step: bool = False) -> list[_Session]:
    """n sessions opened (OPEN_AT_ONCE at a time): those that opened; a refusal is in tally.errors."""
    ctx = ssl.create_default_context(cafile=ca_path)
    sessions = [_Session(i, tally, mic_in_step) for i in range(n)]
    gate = asyncio.Semaphore(OPEN_AT_ONCE)

    async def open_one(s: _Session) -> bool:
        async with gate:
            try:
                await s.open(url, ctx)
                return True
            except Exception as e:  # noqa: BLE001 - a refused session is a figure, not a crash
                tally.errors.append(f"open: {e!r}")
                return False

    t_open = time.monotonic()
    opening = asyncio.gather(*(open_one(s) for s in sessions))
    while not opening.done():
        await asyncio.wait([opening], timeout=5)
        if not opening.done():
            progress(f"opening: {tally.opened}/{n} after {time.monotonic() - t_open:.0f} s")
    live = [s for s, ok in zip(sessions, opening.result()) if ok]
    tally.open_s += time.monotonic() - t_open
    return live


async def traffic(live: list[_Session], mode: str, duration_s: float, tally: Tally,
                  progress: Callable[[str], None]) -> int:
    """`mode` on every live session for duration_s (a turn under way is played out): how many are
    still open after it."""
    loop = asyncio.get_running_loop()
    until = loop.time() + duration_s

    async def run_one(s: _Session) -> bool:
        try:
            if mode == "idle":
                await asyncio.sleep(max(0.0, until - loop.time()))
                await s.ask()
            elif mode == "text":
                await s.talk(until)
            else:
                await asyncio.gather(s.mic(until), s.talk(until))
            return s.ws.state.name == "OPEN"
        except Exception as e:  # noqa: BLE001
            tally.errors.append(f"{mode}: {e!r}")
            return False

    running = asyncio.gather(*(run_one(s) for s in live))
    t_run = time.monotonic()
    while not running.done():
        await asyncio.wait([running], timeout=5)
        if not running.done():
            progress(f"{time.monotonic() - t_run:.0f}/{duration_s:g} s: {len(tally.lats_ms)} replies, "
                     f"{tally.underruns} underruns, mic late <= {tally.mic_late_ms:.0f} ms")
    return sum(1 for ok in running.result() if ok)


async def _close_all(live: list[_Session]) -> None:
    await asyncio.gather(*(s.ws.close() for s in live), return_exceptions=True)


async def run_level(url: str, ca_path: str, n: int, mode: str, duration_s: float,
                    progress: Callable[[str], None], mark: Callable[[str], None],
                    mic_in_step: bool = False) -> Tally:
    """Open n sessions, run `mode` on all of them for duration_s, close them; the tally.
    mark("open") is called once all are open and mark("end") before any closes (the caller reads
    the server's memory there)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}")
    tally = Tally()
    live = await open_all(url, ca_path, n, tally, progress, mic_in_step)
    progress(f"{len(live)}/{n} open in {tally.open_s:.1f} s; {mode} for {duration_s:g} s")
    mark("open")
    tally.held = await traffic(live, mode, duration_s, tally, progress)
    mark("end")
    await _close_all(live)
    return tally


async def run_alternating(targets: list[tuple[str, str]], n: int, mode: str, slice_s: float, slices: int,
                          progress: Callable[[int, str], None], mark: Callable[[int, str, Tally], None],
                          mic_in_step: bool = False) -> list[Tally]:
    """n sessions open on each target (url, ca_path) at once, then `slices` rounds in which each
    target's sessions in turn run `mode` for slice_s while the others' wait idle; one tally a target.
    mark(i, "open", tally) once target i's sessions are all open, mark(i, "start"/"end", tally) around
    each of its slices (the caller reads the server's CPU there). A target's held sessions are those
    open after its last slice."""
    if mode not in ("text", "stream"):
        raise ValueError(f"mode {mode!r}: alternating runs are for traffic, not idle sessions")
    tallies = [Tally() for _ in targets]
    lives: list[list[_Session]] = []
    try:
        for i, (url, ca_path) in enumerate(targets):
            lives.append(await open_all(url, ca_path, n, tallies[i], lambda line, i=i: progress(i, line),
                                        mic_in_step))
            progress(i, f"{len(lives[i])}/{n} open in {tallies[i].open_s:.1f} s")
            mark(i, "open", tallies[i])
        for k in range(slices):
            for i, live in enumerate(lives):
                mark(i, "start", tallies[i])
                tallies[i].held = await traffic(live, mode, slice_s, tallies[i],
                                                lambda line, i=i: progress(i, line))
                mark(i, "end", tallies[i])
    finally:
        for live in lives:
            await _close_all(live)
    return tallies
