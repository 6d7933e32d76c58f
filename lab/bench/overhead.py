"""`lab bench overhead`: what one run costs outside its scenario, per phase, median of N. Prints figures only.

Each run is a real `lab run` of a short scenario (default `control`: no fault, ends when answered)
through lab.run.run_one, in each topology asked for. The phases come from the run's own record:
phases.json (lab.run: topology up, services ready = twin + capture, agent, teardown, report, on the
monotonic clock) and events.jsonl (the agent's run.start and run.end, on the run's clock, whose zero
is the end of topology up). From them:

    agent start  = run.start - services ready          (what the agent, started with the services,
                                                       still takes after them to its first event)
    scenario     = run.end - run.start                 (the scenario itself: not overhead)
    agent exit   = agent - agent start - scenario      (the agent's own teardown and exit)
    overhead     = topology up + services ready + agent start + agent exit + teardown + report

The baseline, measured in the same run: one Python process that imports lab.agent and exits (every
Python service a run starts pays at least this), so the overhead also prints as a multiple of it.
Compose is measured warm: the first run builds or starts what it must and is not counted.

Floors to compare against (not asserted): overhead <= 1 s in netns, <= 6 s in Compose (warm).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.errors import LabError
from lab.events import read_events
from lab.report.verdict import verdict_passed
from lab.run import PHASES_FILE, RunSpec, preflight, run_one

FLOORS_S = {"netns": 1.0, "compose": 6.0}
PHASES = ("topology_up", "services_ready", "agent_start", "agent_exit", "teardown", "report")


def _baseline_s(n: int) -> float:
    """Median wall time of a Python process that imports lab.agent and exits."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import lab.agent"], check=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def _figures(run_dir: Path) -> dict[str, float]:
    """The phases of one finished run, in seconds (LabError if it did not get through)."""
    path = run_dir / PHASES_FILE
    if not path.exists():
        raise LabError(f"{run_dir.name}: no {PHASES_FILE}: the run did not finish")
    ph = json.loads(path.read_text())
    ev = {e.kind: e for e in read_events(run_dir / "events.jsonl") if e.kind in ("run.start", "run.end")}
    if "run.start" not in ev or "run.end" not in ev or "agent" not in ph:
        raise LabError(f"{run_dir.name}: the agent did not start and end its run")
    start_s, end_s = ev["run.start"].ms / 1000, ev["run.end"].ms / 1000
    out = {k: ph[k] for k in ("topology_up", "services_ready", "teardown", "report")}
    out["agent_start"] = start_s - ph["services_ready"]
    out["scenario"] = end_s - start_s
    out["agent_exit"] = ph["agent"] - out["agent_start"] - out["scenario"]
    out["overhead"] = sum(out[k] for k in PHASES)
    return out


def _one(scn, client: str, topology: str, out_dir: Path, i: int, duration: float | None, progress) -> dict:
    run_dir = out_dir / f"{scn.name}-{topology}-{i:02d}"
    lines: list[str] = []
    verdict = run_one(RunSpec(scn, client or scn.client, topology, "twin", run_dir, duration, None,
                              "gemini-3.8-live"), out=lines.append)
    try:
        fig = _figures(run_dir)
    except LabError as e:
        raise LabError(f"{e}; its last lines: {' | '.join(lines[-3:])}")
    progress(f"{topology} run {i}: overhead {fig['overhead']:.2f} s (" +
             ", ".join(f"{k} {fig[k]:.2f}" for k in PHASES) + f"), scenario {fig['scenario']:.2f} s, "
             f"verdict {'PASS' if verdict_passed(verdict) else 'FAIL'}")
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="netns", help="comma-separated: netns, compose (default netns)")
    ap.add_argument("-n", type=int, default=5, help="runs per topology (default 5; Compose runs one more, warm-up)")
    ap.add_argument("--scenario", default="control")
    ap.add_argument("--client", default=None, help="the client (default: the scenario's)")
    ap.add_argument("--keep", action="store_true", help="keep the run folders (printed at the end)")
    args = ap.parse_args(argv or [])
    topologies = [t.strip() for t in args.topology.split(",") if t.strip()]
    for t in topologies:
        if t not in FLOORS_S:
            raise LabError(f"bad --topology {t!r}: netns or compose")
    if args.n < 1:
        raise LabError(f"bad -n {args.n}: at least 1")
    scns = {t: preflight([args.scenario], args.client, t, "twin")[0] for t in topologies}

    def progress(line: str) -> None:
        print(f"  .. {line}", flush=True)

    base = _baseline_s(5)
    print(f"overhead bench: scenario {args.scenario}, {args.n} runs per topology, median per phase; "
          f"baseline (python -c 'import lab.agent') {base:.3f} s, measured now", flush=True)
    out_dir = Path(tempfile.mkdtemp(prefix="livelab-overhead-"))
    results: dict[str, list[dict]] = {}
    try:
        for t in topologies:
            warm = 1 if t == "compose" else 0
            figs = []
            for i in range(1, args.n + warm + 1):
                fig = _one(scns[t], args.client, t, out_dir, i, None, progress)
                if i > warm:
                    figs.append(fig)
                else:
                    progress(f"{t} run {i} was the warm-up: not counted")
            results[t] = figs
    finally:
        if args.keep:
            print(f"run folders kept in {out_dir}")
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
    cols = PHASES + ("overhead", "scenario")
    print(f"{'topology':>9} " + " ".join(f"{c:>14}" for c in cols) + f" {'x baseline':>10}")
    for t, figs in results.items():
        med = {c: statistics.median(f[c] for f in figs) for c in cols}
        print(f"{t:>9} " + " ".join(f"{med[c]:>14.3f}" for c in cols) + f" {med['overhead'] / base:>9.1f}x")
        print(f"floor: {t} overhead median {med['overhead']:.2f} s (<= {FLOORS_S[t]:g} s); "
              f"min {min(f['overhead'] for f in figs):.2f} s, max {max(f['overhead'] for f in figs):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
