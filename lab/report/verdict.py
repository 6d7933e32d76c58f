"""One run's verdict: its metrics and each expectation of its scenario, held or failed.

`build_run(run_dir)` reads `events.jsonl` (and `twin.jsonl`, `run.json` when present), computes
the metrics (`lab.report.metrics`), evaluates the scenario's `expect` dict from run.json, writes
`verdict.json` and `timeline.png` next to them and returns the verdict. It is a pure function of
the folder: running it again on old results gives the same verdict.

Supported expectations (anything else is listed as "not checked" and does not decide the verdict):

| key | expected | observed |
| --- | --- | --- |
| bookings | int or [lo, hi] | backend commits |
| told_truth | true / false / "never" | the status answer against the backend |
| all_resumes_refused | bool | no attempt accepted and at least one refused |
| refusal_code | int | every refusal carried this close code |
| resumed | bool | an attempt was accepted |
| resumed_after_close_ms | [lo, hi] | close of the old connection -> resumed setupComplete |
| max_loss_to_first_audio_ms | number | loss -> first model audio after recovery (absent = failed) |
| fallback | bool | a new session was opened by the fallback |
| reissued_call | bool | the model issued the tool call again under a new id |
| <metric name> | value or [lo, hi] | that metric (e.g. duplicate_bookings: 0, detection_ms: [0, 2500]) |
| max_<metric> / min_<metric> | number | bound on that metric |

A run passes when every checked expectation held and its record is complete (run.end present, its
status not an error).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.events import Event, read_events
from lab.report import metrics as metrics_mod

RUN_FILES = ("events.jsonl", "run.json")
META_FIELDS = ("scenario", "client", "topology", "endpoint", "duration", "n", "index", "started", "model")


def is_run_dir(path: Path) -> bool:
    return any((path / f).is_file() for f in RUN_FILES)


def load_meta(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    p = run_dir / "run.json"
    if not p.is_file():
        return {}, "no run.json"
    try:
        meta = json.loads(p.read_text())
        return (meta if isinstance(meta, dict) else {}), None
    except (json.JSONDecodeError, OSError) as e:
        return {}, f"run.json unreadable ({e.__class__.__name__})"


def load_run(run_dir: Path) -> tuple[list[Event], dict[str, Any], list[Event] | None, list[str]]:
    notes: list[str] = []
    meta, note = load_meta(run_dir)
    if note:
        notes.append(note)
    ev_path = run_dir / "events.jsonl"
    events = read_events(ev_path) if ev_path.is_file() else []
    if not ev_path.is_file():
        notes.append("no events.jsonl")
    twin_path = run_dir / "twin.jsonl"
    twin = read_events(twin_path) if twin_path.is_file() else None
    return events, meta, twin, notes


def _in_range(obs: Any, rng: Any) -> bool:
    if obs is None:
        return False
    if isinstance(rng, (list, tuple)) and len(rng) == 2:
        lo, hi = rng
        return (lo is None or obs >= lo) and (hi is None or obs <= hi)
    return obs == rng


def _row(name: str, expected: Any, observed: Any, held: bool | None, note: str | None = None) -> dict[str, Any]:
    row = {"name": name, "expected": expected, "observed": observed, "held": held}
    if note:
        row["note"] = note
    return row


def evaluate(expect: dict[str, Any], m: dict[str, Any]) -> list[dict[str, Any]]:
    """Each expectation as {name, expected, observed, held, note?}; held None = not checked."""
    rows: list[dict[str, Any]] = []
    for name, exp in (expect or {}).items():
        if name == "status_question":
            continue  # names the question, not an expectation
        if name == "bookings":
            rows.append(_row(name, exp, m["bookings"], _in_range(m["bookings"], exp)))
        elif name == "told_truth":
            want = "never" if exp in (None, "never") else bool(exp)
            got = "never" if m["told_truth"] is None else bool(m["told_truth"])
            rows.append(_row(name, want, got, want == got, f"told {m['told']}, truth {m['truth_at_answer'] or m['truth_final']}"))
        elif name == "all_resumes_refused":
            got = m["accepted"] == 0 and m["refused"] > 0
            rows.append(_row(name, bool(exp), got, got == bool(exp),
                             f"{m['refused']} of {m['attempts']} refused, {m['accepted']} accepted"))
        elif name == "refusal_code":
            codes = sorted(m["refusal_codes"])
            held = bool(codes) and all(c == str(exp) for c in codes)
            rows.append(_row(name, exp, [int(c) if c.lstrip("-").isdigit() else c for c in codes], held,
                             None if codes else "no refusal seen"))
        elif name == "resumed":
            rows.append(_row(name, bool(exp), m["resumed"], m["resumed"] == bool(exp)))
        elif name == "resumed_after_close_ms":
            obs = m["resumed_after_close_ms"]
            rows.append(_row(name, exp, obs, _in_range(obs, exp), None if obs is not None else "no resume after a close"))
        elif name == "max_loss_to_first_audio_ms":
            obs = m["loss_to_first_audio_ms"]
            rows.append(_row(name, exp, obs, obs is not None and obs <= exp, None if obs is not None else "no audio after recovery"))
        elif name == "fallback":
            rows.append(_row(name, bool(exp), m["fallback"], m["fallback"] == bool(exp)))
        elif name == "reissued_call":
            got = m["tool_calls_reissued"] > 0
            rows.append(_row(name, bool(exp), got, got == bool(exp), f"{m['tool_calls_reissued']} re-issued"))
        elif name in m and not isinstance(m[name], (dict, list)):
            rows.append(_row(name, exp, m[name], _in_range(m[name], exp)))
        elif name[:4] in ("max_", "min_") and name[4:] in m and not isinstance(m[name[4:]], (dict, list)):
            obs = m[name[4:]]
            held = obs is not None and (obs <= exp if name.startswith("max_") else obs >= exp)
            rows.append(_row(name, exp, obs, held))
        else:
            rows.append(_row(name, exp, None, None, "not checked: unknown expectation"))
    return rows


def verdict_of(events: list[Event], meta: dict[str, Any], twin: list[Event] | None = None,
               run_id: str = "", notes: list[str] | None = None) -> dict[str, Any]:
    """The verdict dict from already loaded records (pure; build_run adds the files)."""
    notes = list(notes or [])
    m = metrics_mod.compute(events, meta, twin)
    start = next((e for e in events if e.kind == "run.start"), None)
    info = {k: meta.get(k) for k in META_FIELDS if meta.get(k) is not None}
    if isinstance(info.get("scenario"), dict):  # the orchestrator stores the whole scenario
        info["scenario"] = info["scenario"].get("name") or "?"
    for k in ("scenario", "client", "endpoint", "topology"):
        if k not in info and start is not None and start.get(k) is not None:
            info[k] = start.get(k)
    rows = evaluate(meta.get("expect") or {}, m)
    checked = [r for r in rows if r["held"] is not None]
    if not events:
        notes.append("empty record")
    if not m["complete"]:
        notes.append("record truncated: no run.end")
    elif str(m["status"]).lower() in ("error", "failed", "aborted", "interrupted"):
        notes.append(f"run ended with status {m['status']}" + (f": {m['error']}" if m["error"] else ""))
    if not rows:
        notes.append("no expectations in run.json")
    ok_run = bool(events) and m["complete"] and str(m["status"]).lower() not in ("error", "failed", "aborted", "interrupted")
    return {
        "run_id": run_id,
        **info,
        "pass": ok_run and all(r["held"] for r in checked),
        "passed": ok_run and all(r["held"] for r in checked),  # alias read by lab.run
        "expectations": rows,
        "failed": [r["name"] for r in checked if not r["held"]],
        "notes": notes,
        "metrics": m,
    }


def build_run(run_dir: Path | str, timeline: bool = True, write: bool = True) -> dict[str, Any]:
    """Verdict of one run folder; writes verdict.json and (by default) timeline.png."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LabError(f"no such run folder: {run_dir}")
    if not is_run_dir(run_dir):
        raise LabError(f"not a run folder (no events.jsonl or run.json): {run_dir}")
    events, meta, twin, notes = load_run(run_dir)
    v = verdict_of(events, meta, twin, run_id=run_dir.name, notes=notes)
    if timeline:
        from lab.report.timeline import render
        try:
            render(events, run_dir / "timeline.png", twin=twin, title=_title(v))
            v["timeline"] = "timeline.png"
        except Exception as e:  # a picture must never cost the verdict
            v["notes"].append(f"timeline not drawn: {e.__class__.__name__}: {e}")
    if write:
        tmp = run_dir / "verdict.json.tmp"
        tmp.write_text(json.dumps(v, indent=2, default=str) + "\n")
        os.replace(tmp, run_dir / "verdict.json")
    v["checks"] = v["expectations"]  # the name lab.run prints from (not written twice to the file)
    return v


def _title(v: dict[str, Any]) -> str:
    parts = [v.get("run_id") or "", v.get("scenario") or "", v.get("client") or "", v.get("endpoint") or ""]
    return "  ".join(p for p in parts if p) + ("  PASS" if v["pass"] else "  FAIL")
