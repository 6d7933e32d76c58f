"""`lab bench overhead`: what one run costs outside its scenario, per phase, median of N. Prints figures only.

Each run is a real `lab run` of a short scenario (default `control`: no fault, ends when answered)
through lab.run.run_one, in each topology asked for. The phases come from the run's own record, as lab.report.phases reads them (topology up, services
ready, agent start, the scenario, agent exit, teardown, report); overhead is every phase but the
scenario.

The baseline, measured in the same run: one Python process that imports lab.agent and exits (every
Python service a run starts pays at least this), so the overhead also prints as a multiple of it.
Compose is measured warm: the first run builds or starts what it must and is not counted.

netns runs its processes through the fork server (lab/forkserver/server.py), which imports the lab
once per invocation: the first run waits for that and is printed on its own with the server's import
and ready times, not put in the median. Interleaved with those runs, as many with LAB_FORKSERVER=0
(`netns-exec`: each process exec'd by `ip netns exec`, as before) under the same load: the fork
server's saving is the ratio of the two medians (`--no-exec` leaves that row out).

Floors to compare against (not asserted): overhead <= 1 s in netns, <= 6 s in Compose (warm).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.errors import LabError
from lab.events import read_events
from lab.model_id import DEFAULT_MODEL
from lab.report.verdict import verdict_passed
from lab.report.phases import OVERHEAD as PHASES
from lab.report.phases import figures as _figures
from lab.run import RunSpec, preflight, run_one
from lab.forkserver import client as forked

FLOORS_S = {"netns": 1.0, "compose": 6.0}
EXEC = "netns-exec"     # netns with the fork server off: the in-run comparison


def _baseline_s(n: int) -> float:
    """Median wall time of a Python process that imports lab.agent and exits."""
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import lab.agent"], check=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def _one(scn, client: str, label: str, out_dir: Path, i: int, duration: float | None, progress) -> dict:
    """One run of `label` (a topology, or EXEC: netns with LAB_FORKSERVER=0 for this run only)."""
    topology = "netns" if label == EXEC else label
    run_dir = out_dir / f"{scn.name}-{label}-{i:02d}"
    lines: list[str] = []
    switch = os.environ.get(forked.ENV_SWITCH)
    if label == EXEC:
        os.environ[forked.ENV_SWITCH] = "0"
    try:
        verdict = run_one(RunSpec(scn, client or scn.client, topology, "twin", run_dir, duration, None,
                                  DEFAULT_MODEL), out=lines.append)
    finally:
        if switch is None:
            os.environ.pop(forked.ENV_SWITCH, None)
        else:
            os.environ[forked.ENV_SWITCH] = switch
    try:
        fig = _figures(run_dir)
    except LabError as e:
        raise LabError(f"{e}; its last lines: {' | '.join(lines[-3:])}")
    progress(f"{label} run {i}: overhead {fig['overhead']:.2f} s (" +
             ", ".join(f"{k} {fig[k]:.2f}" for k in PHASES) + f"), scenario {fig['scenario']:.2f} s, "
             f"verdict {'PASS' if verdict_passed(verdict) else 'FAIL'}")
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="netns", help="comma-separated: netns, compose (default netns)")
    ap.add_argument("-n", type=int, default=5, help="runs per topology (default 5; Compose and netns with the fork server run one more, warm-up)")
    ap.add_argument("--scenario", default="control")
    ap.add_argument("--client", default=None, help="the client (default: the scenario's)")
    ap.add_argument("--keep", action="store_true", help="keep the run folders (printed at the end)")
    ap.add_argument("--no-exec", action="store_true",
                    help="netns: skip the interleaved runs with the fork server off (LAB_FORKSERVER=0)")
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
            # a first run that sets up what the rest reuse (Compose: images, containers; netns: the
            # fork server's imports, unless it is switched off) is printed but not counted
            warm = 1 if t == "compose" or (t == "netns" and forked.enabled()) else 0
            labels = [t] + ([EXEC] if t == "netns" and forked.enabled() and not args.no_exec else [])
            for label in labels:
                results[label] = []
            for i in range(1, args.n + warm + 1):
                for label in labels:
                    if label == EXEC and i <= warm:
                        continue
                    fig = _one(scns[t], args.client, label, out_dir, i, None, progress)
                    if label == EXEC or i > warm:
                        results[label].append(fig)
                    else:
                        progress(f"{label} run {i} was the warm-up: not counted" + _fork_cost(label))
    finally:
        if args.keep:
            print(f"run folders kept in {out_dir}")
        else:
            shutil.rmtree(out_dir, ignore_errors=True)
    cols = PHASES + ("overhead", "scenario")
    print(f"{'topology':>10} " + " ".join(f"{c:>14}" for c in cols) + f" {'x baseline':>10}")
    medians = {}
    for t, figs in results.items():
        med = medians[t] = {c: statistics.median(f[c] for f in figs) for c in cols}
        print(f"{t:>10} " + " ".join(f"{med[c]:>14.3f}" for c in cols) + f" {med['overhead'] / base:>9.1f}x")
    for t, med in medians.items():
        figs = results[t]
        floor = FLOORS_S["netns" if t == EXEC else t]
        print(f"floor: {t} overhead median {med['overhead']:.2f} s (<= {floor:g} s); "
              f"min {min(f['overhead'] for f in figs):.2f} s, max {max(f['overhead'] for f in figs):.2f} s")
    if "netns" in medians and EXEC in medians:
        print(f"fork server: netns overhead {medians['netns']['overhead']:.2f} s vs {medians[EXEC]['overhead']:.2f} s "
              f"exec'd, {medians[EXEC]['overhead'] / medians['netns']['overhead']:.1f}x less; once per invocation "
              f"on top, by its first run:{_fork_cost('netns')}")
    return 0


def _fork_cost(label: str) -> str:
    """The fork server's own start, paid by the invocation's first netns run."""
    cost = forked.stats() if label == "netns" else None
    if not cost:
        return ""
    return f" (the fork server's start: its imports {cost['import_s']:.2f} s, ready {cost['ready_s']:.2f} s after it began)"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
