"""A server of `lab bench twin` with its entry points timed, for `lab bench twin -- --breakdown`:

    python -m lab.bench.timed_server twin serve ARGS       # `lab twin serve`, its core's calls and shell's writes timed
    python -m lab.bench.timed_server echo --cert-dir DIR   # the baseline (lab.bench.echo), the same calls timed

The figure runs time nothing (a timer around every call costs CPU the baseline does not pay); this
run is the separate one that says where a server's CPU goes, inside a server full of sessions,
where a call costs more than the same call in a tight loop (`lab bench twin-core`). Both servers'
calls are counted under the same names, so that the bench can print, line by line, what the twin
pays beyond the baseline: a client frame (the twin's core answering it; the baseline reading and
decoding it), a write of a frame due now (lab.twin.server.write_now, which both use; a frame that
must wait goes by websockets' `send`, in neither server's lines), a timer (the twin's core
answering it; the baseline's callback for a frame due) and, for the twin, the arming of a timer.
SIGUSR1 starts the count afresh and SIGUSR2 keeps it as it stands (the bench sends them when its
sessions are all open and before they close, the span its CPU figure covers); on exit one line
goes to stdout: `timed {"name": [calls, seconds]}`. A line's time is its calls' own: a timed call
made inside another (the baseline's timer callback writing its frame) counts on its own line only.
A call's time is the server thread's CPU time (the same clock the bench's CPU figure reads, per
thread), less what one read of that clock adds to an interval: on a shared machine a call's wall
time also holds the time the process waited for a CPU, and the lines would add up to more than the
server's CPU.
"""
from __future__ import annotations

import atexit
import math
import signal
import sys
import time
from dataclasses import dataclass

import orjson

from lab.bench import echo
from lab.errors import run_command
from lab.twin import cli as twin_cli
from lab.twin.core import TwinCore
from lab.twin import server as twin_server
from lab.twin.server import TwinServer

TIMED_PREFIX = "timed "
MIC = "a microphone chunk"
OTHER_FRAME = "another client frame"
TIMER = "a timer ({})"
SCHEDULE = "arm a timer"
WRITE = "write a frame"
BASELINE_TIMER = TIMER.format("a frame due")

_totals: dict[str, list] = {}
_kept: dict[str, list] | None = None


def _count(name: str, seconds: float) -> None:
    t = _totals.get(name)
    if t is None:
        _totals[name] = [1, seconds]
    else:
        t[0] += 1
        t[1] += seconds


def frame_name(data: bytes | str) -> str:
    """A client frame's name before it is parsed: a microphone chunk names its audio at once."""
    head = data[:48]
    return MIC if (b'"audio"' in head if isinstance(head, bytes) else '"audio"' in head) else OTHER_FRAME


_inner = [0.0]    # the time of timed calls made inside the timed call under way (synchronous ones)
CLOCK = time.thread_time


def clock_read_s(clock=CLOCK, n: int = 2000) -> float:
    """What one read of `clock` adds to an interval it ends: the least of n back-to-back reads'
    differences (the thread's CPU clock is a system call, ~0.3-1 us, not a vDSO read)."""
    best = float("inf")
    for _ in range(n):
        a = clock()
        best = min(best, clock() - a)
    return best


def _timed(fn, name_of, read_s: float = 0.0):
    """fn, counting each call's own CPU time under name_of(*its arguments): less the timed calls
    it makes itself (the baseline's timer callback writes its frame, and that write is a line of
    its own), so that no second is counted on two lines, and less `read_s`, the clock's own read."""
    clock = CLOCK

    def timed(*args):
        outer, _inner[0] = _inner[0], 0.0
        t = clock()
        try:
            return fn(*args)
        finally:
            spent = max(0.0, clock() - t - read_s)      # before naming the call: its name is not its cost
            nested, _inner[0] = _inner[0], outer + spent
            _count(name_of(*args), spent - nested)
    return timed


def _instrument_twin() -> None:
    r = clock_read_s()
    TwinCore.frame_received = _timed(TwinCore.frame_received, lambda _core, _conn, data, _now: frame_name(data), r)
    TwinCore.timer_fired = _timed(TwinCore.timer_fired, lambda _core, key, _now: TIMER.format(type(key).__name__), r)
    TwinServer._schedule = _timed(TwinServer._schedule, lambda _server, _timer: SCHEDULE, r)
    twin_server.write_now = _timed(twin_server.write_now, lambda _ws, _data: WRITE, r)   # the outbox's frame due now


def _instrument_echo() -> None:
    r = clock_read_s()
    echo.answer = _timed(echo.answer, frame_name, r)
    echo.due = _timed(echo.due, lambda _ws, _frame: BASELINE_TIMER, r)
    echo.write_now = _timed(echo.write_now, lambda _ws, _data: WRITE, r)


def _restart(*_) -> None:
    _totals.clear()


def _keep(*_) -> None:
    global _kept
    _kept = {k: list(v) for k, v in _totals.items()}


def _report() -> None:
    print(TIMED_PREFIX + orjson.dumps(_kept if _kept is not None else _totals).decode(), flush=True)


def parse(out: str) -> dict[str, tuple[int, float]]:
    """The totals from a timed twin's stdout ({} when it printed none: it did not exit cleanly)."""
    for line in reversed(out.splitlines()):
        if line.startswith(TIMED_PREFIX):
            return {k: (int(v[0]), float(v[1])) for k, v in orjson.loads(line[len(TIMED_PREFIX):]).items()}
    return {}


@dataclass
class Span:
    """One timed server's totals over the span its CPU figure covers."""
    totals: dict[str, tuple[int, float]]
    span_s: float            # wall seconds
    cpu_s: float             # the server's CPU over them
    frames: int              # the client frames its sessions sent


REST = "the rest (websockets in, TLS, loop)"


def lines(twin: Span, base: Span | None = None) -> list[str]:
    """One line a timed call of the twin's, the costliest first: calls a second, µs a call, share of
    its CPU; with the baseline's span, the baseline's µs a call and what the line costs the twin
    beyond it per client frame (the lines' extras add up to the two servers' us/frame difference).
    A line only the baseline has (its timer callback) prints with the twin's columns empty."""
    def per_frame(sp: Span, seconds: float) -> float:
        return seconds / sp.frames * 1e6 if sp.frames else math.nan

    def share(s: float) -> str:
        return f"{s / twin.cpu_s * 100:12.0f}%" if twin.cpu_s > 0 else f"{'-':>13}"

    # each line's time is its calls' own (_timed takes nested timed calls out), so what the lines
    # leave is websockets' reading, TLS, the loop and the rest
    def rest(sp: Span) -> float:
        return sp.cpu_s - sum(s for _n, s in sp.totals.values())

    head = f"  {'call':<36} {'calls/s':>8} {'us/call':>8} {'of server cpu':>13}"
    out = [head + (f" {'baseline us/call':>16} {'extra us/frame':>14}" if base else "")]
    names = sorted(twin.totals, key=lambda k: -twin.totals[k][1])
    names += [k for k in (base.totals if base else {}) if k not in twin.totals]
    for name in names:
        n, s = twin.totals.get(name, (0, 0.0))
        line = (f"  {name:<36} {n / twin.span_s if twin.span_s > 0 else 0:>8.0f} {s / n * 1e6:>8.1f} {share(s)}"
                if n else f"  {name:<36} {'-':>8} {'-':>8} {'-':>13}")
        if base:
            bn, bs = base.totals.get(name, (0, 0.0))
            line += f" {f'{bs / bn * 1e6:.1f}' if bn else '-':>16} {per_frame(twin, s) - per_frame(base, bs):>14.1f}"
        out.append(line)
    tail = f"  {REST:<36} {'':>8} {'':>8} {share(rest(twin))}"
    if base:
        tail += f" {'':>16} {per_frame(twin, rest(twin)) - per_frame(base, rest(base)):>14.1f}"
    out.append(tail)
    if base:
        out.append(f"  {'all (us per client frame)':<36} {'':>8} {per_frame(twin, twin.cpu_s):>8.1f} {'':>13} "
                   f"{per_frame(base, base.cpu_s):>16.1f} {per_frame(twin, twin.cpu_s) - per_frame(base, base.cpu_s):>14.1f}")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["echo"]:
        _instrument_echo()
        _count_and_report()
        return echo.main(argv[1:])
    args = twin_cli.parse_twin_command(argv, "python -m lab.bench.timed_server", __doc__.splitlines()[0],
                                       "twin serve ARGS | echo --cert-dir DIR")
    _instrument_twin()
    _count_and_report()
    return run_command(args.func, args, who="timed twin")


def _count_and_report() -> None:
    signal.signal(signal.SIGUSR1, _restart)
    signal.signal(signal.SIGUSR2, _keep)
    atexit.register(_report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
