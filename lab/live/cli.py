"""`lab scan DIR`, `lab drift DIR` and `lab soak`: the live-mode rails on the command line.

- scan: exits 1 if the API key (from the environment or .env, in any form the scanner knows), a raw
  resumption handle, a TLS key log or embedded TLS secrets is found anywhere under DIR.
- drift: compares the runs under DIR with a twin profile, writes DIR/drift.md, exits 1 on a change.
- soak: repeats scenarios (one run each, round after round) until the duration is spent, through
  lab.run.run_batch, then writes one summary.md (and drift.md for live soaks). In live mode every
  session opened is charged to a budget ledger (LAB_BUDGET, LAB_BUDGET_RUN, LAB_BUDGET_DAY).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from lab.errors import LabError

DEFAULT_SOAK_SCENARIOS = ["b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate", "r2-freeze", "s2-recovery"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="fail if a key, handle or TLS secret is anywhere under DIR")
    p.add_argument("dir", type=Path)
    p.add_argument("--secret-env", action="append", default=[], metavar="NAME",
                   help="also look for the value of this environment variable (repeatable)")
    p.add_argument("--allow-tls-secrets", action="store_true",
                   help="accept TLS secrets embedded in pcapng (twin runs: throw-away CA, nothing real)")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("drift", help="compare live runs under DIR with the twin profile; writes drift.md")
    p.add_argument("dir", type=Path)
    p.add_argument("--profile", default="developer-api", help="profile name (lab/twin/profiles) or a YAML path")
    p.add_argument("--tolerance", type=float, default=0.25, help="allowed fraction outside a measured range")
    p.set_defaults(func=cmd_drift)

    p = sub.add_parser("soak", help="repeat scenarios until the duration is spent, then one summary")
    p.add_argument("--endpoint", choices=["twin", "live"], default="twin")
    p.add_argument("--duration", type=float, default=3600.0, help="total seconds of soak (default 3600)")
    p.add_argument("--scenarios", nargs="+", default=DEFAULT_SOAK_SCENARIOS)
    p.add_argument("--run-duration", type=float, default=None, help="per-run duration passed to each scenario")
    p.add_argument("--client", default=None)
    p.add_argument("--topology", default="netns")
    p.add_argument("--base-url", default=None)
    p.add_argument("--out", type=Path, default=None, help="soak folder (default captures/soak-<time>)")
    p.set_defaults(func=cmd_soak)


def cmd_scan(args: argparse.Namespace) -> int:
    import os

    from lab.live.key import load_key
    from lab.live.scanner import scan

    if not args.dir.exists():
        raise LabError(f"no such folder: {args.dir}")
    secrets = [k for k in [load_key(required=False)] if k]
    secrets += [os.environ[n] for n in args.secret_env if os.environ.get(n)]
    findings = scan(args.dir, secrets)
    if args.allow_tls_secrets:
        findings = [f for f in findings if f.kind != "pcapng-secrets"]
    note = "" if secrets else " (no GEMINI_API_KEY to look for: handles, key logs and TLS secrets only)"
    if findings:
        for f in findings:
            print(f"FOUND {f}")
        print(f"lab scan: {len(findings)} finding(s) under {args.dir}; do not publish it{note}")
        return 1
    print(f"lab scan: {args.dir} is clean{note}")
    return 0


def cmd_drift(args: argparse.Namespace) -> int:
    from lab.live.drift import CHANGED, drift_dir

    out, behaviours = drift_dir(args.dir, args.profile, args.tolerance)
    for b in behaviours:
        print(f"{b.status:<13} {b.name:<32} profile {b.expected}; observed {b.observed}")
    print(f"drift: {out}")
    return 1 if any(b.status == CHANGED for b in behaviours) else 0


def cmd_soak(args: argparse.Namespace) -> int:
    from lab.live.budget import Budget, BudgetExceeded
    from lab.report.summary import summarize

    try:
        from lab.run import run_batch  # the orchestrator; imported here so the CLI loads without it
    except ImportError as e:
        raise LabError(f"lab soak needs the orchestrator (lab.run.run_batch): {e}") from None
    if args.duration <= 0:
        raise LabError("--duration must be positive")
    out = args.out or Path("captures") / time.strftime("soak-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    budget = None
    if args.endpoint == "live":
        from lab.live.key import load_key
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
    except BudgetExceeded as e:
        stopped = str(e)
    summary = summarize(out) if any(out.rglob("events.jsonl")) or any(out.rglob("run.json")) else None
    if args.endpoint == "live" and summary is not None:
        from lab.live.drift import drift_dir
        try:
            drift_dir(out)
        except LabError as e:
            print(f"lab soak: drift not written: {e}")
    print(f"lab soak: {rounds} round(s) of {len(args.scenarios)} scenario(s); summary: {summary or 'no runs'}")
    if stopped:
        print(f"lab soak: stopped early: {stopped}")
    return 0
