"""`lab report DIR`: rebuild verdict.json and timeline.png of every run under DIR, then summary.md
(and stop.md, the stop study's table, when a run holds a stop; matrix.md/json on a matrix batch).

DIR is one run folder or a batch folder (runs found at any depth). Prints one line per run.
`lab report DIR DIR... --out MERGED`: several shards (result folders from several machines, see
lab/report/shards.py) reported as one: each run's verdict in its own folder, and one summary.md
(and matrix, when a shard is a matrix batch) over all of them in MERGED.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from lab.errors import LabError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="verdicts, timelines and summary.md for a run or batch folder")
    p.add_argument("dir", type=Path, nargs="+", help="a run folder (captures/<run-id>) or a batch folder; "
                   "several: shards merged into --out")
    p.add_argument("--out", type=Path, default=None, help="with several folders: where the merged summary goes")
    p.add_argument("--no-timeline", action="store_true", help="skip timeline.png (faster on long soaks)")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write every run's verdict and rules as JUnit XML (for a CI)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy: `lab` loads every room's parser; the report's modules (matplotlib) load only for `lab report`
    from lab.report import advice, conformance, junit, shards, stop
    from lab.report.summary import summarize
    from lab.report.verdict import build_run, verdict_passed

    roots: list[Path] = args.dir
    if len(roots) > 1 and args.out is None:
        raise LabError("several result folders: name --out for the merged summary")
    d: Path = roots[0]
    runs = shards.labelled_runs(roots)
    print(f"{'run':<36} {'scenario':<26} {'user':<5} {'study':<5} {'att/ref':>8} {'told':<12} {'truth':<12} {'book':>4}")
    alone = {Path(root).resolve() for root in roots}
    for name, r in runs:
        # a run folder named on its own is reported alone (its page carries plotly's script inline);
        # a run found under a batch shares the copy in the folder holding it
        v = build_run(r, timeline=not args.no_timeline, batch=None if r.resolve() in alone else r.parent)
        m = v["metrics"]
        name = name if len(name) <= 36 else "\u2026" + name[-35:]
        print(f"{name:<36} {str(v.get('scenario') or '?')[:26]:<26} {'yes' if verdict_passed(v) else 'NO':<5} "
              f"{ {True: 'yes', False: 'NO'}.get(v.get('reproduces'), '-'):<5} "
              f"{m['attempts']:>4}/{m['refused']:<3} {m['told']:<12} {str(m['truth_at_answer'] or m['truth_final']):<12} "
              f"{m['bookings']:>4}")
        for what, text in advice.failures(v):
            print(f"    {what}: {text}")
    if len(roots) > 1:
        print(f"summary: {shards.merge_summary(roots, args.out)}")
        if any(conformance.is_matrix_batch(r) for r in roots):
            print(f"matrix: {conformance.write(roots, args.out)[0]}")
        if args.junit_xml:
            print(f"junit: {junit.write(args.out, args.junit_xml, runs=runs)}")
        return 0
    out = summarize(d)
    print(f"summary: {out}")
    stop_table = stop.write(d)
    if stop_table is not None:
        print(f"stop table: {stop_table}")
    if conformance.is_matrix_batch(d):
        print(f"matrix: {conformance.write([d], d)[0]}")
    if args.junit_xml:
        print(f"junit: {junit.write(d, args.junit_xml)}")
    return 0
