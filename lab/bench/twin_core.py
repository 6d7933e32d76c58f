"""`lab bench twin-core`: the twin core's own CPU per client frame, with no sockets. Prints figures only.

Drives `TwinCore` on a simulated clock with the frames `lab bench twin`'s stream sessions send
(a 100 ms microphone chunk every 100 ms per session, "Did you book it?" every 0.6-1.1 s), firing
its timers when due and handing its records to an `EventLog` that records nothing, as `lab twin
serve` without --log does. Process time, best of `--repeat`. The in-run baseline is what the
bench's bare server does with the same frames (lab.bench.echo: `orjson.loads`, and the audio's
base64 decoded by the twin's own decoder), so the ratio is the core's work over the least any
server does per frame.
Also printed: the events the core writes per client frame, and what one write costs on that log
against a log that keeps its events (the strict one every test uses).

    lab bench twin-core -- --sessions 50 --seconds 20 --repeat 3
    lab bench twin-core -- --scale 10,200,1000 --evict 0,1024,4096   (the same frames: more sessions
                           taking turns, more memory swept between two frames)
    LAB_TWIN_COMPILED=1 lab bench twin-core ...                      (the core's mypyc build: lab twin compile)
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
import time
import timeit
from dataclasses import dataclass

from lab.bench import echo
from lab.bench.load import MIC_CHUNK, QUESTION, SETUP
from lab.events import EventLog
from lab.twin import compiled
from lab.twin import io_actions as A
from lab.twin.core import TwinCore

# The twin's settings in both benches: the model's reply delays 0, so what is measured is the twin
# itself. conversation_scope=session: the bench's sessions all come from one address but stand
# for different users
BENCH_SETTINGS = ["reply_delay_s=0", "tool_call_delay_s=0", "speech_ms_per_char=5", "new_setup_s=0.01",
                  "freeze_close_s=3600", "conversation_scope=session"]


def frames(sessions: int, seconds: float, seed: int = 3) -> list[tuple[float, int, str]]:
    """(at, session, frame) in time order: each session's microphone chunks and questions."""
    rng, out = random.Random(seed), []
    for c in range(1, sessions + 1):
        t = 0.5 + rng.random() * 0.1
        while t < seconds:
            out.append((t, c, MIC_CHUNK))
            t += 0.1
        t = 0.5 + rng.random()
        while t < seconds:
            out.append((t, c, QUESTION))
            t += 0.6 + rng.random() * 0.5
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def drive(sessions: int, todo: list[tuple[float, int, str]], warm_s: float = 0.0,
          evict: bytearray | None = None, kinds: dict[str, list] | None = None) -> tuple[float, int]:
    """(seconds, events written) for one pass of a fresh core over `todo`: process seconds for the
    whole pass; with warm_s, the wall seconds of the core's own calls after that simulated second
    (the frames before it, and their timers, are the sessions' setups and first turns). evict:
    copied over itself before each frame, untimed: a memory copy that pushes that much of what
    the core touched out of the caches, as a server's TLS and socket work does between frames.
    kinds: with warm_s, filled with [calls, ns] for each kind of client frame (the frame itself) and
    for "timers" (the timers due before it)."""
    core, log = TwinCore("developer-api", list(BENCH_SETTINGS), seed=1), EventLog(keep=False)
    heap: list = []
    seq = itertools.count()
    written = 0

    def apply(acts) -> None:
        nonlocal written
        for a in acts:
            if isinstance(a, A.Timer):
                heapq.heappush(heap, (a.at, next(seq), a.key))
            elif isinstance(a, A.Log):
                log.write(a.kind, src="twin", **a.fields)
                written += 1

    for c in range(1, sessions + 1):
        apply(core.connection_opened(c, 0.0, "v1", "127.0.0.1:1", ""))
        apply(core.frame_received(c, SETUP, 0.0))
    # one loop for both figures: per_call times the core's own calls on the wall clock (the sweep
    # between frames, the heap and the handling of their actions left out); otherwise the whole
    # pass is read once in process time
    per_call = warm_s > 0.0 or evict is not None
    clock, spent, started = time.perf_counter_ns, 0, not per_call
    half = len(evict) // 2 if evict is not None else 0
    cpu0 = time.process_time()
    for at, c, data in todo:
        if per_call:
            if half:
                evict[:half] = evict[half:]      # one memcpy: the data caches, not the interpreter's code
            if not started and at >= warm_s:
                written, started = 0, True
        fired = timers_ns = 0
        while heap and heap[0][0] <= at:
            due, _, key = heapq.heappop(heap)
            t0 = clock() if per_call else 0
            acts = core.timer_fired(key, due)
            if per_call:
                timers_ns += clock() - t0
            apply(acts)
            fired += 1
        t0 = clock() if per_call else 0
        acts = core.frame_received(c, data, at)
        frame_ns = clock() - t0 if per_call else 0
        apply(acts)
        if per_call and started:
            spent += timers_ns + frame_ns
            if kinds is not None:
                for k, calls, ns in (("timers", fired, timers_ns), (data, 1, frame_ns)):
                    tally = kinds.setdefault(k, [0, 0])
                    tally[0] += calls
                    tally[1] += ns
    if not per_call:
        return time.process_time() - cpu0, written
    return spent / 1e9, written


SCALE_WARM_S = 3.0      # past every session's setup and first turn


def steady(sessions: int, n: int) -> list[tuple[float, int, str]]:
    """SCALE_WARM_S of warm-up, then about n client frames from `sessions` sessions: the same
    frames per session-second whatever the count, so only how many sessions take turns differs."""
    per_s = sessions * (1 / 0.1 + 1 / 0.85)           # a chunk every 100 ms, a question every ~0.85 s
    return frames(sessions, SCALE_WARM_S + n / per_s)


def scale(counts: list[int], evicts_kib: list[int], n: int, repeat: int) -> int:
    """The core's steady-state time per client frame as more sessions take turns with the same
    frames, and as more memory is swept between two frames. The work per frame is the same in
    every cell: a rise along a row is per-session state falling out of the caches, down a column
    what a server's other work between frames (TLS, sockets, the loop) does to the core's own. The
    in-run baseline is the first cell: the fewest sessions, the least swept."""
    todos = {c: steady(c, n) for c in counts}
    sweeps = {k: bytearray(k * 1024 * 2) if k else None for k in evicts_kib}
    best: dict[tuple[int, int], float] = {}
    for _ in range(max(1, repeat)):          # cells alternated, so a loaded minute falls on all
        for k in evicts_kib:
            for c in counts:
                todo = todos[c]
                timed = sum(1 for at, _, _ in todo if at >= SCALE_WARM_S)
                secs, _ = drive(c, todo, warm_s=SCALE_WARM_S, evict=sweeps[k])
                best[c, k] = min(best.get((c, k), math.inf), secs / timed * 1e6)
    base = best[counts[0], evicts_kib[0]]
    print(f"twin core ({compiled.which()}), us a client frame (its own calls, wall; the ratio to the first cell), ~{n} frames a cell "
          f"after {SCALE_WARM_S:g} simulated s of warm-up, best of {repeat}")
    print("  swept between frames " + "".join(f"{f'{c} sessions':>22}" for c in counts))
    for k in evicts_kib:
        cells = "".join(f"{best[c, k]:>13.1f} ({best[c, k] / base:4.2f}x)" for c in counts)
        print(f"  {f'{k} KiB':>20} {cells}")
    return 0


@dataclass(frozen=True)
class Kinds:
    """What the core and the baseline spend on each kind of the stream's client frames, hot (no
    sockets, best of several passes), microseconds: the least each costs in a server."""
    mic_us: float           # the core's answer to a microphone chunk
    question_us: float      # the core's answer to a question, with the timers of its turn
    base_mic_us: float      # the baseline's (lab.bench.echo.answer) to a microphone chunk
    base_question_us: float

    @property
    def mic_extra_us(self) -> float:
        return self.mic_us - self.base_mic_us

    @property
    def question_extra_us(self) -> float:
        return self.question_us - self.base_question_us

    def extra_us(self, mic_chunks: int, questions: int) -> float:
        """The core's cost beyond the baseline's answers per client frame, for that mix of frames."""
        n = mic_chunks + questions
        return (mic_chunks * self.mic_extra_us + questions * self.question_extra_us) / n if n else math.nan


def kinds(sessions: int = 50, n: int = 20000, repeat: int = 3) -> Kinds:
    """Each kind's hot cost in the steady state (lab.bench.echo.answer for the baseline's). Every
    timer of this mix is a question's turn's (its generationComplete and turnComplete)."""
    todo = steady(sessions, n)
    best: dict[str, float] = {}
    for _ in range(max(1, repeat)):
        got: dict[str, list] = {}
        drive(sessions, todo, warm_s=SCALE_WARM_S, kinds=got)
        q = got[QUESTION][0]
        per = {"mic": got[MIC_CHUNK][1] / got[MIC_CHUNK][0] / 1e3,
               "question": (got[QUESTION][1] + got["timers"][1]) / q / 1e3 if q else math.nan,
               "base_mic": min(timeit.repeat(lambda: echo.answer(MIC_CHUNK), number=2000, repeat=3)) / 2000 * 1e6,
               "base_question": min(timeit.repeat(lambda: echo.answer(QUESTION), number=2000, repeat=3)) / 2000 * 1e6}
        best = {k: min(v, best.get(k, math.inf)) for k, v in per.items()}
    return Kinds(best["mic"], best["question"], best["base_mic"], best["base_question"])


def baseline(todo: list[tuple[float, int, str]]) -> float:
    """Process seconds for the bare server's work on the same frames (lab.bench.echo's handler)."""
    answer = echo.answer
    cpu0 = time.process_time()
    for _at, _c, data in todo:
        answer(data)
    return time.process_time() - cpu0


def write_cost_us(log: EventLog, n: int = 20000) -> float:
    fields = {"conn": 1, "session": "s1", "source": "lines", "text": "Yes, it is booked.", "plan": None}
    t = min(timeit.repeat(lambda: log.write("twin.model", "twin", **fields), number=n, repeat=5))
    if log.events:
        log.events.clear()
    return t / n * 1e6


def _ints(text: str, least: int, what: str) -> list[int]:
    try:
        xs = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of {what}: {text!r}") from None
    if min(xs) < least:
        raise argparse.ArgumentTypeError(f"{what} are {least} or more: {text!r}")
    return xs


def _counts(text: str) -> list[int]:
    return _ints(text, 1, "session counts")


def _counts_or_zero(text: str) -> list[int]:
    return _ints(text, 0, "sizes in KiB")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="lab bench twin-core", description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0, help="simulated seconds of traffic")
    ap.add_argument("--repeat", type=int, default=3, help="passes; the best is the figure")
    ap.add_argument("--scale", type=_counts, metavar="N,N,...",
                    help="instead: the steady-state cost per frame at each session count (same frames)")
    ap.add_argument("--evict", type=_counts_or_zero, default=[0], metavar="KIB,KIB,...",
                    help="with --scale: memory swept between two frames, untimed (default 0)")
    ap.add_argument("--frames", type=int, default=20000, help="with --scale: client frames timed per cell")
    args = ap.parse_args(argv)
    if args.scale:
        return scale(args.scale, args.evict, args.frames, args.repeat)
    todo = frames(args.sessions, args.seconds)
    core_s, base_s, written = [], [], 0
    for _ in range(max(1, args.repeat)):   # alternated, so a loaded minute falls on both
        s, written = drive(args.sessions, todo)
        core_s.append(s)
        base_s.append(baseline(todo))
    n = len(todo)
    core_us, base_us = min(core_s) / n * 1e6, min(base_s) / n * 1e6
    print(f"twin core bench ({compiled.which()} core): {args.sessions} sessions, {n} client frames ({args.seconds:g} simulated s), "
          f"best of {len(core_s)} (median core {statistics.median(core_s) / n * 1e6:.1f} us)")
    print(f"  twin core per client frame      {core_us:7.1f} us   (frames, timers, VAD, turns, records)")
    print(f"  baseline per client frame       {base_us:7.1f} us   (orjson.loads + the audio's base64: lab.bench.echo)")
    print(f"  twin core / baseline            {core_us / base_us:7.2f}x")
    print(f"  events per client frame         {written / n:7.2f}")
    k = kinds(args.sessions, repeat=args.repeat)
    print(f"  by kind, steady state (the core's own calls; the baseline's answer, lab.bench.echo): a microphone "
          f"chunk {k.mic_us:.1f} us ({k.base_mic_us:.1f}), a question with its turn's timers {k.question_us:.1f} us "
          f"({k.base_question_us:.1f})")
    idle, kept = write_cost_us(EventLog(keep=False)), write_cost_us(EventLog())
    print(f"  one write, a log that records nothing {idle:.2f} us, a kept log {kept:.2f} us ({idle / kept:.2f}x)")
    return 0
