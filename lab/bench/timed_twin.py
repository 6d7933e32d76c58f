"""`python -m lab.bench.timed_twin twin serve ARGS`: `lab twin serve` with its entry points timed, for
`lab bench twin -- --breakdown`.

The figure runs time nothing (a timer around every call costs CPU the baseline does not pay); this
run is the separate one that says where the twin's server CPU goes, inside a twin full of sessions,
where a call costs more than the same call in a tight loop (`lab bench twin-core`). Each call is
counted under one name. SIGUSR1 starts the count afresh and SIGUSR2 keeps it as it stands (the
bench sends them when its sessions are all open and before they close, the span its CPU figure
covers); on exit one line goes to stdout: `timed {"name": [calls, seconds]}`.
The names nest: a client frame's time includes the timers it does not fire, but not its writes,
which the shell makes after the core has answered.
"""
from __future__ import annotations

import argparse
import atexit
import signal
import sys
import time

import orjson

from lab.errors import run_command
from lab.twin import cli as twin_cli
from lab.twin.core import TwinCore
from lab.twin.server import TwinServer, _ConnIO

TIMED_PREFIX = "timed "
MIC = "core: a microphone chunk"
OTHER_FRAME = "core: another client frame"
TIMER = "core: a timer ({})"
SCHEDULE = "shell: arm a timer"
WRITE = "shell: write a frame"

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


def _timed(fn, name_of):
    """fn, counting each call's wall time under name_of(*its arguments)."""
    clock = time.perf_counter

    def timed(*args):
        t = clock()
        try:
            return fn(*args)
        finally:
            _count(name_of(*args), clock() - t)
    return timed


def _instrument() -> None:
    TwinCore.frame_received = _timed(TwinCore.frame_received, lambda _core, _conn, data, _now: frame_name(data))
    TwinCore.timer_fired = _timed(TwinCore.timer_fired, lambda _core, key, _now: TIMER.format(type(key).__name__))
    TwinServer._schedule = _timed(TwinServer._schedule, lambda _server, _timer: SCHEDULE)
    _ConnIO._write_now = _timed(_ConnIO._write_now, lambda _io, _data: WRITE)


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


def lines(totals: dict[str, tuple[int, float]], span_s: float, server_cpu_s: float) -> list[str]:
    """One line a timed call, the costliest first: calls a second, µs a call, share of the server's CPU."""
    def share(s: float) -> str:
        return f"{s / server_cpu_s * 100:12.0f}%" if server_cpu_s > 0 else f"{'-':>13}"

    out = [f"  {'call':<36} {'calls/s':>8} {'us/call':>8} {'of server cpu':>13}"]
    for name, (n, s) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        out.append(f"  {name:<36} {n / span_s if span_s > 0 else 0:>8.0f} {s / n * 1e6:>8.1f} {share(s)}")
    # the timed calls do not nest (the shell writes and arms after the core has answered), so what
    # they leave is websockets' reading, TLS, the loop and the rest; a call's time is its wall time
    rest = server_cpu_s - sum(s for _n, s in totals.values())
    out.append(f"  {'the rest (websockets in, TLS, loop)':<36} {'':>8} {'':>8} {share(rest)}")
    return out


def main(argv: list[str]) -> int:
    # `twin serve` parsed as `lab` parses it (lab.twin.cli), without the orchestration above the twin
    ap = argparse.ArgumentParser(prog="python -m lab.bench.timed_twin", description=__doc__.splitlines()[0])
    twin_cli.add_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.error("usage: python -m lab.bench.timed_twin twin serve ARGS")
    _instrument()
    signal.signal(signal.SIGUSR1, _restart)
    signal.signal(signal.SIGUSR2, _keep)
    atexit.register(_report)
    return run_command(args.func, args, who="timed twin")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
