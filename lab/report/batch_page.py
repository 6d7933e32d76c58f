"""A batch's report.html (beside summary.md) and matrix.html (beside matrix.md): the grid of scenario x
client, the verdict and each rule as columns, every cell coloured and linking to its run's report.html.

    write_batch(batch_dir, runs)     -> batch_dir/report.html   (runs: [(run id, folder, verdict)])
    write_matrix(matrix, out_dir)    -> out_dir/matrix.html     (matrix: lab.report.conformance.build's dict)

Both grids are the matrix's cells (lab/report/conformance.py: one cell per scenario and client, a rule
FAIL in a cell when any of its runs failed it); the batch page builds them from the verdicts, which
carry the rules' outcomes. Under the grid, what to change for each failed rule and expectation
(lab.report.advice, as the verdicts hold it), and the per-scenario figures of summary.md with the
same mark on every twin input echoed back. Plain HTML and CSS: no script, opened from disk.
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from lab.protocols import GEMINI
from lab.report import conformance
from lab.report import rules as rules_mod
from lab.report import summary
from lab.report.page import RUN_PAGE, esc, outcome_class, shell, table, write as write_page
from lab.report.verdict import verdict_passed

BATCH_PAGE = "report.html"
MATRIX_PAGE = "matrix.html"


def _href(rel_dir: str, anchor: str = "") -> str:
    return esc(f"{Path(rel_dir).as_posix()}/{RUN_PAGE}" + (f"#{anchor}" if anchor else ""))


def cells_from_verdicts(runs: list[tuple[str, Path, dict[str, Any]]], page_dir: Path) -> list[dict[str, Any]]:
    """The matrix's cells from verdicts (with their rules), links relative to page_dir."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run_id, run_dir, v in runs:
        groups[(str(v.get("scenario") or "?"), str(v.get("client") or "-"))].append({
            "run": run_id, "dir": os.path.relpath(run_dir, page_dir), "verdict_pass": verdict_passed(v),
            "reproduces": v.get("reproduces"), "failed": v.get("failed") or [], "rules": v.get("rules") or {},
            "verdict": v})
    cells = []
    for (scenario, client), rs in sorted(groups.items()):
        cells.append({"scenario": scenario, "client": client, "runs": len(rs),
                      "verdict": conformance.verdict_counts(rs),
                      "rules": {n: conformance.aggregate([rules_mod.Outcome(**_outcome_row(r, n)) if n in r["rules"]
                                                         else rules_mod.Outcome(rules_mod.NA, "not judged")
                                                         for r in rs]) for n in rules_mod.RULES},
                      "per_run": rs})
    return cells


def _outcome_row(r: dict[str, Any], name: str) -> dict[str, Any]:
    o = r["rules"].get(name) or {}
    return {k: o.get(k) for k in ("status", "observed", "figure")}


def grid(cells: list[dict[str, Any]]) -> str:
    """The coloured grid: a row per cell, the verdict and each rule as columns, each cell a link to a run."""
    names = list(rules_mod.RULES)
    head = ["protocol", "scenario", "client", "for the user", "reproduces"] + [f"<span title=\"{esc(n)}\">R{i}</span>" for i, n in enumerate(names, 1)]
    rows, cls = [], []
    for c in cells:
        runs = c["per_run"]
        vp, vn = c["verdict"]["pass"], c["verdict"]["runs"]
        first_bad = next((r for r in runs if not r["verdict_pass"]), runs[0])
        row = [esc(c.get("protocol") or GEMINI), esc(c["scenario"]), esc(c["client"]),
               f"<a class=\"run-link\" href=\"{_href(first_bad['dir'], 'outcomes')}\">{vp}/{vn}</a>" + _others(runs)]
        rep, held = c["verdict"].get("reproduces", 0), c["verdict"].get("held_to_study", 0)
        row.append(f"{rep}/{held}" if held else "-")
        k = ["", "", "", "pass" if vp == vn else "fail", "" if not held else "pass" if rep == held else "fail"]
        for name in names:
            agg = c["rules"][name]
            pick = next((r for r in runs if _outcome_row(r, name)["status"] == agg["status"]), runs[0])
            seen = "; ".join(dict.fromkeys(str(o) for o in agg["observed"]))
            word = {"pass": "pass", "fail": "FAIL", "n/a": "n/a"}[agg["status"]]
            if not agg.get("applies", True):       # a rule of another protocol
                word += f" ({', '.join(rules_mod.RULES[name].protocols)} only)"
            if c["runs"] > 1 and agg["status"] != rules_mod.NA:
                word += f" {agg['pass']}/{agg['pass'] + agg['fail']}"
            row.append(f"<a class=\"run-link\" href=\"{_href(pick['dir'], 'rules')}\" title=\"{esc(name)}: {esc(seen)}\">"
                       f"{esc(word)}</a>")
            k.append(outcome_class(agg["status"]))
        rows.append(row)
        cls.append(k)
    legend = "".join(f"<li><b>R{i}</b> <code>{esc(r.name)}</code> ({esc(r.source)}): {esc(r.about)}</li>"
                     for i, r in enumerate(rules_mod.RULES.values(), 1))
    return (table(head, rows, cls) + "<p class=\"muted\">Each cell opens its run's report.html; hover a rule's "
            "cell for what its runs showed. A rule is n/a where the run gave it nothing to judge.</p>"
            f"<details><summary>The rules</summary><ul>{legend}</ul></details>")


def _others(runs: list[dict[str, Any]]) -> str:
    if len(runs) < 2:
        return ""
    return " <span class=\"muted\">" + " ".join(f"<a href=\"{_href(r['dir'])}\">{i}</a>" for i, r in enumerate(runs, 1)) + "</span>"


def what_to_change(cells: list[dict[str, Any]], verdicts: dict[str, dict[str, Any]]) -> str:
    """Each failed user outcome, reproduction row and rule with its advice, cell by cell."""
    out = []
    for c in cells:
        items = []
        for r in c["per_run"]:
            v = verdicts.get(r["run"]) or {}
            link = f"<a href=\"{_href(r['dir'])}\">{esc(r['run'])}</a>"
            for name, o in (v.get("outcomes") or {}).items():
                if o.get("status") == rules_mod.FAIL:
                    items.append(f"<li>{link}, user outcome <code>{esc(name)}</code><div class=\"advice\">"
                                 f"{esc(o.get('advice') or o.get('observed'))}</div></li>")
            for row in v.get("expectations") or []:
                if row.get("held") is False:
                    items.append(f"<li>{link}, reproduction row <code>{esc(row['name'])}</code><div class=\"advice\">"
                                 f"{esc(row.get('advice') or row.get('observed'))}</div></li>")
            if v.get("advice"):
                items.append(f"<li>{link}<div class=\"advice\">{esc(v['advice'])}</div></li>")
            for name, o in (r.get("rules") or {}).items():
                if o.get("status") == rules_mod.FAIL:
                    items.append(f"<li>{link}, rule <code>{esc(name)}</code><div class=\"advice\">"
                                 f"{esc(o.get('advice') or o.get('observed'))}</div></li>")
        if items:
            out.append(f"<h3>{esc(c['scenario'])} x {esc(c['client'])}</h3><ul>{''.join(items)}</ul>")
    return "".join(out) or "<p>Nothing failed.</p>"


def figures(verdicts: list[dict[str, Any]]) -> str:
    """summary.md's per-scenario table, every twin input marked as there."""
    keys = ("scenario", "client", "runs", "passed", "resumes", "detection", "setup", "audio", "bookings", "told", "truth")
    head = ["scenario", "client", "runs", "passed", summary.label("resume attempts (codes)", "refusal_codes"),
            summary.label("detection", "detection_ms"), summary.label("loss → setupComplete", "loss_to_setup_ms"),
            summary.label("loss → first audio", "loss_to_first_audio_ms"), summary.label("bookings per run", "bookings"),
            "the user was told", "backend truth"]
    rows = [[esc(r[k]) for k in keys] for r in summary.group_rows(verdicts)]
    return f"<p class=\"muted\">{esc(summary.legend())}</p>" + table([esc(h) for h in head], rows)


def write_batch(batch_dir: Path | str, runs: list[tuple[str, Path, dict[str, Any]]], title: str) -> Path:
    batch_dir = Path(batch_dir)
    cells = cells_from_verdicts(runs, batch_dir)
    verdicts = {run_id: v for run_id, _, v in runs}
    npass = sum(1 for _, _, v in runs if verdict_passed(v))
    body = [f"<h1>{esc(title)}</h1>",
            f"<p id=\"counts\">{len(runs)} runs, {npass} passed for the user. "
            "<a href=\"summary.md\">summary.md</a></p>",
            "<h2>Scenario x client</h2>", grid(cells),
            "<h2>What to change</h2>", what_to_change(cells, verdicts),
            "<h2>Figures</h2>", figures([v for _, _, v in runs])]
    return write_page(batch_dir / BATCH_PAGE, shell(title, "\n".join(body)))


def write_matrix(m: dict[str, Any], out_dir: Path | str) -> Path:
    out_dir = Path(out_dir)
    verdicts = {r["run"]: summary.load_verdict(out_dir / r["dir"]) for c in m["cells"] for r in c["per_run"]}
    versions = "".join(f"<li>{esc(c)}: " + esc(", ".join(f"{p} {v}" for p, v in sorted(pk.items()))) + "</li>"
                       for c, pk in sorted((m.get("versions") or {}).items())) or "<li>not recorded</li>"
    title = "livelab conformance matrix"
    body = [f"<h1>{title}</h1>",
            f"<p>{len(m['cells'])} cells ({len(m['scenarios'])} scenarios x {len(m['clients'])} clients), generated "
            f"{esc(m.get('generated'))} from {esc(', '.join(m.get('shards') or []))}. "
            "<a href=\"matrix.md\">matrix.md</a> <a href=\"matrix.json\">matrix.json</a></p>",
            grid(m["cells"]),
            "<h2>What to change</h2>", what_to_change(m["cells"], verdicts),
            "<h2>Figures</h2>", figures(list(verdicts.values())),
            f"<h2>Versions</h2><ul>{versions}</ul>"]
    return write_page(out_dir / MATRIX_PAGE, shell(title, "\n".join(body)))
