"""`lab bench twin|twin-core|faults|recovery|overhead|router|false-alarms|report|hearing`: benchmarks that print figures and ratios, never assert."""
from __future__ import annotations

import importlib

from lab.errors import LabError

BENCHES = {"twin": "lab.bench.twin", "twin-core": "lab.bench.twin_core", "faults": "lab.bench.faults", "recovery": "lab.bench.recovery",
           "overhead": "lab.bench.overhead", "router": "lab.bench.router", "false-alarms": "lab.bench.false_alarms",
           "report": "lab.bench.pages", "hearing": "lab.bench.hearing"}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print its figures")
    p.add_argument("which", choices=sorted(BENCHES))
    p.add_argument("rest", nargs="*", help="options for that benchmark (after --)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    try:
        mod = importlib.import_module(BENCHES[args.which])
    except ModuleNotFoundError as e:
        raise LabError(f"benchmark {args.which!r} is not available: {e}")
    return mod.main(args.rest)
