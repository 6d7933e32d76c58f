"""What one pod of the Indexed Job runs: one lab run into its shard folder, through the pod topology.

    python -m lab.deploy.shard SCENARIO --out /captures/shard-3 [--client C] [--endpoint twin|live]
                                        [--duration S] [--model M]

The run itself is `lab run`'s (lab.run.run_batch: the same run.json, agent, capture, verdict and
summary) with the `pod` topology (lab/topology/pod.py). The client image has no tshark or matplotlib:
the capture stays raw (raw-eth.pcap, raw-nflog.pcap) and the verdict has no timeline.png until the
fan-in job (lab.deploy.fan_in, in the report image) merges and draws them. In live mode the shard's
budget is LAB_BUDGET, its share of the batch's (lab.deploy.shards.split_budget). Whatever happens,
the shard leaves DONE_MARKER with its exit status, which the fan-in job waits for. Exit status as
`lab run`: 0 passed, 1 a check failed, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lab import run as run_mod
from lab.deploy.shards import DONE_MARKER
from lab.errors import LabError
from lab.model_id import DEFAULT_MODEL


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab.deploy.shard", description=__doc__.splitlines()[0])
    p.add_argument("scenario")
    p.add_argument("--out", required=True, type=Path, help="this index's shard folder")
    p.add_argument("--client", default=None)
    p.add_argument("--endpoint", default="twin", choices=["twin", "live"])
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--model", default=DEFAULT_MODEL)
    return p.parse_args(argv)


def run_shard(args: argparse.Namespace) -> int:
    budget = None
    if args.endpoint == "live":
        from lab.live.budget import Budget      # live rails only in live mode (as lab run does)
        budget = Budget.for_batch()             # LAB_BUDGET: this shard's share
    batch = run_mod.run_batch([args.scenario], n=1, client=args.client, topology="pod", endpoint=args.endpoint,
                              out_dir=args.out, duration=args.duration, budget=budget, model=args.model)
    return 0 if run_mod.batch_passed(batch) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rc = 2
    try:
        rc = run_shard(args)
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        rc = e.code
    finally:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / DONE_MARKER).write_text(json.dumps({"exit": rc}) + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
