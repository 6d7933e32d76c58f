"""`lab soak`: scenarios repeated, one run each, round after round, until the duration is spent.

Each round is one `lab.run.run_batch` per scenario under `<out>/round-NNN/`; at the end one
summary.md covers every round (and drift.md for a live soak). In live mode every connection a
client opens is charged to one budget ledger for the whole soak (LAB_BUDGET, LAB_BUDGET_RUN,
LAB_BUDGET_DAY; see lab.live.budget): when a cap is reached the soak stops early and still writes
its summary. It sits beside the orchestrator (it drives run_batch), above the rooms it uses.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab.errors import BudgetError, LabError
from lab.live.budget import Budget
from lab.live.drift import drift_dir
from lab.live.key import load_key
from lab.report.junit import publish
from lab.report.summary import summarize
from lab.run import run_batch

DEFAULT_SOAK_SCENARIOS = ["b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate", "r2-freeze", "s2-recovery"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="repeat scenarios until the duration is spent, then one summary")
    p.add_argument("--endpoint", choices=["twin", "live"], default="twin")
    p.add_argument("--duration", type=float, default=3600.0, help="total seconds of soak (default 3600)")
    p.add_argument("--scenarios", nargs="+", default=DEFAULT_SOAK_SCENARIOS)
    p.add_argument("--run-duration", type=float, default=None, help="per-run duration passed to each scenario")
    p.add_argument("--client", default=None)
    p.add_argument("--topology", default="netns")
    p.add_argument("--base-url", default=None)
    p.add_argument("--out", type=Path, default=None, help="soak folder (default captures/soak-<time>)")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write every run's verdict and rules as JUnit XML (for a CI)")
    p.set_defaults(func=cmd_soak)


def cmd_soak(args: argparse.Namespace) -> int:
    if args.duration <= 0:
        raise LabError("--duration must be positive")
    out = args.out or Path("captures") / time.strftime("soak-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    budget = None
    if args.endpoint == "live":
        load_key()  # fail early, with one line, when there is no key
        budget = Budget.from_env(out)
    deadline = time.monotonic() + args.duration
    rounds, stopped = 0, None
    try:
        while time.monotonic() < deadline:
            rounds += 1
            for scen in args.scenarios:
                if time.monotonic() >= deadline:
                    break
                run_batch([scen], 1, args.client, args.topology, args.endpoint, out / f"round-{rounds:03d}",
                          args.run_duration, args.base_url, budget)
    except BudgetError as e:
        stopped = str(e)
    summary = summarize(out) if any(out.rglob("events.jsonl")) or any(out.rglob("run.json")) else None
    if args.endpoint == "live" and summary is not None:
        try:
            drift_dir(out)
        except LabError as e:
            print(f"lab soak: drift not written: {e}")
    print(f"lab soak: {rounds} round(s) of {len(args.scenarios)} scenario(s); summary: {summary or 'no runs'}")
    if stopped:
        print(f"lab soak: stopped early: {stopped}")
    if summary is not None:
        publish(out, getattr(args, "junit_xml", None))   # a caller that builds its own Namespace may omit it
    return 0
