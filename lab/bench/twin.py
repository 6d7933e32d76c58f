"""`lab bench twin`: how many sessions the twin holds, how fast it answers, what each costs. Prints figures only.

Each level (a mode and a number of concurrent sessions) compares the twin (`lab twin serve` with the
model's reply delays set to 0, so what is measured is the twin itself) with the baseline
(lab.bench.echo: a bare websockets server with the twin's TLS, loop and settings, none of its
logic); the twin's figures print as ratios to the baseline's.

A traffic level (`stream`, `text`) starts its servers (the baseline, the twin and the floor's shell,
below), opens its sessions on each, and lets their traffic take turns: `--slices K` slices of
duration/K seconds each, one server after another, the others' sessions idle meanwhile. A machine shared with other work is slower in one minute than the next, and
a ratio of two runs a minute apart measures that as much as the twin; with the slices interleaved
every few seconds each server's figures (the sum of its slices) meet the same minutes. The round's
line also prints the slice-by-slice ratios' spread. An `idle` level, whose figure is memory, runs
the two one after the other, each on a fresh server process.

The load (lab.bench.load) runs in this process; the servers in their own. With two or more CPUs the
servers are pinned to the first and the load to the second, so the twin's figures are one core's
work and a starved load generator shows up in its own column (mic late) instead of in the twin's.

Modes (lab.bench.load): `stream` every session streams 16 kHz audio in 100 ms chunks in real time,
each microphone at its own phase (`--mic-in-step`: all at once, a burst every 100 ms), asks questions and plays the twin's audio (underruns counted); `text` the questions only; `idle`
sessions held without traffic, one question each at the end. Memory per session is the server's
resident-set growth (VmRSS) from before the first session to all open (idle) or to the end
(text, stream), divided by the sessions.

`--rounds N` runs each level N times on fresh server processes, and the goals use the median of the
rounds' ratios. `faults/frame` is the server's minor page faults per client frame: a server whose
CPU goes to its allocator shows it there (SERVER_ALLOCATOR). `--breakdown` runs each traffic level's
baseline and twin once more, one after the other, with their calls timed (lab.bench.timed_server),
and prints where the twin's server CPU goes and what each of its lines costs beyond the baseline's
same call: not a figure run, since the timing costs CPU of its own.

The floor beside the figure: a traffic level also runs, in the same slices, the twin's own server
with the baseline's answers (lab.bench.shell_twin, the `shell` row): its ratio to the baseline is
what the twin's shell, TLS set-up and process cost, which no change to the core can move, and the
twin's ratio to it is the core's part. The goal line adds what the twin would read if its core ran
inside the server as fast as in a tight loop (lab.bench.twin_core's hot figures for each kind of
frame, weighed by the level's own mix). `--no-floor` leaves the shell out.

`--compiled` runs the twin and the shell on the core's mypyc build (lab.twin.compiled, `lab twin
compile`; the baseline never): the first line says which core ran.

Goals to compare against (not asserted), as ratios to the same level's baseline where the machine
decides the figure: 200 streaming sessions held, no underrun, server CPU per client frame <= 1.15x
the baseline's, p99 <= 1.2x the baseline's, <= 200 KiB each; 1000 idle sessions held, <= 64 KiB each.
The core's own part, twin/shell in the same slices: CPU per client frame and p99 each <= 1.15x.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import uvloop

from lab.bench import timed_server, twin_core
from lab.bench.twin_core import BENCH_SETTINGS, Kinds
from lab.bench.load import MODES, PATH, Tally, run_alternating, run_level
from lab.errors import LabError
from lab.stats.order import percentile
from lab.twin import compiled

DEFAULT_SESSIONS = {"stream": "1,50,200", "text": "1,50,200", "idle": "1000"}
# Both servers' C allocator (glibc) keeps 64 MiB of free heap above its top instead of giving it back
# at once. Without it a server as small as the baseline, whose every frame frees what it allocated,
# moves its heap's top up and down: one to three page faults a frame, a quarter of its CPU, as many
# or as few from one process to the next. The twin's own heap holds its sessions and was not
# touched by this. Both pay the same allocator, so the ratio is the twin's logic, not the baseline's
# page faults. (A name glibc reads at start; another C library ignores it.)
SERVER_ALLOCATOR = {"MALLOC_TOP_PAD_": str(64 << 20)}
DEFAULT_SLICES = 6
MIN_SLICE_S = 0.5     # a slice shorter than a few question turns measures its own start and end
STREAM_FLOORS = {"sessions": 200, "cpu_ratio": 1.15, "p99_ratio": 1.2, "kib": 200.0}
# the core's own part, the twin over its own server answering as the baseline does (the shell row):
# cpu per client frame and p99 frame -> reply
CORE_FLOORS = {"cpu_ratio": 1.15, "p99_ratio": 1.15}
IDLE_FLOORS = {"sessions": 1000, "kib": 64.0}


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise LabError(f"no VmRSS for pid {pid}")


def _cpu_and_faults(pid: int) -> tuple[float, int]:
    """(CPU seconds of every thread, minor page faults) of a live process. The CPU is read from the
    process's own CPU clock, to the nanosecond: /proc's utime and stime count whole clock ticks
    (10 ms), so a short slice of a light server read 0. The faults (/proc/PID/stat field 10) say
    when a server's CPU is its allocator's (SERVER_ALLOCATOR)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return time.clock_gettime(_process_cpu_clock(pid)), int(fields[7])


def _process_cpu_clock(pid: int) -> int:
    """Linux's clock id for another process's CPU time (what clock_getcpuclockid(3) returns, which
    Python does not wrap): the pid complemented, shifted past the clock kind, kind 2 (CPUCLOCK_SCHED,
    the scheduler's runtime, summed over the process's threads, live and exited)."""
    return (~pid << 3) | 2


class _Server:
    """A server process (the twin or the baseline) that prints "base_url URL" and "ca_path PATH"."""

    def __init__(self, argv: list[str], cpu: int | None, env: dict[str, str] | None = None):
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **SERVER_ALLOCATOR, **(env or {})},
                                     preexec_fn=pin)
        self.out: str | None = None
        base = ca = None
        t0 = time.monotonic()
        while (base is None or ca is None) and time.monotonic() - t0 < 30:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("base_url "):
                base = line.split()[1]
            elif line.startswith("ca_path "):
                ca = line.split()[1]
        if base is None or ca is None:
            self.stop()
            raise LabError(f"the server did not start: {argv[2:5]} {self.proc.stderr.read().strip()[-300:]}")
        self.url = base.replace("https://", "wss://") + PATH
        self.ca = ca

    def stop(self) -> str:
        """Stop it; what it printed after its address (a timed server's totals)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.out is None:
            self.out = self.proc.stdout.read() if self.proc.stdout else ""
        return self.out


@dataclass
class Row:
    server: str
    mode: str
    n: int
    tally: Tally
    kib_per_session: float
    server_cores: float
    load_cores: float
    server_cpu_s: float
    slice_us: list[float] = field(default_factory=list)   # us/frame of each slice (an alternating level)
    server_faults: int = 0      # the server's minor page faults over the span its CPU is counted
    timed: dict[str, tuple[int, float]] = field(default_factory=dict)   # a timed server's calls (lab.bench.timed_server)

    @property
    def faults_per_frame(self) -> float:
        frames = self.tally.frames
        return self.server_faults / frames if frames else math.nan

    @property
    def us_per_frame(self) -> float:
        """The server's CPU per client frame (questions and mic chunks): its cost, whatever share of
        a contended CPU it got (read from the process's CPU clock, _cpu_and_faults)."""
        frames = self.tally.frames
        return self.server_cpu_s / frames * 1e6 if frames else math.nan

    @property
    def p50(self) -> float:
        return percentile(self.tally.lats_ms, 50, default=math.nan)

    @property
    def p99(self) -> float:
        return percentile(self.tally.lats_ms, 99, default=math.nan)


def _run_one(server: str, argv: list[str], mode: str, n: int, duration: float, cpus: list[int],
             timed: bool = False, mic_in_step: bool = False, env: dict[str, str] | None = None) -> Row:
    """One server's level on a fresh process. `timed`: the server is a timed one, told where the
    span its CPU figure covers begins and ends (lab.bench.timed_server)."""
    srv = _Server(argv, cpus[0] if len(cpus) > 1 else None, env)
    try:
        pid = srv.proc.pid
        rss0 = _rss_kib(pid)
        marks: dict[str, tuple[int, tuple[float, int], float, float]] = {}

        def mark(at: str) -> None:   # (rss KiB, (server cpu s, faults), load cpu s, wall s)
            marks[at] = (_rss_kib(pid), _cpu_and_faults(pid), time.process_time(), time.monotonic())
            if timed:
                os.kill(pid, signal.SIGUSR1 if at == "open" else signal.SIGUSR2)

        def progress(line: str) -> None:
            print(f"  .. {server} {mode} {n}: {line}", flush=True)

        tally = uvloop.run(run_level(srv.url, srv.ca, n, mode, duration, progress, mark, mic_in_step))
    finally:
        out = srv.stop()
    none = (rss0, (0.0, 0), 0.0, 0.0)
    grown_at = marks.get("open" if mode == "idle" else "end", none)[0]
    (_, (cpu_a, pf_a), load_a, t_a), (_, (cpu_b, pf_b), load_b, t_b) = marks.get("open", none), marks.get("end", none)
    span = max(1e-9, t_b - t_a)
    return Row(server, mode, n, tally, (grown_at - rss0) / max(1, tally.opened),
               (cpu_b - cpu_a) / span, (load_b - load_a) / span, cpu_b - cpu_a, server_faults=pf_b - pf_a,
               timed=timed_server.parse(out) if timed else {})


def _run_alternating(servers: list[tuple[str, list[str], dict[str, str]]], mode: str, n: int, duration: float, slices: int,
                     cpus: list[int], mic_in_step: bool = False) -> list[Row]:
    """Both servers up at once on the same CPU, n sessions open on each, their traffic taking turns
    in `slices` slices of duration/slices seconds: what the machine does in one minute falls on
    both, and each server's figures are the sum of its slices. One row a server, in order."""
    procs: list[_Server] = []
    try:
        for _name, argv, env in servers:
            procs.append(_Server(argv, cpus[0] if len(cpus) > 1 else None, env))
        pids = [p.proc.pid for p in procs]
        rss0 = [_rss_kib(pid) for pid in pids]
        rss_end = list(rss0)
        cpu = [0.0] * len(procs)
        load = [0.0] * len(procs)
        span = [0.0] * len(procs)
        faults = [0] * len(procs)
        slice_us: list[list[float]] = [[] for _ in procs]
        began: dict[int, tuple[tuple[float, int], float, float, int]] = {}

        def mark(i: int, at: str, tally: Tally) -> None:
            now = (_cpu_and_faults(pids[i]), time.process_time(), time.monotonic(), tally.frames)
            if at == "start":
                began[i] = now
            elif at == "end":
                ((c0, p0), l0, t0, f0), ((c1, p1), l1, t1, f1) = began.pop(i), now
                cpu[i] += c1 - c0
                faults[i] += p1 - p0
                load[i] += l1 - l0
                span[i] += t1 - t0
                slice_us[i].append((c1 - c0) / (f1 - f0) * 1e6 if f1 > f0 else math.nan)
                rss_end[i] = _rss_kib(pids[i])

        def progress(i: int, line: str) -> None:
            print(f"  .. {servers[i][0]} {mode} {n}: {line}", flush=True)

        tallies = uvloop.run(run_alternating([(p.url, p.ca) for p in procs], n, mode, duration / slices, slices,
                                             progress, mark, mic_in_step))
    finally:
        for p in procs:
            p.stop()
    return [Row(name, mode, n, t, (rss_end[i] - rss0[i]) / max(1, t.opened), cpu[i] / max(1e-9, span[i]),
                load[i] / max(1e-9, span[i]), cpu[i], slice_us[i], faults[i])
            for i, ((name, _argv, _env), t) in enumerate(zip(servers, tallies))]


def _baseline_argv(cert_dir: str, timed: bool = False) -> list[str]:
    return [sys.executable, "-m", *(["lab.bench.timed_server", "echo"] if timed else ["lab.bench.echo"]),
            "--cert-dir", cert_dir]


def _shell_argv(profile: str, cert_dir: str, overrides: list[str]) -> list[str]:
    """The floor: `lab twin serve` with the same arguments, answering as the baseline does."""
    argv = _twin_argv(profile, cert_dir, overrides)
    return [argv[0], "-m", "lab.bench.shell_twin", *argv[3:]]


def _twin_argv(profile: str, cert_dir: str, overrides: list[str], timed: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "lab.bench.timed_server" if timed else "lab", "twin", "serve", "--port", "0",
            "--profile", profile, "--cert-dir", cert_dir, "--seed", "1"]
    for s in BENCH_SETTINGS + overrides:
        argv += ["--set", s]
    return argv


HEADER = (f"{'server':>8} {'mode':>6} {'sessions':>8} {'held':>9} {'open s':>6} {'replies':>7} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'audio':>6} {'underrun':>8} {'mic late':>8} {'KiB/sess':>8} "
          f"{'srv cpu':>7} {'load cpu':>8} {'us/frame':>8} {'faults/frame':>12}")


def _line(r: Row) -> str:
    t = r.tally
    mx = max(t.lats_ms) if t.lats_ms else math.nan
    return (f"{r.server:>8} {r.mode:>6} {r.n:>8} {t.held:>4}/{r.n:<4} {t.open_s:>6.1f} {len(t.lats_ms):>7} "
            f"{r.p50:>7.2f} {r.p99:>7.2f} {mx:>7.1f} {t.audio_chunks:>6} {t.underruns:>8} "
            f"{t.mic_late_ms:>6.0f}ms {r.kib_per_session:>8.1f} {r.server_cores:>7.2f} {r.load_cores:>8.2f} "
            f"{r.us_per_frame:>8.0f} {r.faults_per_frame:>12.2f}")


def _slice_ratios(b: Row, t: Row) -> str:
    """Each slice's twin over the baseline's slice just before it (how much one slice's figure
    moves), or "" for a level of one slice."""
    xs = [y / x for x, y in zip(b.slice_us, t.slice_us) if x and not math.isnan(x) and not math.isnan(y)]
    return f"slice by slice {min(xs):.2f}-{max(xs):.2f}x, median {_median(xs):.2f}x" if len(xs) > 1 else ""


def _quotient(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and not math.isnan(a) and not math.isnan(b) else "-"


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2 if xs else math.nan


def _of(rows: list[Row], server: str, mode: str, n: int) -> list[Row]:
    return [r for r in rows if r.server == server and (r.mode, r.n) == (mode, n)]


def _pairs(rows: list[Row], mode: str, n: int) -> list[tuple[Row, Row]]:
    """(baseline, twin) of each round of one level, in the order they ran."""
    return list(zip(_of(rows, "baseline", mode, n), _of(rows, "twin", mode, n)))


def _floor_line(rows: list[Row], mode: str, n: int, hot: Kinds | None) -> str:
    """The floor beside the level's figure: the shell's cpu ratio to the baseline (median of the
    rounds) and, with the core's hot figures, what the twin would read with a core as fast inside
    the server as in a tight loop; "" without shell rows."""
    trios = list(zip(_of(rows, "baseline", mode, n), _of(rows, "twin", mode, n), _of(rows, "shell", mode, n)))
    if not trios:
        return ""
    shell = _median([s.us_per_frame / b.us_per_frame for b, _t, s in trios])
    core = _median([t.us_per_frame / s.us_per_frame for _b, t, s in trios])
    core_p99 = _median([t.p99 / s.p99 for _b, t, s in trios])
    line = (f"; floor: the twin's own server answering as the baseline does {shell:.2f}x the baseline, "
            f"the twin {core:.2f}x that (twin/shell, the core's part: {_core_goals(core, core_p99)})")
    if hot is not None:
        tight = _median([(s.us_per_frame + hot.extra_us(t.tally.mic_chunks, len(t.tally.lats_ms))) / b.us_per_frame
                         for b, t, s in trios])
        line += (f"; with a core as fast in the server as in a tight loop ({hot.mic_extra_us:.1f} us a "
                 f"microphone chunk and {hot.question_extra_us:.1f} us a question with its "
                 f"timers beyond the baseline's answers, lab bench twin-core) it would read {tight:.2f}x")
    return line


def _core_goals(cpu: float, p99: float) -> str:
    """twin/shell beside its goals: the core's part of the cpu per client frame and of the p99."""
    g = CORE_FLOORS
    return (f"cpu {cpu:.2f}x, goal <= {g['cpu_ratio']:g}x: {_met(cpu <= g['cpu_ratio'])}; "
            f"p99 {p99:.2f}x, goal <= {g['p99_ratio']:g}x: {_met(p99 <= g['p99_ratio'])}")


def _floors(rows: list[Row], hot: Kinds | None = None) -> None:
    seen = set()
    for r in rows:
        if r.server != "twin" or (r.mode, r.n) in seen:
            continue
        seen.add((r.mode, r.n))
        twins = [x for x in rows if x.server == "twin" and (x.mode, x.n) == (r.mode, r.n)]
        pairs = _pairs(rows, r.mode, r.n)
        held = min(x.tally.held for x in twins)
        kib = max(x.kib_per_session for x in twins)
        if r.mode == "stream" and r.n == STREAM_FLOORS["sessions"]:
            g = STREAM_FLOORS
            line = (f"goal: {r.n} streaming held {held}/{r.n} ({_met(held == r.n)}); underruns "
                    f"{sum(x.tally.underruns for x in twins)} ({_met(all(x.tally.underruns == 0 for x in twins))}); "
                    f"{kib:.0f} KiB/session (<= {g['kib']:g}: {_met(kib <= g['kib'])})")
            if pairs:
                # each round's twin over the baseline run just before it: the machine's load of those
                # minutes falls on both; with several rounds the median is the figure
                cpus = [t.us_per_frame / bb.us_per_frame for bb, t in pairs]
                p99s = [t.p99 / bb.p99 for bb, t in pairs]
                cpu, p99 = _median(cpus), _median(p99s)
                if len(pairs) > 1:
                    each = (f" (median of {len(pairs)} rounds: cpu {', '.join(f'{x:.2f}' for x in cpus)}; "
                            f"p99 {', '.join(f'{x:.2f}' for x in p99s)})")
                else:
                    spread = _slice_ratios(*pairs[0])
                    each = (f" ({pairs[0][1].p99:.1f} vs {pairs[0][0].p99:.1f} ms"
                            + (f"; cpu {spread}" if spread else "") + ")")
                line += (f"; cpu per client frame {cpu:.2f}x the baseline (<= {g['cpu_ratio']:g}x: "
                         f"{_met(cpu <= g['cpu_ratio'])}); p99 {p99:.2f}x (<= {g['p99_ratio']:g}x: "
                         f"{_met(p99 <= g['p99_ratio'])}){each}" + _floor_line(rows, r.mode, r.n, hot))
            else:
                line += "; cpu and p99 ratios need the baseline (drop --no-baseline)"
            print(line)
            continue
        if r.mode == "idle" and r.n == IDLE_FLOORS["sessions"]:
            kibs = [t.kib_per_session / bb.kib_per_session for bb, t in pairs]
            print(f"goal: {r.n} idle held {held}/{r.n} ({_met(held == r.n)}); {kib:.0f} KiB/session "
                  f"(<= {IDLE_FLOORS['kib']:g}: {_met(kib <= IDLE_FLOORS['kib'])})"
                  + (f", {_median(kibs):.2f}x the baseline's" if kibs else ""))


def _timed_span(r: Row) -> timed_server.Span:
    return timed_server.Span(r.timed, r.server_cpu_s / r.server_cores if r.server_cores else 0.0,
                             r.server_cpu_s, r.tally.frames)


def _breakdown(base: Row, twin: Row) -> None:
    print(f"level: both servers with their calls timed, {twin.mode}, {twin.n} sessions, one after the other "
          "(not a figure run: the timers cost CPU)")
    print(HEADER)
    print(_line(base))
    print(_line(twin))
    if not twin.timed:
        print("  the timed twin printed no totals (it did not exit cleanly)")
        return
    sp = _timed_span(twin)
    print(f"where the twin's server CPU goes ({sp.cpu_s:.2f} s over {sp.span_s:.1f} s; a client frame's time is "
          "the core's answer to it, the shell's writes of that answer are their own line)"
          + (", and what each line costs beyond the baseline's same call, per client frame:" if base.timed else
             " (the timed baseline printed no totals):"))
    for line in timed_server.lines(sp, _timed_span(base) if base.timed else None):
        print(line)


def _levels(args) -> list[tuple[str, int]]:
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            raise LabError(f"bad --mode {m!r}: one or more of {', '.join(MODES)}")
    out = []
    for m in modes:
        text = args.sessions or DEFAULT_SESSIONS[m]
        try:
            ns = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise LabError(f"bad --sessions {text!r}: comma-separated counts")
        if not ns or min(ns) < 1:
            raise LabError(f"bad --sessions {text!r}: counts of at least 1")
        out += [(m, n) for n in ns]
    return out


def _hot_kinds(core_env: dict[str, str]) -> Kinds:
    """lab.bench.twin_core.kinds() for the core the twin ran (in a child process when it is the
    build: this process imported the .py files)."""
    if not core_env.get(compiled.SWITCH):
        return twin_core.kinds()
    code = "import dataclasses, json; from lab.bench import twin_core; print(json.dumps(dataclasses.asdict(twin_core.kinds())))"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **core_env}, capture_output=True, text=True)
    if r.returncode != 0:
        raise LabError(f"the compiled core's hot figures: {r.stderr.strip()[-300:]}")
    return Kinds(**json.loads(r.stdout))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench twin", description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="stream,idle", help=f"comma-separated, of {', '.join(MODES)} (default stream,idle)")
    ap.add_argument("--sessions", default=None,
                    help="concurrent sessions per level, comma-separated (default 1,50,200; idle 1000)")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of traffic per level (default 15)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="baseline-then-twin rounds per level; the goals use the median of the rounds' ratios "
                         "(on a shared machine one round's load differs from the next)")
    ap.add_argument("--slices", type=int, default=DEFAULT_SLICES,
                    help=f"a traffic level's baseline and twin take turns in this many slices of "
                         f"duration/slices s each, both servers up (default {DEFAULT_SLICES}; idle levels run one after the other)")
    ap.add_argument("--mic-in-step", action="store_true",
                    help="start every session's microphone at once (a burst of one chunk a session every 100 ms) "
                         "instead of each at its own phase, as independent phones are")
    ap.add_argument("--no-baseline", action="store_true", help="skip the bare-websockets baseline runs")
    ap.add_argument("--no-floor", action="store_true",
                    help="skip the floor: the twin's own server answering as the baseline does, in a traffic "
                         "level's slices beside the other two")
    ap.add_argument("--breakdown", action="store_true",
                    help="after a traffic level's rounds, run its baseline and twin once more with their calls timed "
                         "and print where the twin's server CPU goes and what each line costs beyond the baseline's "
                         "(a separate run: the timing costs CPU of its own)")
    ap.add_argument("--no-pin", action="store_true",
                    help="let server and load share every CPU (on a busy machine one pinned CPU may be the smaller share)")
    ap.add_argument("--compiled", action="store_true",
                    help="the twin and the shell run the core's mypyc build (lab twin compile; docs/benchmarks.md "
                         "\"The core compiled\"); the baseline and the load stay as they are")
    ap.add_argument("--profile", default="developer-api")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv or [])
    levels = _levels(args)
    if args.compiled and compiled.problem():
        raise LabError(f"--compiled: {compiled.problem()}")
    # the twin's and the shell's core; the baseline never runs the build (its decoder is the twin's)
    core_env, base_env = {compiled.SWITCH: "1" if args.compiled else ""}, {compiled.SWITCH: ""}
    if args.rounds < 1:
        raise LabError(f"bad --rounds {args.rounds}: at least 1")
    if not args.duration > 0:
        raise LabError(f"bad --duration {args.duration}: seconds > 0")
    if args.slices < 1 or args.duration / args.slices < MIN_SLICE_S:
        raise LabError(f"bad --slices {args.slices}: at least 1, and slices of at least {MIN_SLICE_S:g} s "
                       f"(--duration {args.duration:g} s)")
    gc.freeze()   # the load's own collector pauses would count as the server's latency
    all_cpus = os.sched_getaffinity(0)
    cpus = sorted(all_cpus)[:1] if args.no_pin else sorted(all_cpus)   # one CPU listed: nothing is pinned
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[1]})
    where = (f"server pinned to CPU {cpus[0]}, load to CPU {cpus[1]}" if len(cpus) > 1
             else "not pinned: server and load share the CPUs")
    core = f"compiled ({compiled.build_dir()})" if args.compiled else "interpreted (the .py files)"
    print(f"twin bench: the twin's core {core}; profile {args.profile}, TLS on loopback, a fresh server process per level ({where}; "
          f"the machine is shared, so other work lands on both); {args.duration:g} s per level; load average "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    print("latency = a question's send -> the first frame of its reply; KiB/sess = server VmRSS growth / sessions; "
          "cpu = cores used while the level ran; us/frame = server CPU per client frame (its cost, whatever share "
          "of a busy CPU it got); faults/frame = the server's minor page faults per client frame", flush=True)
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="livelab-bench-") as d:
            for mode, n in levels:
                # a directory each: both may be up at once, and each makes its own CA
                servers = [] if args.no_baseline else [("baseline", _baseline_argv(os.path.join(d, "baseline")), base_env)]
                servers.append(("twin", _twin_argv(args.profile, os.path.join(d, "twin"), args.overrides), core_env))
                if servers[0][0] == "baseline" and mode != "idle" and not args.no_floor:
                    servers.append(("shell", _shell_argv(args.profile, os.path.join(d, "shell"), args.overrides),
                                    core_env))
                for k in range(args.rounds):
                    rnd = f", round {k + 1}/{args.rounds}" if args.rounds > 1 else ""
                    if len(servers) >= 2 and mode != "idle":
                        print(f"level: {', '.join(name for name, _, _ in servers)} taking turns in {args.slices} "
                              f"slices of {args.duration / args.slices:.3g} s, {mode}, {n} sessions{rnd}", flush=True)
                        level = _run_alternating(servers, mode, n, args.duration, args.slices, cpus,
                                                 args.mic_in_step)
                    else:
                        level = []
                        for name, sargv, env in servers:
                            print(f"level: {name}, {mode}, {n} sessions{rnd}", flush=True)
                            level.append(_run_one(name, sargv, mode, n, args.duration, cpus,
                                                  mic_in_step=args.mic_in_step, env=env))
                    for r in level:
                        for e in r.tally.errors[:3]:
                            print(f"  error ({r.server}): {e}", flush=True)
                    print(HEADER)
                    for r in level:
                        print(_line(r), flush=True)
                    by = {r.server: r for r in level}
                    b, t, sh = by.get("baseline"), by.get("twin"), by.get("shell")
                    if b and t:
                        spread = _slice_ratios(b, t)
                        print(f"  twin / baseline: p50 {_ratio(t.p50, b.p50)}, p99 {_ratio(t.p99, b.p99)}, "
                              f"KiB/session {_ratio(t.kib_per_session, b.kib_per_session)}, "
                              f"server cpu per client frame {_ratio(t.us_per_frame, b.us_per_frame)}"
                              + (f" ({spread})" if spread else ""), flush=True)
                    if b and t and sh:
                        print(f"  the floor, shell / baseline: server cpu per client frame "
                              f"{_ratio(sh.us_per_frame, b.us_per_frame)}, p99 {_ratio(sh.p99, b.p99)} (the twin's "
                              f"own server answering as the baseline does); twin/shell (the core's part): "
                              f"{_core_goals(_quotient(t.us_per_frame, sh.us_per_frame), _quotient(t.p99, sh.p99))}",
                              flush=True)
                    rows += level
                if args.breakdown and mode != "idle":
                    timed = [_run_one(f"timed {name}", argv, mode, n, args.duration, cpus, timed=True,
                                      mic_in_step=args.mic_in_step, env=env)
                             for name, argv, env in (
                                 ("baseline", _baseline_argv(os.path.join(d, "timed-b"), timed=True), base_env),
                                 ("twin", _twin_argv(args.profile, os.path.join(d, "timed"), args.overrides, timed=True),
                                  core_env))]
                    _breakdown(*timed)
    finally:
        os.sched_setaffinity(0, all_cpus)
    print("summary")
    print(HEADER)
    for r in rows:
        print(_line(r))
    # the core's hot figures, for the floor beside a streaming level's figure (a few seconds, after the levels)
    hot = _hot_kinds(core_env) if _of(rows, "shell", "stream", STREAM_FLOORS["sessions"]) else None
    _floors(rows, hot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
