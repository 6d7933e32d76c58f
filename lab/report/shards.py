"""Result folders from several machines (shards) read as one batch.

A shard is any result folder: `captures/<batch>` copied from one host, or one index's `shard-<i>/`
of the Kubernetes fan-out (lab/deploy/fan_in.py). `labelled_runs(roots)` finds every run under each
and names it `<shard label>/<path in the shard>`, the label being the shortest trailing part of the
root's path that tells the roots apart (two hosts' `20261201-batch` folders become
`hostA/20261201-batch` and `hostB/20261201-batch`; identical paths get `#2`, `#3`), so two runs
with the same name on two machines stay two runs. With one root the names are as `lab report DIR`
gives them (the path inside it).

    merge_summary(roots, out_dir)  -> out_dir/summary.md over every run of every shard
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.report.summary import load_verdict, render_summary, runs_under


def shard_labels(roots: list[Path]) -> list[str]:
    """A distinct, readable label per root (see the module docstring)."""
    parts = [Path(r).resolve().parts for r in roots]
    labels = []
    for i, p in enumerate(parts):
        others = [q for j, q in enumerate(parts) if j != i and q != p]     # an identical path gets #n below
        n = 1
        while n < len(p) and any(q[-n:] == p[-n:] for q in others):
            n += 1
        labels.append("/".join(p[-n:]) or str(roots[i]))
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def labelled_runs(roots: list[Path]) -> list[tuple[str, Path]]:
    """(run id, run folder) for every run under every root; a LabError for a root with no run."""
    if not roots:
        raise LabError("name at least one result folder")
    out: list[tuple[str, Path]] = []
    labels = shard_labels(roots)
    for label, root in zip(labels, roots):
        root = Path(root)
        for run in runs_under(root):
            rel = str(run.relative_to(root)) if run != root else run.name
            out.append((rel if len(roots) == 1 else f"{label}/{rel}", run))
    return out


def verdicts(roots: list[Path], rebuild: bool = False) -> list[dict[str, Any]]:
    """Each run's verdict, its `run_id` the shard-qualified name."""
    out = []
    for run_id, run in labelled_runs(roots):
        v = load_verdict(run, rebuild=rebuild)
        v["run_id"] = run_id
        out.append(v)
    return out


def merge_summary(roots: list[Path], out_dir: Path) -> Path:
    """out_dir/summary.md over every run of every shard; returns its path."""
    vs = verdicts(roots)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "summary.md"
    names = ", ".join(shard_labels(roots))
    out.write_text(render_summary(vs, f"livelab summary: {len(roots)} shards ({names})"))
    return out
