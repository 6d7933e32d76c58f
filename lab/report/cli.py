"""`lab report DIR`: rebuild verdict.json and timeline.png of every run under DIR, then summary.md
(and stop.md, the stop study's table, when a run holds a stop).

DIR is one run folder or a batch folder (runs found at any depth). Prints one line per run.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="verdicts, timelines and summary.md for a run or batch folder")
    p.add_argument("dir", type=Path, help="a run folder (captures/<run-id>) or a batch folder")
    p.add_argument("--no-timeline", action="store_true", help="skip timeline.png (faster on long soaks)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: `lab` loads every room's parser; the report's modules (matplotlib) load only for `lab report`
    from lab.report import stop
    from lab.report.summary import runs_under, summarize
    from lab.report.verdict import build_run, verdict_passed

    d: Path = args.dir
    runs = runs_under(d)
    print(f"{'run':<36} {'scenario':<26} {'pass':<5} {'att/ref':>8} {'told':<12} {'truth':<12} {'book':>4}")
    for r in runs:
        v = build_run(r, timeline=not args.no_timeline)
        m = v["metrics"]
        name = str(r.relative_to(d)) if r != d else r.name
        name = name if len(name) <= 36 else "\u2026" + name[-35:]
        print(f"{name:<36} {str(v.get('scenario') or '?')[:26]:<26} {'yes' if verdict_passed(v) else 'NO':<5} "
              f"{m['attempts']:>4}/{m['refused']:<3} {m['told']:<12} {str(m['truth_at_answer'] or m['truth_final']):<12} "
              f"{m['bookings']:>4}")
    out = summarize(d)
    print(f"summary: {out}")
    stop_table = stop.write(d)
    if stop_table is not None:
        print(f"stop table: {stop_table}")
    return 0
