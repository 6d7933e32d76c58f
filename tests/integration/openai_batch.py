"""One batch of catalogue scenarios with one OpenAI client in network namespaces, each scenario at
its own duration, for the OpenAI run tests (test_openai_runs, test_openai_catalogue)."""
from __future__ import annotations

import json

# what tests/integration/test_openai_runs.py runs; the catalogue test runs the rest
RUNS_SCENARIOS = ["control", "b1-silent-loss", "b2-path-return", "l1-session-cap"]
RUNS_SPOKEN = ["control-speech"]


def run_batch(tmp_path_factory, client: str, names: list[str], durations: dict[str, float],
              jobs: int = 4) -> dict[str, tuple]:
    """{scenario: (run folder, verdict, the batch's output lines)}; every run must have a verdict.
    Four runs side by side: a lab client's run is mostly waits on the scenario's timers (lab.parallel
    spaces their starts by what each costs the cores), so the batch takes a quarter of its serial time."""
    from lab import parallel, scenario as scenario_mod
    from lab.report import summarize
    from lab.run import batch_cells

    out = tmp_path_factory.mktemp(client) / "batch"
    out.mkdir()
    lines: list[str] = []
    cells = []
    for name in names:        # each with its own duration (run_batch takes one for all)
        cells += batch_cells([scenario_mod.load(name)], out, client=client, topology="netns",
                             duration=durations.get(name), out=lines.append, protocol="openai")
    parallel.run_cells(cells, jobs, out=lines.append)
    summarize(out)
    runs = {}
    for name in names:
        run = out / f"{name}-{client}-01"
        assert (run / "verdict.json").exists(), "\n".join(lines[-40:])
        runs[name] = (run, json.loads((run / "verdict.json").read_text()), lines)
    return runs


def status(verdict: dict) -> dict[str, str]:
    """Each user outcome's status."""
    return {name: o["status"] for name, o in verdict["outcomes"].items()}
