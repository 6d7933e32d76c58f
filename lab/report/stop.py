"""stop.md: the stop study's table (001) over a batch's runs that hold a stop.

Per scenario and client, in the shape of the study's findings: toolCallCancellation count (the
study: 0 in 41 sessions), `interrupted` after the stop, calls after the stop (re-issued or late),
bookings and bookings committed after the stop, and what the model claimed against what the
backend had done at that moment ("claimed booked before the commit"), then every run's lines after
the stop with that judgement. Reads only the verdicts' metrics (lab.report.metrics.stop_metrics).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from lab.report import claims
from lab.report.summary import _cell, _counts, fmt_range, load_verdict, runs_under
from lab.report.verdict import verdict_passed


def judge(claim: str, backend: str) -> str:
    """One statement against the backend at that moment, in the study's words."""
    if claim == claims.UNKNOWN:
        return "says nothing about the booking"
    if claim == backend:
        return "true"
    if claim == claims.BOOKED and backend == claims.IN_PROGRESS:
        return "claimed booked before the commit"
    if claim == claims.BOOKED:
        return "claimed booked, nothing was booked"
    if claim == claims.NOT_BOOKED and backend == claims.BOOKED:
        return "claimed not booked, the backend had booked"
    return f"claimed {claim}, the backend was {backend}"


def has_stop(v: dict[str, Any]) -> bool:
    return v["metrics"].get("stop_ms") is not None


def _row(scen: str, client: str, vs: list[dict[str, Any]]) -> str:
    ms = [v["metrics"] for v in vs]
    judged = Counter(judge(d["claim"], d["backend"]) for m in ms for d in m["stop_statements"] or []
                     if d["who"] == "model" and d["claim"] != claims.UNKNOWN)
    told = sum(1 for m in ms if m["told_truth_after_stop"])
    failures = Counter(", ".join(m["stop_failures"]) or "none" for m in ms)
    cells = [scen, client, f"{sum(1 for v in vs if verdict_passed(v))} of {len(vs)}",
             str(sum(m["cancellations"] for m in ms)),
             fmt_range(m["interrupted_after_stop_ms"] for m in ms)
             + (f"; none in {sum(1 for m in ms if m['interrupted_after_stop_ms'] is None)}"
                if any(m["interrupted_after_stop_ms"] is None for m in ms) else ""),
             f"{sum(1 for m in ms if m['calls_after_stop'])} of {len(ms)}"
             + (f" ({fmt_range(m['first_call_after_stop_ms'] for m in ms)} ms)" if any(m["calls_after_stop"] for m in ms)
                else ""),
             fmt_range(m["bookings"] for m in ms), fmt_range(m["booked_after_stop"] for m in ms),
             _counts(judged), f"{told} of {len(ms)}", _counts(failures)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render(verdicts: list[dict[str, Any]], title: str) -> str:
    """The markdown; '' when no run holds a stop."""
    vs = [v for v in verdicts if has_stop(v)]
    if not vs:
        return ""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in vs:
        groups.setdefault((v.get("scenario") or "?", v.get("client") or "-"), []).append(v)
    lines = [f"# {title}", "",
             "The stop study's table (seed 001). Offsets in ms after the user's stop line was sent (text) or "
             "began (speech). The backend column is the ground truth at the moment each sentence began.", "",
             "| scenario | client | passed | cancellations | interrupted after the stop | calls after the stop | "
             "bookings | booked after the stop | the model's claims against the backend | the user told the truth "
             "| failures |",
             "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [_row(s, c, g) for (s, c), g in sorted(groups.items())]
    lines += ["", "## After the stop, run by run", ""]
    for v in vs:
        m = v["metrics"]
        lines.append(f"- **{_cell(v.get('run_id', '?'))}** ({v.get('client') or '-'}): "
                     f"{m['bookings']} booking(s), {m['calls_after_stop']} call(s) after the stop")
        for d in m["stop_statements"] or []:
            lines.append(f"  - +{d['after_stop_ms']:.0f} ms {d['who']}: \u201c{_cell(d['text'])}\u201d \u2014 "
                         f"{d['claim']}, backend {d['backend']}: {judge(d['claim'], d['backend'])}")
    lines.append("")
    return "\n".join(lines)


def write(batch_dir: Path | str) -> Path | None:
    """Write batch_dir/stop.md when some run under it holds a stop; returns its path (None: no stop)."""
    batch_dir = Path(batch_dir)
    verdicts = []
    for r in runs_under(batch_dir):
        v = load_verdict(r)
        v["run_id"] = str(r.relative_to(batch_dir)) if r != batch_dir else r.name
        verdicts.append(v)
    text = render(verdicts, f"livelab stop table: {batch_dir.name}")
    if not text:
        return None
    out = batch_dir / "stop.md"
    out.write_text(text)
    return out
