"""One run's verdict: its metrics and each expectation of its scenario, held or failed.

`build_run(run_dir)` reads `events.jsonl` (and `twin.jsonl`, `run.json` when present), computes
the metrics (`lab.report.metrics`), evaluates the scenario's `expect` dict from run.json, judges the
conformance rules (`lab.report.rules`, each FAIL with its advice: `lab.report.advice`), writes
`verdict.json`, `timeline.png` and `report.html` (lab/report/run_page.py) next to them and returns the verdict. It is a pure function of
the folder: running it again on old results gives the same verdict.

The expectations and their checkers are defined in `lab.expectations` (the scenario loader refuses
any other name); each row of the verdict says what was expected, observed, whether it held, and the
`origin` of what it read (a twin input echoed back, or emerged from the run).

Two kinds of judgement, named apart (docs/truth.md):
- **user outcomes** (`outcomes`, lab.report.outcomes): what the agent's user got, for every client: each
  side effect once, the truth when it was said, a working conversation again, owed results delivered,
  no invented turn, no zombie connection. `pass` is these: a run passes when its record is complete
  (run.end present, its status not an error), at least one outcome was judged ("no checks" is never a
  pass) and none failed. Each FAIL carries advice and the conformance rules behind it that failed.
- **reproduction rows** (`expectations`, each with `kind: reproduction`): the scenario's `expect:`
  for the client they were recorded for (the study's client, or a client the scenario names).
  `reproduces` is whether they all held (None: no row for this client).

`held_to` says what the run is held to: `reproduction` for the scenario's own (the study's) client,
else `user`; `met` is that one (`verdict_met`), what `lab run` exits on. `reasons` are the notes that
fail a run outside its rows (a truncated record, an error status, no checks): `headline()` says them.
A run that ended (killed, or stopped) before its client wrote anything is `interrupted`: nothing is
judged, as nothing was tried. Older verdicts carried the outcome twice, as `pass` and `passed`;
`verdict_passed` reads either, and a verdict of an older `format` is rebuilt.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lab import expectations, metric_names
from lab.conversation.semantics import JSON_FILE
from lab.errors import LabError
from lab.events import EVENT_KINDS, Event, read_events
from lab.live import errors as live_errors
from lab.report import advice as advice_mod
from lab.report import arguments
from lab.report import metrics as metrics_mod
from lab.report import outcomes as outcomes_mod
from lab.report import rules as rules_mod
from lab.protocols import GEMINI

RUN_FILES = ("events.jsonl", "run.json")
VERDICT_FORMAT = 4      # 2: one `pass` field, "no checks" fails, rows carry origin; 3: rules and advice;
                        # 4: `pass` from the user outcomes, the expectations as reproduction rows
USER, REPRODUCTION = "user", "reproduction"     # the two kinds of judgement a verdict row is
META_FIELDS = ("scenario", "client", "topology", "endpoint", "protocol", "duration", "n", "index", "started", "model")


def protocol_of(v: dict[str, Any]) -> str:
    """The realtime protocol a verdict's run spoke (lab.protocols); a run from before the option, Gemini's."""
    return str(v.get("protocol") or GEMINI)


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


def load_conversation(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's conversation.json (the conversation the run played), None when it has none or it
    cannot be read: the report then reads the tools from twin.jsonl or as the booking's
    (lab.report.run_tools)."""
    p = run_dir / JSON_FILE
    try:
        d = json.loads(p.read_text()) if p.is_file() else None
    except (json.JSONDecodeError, OSError):
        return None
    return d if isinstance(d, dict) else None


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


def verdict_passed(v: dict[str, Any]) -> bool:
    """A verdict's outcome, from `pass` or the `passed` of verdicts of the first format."""
    return bool(v.get("pass", v.get("passed")))


def lab_stopped(events: list[Event]) -> str | None:
    """The lab's own configuration error a run's record carries (the twin refused a setup whose
    client lacks the conversation's tools), as lab.live.errors reads it, else None."""
    stop = next((s for s in map(live_errors.live_stop, events) if s is not None and s.kind == live_errors.LAB), None)
    return stop.detail if stop is not None else None


def unasked(rows: list[dict[str, Any]], events: list[Event]) -> list[dict[str, Any]]:
    """The rows left unjudged because the client could not be asked what the scenario scripts: a
    failed row whose figure is absent and can only exist after a client action (resume, close) that
    an app refused to be made to do (step.error unaskable). A figure the app did produce on its own
    is judged as usual."""
    refused = {e.get("unaskable") for e in events if e.kind == "step.error" and e.get("unaskable")}
    if not refused:
        return rows
    out = []
    for r in rows:
        exp = expectations.resolve(r["name"])
        needs = {metric_names.needs_action(n) for n in (exp.reads if exp is not None else ())} & refused
        if r["held"] is False and r["observed"] in (None, [], {}) and needs:
            r = {**r, "held": None, "note": f"not judged: the scenario asks the client to {' and '.join(sorted(needs))}, "
                                            "which the lab cannot make an app do, and the app did not on its own"}
        out.append(r)
    return out


def verdict_of(events: list[Event], meta: dict[str, Any], twin: list[Event] | None = None,
               run_id: str = "", notes: list[str] | None = None,
               conversation: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict dict from already loaded records (pure; build_run adds the files)."""
    notes = list(notes or [])
    m = metrics_mod.compute(events, meta, twin, conversation)
    start = next((e for e in events if e.kind == "run.start"), None)
    info = {k: meta.get(k) for k in META_FIELDS if meta.get(k) is not None}
    if isinstance(info.get("scenario"), dict):  # the orchestrator stores the whole scenario
        info["scenario"] = info["scenario"].get("name") or "?"
    for k in ("scenario", "client", "endpoint", "topology"):
        if k not in info and start is not None and start.get(k) is not None:
            info[k] = start.get(k)
    bad_status = str(m["status"]).lower() in ("error", "failed", "aborted", "interrupted")
    # the client never wrote a line and the run did not end well: nothing was tried, nothing to judge
    interrupted = not client_started(events, twin) and (not m["complete"] or bad_status)
    stopped = lab_stopped(events)       # the lab's own configuration stopped it: nothing to judge
    rows = [] if interrupted or stopped else unasked(expectations.evaluate(meta.get("expect") or {}, m), events)
    for r in rows:
        r["kind"] = REPRODUCTION
    checked = [r for r in rows if r["held"] is not None]
    record, rules = ((None, {}) if interrupted or stopped
                     else judged_record(events, twin, meta, m, notes, conversation))
    judged = outcome_rows(record, rules, m, notes) if record is not None else {}
    users = [n for n, o in judged.items() if o["status"] != rules_mod.NA]
    reasons = []
    if not events:
        reasons.append("empty record")
    if not m["complete"]:
        reasons.append("record truncated: no run.end")
    elif bad_status:
        reasons.append(f"run ended with status {m['status']}" + (f": {m['error']}" if m["error"] else ""))
    if not users and not interrupted and not stopped:
        reasons.append("no checks")
    if interrupted:
        reasons.append("interrupted before the client started: not judged")
    if stopped:
        reasons.append(f"not judged: {stopped}")
    notes += reasons
    for r in rows:
        a = advice_mod.for_expectation(r, m)
        if a is not None:
            r["advice"] = a.text()
    ok_run = bool(events) and m["complete"] and not bad_status
    passed = ok_run and bool(users) and all(judged[n]["status"] == rules_mod.PASS for n in users)
    reproduces = (ok_run and all(r["held"] for r in checked)) if checked else None
    study = meta["held_to"] == REPRODUCTION if meta.get("held_to") else _legacy_study(meta)
    held_to = REPRODUCTION if reproduces is not None and study else USER
    v = {
        "run_id": run_id,
        "format": VERDICT_FORMAT,
        **info,
        "pass": passed,
        "reproduces": reproduces,
        "held_to": held_to,
        "met": reproduces if held_to == REPRODUCTION else passed,
        "interrupted": interrupted,
        **({"lab_stopped": stopped} if stopped else {}),
        "reasons": reasons,
        "outcomes": judged,
        "expectations": rows,
        "failed": [n for n in users if judged[n]["status"] == rules_mod.FAIL],
        "not_reproduced": [r["name"] for r in checked if not r["held"]],
        "notes": notes,
        "defaulted_args": arguments.defaulted_args(twin),
        "rules": rule_rows(rules, m),
        "metrics": m,
    }
    run_advice = advice_mod.for_run(v)
    if run_advice is not None:
        v["advice"] = run_advice.text()
    return v


def _legacy_study(meta: dict[str, Any]) -> bool:
    """A run.json written before user outcomes: its client was the scenario's own, when it names one."""
    scn = meta.get("scenario") if isinstance(meta.get("scenario"), dict) else {}
    return bool(scn.get("client")) and meta.get("client") == scn.get("client") and not meta.get("client_cmd")


def judged_record(events: list[Event], twin: list[Event] | None, meta: dict[str, Any], m: dict[str, Any],
                  notes: list[str], conversation: dict[str, Any] | None = None
                  ) -> tuple[rules_mod.Record | None, dict[str, rules_mod.Outcome]]:
    """The run's record as the rules and outcomes read it, and every rule's outcome; (None, {}) with a
    note when an odd record cannot be read (a rule must not cost the verdict)."""
    try:
        record = rules_mod.Record(events, twin, meta, m, conversation=conversation)
        return record, rules_mod.judge_all(record)
    except Exception as e:
        notes.append(f"rules not judged: {e.__class__.__name__}: {e}")
        return None, {}


def outcome_rows(record: rules_mod.Record, rules: dict[str, rules_mod.Outcome], m: dict[str, Any],
                 notes: list[str]) -> dict[str, dict[str, Any]]:
    """Every user outcome of the run (lab.report.outcomes), a FAIL with its advice and the failed rules behind it."""
    try:
        judged = outcomes_mod.judge_all(record)
    except Exception as e:  # an outcome that cannot read an odd record must not cost the verdict
        notes.append(f"user outcomes not judged: {e.__class__.__name__}: {e}")
        return {}
    out = {}
    for name, o in judged.items():
        row = {**o.to_json(), "kind": USER, "about": outcomes_mod.OUTCOMES[name].about}
        if o.status == rules_mod.FAIL:
            behind = [n for n in outcomes_mod.BEHIND.get(name, ()) if n in rules and rules[n].status == rules_mod.FAIL]
            row["advice"] = advice_mod.for_outcome(name, o, m, behind).text()
            row["rules_failed"] = behind
        out[name] = row
    return out


def rule_rows(rules: dict[str, rules_mod.Outcome], m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every conformance rule's outcome for the run, a FAIL with its advice: the how-to behind the user
    outcomes (the rules do not decide the verdict's pass)."""
    out = {}
    for name, o in rules.items():
        row = o.to_json()
        a = advice_mod.for_rule(name, o, m)
        if a is not None:
            row["advice"] = a.text()
        out[name] = row
    return out


def client_started(events: list[Event], twin: list[Event] | None = None) -> bool:
    """Whether the client under test did anything: an event the client (or the backend it calls)
    writes, or a connection the twin saw."""
    return (any(EVENT_KINDS[e.kind].writer in ("client", "backend") for e in events if e.kind in EVENT_KINDS)
            or any(e.kind == "twin.conn.open" for e in twin or ()))


def verdict_met(v: dict[str, Any]) -> bool:
    """Whether the run did what it is held to: the study's client reproducing the study, any other
    client its user outcomes (`pass`). What `lab run` exits on; a verdict before format 4 has `pass` only."""
    return bool(v["met"]) if "met" in v else verdict_passed(v)


def outcome(v: dict[str, Any]) -> str:
    """PASS, FAIL or INTERRUPTED (ended before its client started: not judged), for the user."""
    return "PASS" if verdict_passed(v) else "INTERRUPTED" if v.get("interrupted") else "FAIL"


def reproduction_word(v: dict[str, Any]) -> str | None:
    """'reproduces the study' / 'does not reproduce the study', for a verdict with reproduction rows."""
    if v.get("reproduces") is None:
        return None
    return "reproduces the study" if v["reproduces"] else "does not reproduce the study"


def headline(v: dict[str, Any]) -> str:
    """The user's outcome with the reasons outside the rows (a failed row is said by itself), and for
    a run with reproduction rows whether it reproduces the study."""
    word = outcome(v)
    reasons = [r for r in v.get("reasons") or [] if not (v.get("interrupted") and r.startswith("interrupted"))]
    head = word if word == "PASS" else word + (f" ({'; '.join(reasons)})" if reasons else "")
    if "outcomes" in v and word != "INTERRUPTED":
        head = f"{head} for the user"
        rep = reproduction_word(v)
        if rep:
            head += f"; {rep}" + (" (what this run is held to: the study's own client)"
                                  if v.get("held_to") == REPRODUCTION else "")
    return head


def build_run(run_dir: Path | str, timeline: bool = True, write: bool = True, page: bool = True,
              batch: Path | str | None = None) -> dict[str, Any]:
    """Verdict of one run folder; writes verdict.json and (by default) timeline.png and report.html
    (`page=False`: the picture without the page, which `lab bench report` weighs against each other).
    `batch`: the batch folder holding the run, where its page finds the batch's one copy of plotly's
    script; None for a run folder alone, whose page carries the script inline."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LabError(f"no such run folder: {run_dir}")
    if not is_run_dir(run_dir):
        raise LabError(f"not a run folder (no events.jsonl or run.json): {run_dir}")
    events, meta, twin, notes = load_run(run_dir)
    v = verdict_of(events, meta, twin, run_id=run_dir.name, notes=notes, conversation=load_conversation(run_dir))
    if timeline:
        try:
            # lazy: matplotlib loads only when a picture is drawn; inside the try, as an image without
            # matplotlib (the Kubernetes shard's) must not cost the verdict either
            from lab.report.timeline import render
            render(events, run_dir / "timeline.png", twin=twin, title=_title(v))
            v["timeline"] = "timeline.png"
        except Exception as e:  # a picture must never cost the verdict
            v["notes"].append(f"timeline not drawn: {e.__class__.__name__}: {e}")
    if timeline and write and page:
        try:
            # lazy, as the timeline: plotly loads only when a page is written
            from lab.report import run_page
            run_page.write(run_dir, v, events, twin, batch_dir=batch)
            v["report"] = run_page.PAGE
        except Exception as e:  # a page must never cost the verdict either
            v["notes"].append(f"report.html not written: {e.__class__.__name__}: {e}")
    if write:
        tmp = run_dir / "verdict.json.tmp"
        tmp.write_text(json.dumps(v, indent=2, default=str) + "\n")
        os.replace(tmp, run_dir / "verdict.json")
    v["checks"] = v["expectations"]  # the name lab.run prints from (not written twice to the file)
    return v


def _title(v: dict[str, Any]) -> str:
    parts = [v.get("run_id") or "", v.get("scenario") or "", v.get("client") or "", v.get("endpoint") or "",
             protocol_of(v)]
    rep = {True: "  reproduces the study", False: "  does not reproduce the study"}.get(v.get("reproduces"), "")
    return "  ".join(p for p in parts if p) + ("  PASS" if v["pass"] else "  FAIL") + rep
