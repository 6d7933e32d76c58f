"""The fan-in: once every shard is done, merge each run's capture and report all shards as one batch.

    python -m lab.deploy.fan_in /captures --shards 4 [--timeout S] [--matrix]

Runs in the report image (deploy/kubernetes/Dockerfile.report: the client image plus tshark and
matplotlib), so the client image the shards run stays without them: a shard leaves the sidecar's raw
captures (raw-eth.pcap, raw-nflog.pcap), events.jsonl, twin.jsonl and its verdict; this job merges
each run's capture.pcapng (the raw files with a marker per event; without TLS secrets, which stayed
in the shard's private temp folder) and then runs `lab report` over all shards: verdicts with
timeline.png, and one summary.md. Exit status: `lab report`'s, 2 when the shards are not all done in
time (one line naming how many are). `--matrix` also writes matrix.md/json over all shards (`lab
matrix --report`: the conformance rules of lab/report/rules.py, run by run).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lab import cli
from lab.capture import RAW_FILES
from lab.deploy.shards import DONE_MARKER
from lab.errors import LabError
from lab.report.summary import runs_under
from lab.topology.pod import sidecar_capture


def wait_done(root: Path, shards: int, timeout: float, poll: float = 10.0) -> None:
    """Until `shards` shard folders under `root` hold their DONE_MARKER; LabError after `timeout`."""
    deadline = time.monotonic() + timeout
    while (done := len(list(root.glob(f"shard-*/{DONE_MARKER}")))) < shards:
        if time.monotonic() > deadline:
            raise LabError(f"{done} of {shards} shards done under {root} after {timeout:.0f} s")
        time.sleep(poll)


def merge_captures(root: Path, out=print) -> list[Path]:
    """capture.pcapng for every run under `root` that has raw captures and no merged one yet."""
    made = []
    for run in runs_under(root):
        if (run / "capture.pcapng").exists() or not any((run / n).exists() for n in RAW_FILES):
            continue
        try:
            made.append(sidecar_capture(run).finish())      # the sidecar's capture, its files now in the run
        except LabError as e:                               # one run's capture must not cost the report
            out(f"fan-in: {run}: capture not merged: {e}")
    return made


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.deploy.fan_in", description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="the batch folder holding shard-<i>/ folders")
    p.add_argument("--shards", type=int, required=True, help="how many shards to wait for")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for them")
    p.add_argument("--matrix", action="store_true", help="also write matrix.md/json (lab matrix --report)")
    args = p.parse_args(argv)
    try:
        if args.shards < 1:
            raise LabError(f"--shards must be at least 1, got {args.shards}")
        wait_done(args.root, args.shards, args.timeout)
    except LabError as e:
        print(f"lab.deploy.fan_in: {e}", file=sys.stderr)
        return 2
    for pcap in merge_captures(args.root):
        print(f"fan-in: merged {pcap}")
    rc = cli.main(["report", str(args.root)])
    if args.matrix:
        rc = max(rc, cli.main(["matrix", "--report", str(args.root)]))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
