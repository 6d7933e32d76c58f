"""`lab bench false-alarms`: how often the reference client takes a healthy, poor path for a loss.

The path is h1-healthy-jitter-loss (lab/scenarios): every packet to the endpoint held 0-600 ms
(delay 300 ms, jitter 300 ms, userspace) and 1 % of the packets dropped each way, for `--duration`
seconds (default 600: ten minutes). Nothing cuts the path, so every `loss.detected` is a false
alarm; the count must be 0. The baseline is the same client with the silence-only rule
(`tcp_witness: false`: lost after 1 s without a frame or a pong), on the same path at the same
time (both runs go side by side in their own namespaces, so they share the machine's load).

While it runs it prints, every `--every` seconds, each run's detections, suspicions and pongs so
far. At the end: false detections per client, suspicions (spare sessions the client opened and
closed again), the ratio of the baseline's count to the reference's, and the reference's count
beside its goal (0 in 10 minutes; a shorter run is not judged unless it already missed). It asserts
nothing.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lab import scenario as scenario_mod
from lab.errors import LabError
from lab.events import read_events

SCENARIO = "h1-healthy-jitter-loss"
REFERENCE, BASELINE = "recovery (TCP witness)", "recovery, silence only"
COUNTED = ("loss.detected", "loss.suspected", "fallback.start")


def counts(batch: Path) -> dict[str, int]:
    """Counts of the events that matter, from the run folder's events.jsonl as written so far."""
    found = {k: 0 for k in COUNTED}
    for path in batch.glob("*/events.jsonl"):
        try:
            evs = read_events(path)
        except (OSError, ValueError):
            continue                # a line being written: the next look reads it
        for e in evs:
            if e.kind in found:
                found[e.kind] += 1
    return found


def baseline_scenario(where: Path) -> Path:
    """A copy of the scenario whose client uses the silence-only rule: the in-run baseline."""
    raw = yaml.safe_load(scenario_mod.resolve(SCENARIO).read_text())
    raw["name"] = f"{SCENARIO}-silence"
    raw["client_params"] = {"recovery": {"tcp_witness": False, "prepare_on_suspect": False}}
    path = where / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def progress_line(elapsed: float, total: float, runs: dict[str, dict[str, int]]) -> str:
    parts = [f"{who}: {c['loss.detected']} detected, {c['loss.suspected']} suspected" for who, c in runs.items()]
    return f"[{elapsed:5.0f}/{total:.0f} s] " + "; ".join(parts)


def summary_lines(runs: dict[str, dict[str, int]], minutes: float) -> list[str]:
    ref, base = runs[REFERENCE]["loss.detected"], runs[BASELINE]["loss.detected"]
    lines = [f"{'client':26s} {'false detections':>16s} {'per 10 min':>10s} {'suspected':>9s} {'fallbacks':>9s}"]
    for who, c in runs.items():
        per10 = c["loss.detected"] * 10 / minutes if minutes else float("nan")
        lines.append(f"{who:26s} {c['loss.detected']:16d} {per10:10.1f} {c['loss.suspected']:9d} {c['fallback.start']:9d}")
    ratio = f"{base / ref:.1f}x" if ref else ("inf (reference 0)" if base else "- (both 0)")
    lines.append(f"baseline / reference false detections: {ratio}")
    lines.append(goal_line(ref, minutes))
    return lines


GOAL_MINUTES = 10.0     # the goal: no false detection by the reference in this long


def goal_line(false_detections: int, minutes: float) -> str:
    """The reference's count beside its goal and floor (0 in 10 minutes), met or not; a shorter run
    can only miss it, not meet it."""
    if false_detections:
        verdict = "NOT met"
    elif minutes >= GOAL_MINUTES:
        verdict = "met"
    else:
        verdict = f"not judged: {minutes:.0f} of {GOAL_MINUTES:.0f} min played"
    return (f"reference false detections {false_detections} in {minutes:.0f} min: goal (and floor) 0 in "
            f"{GOAL_MINUTES:.0f} min {verdict}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="lab bench false-alarms")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds on the path (default 600)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--topology", default="netns", choices=["netns", "compose"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.duration < 10:
        raise LabError(f"bench false-alarms: --duration must be at least 10 s (got {args.duration:g})")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="lab-bench-false-alarms-"))
    out.mkdir(parents=True, exist_ok=True)
    plays = {REFERENCE: SCENARIO, BASELINE: str(baseline_scenario(out))}
    print(f"lab bench false-alarms: {SCENARIO} (delay 300 ms +- 300 ms out, 1 % loss each way) for "
          f"{args.duration:.0f} s, topology {args.topology}; {REFERENCE} against the baseline {BASELINE}, "
          f"side by side; results in {out}", flush=True)
    procs: dict[str, subprocess.Popen] = {}
    batches = {who: out / ("reference" if who == REFERENCE else "baseline") for who in plays}
    try:
        for who, scn in plays.items():
            procs[who] = subprocess.Popen(
                [sys.executable, "-m", "lab", "run", scn, "--client", "recovery", "--topology", args.topology,
                 "--duration", str(args.duration), "--out", str(batches[who])],
                stdout=subprocess.DEVNULL, stderr=(out / f"{batches[who].name}.stderr").open("w"))
        t0 = time.monotonic()
        while any(p.poll() is None for p in procs.values()):
            time.sleep(min(args.every, 5.0))
            elapsed = time.monotonic() - t0
            if int(elapsed // args.every) != int((elapsed - 5.0) // args.every) or elapsed < 5.5:
                print(progress_line(elapsed, args.duration, {w: counts(b) for w, b in batches.items()}), flush=True)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(30)
    runs = {w: counts(b) for w, b in batches.items()}
    print()
    for line in summary_lines(runs, args.duration / 60):
        print(line)
    failed = [w for w, p in procs.items() if p.returncode not in (0, 1)]   # 1: an expectation failed
    if failed:
        print(f"note: the run of {', '.join(failed)} ended with an error; see {out}/*.stderr")
    print(f"results: {out}")
    return 0
