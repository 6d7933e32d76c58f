"""Where a run's time went, read from what it leaves: phases.json (lab.run's marks on the monotonic
clock: topology up, services ready, agent, teardown, report) and the agent's run.start and run.end
in events.jsonl (on the run's clock, whose zero is the end of topology up). From them:

    agent start  = run.start - services ready     (what the agent, started with the services, still
                                                  takes after them to its first event)
    scenario     = run.end - run.start            (the scenario itself: not overhead)
    agent exit   = agent - agent start - scenario (the agent's own teardown and exit)
    overhead     = every phase but the scenario

Asked by `lab bench overhead` (one run's phases, median of N) and `lab matrix` (summed over its cells).
"""
from __future__ import annotations

import json
from pathlib import Path

from lab.errors import LabError
from lab.events import read_events

PHASES_FILE = "phases.json"
# the phases that are not the scenario, in the order a run goes through them
OVERHEAD = ("topology_up", "services_ready", "agent_start", "agent_exit", "teardown", "report")
# every phase, in order, the scenario in its place
ORDER = ("topology_up", "services_ready", "agent_start", "scenario", "agent_exit", "teardown", "report")
NAMES = {"topology_up": "topology up", "services_ready": "services up", "agent_start": "agent start",
         "scenario": "the scenario", "agent_exit": "agent exit", "teardown": "teardown", "report": "report"}


def figures(run_dir: Path) -> dict[str, float]:
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
    out["overhead"] = sum(out[k] for k in OVERHEAD)
    return out


def summed(run_dirs: list[Path]) -> tuple[dict[str, float], int]:
    """Each phase summed over the runs that got through, and how many did."""
    total = {k: 0.0 for k in ORDER}
    read = 0
    for d in run_dirs:
        try:
            fig = figures(d)
        except (LabError, OSError, ValueError):
            continue            # a cell that did not finish has no phases to add
        read += 1
        for k in ORDER:
            total[k] += fig[k]
    return total, read


def line(total: dict[str, float]) -> str:
    """"topology up 12.0 s (8 %), ...": each phase's seconds and its share of their sum."""
    whole = sum(total[k] for k in ORDER) or float("nan")
    return ", ".join(f"{NAMES[k]} {total[k]:.1f} s ({100 * total[k] / whole:.0f} %)" for k in ORDER)
