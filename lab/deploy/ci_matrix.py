"""The GitHub Actions matrix of a fan-out: one entry per shard (scenario x run), its live budget share.

    python -m lab.deploy.ci_matrix --scenarios "b1-silent-loss b2-path-return" --runs 2 [--budget 100]

prints `shards=<JSON list>` for $GITHUB_OUTPUT; .github/workflows/fanout.yml feeds it to its matrix.
Each entry: index, scenario, budget (its share of the batch's sessions, lab.deploy.shards.split_budget;
"" without a live budget); each shard runs `make lab-run SCENARIO=...`, as a user would. One clear line and exit 2
for bad input (an unknown scenario, runs < 1, a budget smaller than the shard count, too many shards).
"""
from __future__ import annotations

import argparse
import json
import sys

from lab import scenario as scenario_mod
from lab.deploy.shards import split_budget
from lab.errors import LabError

MAX_SHARDS = 256        # GitHub's limit of jobs in one matrix


def shards(scenarios: list[str], runs: int, budget: int | None = None) -> list[dict]:
    if not scenarios:
        raise LabError("name at least one scenario (lab list)")
    if runs < 1:
        raise LabError(f"runs per scenario must be at least 1, got {runs}")
    names = [scenario_mod.load(s).name for s in scenarios]      # unknown names fail here, with the catalogue
    cells = [s for s in names for _ in range(runs)]
    if len(cells) > MAX_SHARDS:
        raise LabError(f"{len(cells)} shards: a GitHub matrix holds at most {MAX_SHARDS}")
    shares = split_budget(budget, len(cells)) if budget is not None else [None] * len(cells)
    return [{"index": i, "scenario": s, "budget": "" if b is None else str(b)}
            for i, (s, b) in enumerate(zip(cells, shares))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.deploy.ci_matrix", description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", required=True, help="space-separated scenario names")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--budget", type=int, default=None, help="live sessions for the whole fan-out")
    args = p.parse_args(argv)
    try:
        out = shards(args.scenarios.split(), args.runs, args.budget)
    except LabError as e:
        print(f"lab.deploy.ci_matrix: {e}", file=sys.stderr)
        return 2
    print(f"shards={json.dumps(out, separators=(',', ':'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
