"""`lab bench recovery`: stage 2 with the study's sequential pattern and with the reference client.

Both clients run the same scenario (s2-recovery: a silent loss on a path that never returns) N
times in the same invocation, against the twin, in network namespaces with real packet loss; their
runs alternate, so the sequential pattern is a baseline measured under the same machine load. The
figure is loss to the first audio of the recovered session, read from each run's events (the agent's
`loss` event is the loss). It prints one line per run as it ends, then p50/p95 for each client with
its ratio to the baseline, and the reference's median beside its goals (<= 1.5 s, <= 1.15x the
floor the twin's inputs set), met or NOT met. It asserts nothing.

The sequential pattern is the study's recovery.py: detection by pings every 0.5 s and 2 s of
silence, a 4 s resume window (an attempt at detection, then one per second), then a new session.
The reference client asks TCP before calling silence a loss (lab.clients.liveness): suspected
once a ping has waited 0.1 s without an ACK (here; 2 of the path's own RTOs where that is longer),
lost once three pings are unanswered past TCP's RTO (0.2 s here), the oldest for 0.35 s, while the
spare session, opened at the suspicion on the same path, is up (else after 4 RTO, 0.8 s); at the
suspicion it starts one resume attempt and the new session in parallel, and at the loss it
restores into the new session without waiting for that attempt's refusal (a silent loss leaves
the session held: the cut-off is the loss itself).

Where the time goes, per client (medians over the runs, from the events):
    detection   loss -> loss.detected                      the client's own limits (emerged)
    wait        loss.detected -> fallback.start / resume   the refusal (twin input refuse_close_s)
                                                           and the new session's setup (new_setup_s),
                                                           minus what the suspicion already did
    restore     fallback.start -> session.restored         the client sending its restore
    first audio session.restored -> first model.audio      twin input restore_first_audio_s
                                                           (lab/twin/profiles, p50 846 ms)
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from lab.errors import LabError
from lab.events import read_events
from lab.report.verdict import verdict_passed
from lab.run import run_batch
from lab.stats.order import quantile
from lab.twin.profile import load_profile

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


STAGES = ("detection", "wait", "restore", "first audio")


def stages_ms(run_dir: Path) -> dict[str, float] | None:
    """The loss -> first audio time of one run cut at the client's own events (see the module text)."""
    evs = read_events(run_dir / "events.jsonl")
    loss = next((e for e in evs if e.kind == "loss"), None)
    if loss is None:
        return None
    after = [e for e in evs if e.ms >= loss.ms]
    detected = next((e for e in after if e.kind == "loss.detected"), None)
    start = next((e for e in after if e.kind == "fallback.start" or (e.kind == "resume.result" and e.get("ok"))), None)
    done = next((e for e in after if e.kind == "session.restored" or (e.kind == "resume.result" and e.get("ok"))), None)
    audio = next((e for e in after if e.kind == "model.audio" and done is not None and e.ms >= done.ms), None)
    if None in (detected, start, done, audio):
        return None
    return {"detection": detected.ms - loss.ms, "wait": start.ms - detected.ms, "restore": done.ms - start.ms,
            "first audio": audio.ms - done.ms}


def stage_lines(stages: dict[str, list[dict[str, float]]]) -> list[str]:
    """Median of each stage per client."""
    lines = [f"{'where the time goes (p50 ms)':30s} " + " ".join(f"{s:>11s}" for s in STAGES)]
    for client, rows in stages.items():
        if rows:
            lines.append(f"{client:30s} " + " ".join(f"{quantile([r[s] for r in rows], .5):11.0f}" for s in STAGES))
    inputs = twin_inputs_ms()
    lines.append(f"twin inputs: wait holds refuse_close_s (p50 {inputs['refuse_close_s']:.0f} ms) and new_setup_s "
                 f"(p50 {inputs['new_setup_s']:.0f} ms) unless the suspicion started them; first audio is "
                 f"restore_first_audio_s (p50 {inputs['restore_first_audio_s']:.0f} ms)")
    return lines


TWIN_INPUTS = ("refuse_close_s", "new_setup_s", "restore_first_audio_s")
GOAL_MS = 1500.0        # the reference client's median, loss to first audio
GOAL_FLOOR_RATIO = 1.15  # ... and that median over the floor the twin's inputs set


def twin_inputs_ms(profile: str = "developer-api") -> dict[str, float]:
    """The p50 of each twin input the recovery figure holds, from the profile the bench runs against."""
    prof = load_profile(profile)
    return {name: prof[name].at(0.5) * 1000 for name in TWIN_INPUTS}


def floor_ms(inputs: dict[str, float]) -> float:
    """What the twin's inputs alone cost a client that falls back: a new session's setup, then the
    first audio after its restore. A client can hide the setup behind its detection (the hedge), so
    this is the most a client could owe the twin, not the least."""
    return inputs["new_setup_s"] + inputs["restore_first_audio_s"]


def goal_lines(median_ms: float, floor: float) -> list[str]:
    """The reference client's median beside each goal and the floor, met or not."""
    ratio = median_ms / floor
    return [f"reference median {median_ms:.0f} ms: goal <= {GOAL_MS:.0f} ms "
            f"{'met' if median_ms <= GOAL_MS else 'NOT met'} ({median_ms / GOAL_MS:.2f}x)",
            f"floor {floor:.0f} ms (twin inputs new_setup_s + restore_first_audio_s, p50): the median is "
            f"{ratio:.2f}x it, {median_ms - floor:+.0f} ms; goal <= {GOAL_FLOOR_RATIO:.2f}x the floor "
            f"({GOAL_FLOOR_RATIO * floor:.0f} ms) {'met' if ratio <= GOAL_FLOOR_RATIO else 'NOT met'}"]


def detection_lines(run_dirs: list[Path]) -> list[str]:
    """How far the detection sits above what the path itself costs: loss.detected's own TCP fields."""
    rows = []
    for d in run_dirs:
        evs = read_events(d / "events.jsonl")
        loss = next((e for e in evs if e.kind == "loss"), None)
        det = next((e for e in evs if e.kind == "loss.detected" and loss is not None and e.ms >= loss.ms), None)
        if det is not None and det.get("rtt_ms") is not None and det.get("rto_ms"):
            rows.append((det.ms - loss.ms, float(det["rtt_ms"]), float(det["rto_ms"])))
    if not rows:
        return ["detection against the path: no loss.detected with TCP fields"]
    det_ms, rtt, rto = (quantile([r[i] for r in rows], .5) for i in range(3))
    return [f"detection p50 {det_ms:.0f} ms: {det_ms / rto:.1f} RTOs (RTO p50 {rto:.0f} ms, the kernel's floor "
            f"is 200 ms) and {det_ms - rtt:.0f} ms above the path's own RTT (smoothed RTT p50 {rtt:.2f} ms)"]


def _verdict_word(run_dir: Path) -> str:
    try:
        v = json.loads((run_dir / "verdict.json").read_text())
    except (OSError, ValueError):
        return "no verdict"
    return "PASS" if verdict_passed(v) else "FAIL"


def run_line(k: int, total: int, client: str, i: int, n: int, figure: float | None, verdict: str,
             wall_s: float) -> str:
    what = f"loss to first audio {figure:6.0f} ms" if figure is not None else "did not recover         "
    return f"[{k:{len(str(total))}d}/{total}] {client:22s} run {i}/{n}: {what}  {verdict}  ({wall_s:.0f} s)"


def summary_lines(figures: dict[str, list[float]], baseline: str) -> list[str]:
    """p50/p95/min/max per client and each client's p50 and p95 over the baseline's."""
    base = figures.get(baseline) or []
    lines = [f"{'client':22s} {'runs':>4s} {'p50 ms':>8s} {'p95 ms':>8s} {'min':>7s} {'max':>7s} "
             f"{'p50/base':>8s} {'p95/base':>8s}"]
    for client, vals in figures.items():
        if not vals:
            lines.append(f"{client:22s} {0:4d}  (no run recovered)")
            continue
        ratios = (f"{quantile(vals, .5) / quantile(base, .5):7.2f}x {quantile(vals, .95) / quantile(base, .95):7.2f}x" if base
                  else f"{'-':>8s} {'-':>8s}")
        lines.append(f"{client:22s} {len(vals):4d} {quantile(vals, .5):8.0f} {quantile(vals, .95):8.0f} {min(vals):7.0f} "
                     f"{max(vals):7.0f} {ratios}")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="lab bench recovery")
    ap.add_argument("-n", type=int, default=5, help="runs per client")
    ap.add_argument("--topology", default="netns", choices=["netns", "compose"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.n < 1:
        raise LabError(f"bench recovery: -n must be at least 1 (got {args.n})")

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="lab-bench-recovery-"))
    clients = (SEQUENTIAL, REFERENCE)
    total = args.n * len(clients)
    print(f"lab bench recovery: s2-recovery against the twin, {args.n} runs per client, topology "
          f"{args.topology}; baseline {SEQUENTIAL}; {total} runs, about 30 s each; results in {out}", flush=True)
    figures: dict[str, list[float]] = {c: [] for c in clients}
    stages: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    reference_runs: list[Path] = []
    k = 0
    for i in range(1, args.n + 1):
        for client in clients:
            k += 1
            t0 = time.monotonic()
            batch = run_batch(["s2-recovery"], n=1, client=client, topology=args.topology,
                              out_dir=out / client / f"{i:02d}", out=lambda s: None)
            run_dir = next((d for d in sorted(batch.iterdir()) if (d / "events.jsonl").exists()), None)
            figure = loss_to_first_audio_ms(run_dir) if run_dir is not None else None
            if figure is not None:
                figures[client].append(figure)
            cut = stages_ms(run_dir) if run_dir is not None else None
            if cut is not None:
                stages[client].append(cut)
            if client == REFERENCE and run_dir is not None:
                reference_runs.append(run_dir)
            verdict = _verdict_word(run_dir) if run_dir is not None else "no run folder"
            print(run_line(k, total, client, i, args.n, figure, verdict, time.monotonic() - t0), flush=True)
    print()
    for line in summary_lines(figures, SEQUENTIAL):
        print(line)
    print()
    for line in stage_lines(stages):
        print(line)
    a, b = figures[SEQUENTIAL], figures[REFERENCE]
    if a and b:
        print(f"ratio of medians (sequential / reference): {quantile(a, .5) / quantile(b, .5):.2f}x; the study measured "
              f"6100-7100 ms for its sequential pattern")
    if b:
        for line in goal_lines(quantile(b, .5), floor_ms(twin_inputs_ms())):
            print(line)
        for line in detection_lines(reference_runs):
            print(line)
    print(f"results: {out}")
    return 0
