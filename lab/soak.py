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
from lab.protocols import GEMINI, OPENAI, add_protocol_argument
from lab.report.junit import publish
from lab.report.summary import summarize
from lab.run import run_batch
from lab.twin.params import DEFAULT_PROFILE

# per protocol (lab.protocols): the scenarios a soak repeats and the client it runs them with (None: each
# scenario's own). OpenAI's: the catalogue's scenarios that apply to it and mean something live (L1's
# 20 s cap is a twin setting; the service's is 60 min), run by its reference client, the one that
# recovers (the plain `openai` client does nothing after a loss)
DEFAULT_SOAK_SCENARIOS = {GEMINI: ["b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate", "r2-freeze",
                                   "s2-recovery"],
                          OPENAI: ["control", "b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate"]}
DEFAULT_SOAK_CLIENT = {GEMINI: None, OPENAI: "openai-recovery"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="repeat scenarios until the duration is spent, then one summary")
    p.add_argument("--endpoint", choices=["twin", "live"], default="twin")
    add_protocol_argument(p)
    p.add_argument("--duration", type=float, default=3600.0, help="total seconds of soak (default 3600)")
    p.add_argument("--scenarios", nargs="+", default=None,
                   help="default: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in DEFAULT_SOAK_SCENARIOS.items()))
    p.add_argument("--run-duration", type=float, default=None, help="per-run duration passed to each scenario")
    p.add_argument("--client", default=None, help="default: each scenario's own (gemini), openai-recovery (openai)")
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
    protocol = getattr(args, "protocol", GEMINI)     # a caller that builds its own Namespace may omit it
    scenarios = args.scenarios or DEFAULT_SOAK_SCENARIOS[protocol]
    client = args.client or DEFAULT_SOAK_CLIENT[protocol]
    budget = None
    if args.endpoint == "live":
        load_key(protocol=protocol)  # fail early, with one line, when there is no key
        budget = Budget.from_env(out)
    deadline = time.monotonic() + args.duration
    rounds, stopped = 0, None
    try:
        while time.monotonic() < deadline:
            rounds += 1
            for scen in scenarios:
                if time.monotonic() >= deadline:
                    break
                run_batch([scen], 1, client, args.topology, args.endpoint, out / f"round-{rounds:03d}",
                          args.run_duration, args.base_url, budget, protocol=protocol)
    except BudgetError as e:
        stopped = str(e)
    summary = summarize(out) if any(out.rglob("events.jsonl")) or any(out.rglob("run.json")) else None
    if args.endpoint == "live" and summary is not None:
        try:
            drift_dir(out, DEFAULT_PROFILE[protocol])
        except LabError as e:
            print(f"lab soak: drift not written: {e}")
    print(f"lab soak: {rounds} round(s) of {len(scenarios)} scenario(s); summary: {summary or 'no runs'}")
    if stopped:
        print(f"lab soak: stopped early: {stopped}")
    if summary is not None:
        publish(out, getattr(args, "junit_xml", None))   # a caller that builds its own Namespace may omit it
    return 0
