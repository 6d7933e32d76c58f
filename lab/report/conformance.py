"""The conformance matrix: scenarios x clients, each cell the rules' outcomes over its runs.

    write(roots, out_dir)   -> (matrix.md, matrix.json) in out_dir, from the run folders under roots,
                               and matrix.html beside them (lab/report/batch_page.py)

A pure function of result folders, like summary.md: `lab matrix` writes it after its runs, `lab
matrix --report DIR...` and `lab report` on a matrix batch rebuild it, and several roots (shards
from several machines, lab/report/shards.py) merge into one matrix. Per cell (scenario, client): how
many runs passed for the user (the verdict's user outcomes, lab/report/outcomes.py) and how many of
those held to the study reproduced it, and per rule of lab/report/rules.py
how many runs passed, failed or could not be judged, with what each run showed and a link to its
folder. The client versions come from `versions.json`, which the matrix runner (lab/matrix.py) writes
into its batch folder when it measures them in the clients' venvs; a folder without one says so.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab.protocols import GEMINI, PROTOCOLS
from lab.report import advice as advice_mod
from lab.report import rules as rules_mod
from lab.report.shards import labelled_runs, shard_labels
from lab.report.summary import load_verdict
from lab.report.verdict import load_conversation, load_run, protocol_of, verdict_passed

FORMAT = 1
VERSIONS_FILE = "versions.json"     # {client: {package: version}}, written by the runner
MATRIX_FILES = ("matrix.md", "matrix.json")
SYMBOL = {rules_mod.PASS: "pass", rules_mod.FAIL: "FAIL", rules_mod.NA: "n/a"}


def run_outcomes(run_dir: Path) -> tuple[dict[str, Any], dict[str, rules_mod.Outcome]]:
    """One run's verdict and every rule's outcome (the verdict's metrics feed the rules)."""
    v = load_verdict(run_dir)
    events, meta, twin, _ = load_run(run_dir)
    record = rules_mod.Record(events, twin, meta, v["metrics"], conversation=load_conversation(run_dir))
    return {**v, "client": client_label(v, meta)}, rules_mod.judge_all(record)


def client_label(verdict: dict[str, Any], meta: dict[str, Any]) -> str:
    """The cell's client: a framework at a release other than its pinned one by the name it was
    asked for (livekit@1.8.8, livekit@1.8.0+pr003), so a sweep's releases are cells of their own;
    the run is judged by the plain name all the same."""
    fw = meta.get("framework") or {}
    name = str(verdict.get("client") or "-")
    if fw.get("framework") and fw.get("venv") != f".venv-{fw['framework']}":
        return f"{fw['framework']}@{fw['version']}" + (f"+{fw['build']}" if fw.get("build") else "")
    return name


def read_versions(roots: list[Path]) -> dict[str, dict[str, str]]:
    """The clients' versions from every versions.json at or under the roots (later roots add to earlier)."""
    out: dict[str, dict[str, str]] = {}
    for root in roots:
        for p in sorted(Path(root).rglob(VERSIONS_FILE)):
            try:
                found = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            for client, pkgs in (found.get("clients") or {}).items():
                out.setdefault(client, {}).update(pkgs or {})
    return out


def aggregate(outcomes: list[rules_mod.Outcome]) -> dict[str, Any]:
    """A rule over a cell's runs: FAIL if any run failed it, else pass if any passed, else n/a."""
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in (rules_mod.PASS, rules_mod.FAIL, rules_mod.NA)}
    status = (rules_mod.FAIL if counts[rules_mod.FAIL] else rules_mod.PASS if counts[rules_mod.PASS] else rules_mod.NA)
    return {"status": status, "pass": counts[rules_mod.PASS], "fail": counts[rules_mod.FAIL], "na": counts[rules_mod.NA],
            "observed": [o.observed for o in outcomes], "figures": [o.figure for o in outcomes]}


def applies(rule: str, protocol: str) -> bool:
    """The rule is about `protocol` (a Live API rule is n/a, saying so, in an OpenAI cell)."""
    return protocol in rules_mod.RULES[rule].protocols


def build(roots: list[Path], out_dir: Path) -> dict[str, Any]:
    """The matrix as a JSON-ready dict (matrix.json); links relative to out_dir. A cell is a
    (protocol, scenario, client): protocols run side by side are cells apart, each naming its own."""
    roots = [Path(r) for r in roots]
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for run_id, run in labelled_runs(roots):
        v, outcomes = run_outcomes(run)
        cells[(protocol_of(v), str(v.get("scenario") or "?"), str(v.get("client") or "-"))].append({
            "run": run_id, "dir": os.path.relpath(run, out_dir), "verdict_pass": verdict_passed(v),
            "reproduces": v.get("reproduces"),
            "failed": v.get("failed") or [], "notes": v.get("notes") or [],
            "rules": {n: _with_advice(n, o, v["metrics"]) for n, o in outcomes.items()}, "_outcomes": outcomes})
    out_cells = []
    for (protocol, scenario, client), runs in sorted(cells.items()):
        out_cells.append({
            "protocol": protocol, "scenario": scenario, "client": client, "runs": len(runs),
            "verdict": verdict_counts(runs),
            "rules": {n: {**aggregate([r["_outcomes"][n] for r in runs]), "applies": applies(n, protocol)}
                      for n in rules_mod.RULES},
            "per_run": [{k: val for k, val in r.items() if k != "_outcomes"} for r in runs],
        })
    return {
        "format": FORMAT,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "shards": shard_labels(roots),
        "versions": read_versions(roots),
        "rules": [{"name": r.name, "source": r.source, "about": r.about, "protocols": list(r.protocols)}
                  for r in rules_mod.RULES.values()],
        "protocols": sorted({c["protocol"] for c in out_cells}),
        "scenarios": sorted({c["scenario"] for c in out_cells}),
        "clients": sorted({c["client"] for c in out_cells}),
        "cells": out_cells,
    }


def verdict_counts(runs: list[dict[str, Any]]) -> dict[str, int]:
    """A cell's verdicts over its runs (each with `verdict_pass` and `reproduces`): how many passed for
    the user, and of the runs with reproduction rows how many reproduced the study."""
    return {"pass": sum(1 for r in runs if r["verdict_pass"]), "runs": len(runs),
            "reproduces": sum(1 for r in runs if r.get("reproduces")),
            "held_to_study": sum(1 for r in runs if r.get("reproduces") is not None)}


def _with_advice(name: str, outcome: rules_mod.Outcome, metrics: dict[str, Any]) -> dict[str, Any]:
    row = outcome.to_json()
    a = advice_mod.for_rule(name, outcome, metrics)
    if a is not None:
        row["advice"] = a.text()
    return row


def advice_of(cell: dict[str, Any], rule: str) -> list[str]:
    """What to change for a rule in a cell: each distinct advice of its failed runs."""
    return list(dict.fromkeys(r["rules"][rule]["advice"] for r in cell["per_run"]
                              if r["rules"].get(rule, {}).get("advice")))


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _mark(agg: dict[str, Any], runs: int, rule: dict[str, Any] | None = None) -> str:
    if agg["status"] == rules_mod.NA:
        # a rule of another protocol (an old matrix.json has no "applies": every rule applied)
        return "n/a" if agg.get("applies", True) or rule is None else f"n/a ({only(rule)})"
    word = SYMBOL[agg["status"]]
    return word if runs == 1 else f"{word} {agg['pass']}/{agg['pass'] + agg['fail']}"


def only(rule: dict[str, Any]) -> str:
    """'gemini only' for a rule of some protocols; '' for a rule of all (or of an old matrix.json)."""
    protos = rule.get("protocols") or PROTOCOLS
    return "" if set(PROTOCOLS) <= set(protos) else f"{', '.join(protos)} only"


def render(matrix: dict[str, Any]) -> str:
    """matrix.md: the table (one row per cell: its protocol, scenario and client; one column per rule),
    the rules, then what each cell showed."""
    rules = matrix["rules"]
    protocols = matrix.get("protocols") or sorted({_protocol(c) for c in matrix["cells"]})
    lines = ["# livelab conformance matrix", "",
             f"{len(matrix['cells'])} cells ({len(matrix['scenarios'])} scenarios x {len(matrix['clients'])} clients; "
             f"{'protocols' if len(protocols) > 1 else 'protocol'} {', '.join(protocols)}), "
             f"generated {matrix['generated']} by `lab matrix` from the run folders of "
             f"{', '.join(matrix['shards'])}. A rule is n/a where the run gave it nothing to judge, or where the "
             "lab cannot observe it (the reason is below the table).", ""]
    head = ["protocol", "scenario", "client", "for the user", "reproduces"] + [f"R{i}" for i in range(1, len(rules) + 1)]
    lines += ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for c in matrix["cells"]:
        verdict = f"{c['verdict']['pass']}/{c['verdict']['runs']}"
        row = [_protocol(c), c["scenario"], c["client"], verdict, _reproduces(c["verdict"])] + [
            _mark(c["rules"][r["name"]], c["runs"], r) for r in rules]
        lines.append("| " + " | ".join(_cell(x) for x in row) + " |")
    lines += ["", "## The rules", ""]
    for i, r in enumerate(rules, 1):
        lines.append(f"- **R{i} `{r['name']}`** ({r['source']}{'; ' + only(r) if only(r) else ''}): {r['about']}")
    lines += ["", "## Versions", ""]
    if matrix["versions"]:
        for client, pkgs in sorted(matrix["versions"].items()):
            lines.append(f"- {client}: " + ", ".join(f"{p} {v}" for p, v in sorted(pkgs.items())))
    else:
        lines.append("- not recorded (no versions.json in these folders)")
    lines += ["", "## What each cell showed", ""]
    for c in matrix["cells"]:
        links = ", ".join(f"[{r['run']}]({r['dir']})" for r in c["per_run"])
        lines += [f"### {c['scenario']} x {c['client']} ({_protocol(c)})", "", f"runs: {links}; passed for the user "
                  f"{c['verdict']['pass']} of {c['verdict']['runs']}" + _failed(c), ""]
        for i, r in enumerate(rules, 1):
            agg = c["rules"][r["name"]]
            seen = "; ".join(dict.fromkeys(agg["observed"]))
            lines.append(f"- R{i} {r['name']}: {_mark(agg, c['runs'], r)}: {_cell(seen)}")
            lines += [f"  - {_cell(a)}" for a in advice_of(c, r["name"])]
        lines.append("")
    return "\n".join(lines)


def _protocol(cell: dict[str, Any]) -> str:
    return str(cell.get("protocol") or GEMINI)      # a matrix.json from before protocols: Gemini's


def _reproduces(verdict: dict[str, Any]) -> str:
    """How many runs with the study's rows reproduced it; '-' where no run was held to the study."""
    held = verdict.get("held_to_study", 0)
    return f"{verdict.get('reproduces', 0)}/{held}" if held else "-"


def _failed(cell: dict[str, Any]) -> str:
    failed = sorted({f for r in cell["per_run"] for f in r["failed"]})
    return f" (failed: {', '.join(failed)})" if failed else ""


def write(roots: list[Path], out_dir: Path) -> tuple[Path, Path]:
    """matrix.md and matrix.json in out_dir over every run under roots."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    m = build(roots, out_dir)
    md, js = (out_dir / n for n in MATRIX_FILES)
    js.write_text(json.dumps(m, indent=2, default=str) + "\n")
    md.write_text(render(m))
    # here, not at the top: the page builds on this module's cells (aggregate)
    from lab.report import batch_page
    batch_page.write_matrix(m, out_dir)
    return md, js


def is_matrix_batch(root: Path) -> bool:
    """A folder a matrix was written into (so `lab report` on it rebuilds the matrix too)."""
    return (Path(root) / MATRIX_FILES[1]).is_file() or (Path(root) / VERSIONS_FILE).is_file()
