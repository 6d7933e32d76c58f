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
from lab.bench.twin import _baseline_argv, _Server, _shell_argv, _twin_argv


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
        # the audio at once, the generation over once the chunk was sent at the profile's speed, the
        # turn complete no sooner than the chunk has played
        for frames in (b, t):
            (gen_ms, _), = [f for f in frames if f[1] == ("generationComplete",)]
            # (1 ms either side: the event loop's timers fire up to a clock tick early)
            assert echo.GENERATED_S * 1000 - 1 <= gen_ms < echo.REPLY_CHUNK_S * 1000 - 1 <= frames[-1][0], (b, t)


def test_the_floor_server_is_the_twins_own_setup_then_the_baselines_answers():
    # lab.bench.shell_twin: the twin's server and session set-up, a question answered with the
    # baseline's frames at the baseline's times (no usageMetadata: the core did not answer it)
    async def setup_then_ask(url: str, ca: str) -> tuple[dict, list]:
        async with connect(url, ssl=ssl.create_default_context(cafile=ca), max_size=None) as ws:
            await ws.send(SETUP)
            assert "setupComplete" in orjson.loads(await ws.recv())
            update = orjson.loads(await ws.recv())
            t0, frames = time.monotonic(), []
            await ws.send(QUESTION)
            while not frames or "turnComplete" not in frames[-1][1]:
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
                frames.append(((time.monotonic() - t0) * 1000, _kinds(frame)))
            return update, frames

    with tempfile.TemporaryDirectory() as d:
        base = _serve_and_ask(_baseline_argv(d), 1)[0]
        srv = _Server(_shell_argv("developer-api", d, []), None)
        try:
            update, shell = asyncio.run(setup_then_ask(srv.url, srv.ca))
        finally:
            srv.stop()
    handle = update["sessionResumptionUpdate"]["newHandle"]
    assert handle != "baseline" and len(handle) > 16, update       # the twin's own session handle
    assert [k for _, k in shell] == [k for _, k in base], (shell, base)
    (gen_ms, _), = [f for f in shell if f[1] == ("generationComplete",)]
    assert echo.GENERATED_S * 1000 - 1 <= gen_ms < echo.REPLY_CHUNK_S * 1000 <= shell[-1][0], shell


def test_an_alternating_level_runs_one_servers_traffic_at_a_time_and_sums_its_slices():
    # both servers up, each with its sessions open; while one's slice runs the other's sessions
    # send nothing, so what a minute of the machine does falls on both and on neither's figure twice
    from lab.bench import twin
    from lab.bench.load import run_alternating

    with tempfile.TemporaryDirectory() as d:
        # (name, argv, the environment it adds: the core's switch, lab.twin.compiled)
        servers = [("baseline", _baseline_argv(f"{d}/b"), {}), ("twin", _twin_argv("developer-api", f"{d}/t", []), {})]
        procs = [_Server(argv, None, env) for _, argv, env in servers]
        seen: list[tuple[int, str, tuple[int, ...]]] = []
        tallies_seen: list = []

        def mark(i, at, tally):
            if tally not in tallies_seen:
                tallies_seen.append(tally)
            seen.append((i, at, tuple(t.frames for t in tallies_seen)))

        try:
            tallies = asyncio.run(run_alternating([(p.url, p.ca) for p in procs], 3, "stream", 0.8, 2,
                                                  lambda i, line: None, mark))
        finally:
            for p in procs:
                p.stop()
        rows = twin._run_alternating(servers, "stream", 2, 1.2, 2, [0])
    assert [(i, at) for i, at, _ in seen] == [(0, "open"), (1, "open")] + [(0, "start"), (0, "end"), (1, "start"),
                                                                       (1, "end")] * 2
    for k in range(2, len(seen), 2):     # each slice: only its own server's tally moved
        (i, _, before), (_, _, after) = seen[k], seen[k + 1]
        assert after[i] > before[i] and all(a == b for j, (a, b) in enumerate(zip(before, after)) if j != i), seen
    for t in tallies:
        assert (t.opened, t.held) == (3, 3) and t.lats_ms and t.mic_chunks and not t.errors, t

    assert [r.server for r in rows] == ["baseline", "twin"]
    for r in rows:
        assert r.tally.held == 2 and len(r.slice_us) == 2 and r.server_cpu_s > 0


def test_a_timed_twin_counts_the_calls_of_the_span_the_cpu_figure_covers():
    # the bench signals the timed twin when its sessions are open and before they close: the calls
    # it reports are that span's, the load's own frames and no setup
    from lab.bench import timed_server, twin

    with tempfile.TemporaryDirectory() as d:
        r = twin._run_one("timed", _twin_argv("developer-api", d, [], timed=True), "stream", 2, 1.5, [0], timed=True)
    assert r.tally.held == 2 and r.timed, r.timed
    assert r.timed[timed_server.OTHER_FRAME][0] == len(r.tally.lats_ms)
    assert r.tally.mic_chunks - 2 <= r.timed[timed_server.MIC][0] <= r.tally.mic_chunks
    assert r.timed[timed_server.WRITE][0] >= len(r.tally.lats_ms) and r.timed[timed_server.TIMER.format("Step")][0] > 0


def test_a_timed_baseline_counts_the_same_calls_under_the_same_names():
    # so that the breakdown can set each of the twin's lines against the baseline's same call
    from lab.bench import timed_server, twin

    with tempfile.TemporaryDirectory() as d:
        r = twin._run_one("timed baseline", _baseline_argv(d, timed=True), "stream", 2, 1.5, [0], timed=True)
    assert r.tally.held == 2 and r.timed, r.timed
    questions = len(r.tally.lats_ms)
    assert r.timed[timed_server.OTHER_FRAME][0] == questions
    assert r.tally.mic_chunks - 2 <= r.timed[timed_server.MIC][0] <= r.tally.mic_chunks
    # each question's audio at once, its generationComplete and turnComplete from two timers
    assert r.timed[timed_server.WRITE][0] >= 3 * questions - 4
    assert 2 * questions - 4 <= r.timed[timed_server.BASELINE_TIMER][0] <= 2 * questions


def test_a_servers_cpu_is_read_to_well_under_a_clock_tick():
    # a slice of a light server spends a few ms of CPU: read in /proc's 10 ms ticks it was 0, and
    # its us/frame with it. The child reports its own CPU clock and then blocks, so the bench's
    # reading of that child must agree with the child's report to a fraction of a tick
    import subprocess
    import sys

    from lab.bench.twin import _cpu_and_faults

    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nsum(range(300000))\n"
                              "print(time.process_time(), flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())
        seen, faults = _cpu_and_faults(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
    assert 0 <= seen - own < 0.002 and faults > 0, (seen, own)
