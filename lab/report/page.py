"""What every HTML page of the report shares: escaping, the stylesheet, the page shell, the outcome colours.

The pages (run_page.py: a run's report.html; batch_page.py: a batch's report.html and matrix.html)
are self-contained files opened from disk: no CDN, no fetch, every link relative to the page.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

RUN_PAGE = "report.html"    # a run's page, in its folder (lab/report/run_page.py); a batch's has the same name

# an outcome word -> its CSS class (lab.report.rules' words, a verdict's pass/FAIL)
OUTCOME_CLASS = {"pass": "pass", "fail": "fail", "n/a": "na", "FAIL": "fail", "PASS": "pass", "none": "na"}

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.2em 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ccc; padding: 3px 7px;
  vertical-align: top; text-align: left; } th { background: #f4f4f4; }
.pass { background: #d9f2d9; } .fail { background: #f8d0d0; } .na { background: #eee; color: #666; }
td.pass a, td.fail a, td.na a { color: inherit; text-decoration: none; display: block; }
.verdict { font-size: 1.3em; padding: .3em .8em; display: inline-block; border-radius: 4px; }
.advice { margin: .2em 0 .4em 1em; padding: .3em .6em; border-left: 3px solid #c33; background: #fff6f6; }
.mark { color: #a60; font-weight: bold; } .muted { color: #777; } code { background: #f4f4f4; padding: 0 3px; }
.cols { display: flex; gap: 2em; align-items: flex-start; } .cols > div { flex: 1; min-width: 0; }
.who { font-weight: bold; white-space: nowrap; } .t { color: #777; white-space: nowrap; font-variant-numeric: tabular-nums; }
tr.user td { background: #f1f6ff; } tr.model td { background: #f6fff1; } tr.tool td { background: #fffbea; }
"""


def esc(s: Any) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def outcome_class(word: Any) -> str:
    return OUTCOME_CLASS.get(str(word), "na")


def shell(title: str, body: str, head: str = "") -> str:
    """A whole page: the title, the stylesheet, anything for the head (a script), the body."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style>{head}</head><body>\n{body}\n</body></html>\n")


def table(head: list[str], rows: list[list[str]], cls: list[list[str]] | None = None) -> str:
    """An HTML table; cells are HTML already (escape them first), `cls` the CSS class per cell."""
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cells = []
        for j, c in enumerate(row):
            k = cls[i][j] if cls and cls[i][j] else ""
            cells.append(f"<td class=\"{k}\">{c}</td>" if k else f"<td>{c}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out + ["</table>"])


def write(path: Path | str, text: str) -> Path:
    """Write a page atomically (a reader never sees half a page)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)
    return p
