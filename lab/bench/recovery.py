"""`lab bench recovery`: stage 2 with the study's sequential pattern and with the reference client.

Both clients run the same scenario (s2-recovery: a silent loss on a path that never returns) N
times in the same invocation, against the twin, in network namespaces with real packet loss. The
figure is loss to the first audio of the recovered session, read from each run's events; the
benchmark prints p50/p95 for each client and the ratio of their medians. It asserts nothing.

The sequential pattern is the study's recovery.py: detection by pings every 0.5 s and 2 s of
silence, a 4 s resume window (an attempt at detection, then one per second), then a new session.
The reference client detects in 1 s, tries one resume while it opens the new session in parallel,
and restores on the first refusal.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from lab.events import read_events

SEQUENTIAL = "recovery-sequential"
REFERENCE = "recovery"


def loss_to_first_audio_ms(run_dir: Path) -> float | None:
    evs = read_events(run_dir / "events.jsonl")
    loss = next((e for e in evs if e.kind == "loss"), None)
    if loss is None:
        return None
    recovered = next((e for e in evs if e.ms >= loss.ms and (
        e.kind == "session.restored" or (e.kind == "resume.result" and e.get("ok")))), None)
    if recovered is None:
        return None
    first = next((e for e in evs if e.kind == "model.audio" and e.ms >= recovered.ms), None)
    return None if first is None else first.ms - loss.ms


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="lab bench recovery")
    ap.add_argument("-n", type=int, default=5, help="runs per client")
    ap.add_argument("--topology", default="netns")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from lab.run import run_batch

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="lab-bench-recovery-"))
    figures: dict[str, list[float]] = {}
    for client in (SEQUENTIAL, REFERENCE):
        batch = run_batch(["s2-recovery"], n=args.n, client=client, topology=args.topology,
                          out_dir=out / client, out=lambda s: None)
        vals = [v for d in sorted(batch.iterdir()) if d.is_dir() and (d / "events.jsonl").exists()
                for v in [loss_to_first_audio_ms(d)] if v is not None]
        figures[client] = vals
    print(f"lab bench recovery: s2-recovery against the twin, {args.n} runs per client, topology {args.topology}")
    print(f"{'client':22s} {'runs':>4s} {'p50 ms':>8s} {'p95 ms':>8s} {'min':>7s} {'max':>7s}")
    for client, vals in figures.items():
        if vals:
            print(f"{client:22s} {len(vals):4d} {pct(vals, .5):8.0f} {pct(vals, .95):8.0f} {min(vals):7.0f} {max(vals):7.0f}")
        else:
            print(f"{client:22s} {0:4d}  (no run recovered)")
    a, b = figures.get(SEQUENTIAL), figures.get(REFERENCE)
    if a and b:
        print(f"ratio of medians (sequential / reference): {statistics.median(a) / statistics.median(b):.2f}x; "
              f"floor for the reference median: 3500 ms; the study measured 6100-7100 ms")
    print(f"results: {out}")
    return 0
