"""Numbers from one run's events, in the shape of the resume study's tables.

`compute(events, meta=None, twin=None) -> dict` is pure: it reads `lab.events.Event`s (from
events.jsonl, see docs/DESIGN.md), the run's metadata (run.json) and optionally the twin's events,
and returns a JSON-ready dict. Every field is present; a quantity that the record does not show
(a truncated run, a scenario without a loss) is None, never a guess.

Definitions (all times in ms on the run's clock):

- loss: the agent's `loss` event, the only loss (lab.anchors: the first fault start or path-cutting
  action; `cuts_path` false when a fault only degraded the path). A record without one has no loss.
  `loss_shape` is what it did to the path (cut, degrade, zombie, armed), asked of the fault kind's
  declaration or the action (lab.report.loss_shape), never read from its name.
- detection latency: the first `loss.detected` at or after the loss, minus the loss.
- resume attempts: each `resume.attempt` paired with its `resume.result` (same attempt number);
  outcome accepted / refused (ok false) / no_result (the record ends first).
- recovery: the first `conn.setup_complete` after the loss on a connection opened to resume or
  as a new session; loss -> setupComplete and loss -> first model audio after it.
- resumed_after_close_ms: from the last close of the old connection before an accepted resume
  (its close echoed by the server, code 1000; else `action close`; else the lost connection's
  `conn.closed` by client/server) to that resume's setupComplete (B2 in the study: 0.5 to 0.6 s).
- the run's tools (lab.report.run_tools: the conversation's, else the booking's) and its effects
  (lab.report.effects): the lab's backend when the run used it or has no conversation of its own,
  else what the twin observed of the side-effecting calls (a call issued is under way, a response
  seen says done or not by its status); `effects_from` says which, `action` names the tools.
- bookings: the effects done (`backend.commit` events, or side-effecting calls answered done),
  grouped by business key for duplicates.
- status answer: the first model turn (`model.text`) starting after the last `user.say` of the
  status question (a spoken one: after its speech ended, `voiced_ms`; lab.conversation.intents, read
  with the action's words) that says something about the action, classified with `claims.classify`
  and those words; the truth is the effects at the moment it was said (`answer_said_ms`: the turn's
  first audio; done -> booked, asked and not undone -> in_progress, else not_booked);
  told_truth is None when the question was never answered ("never told"); loss_to_answer_ms from the loss.
- while the server holds the lost session (`held_metrics`): `fallback.new_failed` after the loss,
  and the client's own status lines (`user.status`) after it: the first one's time from the loss,
  and how many said other than the backend at that moment (pending is in_progress).
- the stop (seed 001, `stop_metrics`): from the first user.say that withdraws the action
  (lab.conversation.intents.is_stop): cancellations, `interrupted`, calls and commits after it, and every
  statement the user got after it (model turns from their first audio, the client's user.status
  lines) against the backend at that moment; a false one counts unless a later status line of the
  client corrects it; stop_failures names booked_after_stop, double_booking, false_claim.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from lab import actions, metric_names
from lab.conversation import intents
from lab.conversation.semantics import ActionWords
from lab.events import Event
from lab.report import claims, effects, loss_shape, run_tools
from lab.report.effects import Effects
from lab.report.tool_results import tool_result_metrics
from lab.stats.order import percentile

# The metric names, each with its description and origin, are defined in lab.metric_names (below
# this module and lab.expectations alike); compute() returns exactly those names.
NAMES = metric_names.TOP_LEVEL
# The actions that cut the path (lab.actions), for the timeline's marks.
LOSS_ACTIONS = actions.cutting_names()
ERROR_CLOSE_CODES = (1007, 1008, 1011)


def _stats(values: Iterable[float | None]) -> dict[str, Any]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0, "min": None, "max": None, "p50": None}
    return {"n": len(vals), "min": vals[0], "max": vals[-1], "p50": percentile(vals, 50)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def status_question(meta: dict[str, Any] | None) -> str | None:
    meta = meta or {}
    for src in (meta, meta.get("params") or {}, meta.get("expect") or {}):
        if isinstance(src, dict) and src.get("status_question"):
            return str(src["status_question"])
    return None


def _norm_text(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", str(s).lower()).strip()


def _connections(events: list[Event]) -> list[dict[str, Any]]:
    conns: dict[Any, dict[str, Any]] = {}

    def get(c: Any) -> dict[str, Any]:
        if c not in conns:
            conns[c] = {"conn": c, "purpose": None, "open_ms": None, "setup_ms": None, "setup_took_ms": None,
                        "closed_ms": None, "code": None, "reason": None, "by": None, "handle_updates": 0}
        return conns[c]

    for e in events:
        c = e.get("conn")
        if c is None:
            continue
        if e.kind == "conn.open":
            d = get(c)
            d["purpose"], d["open_ms"] = e.get("purpose"), _r(e.ms)
        elif e.kind == "conn.setup_complete":
            d = get(c)
            if d["setup_ms"] is None:
                d["setup_ms"] = _r(e.ms)
                took = e.get("setup_ms")
                if took is None and d["open_ms"] is not None:
                    took = e.ms - d["open_ms"]
                d["setup_took_ms"] = _r(took)
        elif e.kind == "conn.closed":
            d = get(c)
            if d["closed_ms"] is None:
                d["closed_ms"], d["code"], d["reason"], d["by"] = _r(e.ms), e.get("code"), e.get("reason"), e.get("by")
        elif e.kind == "handle.update":
            get(c)["handle_updates"] += 1
    return sorted(conns.values(), key=lambda d: (d["open_ms"] is None, d["open_ms"] or 0, str(d["conn"])))


def _resume_attempts(events: list[Event], loss_ms: float | None) -> list[dict[str, Any]]:
    results = [e for e in events if e.kind == "resume.result"]
    used: set[int] = set()
    out: list[dict[str, Any]] = []
    for a in (e for e in events if e.kind == "resume.attempt"):
        res = None
        for i, r in enumerate(results):
            if i in used or r.ms < a.ms or r.get("attempt") != a.get("attempt"):
                continue
            if a.get("conn") is not None and r.get("conn") is not None and r.get("conn") != a.get("conn"):
                continue
            res = r
            used.add(i)
            break
        out.append(_attempt_row(a, res, loss_ms))
    for i, r in enumerate(results):  # results whose attempt line is missing still count
        if i not in used:
            out.append(_attempt_row(None, r, loss_ms))
    out.sort(key=lambda d: d["ms"])
    return out


def _attempt_row(a: Event | None, r: Event | None, loss_ms: float | None) -> dict[str, Any]:
    start = a.ms if a else (r.ms - (r.get("latency_ms") or 0))
    if r is None:
        outcome = "no_result"
    elif r.get("ok"):
        outcome = "accepted"
    else:
        outcome = "refused"
    latency = None
    if r is not None:
        latency = r.get("latency_ms")
        if latency is None and a is not None:
            latency = r.ms - a.ms
    return {
        "attempt": (a or r).get("attempt"),
        "conn": (r.get("conn") if r is not None and r.get("conn") is not None else (a.get("conn") if a else None)),
        "ms": _r(start),
        "after_loss_ms": _r(start - loss_ms) if loss_ms is not None else None,
        "outcome": outcome,
        "code": r.get("code") if r is not None else None,
        "reason": r.get("reason") if r is not None else None,
        "latency_ms": _r(latency),
        "result_ms": _r(r.ms) if r is not None else None,
    }


def _first(events: list[Event], kind: str, after: float | None = None, **match: Any) -> Event | None:
    for e in events:
        if e.kind == kind and (after is None or e.ms >= after) and all(e.get(k) == v for k, v in match.items()):
            return e
    return None


def turn_starts(events: list[Event]) -> dict[int, float]:
    """For each model.text (by id()), when its turn started: the turn's first audio chunk.

    model.text is written when the turn completes, so a reply that began before the user's next
    line can be logged after it; only a turn that starts after the question answers it.
    """
    start: dict[Any, float | None] = {}
    out: dict[int, float] = {}
    for e in events:
        c = e.get("conn")
        if e.kind == "model.audio" and start.get(c) is None:
            start[c] = e.ms
        elif e.kind == "model.text":
            out[id(e)] = start.get(c) if start.get(c) is not None else e.ms
            start[c] = None  # one model.text per turn
        elif e.kind in ("model.turn_complete", "model.interrupted"):
            start[c] = None
    return out


def _truth_at(events: list[Event], ms: float, fx: Effects | None = None) -> str:
    """The effects' state at `ms` (lab.report.effects): done -> booked; asked and not undone (the
    guard's backend.cancel, a failed response) -> in_progress; else not_booked. Without `fx`, the
    backend's record in `events`."""
    return (fx or effects.from_backend(events)).truth_at(ms)


@dataclass
class _Run:
    """What several steps of `compute` read, found once: the record sorted, the loss, the connections,
    the resume attempts, the recovery and the run's effects."""
    events: list[Event]
    meta: dict[str, Any]
    twin: list[Event] | None
    tools: run_tools.RunTools
    fx: Effects
    loss: Event | None
    conns: list[dict[str, Any]]
    lost_conn: Any
    det: Event | None                   # the first loss.detected at or after the loss
    attempts: list[dict[str, Any]]
    first_ok: dict[str, Any] | None     # the first accepted resume attempt
    rec_ms: float | None                # the recovery: resumed or new setupComplete after the loss
    rec: Event | None
    audio: Event | None                 # the first model audio after the recovery

    @property
    def loss_ms(self) -> float | None:
        return self.loss.ms if self.loss is not None else None


def _facts(events: list[Event], meta: dict[str, Any] | None, twin: list[Event] | None,
           conversation: dict[str, Any] | None) -> _Run:
    events = sorted(events, key=lambda e: e.ms)
    tools = run_tools.of_run(twin, conversation)
    loss = _first(events, "loss")
    loss_ms = loss.ms if loss else None
    conns = _connections(events)
    lost_conn = None
    if loss is not None:
        before = [c for c in conns if c["open_ms"] is not None and c["open_ms"] <= loss_ms]
        lost_conn = before[-1]["conn"] if before else None
    attempts = _resume_attempts(events, loss_ms)
    first_ok = next((a for a in attempts if a["outcome"] == "accepted"), None)
    rec = _recovery_setup(events, conns, attempts, loss, lost_conn)
    rec_ms = rec.ms if rec is not None else (first_ok["result_ms"] if first_ok else None)
    audio = None
    if rec_ms is not None:
        audio = _first(events, "model.audio", after=rec_ms, first=True) or _first(events, "model.audio", after=rec_ms)
    return _Run(events=events, meta=meta or {}, twin=twin, tools=tools, fx=effects.of_run(events, twin, tools),
                loss=loss, conns=conns, lost_conn=lost_conn,
                det=_first(events, "loss.detected", after=loss_ms) if loss is not None else None,
                attempts=attempts, first_ok=first_ok, rec_ms=rec_ms, rec=rec, audio=audio)


def _recovery_setup(events: list[Event], conns: list[dict[str, Any]], attempts: list[dict[str, Any]],
                    loss: Event | None, lost_conn: Any) -> Event | None:
    """The first setupComplete after the loss on another connection opened to resume or as a new
    session (or on one whose resume was accepted)."""
    if loss is None:
        return None
    purpose = {c["conn"]: c["purpose"] for c in conns}
    accepted_conns = {a["conn"] for a in attempts if a["outcome"] == "accepted"}
    for e in events:
        if e.kind == "conn.setup_complete" and e.ms >= loss.ms and e.get("conn") != lost_conn and (
                purpose.get(e.get("conn")) in ("resume", "new") or e.get("conn") in accepted_conns):
            return e
    return None


def compute(events: list[Event], meta: dict[str, Any] | None = None,
            twin: list[Event] | None = None, conversation: dict[str, Any] | None = None) -> dict[str, Any]:
    """All metrics of one run (see the module docstring); `conversation` is the run folder's
    conversation.json, when it has one. Each step below computes one group of names."""
    r = _facts(events, meta, twin, conversation)
    m: dict[str, Any] = {}
    m.update(action_metrics(r.fx))
    m.update(record_metrics(r.events))
    m.update(loss_metrics(r))
    m.update(resume_attempt_metrics(r))
    m.update(recovery_metrics(r))
    m.update(close_metrics(r))
    m.update(fallback_metrics(r))
    m.update(effect_metrics(r.fx, r.loss_ms))
    m.update(tool_call_metrics(r))
    m.update(handle_metrics(r.conns))
    m.update(status_answer_metrics(r.events, r.meta, r.fx, r.loss_ms))
    m.update(held_metrics(r.events, r.loss_ms, r.fx))
    m.update(stop_metrics(r.events, r.fx))
    m.update(after_resume_metrics(r.events, r.first_ok["conn"] if r.first_ok else None))
    m.update(first_after_recovery_metrics(r))
    m.update(protocol_metrics(r))
    m.update(gap_speech_metrics(r.events, r.twin))
    m.update(tool_result_metrics(r.events, r.twin))
    m.update(twin_metrics(r.twin))
    m.update(replay_metrics(r.twin))
    return m


def record_metrics(events: list[Event]) -> dict[str, Any]:
    """The record itself: whether it ends with run.end, how, and how long it is."""
    start = _first(events, "run.start")
    end = next((e for e in reversed(events) if e.kind == "run.end"), None)
    return {
        "complete": end is not None,
        "status": end.get("status") if end else None,
        "error": end.get("error") if end else None,
        "n_events": len(events),
        "duration_ms": _r(events[-1].ms - (start.ms if start else events[0].ms)) if events else None,
    }


def loss_metrics(r: _Run) -> dict[str, Any]:
    """The loss, what it did to the path (lab.report.loss_shape), the connections and its detection."""
    loss, loss_ms = r.loss, r.loss_ms
    kind = loss_shape.kind_of_loss(loss) if loss is not None else None
    cuts = loss.get("cuts_path") if loss is not None else None
    # the server's own close of the lost connection as it reached the client (B3: late, after the path came back)
    srv_close = next((e for e in r.events if loss is not None and e.ms >= loss_ms and e.kind == "conn.closed"
                      and e.get("conn") == r.lost_conn and e.get("by") == "server"), None)
    return {
        "loss_ms": _r(loss_ms),
        "loss_kind": kind,
        "loss_cuts_path": cuts,
        "loss_shape": loss_shape.shape(kind, cuts) if loss is not None else None,
        "connections": r.conns,
        "lost_conn": r.lost_conn,
        "lost_conn_server_close_ms": _r(srv_close.ms - loss_ms) if srv_close is not None else None,
        "detected_ms": _r(r.det.ms) if r.det else None,
        "detection_ms": _r(r.det.ms - loss_ms) if r.det else None,
    }


def resume_attempt_metrics(r: _Run) -> dict[str, Any]:
    """The resume attempts: how many, refused or accepted, their codes and latencies."""
    attempts, first_ok = r.attempts, r.first_ok
    return {
        "resume_attempts": attempts,
        "attempts": len(attempts),
        "refused": sum(1 for a in attempts if a["outcome"] == "refused"),
        "accepted": sum(1 for a in attempts if a["outcome"] == "accepted"),
        "no_result": sum(1 for a in attempts if a["outcome"] == "no_result"),
        "refusal_codes": {str(k): v for k, v in Counter(a["code"] for a in attempts
                                                        if a["outcome"] == "refused").items()},
        "refusal_latency_ms": _stats(a["latency_ms"] for a in attempts if a["outcome"] == "refused"),
        "resumed": first_ok is not None,
        "first_accept_latency_ms": first_ok["latency_ms"] if first_ok else None,
        "first_accept_after_loss_ms": first_ok["after_loss_ms"] if first_ok else None,
        "refused_before_accept": sum(1 for a in attempts if a["outcome"] == "refused"
                                     and (first_ok is None or a["ms"] < first_ok["ms"])),
    }


def recovery_metrics(r: _Run) -> dict[str, Any]:
    """The recovery: resumed or new setupComplete after the loss, and the first model audio after it."""
    purpose = {c["conn"]: c["purpose"] for c in r.conns}
    loss_ms, rec_ms, audio = r.loss_ms, r.rec_ms, r.audio
    return {
        "recovered_ms": _r(rec_ms),
        "recovered_via": ((purpose.get(r.rec.get("conn")) or "resume") if r.rec is not None
                          else ("resume" if r.first_ok else None)),
        "loss_to_setup_ms": _r(rec_ms - loss_ms) if rec_ms is not None and loss_ms is not None else None,
        "first_audio_ms": _r(audio.ms) if audio else None,
        "loss_to_first_audio_ms": _r(audio.ms - loss_ms) if audio and loss_ms is not None else None,
    }


def close_metrics(r: _Run) -> dict[str, Any]:
    """The close that unlocked the session (B2): when, and how long before the accepted resume's setup."""
    m: dict[str, Any] = {"resumed_after_close_ms": None, "close_ms": None}
    first_ok, loss_ms, lost_conn = r.first_ok, r.loss_ms, r.lost_conn
    if first_ok is None or loss_ms is None:
        return m
    resumed_setup = next((c["setup_ms"] for c in r.conns
                          if c["conn"] == first_ok["conn"] and c["setup_ms"] is not None), first_ok["result_ms"])
    window = [e for e in r.events if loss_ms <= e.ms <= resumed_setup]
    # the scripted close is the moment the client closed; the lost connection's close record
    # stands in when no action was scripted (a client that closes on its own)
    # The study measured from the close echoed by the server (the moment the server has seen the
    # old connection end); after a long outage that echo waits behind TCP's retransmission
    # backoff, seconds after the client started closing. Prefer it; else the scripted close.
    echoed = [e for e in window if e.kind == "conn.closed" and e.get("conn") == lost_conn
              and e.get("code") == 1000]
    closes = (echoed
              or [e for e in window if e.kind == "action" and str(e.get("what", "")).lower() == "close"]
              or [e for e in window if e.kind == "conn.closed" and e.get("conn") == lost_conn
                  and e.get("by") in ("client", "server")])
    if closes:
        m["close_ms"] = _r(closes[-1].ms)
        m["resumed_after_close_ms"] = _r(resumed_setup - closes[-1].ms)
    return m


def fallback_metrics(r: _Run) -> dict[str, Any]:
    """The fallback to a new session (the reference recovery client) and the recovery's breakdown."""
    events, loss_ms, det = r.events, r.loss_ms, r.det
    fb = _first(events, "fallback.start", after=loss_ms)
    restored = _first(events, "session.restored", after=fb.ms if fb else None) if fb else None
    new_conn = next((c for c in r.conns if c["purpose"] == "new" and c["open_ms"] is not None
                     and (loss_ms is None or c["open_ms"] >= loss_ms)), None)
    after_restore = _first(events, "model.audio", after=restored.ms) if restored else None
    return {
        "fallback": fb is not None,
        "fallback_note": (fb.get("note") if fb is not None else None),
        "recovery": {
            "detection_ms": _r(det.ms - loss_ms) if det else None,
            "resume_window_ms": _r(fb.ms - det.ms) if fb and det else None,
            "new_setup_ms": new_conn["setup_took_ms"] if new_conn else None,
            "restore_to_first_audio_ms": _r(after_restore.ms - restored.ms) if after_restore else None,
            "loss_to_first_audio_ms": _r(r.audio.ms - loss_ms) if r.audio and loss_ms is not None else None,
        },
    }


def tool_call_metrics(r: _Run) -> dict[str, Any]:
    """Tool calls: issued, re-issued under a new id, deduplicated, and the pending one answered after a resume."""
    events, first_ok, loss_ms = r.events, r.first_ok, r.loss_ms
    calls = [e for e in events if e.kind == "tool.call"]
    ids: list[Any] = []
    for e in calls:
        if e.get("id") not in ids:
            ids.append(e.get("id"))
    first_call = calls[0] if calls else None
    reissued = [e for e in calls[1:] if first_call and e.get("id") != first_call.get("id")
                and e.get("name") == first_call.get("name")]
    m: dict[str, Any] = {"tool_calls": len(ids), "tool_calls_reissued": len({e.get("id") for e in reissued}),
                         "tool_dedups": sum(1 for e in events if e.kind == "tool.dedup"),
                         "pending_call_answered_after_resume": None}
    if first_ok is not None and loss_ms is not None:
        pre = {e.get("id") for e in calls if e.ms <= loss_ms}
        resp = [e for e in events if e.kind == "tool.response" and e.get("id") in pre and e.ms >= first_ok["ms"]]
        if resp:
            x = resp[0]
            bad = any(e.kind == "conn.closed" and e.get("conn") == x.get("conn") and e.get("code") in ERROR_CLOSE_CODES
                      and 0 <= e.ms - x.ms <= 5000 for e in events)
            m["pending_call_answered_after_resume"] = (str(x.get("status", "ok")).lower() not in ("error", "failed")
                                                       and not bad)
    return m


def handle_metrics(conns: list[dict[str, Any]]) -> dict[str, Any]:
    """Session handle updates per connection, and the most on one."""
    return {"handle_updates": {str(c["conn"]): c["handle_updates"] for c in conns},
            "max_handle_updates_per_conn": max((c["handle_updates"] for c in conns), default=0)}


def first_after_recovery_metrics(r: _Run) -> dict[str, Any]:
    """The first model text after the recovery, and what it claims of the action."""
    first_text = _first(r.events, "model.text", after=r.rec_ms) if r.rec_ms is not None else None
    if first_text is None:
        return {"first_text_after_recovery": None, "first_claim_after_recovery": None}
    return {"first_text_after_recovery": first_text.get("text"),
            "first_claim_after_recovery": claims.classify(first_text.get("text"), r.tools.words)}


def protocol_metrics(r: _Run) -> dict[str, Any]:
    """Protocol observations for drift: goAways, transparent resumption asked and refused, the server's closes."""
    events = r.events
    requested = bool((r.meta.get("params") or {}).get("transparent"))
    refused = None
    if requested:
        refused = any((e.kind == "conn.closed" and e.get("code") == 1007)
                      or (e.kind == "resume.result" and e.get("code") == 1007) for e in events)
    return {
        "go_away": sum(1 for e in events if "goaway" in e.kind.replace("_", "").replace(".", "").lower()),
        "transparent_requested": requested,
        "transparent_refused": refused,
        "server_closes": {str(k): v for k, v in Counter(
            c["code"] for c in r.conns if c["by"] == "server" and c["code"] is not None).items()},
    }


def twin_metrics(twin: list[Event] | None) -> dict[str, Any]:
    """What the twin recorded: refusals, accepts, how connections ended, the modalities and A/V resumes."""
    if not twin:
        return {"twin": None, "resume_mitigations": None}
    tw = sorted(twin, key=lambda e: e.ms)
    av = next((e for e in tw if e.kind == "twin.av_resume"), None)
    return {
        "twin": {
            "refusals": sum(1 for e in tw if e.kind == "twin.refuse"),
            "refusal_codes": {str(k): v for k, v in Counter(e.get("code") for e in tw
                                                            if e.kind == "twin.refuse").items()},
            "accepts": sum(1 for e in tw if e.kind == "twin.accept"),
            "conn_ends": dict(Counter(str(e.get("how")) for e in tw if e.kind == "twin.conn.end")),
            "modalities": {str(e.get("conn")): e.get("modalities") for e in tw
                           if e.kind == "twin.conn.end" and e.get("modalities") is not None},
            "av_resumes": [{"conn": e.get("conn"), "mitigations": e.get("mitigations"), "helped_by": e.get("helped_by")}
                           for e in tw if e.kind == "twin.av_resume"],
        },
        "resume_mitigations": ",".join(sorted(av.get("mitigations") or [])) if av is not None else None,
    }


def replay_metrics(twin: list[Event] | None) -> dict[str, Any]:
    """Transparent resumption (seed 004), as the twin judged each resume's resend (lab.twin.transparent)."""
    replays = [e for e in (twin or []) if e.kind == "twin.replay"]
    return {
        "transparent_resumes": sum(1 for e in replays if e.get("verdict") == "owed") if twin else None,
        "replayed_messages": sum(int(e.get("owed") or 0) for e in replays if e.get("verdict") == "owed")
        if twin else None,
        "wrong_replays": [e.get("verdict") for e in replays if e.get("verdict") not in ("owed", "ok")]
        if twin else None,
    }


# ---- the run's action and its effects (lab.report.run_tools, lab.report.effects) -------------------
def action_metrics(fx: Effects) -> dict[str, Any]:
    """Which tools the run's truth is about, where their meaning came from and how their effects are known."""
    return {"action": fx.tools.names, "action_word": claims.label(claims.DONE, fx.tools.words),
            "tools_from": fx.tools.source, "effects_from": fx.source}


def effect_metrics(fx: Effects, loss_ms: float | None) -> dict[str, Any]:
    """The effects done, asked and duplicated (by business key), and when each was done after the loss."""
    keys = Counter(str(d.key) for d in fx.done if d.key is not None)
    return {
        "bookings": len(fx.done),
        "booking_requests": len(fx.requested),
        "distinct_keys": len(keys),
        "duplicate_bookings": sum(v - 1 for v in keys.values()),
        "commit_after_loss_ms": [_r(d.ms - loss_ms) for d in fx.done] if loss_ms is not None else [],
    }


def _status_question(events: list[Event], meta: dict[str, Any], words: ActionWords) -> Event | None:
    """The user's last status question: the scenario's own line when it names one, else the last
    line the shared vocabulary hears as one (lab.conversation.intents, with the action's words)."""
    q = status_question(meta)
    says = [e for e in events if e.kind == "user.say"]
    if q:
        asked = [e for e in says if _norm_text(e.get("text", "")) == _norm_text(q)]
    else:
        asked = [e for e in says if intents.is_status(e.get("text", ""), words)]
    return asked[-1] if asked else None


def heard_from(events: list[Event], say: Event) -> float:
    """The earliest a model turn can answer a line: a typed line when sent; a spoken one when its
    speech ended (the service hears it at ACTIVITY_END, 1.1-1.3 s later still: fidelity §8 F9), so
    a reply already under way when the user began (F1's sentence to a response, which the model
    finishes: F4) is not the answer even when its first audio reaches the client during the line;
    or when a client replays the line cut by a loss (user.replay), if that comes first."""
    voiced = say.get("voiced_ms") if say.get("mode") == "speech" else None
    end = say.ms + float(voiced) if voiced else say.ms
    replays = [e.ms for e in events if e.kind == "user.replay" and e.ms >= say.ms
               and e.get("line") == say.get("line") and e.get("how") in ("audio", "restore")]
    return min([end, *replays])


def status_answer_metrics(events: list[Event], meta: dict[str, Any], fx: Effects,
                          loss_ms: float | None) -> dict[str, Any]:
    """What the user was told when asked about the action, against the effects at that moment."""
    words = fx.tools.words
    question = _status_question(events, meta, words)
    says = [e for e in events if e.kind == "user.say"]
    m: dict[str, Any] = {"asked_ms": _r(question.ms) if question else None}
    answer = None
    nxt = math.inf
    if question is not None:
        nxt = next((e.ms for e in says if e.ms > question.ms), math.inf)
        starts = turn_starts(events)
        heard = heard_from(events, question)
        texts = [e for e in events if e.kind == "model.text" and heard <= starts[id(e)] < nxt
                 and str(e.get("text", "")).strip()]
        answer = next((e for e in texts if claims.classify(e.get("text"), words) != claims.UNKNOWN),
                      texts[0] if texts else None)
    m["answer_ms"] = _r(answer.ms) if answer else None
    # the claim is judged at the moment the user began to hear it (its turn's first audio), not when the
    # turn's transcript was complete: "I'm booking it now", said just before the commit, was true
    said = turn_starts(events)[id(answer)] if answer else None
    m["answer_said_ms"] = _r(said)
    m["answer_after_question_ms"] = _r(answer.ms - question.ms) if answer and question else None
    m["answer_text"] = answer.get("text") if answer else None
    m["told"] = claims.classify(answer.get("text"), words) if answer else "never"
    m["truth_at_answer"] = fx.truth_at(said) if answer else None
    m["truth_final"] = fx.truth_at(math.inf)
    m["told_truth"] = (m["told"] == m["truth_at_answer"]) if answer else None
    # a question cut by a loss may be answered twice (a restore's reply, then the late fragment's)
    m["answers_heard"] = None
    if question is not None:
        m["answers_heard"] = sum(1 for e in events if e.kind == "user.heard" and question.ms <= e.ms < nxt
                                 and claims.classify(e.get("text"), words) != claims.UNKNOWN)
    m["loss_to_answer_ms"] = _r(answer.ms - loss_ms) if answer and loss_ms is not None else None
    return m


# ---- speech spoken during the gap (000 'Not tested') ----------------------------------------------
def gap_speech_metrics(events: list[Event], twin: list[Event] | None) -> dict[str, Any]:
    """What of the user's spoken lines reached the twin: its VAD's ended utterances (twin record,
    every session), the audio time of the last one (a whole line or a fragment), and what the
    recovery client did with a line cut by a loss (`user.replay`: spoken again, or carried as text
    by a new session's restore)."""
    spoken = [e for e in events if e.kind == "user.say" and e.get("mode") == "speech"]
    ends = [e for e in sorted(twin or [], key=lambda e: e.ms) if e.kind == "twin.vad" and e.get("event") == "end"]
    replays = Counter(str(e.get("how")) for e in events if e.kind == "user.replay")
    return {
        "speech_lines": len(spoken),
        "utterances_heard": len(ends) if twin else None,
        "last_utterance_heard_ms": ends[-1].get("heard_ms") if ends else None,
        "speech_replayed": replays.get("audio", 0),
        "speech_restored_as_text": replays.get("restore", 0),
    }


# ---- while the server holds the lost session (000 'Not tested'; lab.clients.held) -----------------
USER_STATUS_CLAIM = {"booked": claims.BOOKED, "pending": claims.IN_PROGRESS, "not_booked": claims.NOT_BOOKED}


def held_metrics(events: list[Event], loss_ms: float | None, fx: Effects | None = None) -> dict[str, Any]:
    """New sessions refused after the loss, and what the client itself told the user meanwhile
    (`user.status`, its status word against the effects at that moment; default: the backend's)."""
    if loss_ms is None:
        return {"new_sessions_failed": None, "loss_to_status_ms": None, "false_status_lines": None}
    told = [e for e in events if e.kind == "user.status" and e.ms >= loss_ms]
    return {
        "new_sessions_failed": sum(1 for e in events if e.kind == "fallback.new_failed" and e.ms >= loss_ms),
        "loss_to_status_ms": _r(told[0].ms - loss_ms) if told else None,
        "false_status_lines": sum(1 for e in told
                                  if USER_STATUS_CLAIM.get(str(e.get("status"))) != _truth_at(events, e.ms, fx)),
    }


# ---- after the resume (002) ----------------------------------------------------------------------
def after_resume_metrics(events: list[Event], resumed_conn: int | None) -> dict[str, Any]:
    """What became of the first accepted resumed connection: the model turns it carried and the
    server's error close if one came (002: the reconnect works, the first post-resume utterance may,
    a later one closes 1007); and how many camera frames the client made in the run."""
    stops = [e for e in events if e.kind == "video.stop"]
    m: dict[str, Any] = {"video_frames": max((int(e.get("frames") or 0) for e in stops), default=0),
                         "answers_after_resume": None, "resumed_failed": None, "resumed_close_code": None}
    if resumed_conn is None:
        return m
    close = next((e for e in events if e.kind == "conn.closed" and e.get("conn") == resumed_conn
                  and e.get("by") == "server"), None)
    code = close.get("code") if close is not None else None
    m["answers_after_resume"] = sum(1 for e in events if e.kind == "model.text" and e.get("conn") == resumed_conn)
    m["resumed_failed"] = code is not None and code != 1000
    m["resumed_close_code"] = code
    return m


# ---- the stop study (001) -----------------------------------------------------------------------
STOP_FAILURES = ("booked_after_stop", "double_booking", "false_claim")


def statements_after(events: list[Event], stop_ms: float, fx: Effects) -> list[dict[str, Any]]:
    """Model turns (from their first audio) and the client's status lines after the stop, in order."""
    starts = turn_starts(events)
    out = []
    for e in events:
        if e.kind == "model.text":
            at, who = starts[id(e)], "model"
        elif e.kind == "model.interrupted" and str(e.get("text") or "").strip():
            at, who = e.ms, "model"
        elif e.kind == "user.status":
            at, who = e.ms, "client"
        else:
            continue
        if at < stop_ms:
            continue
        text = str(e.get("text") or "").strip()
        out.append({"ms": _r(at), "after_stop_ms": _r(at - stop_ms), "who": who, "text": text,
                    "claim": claims.classify(text, fx.tools.words), "backend": fx.truth_at(at)})
    out.sort(key=lambda d: d["ms"])
    for i, d in enumerate(out):
        said = d["claim"] != claims.UNKNOWN
        corrected = any(x["who"] == "client" for x in out[i + 1:])
        d["false"] = said and d["claim"] != d["backend"] and not corrected
    return out


def stop_metrics(events: list[Event], fx: Effects | None = None) -> dict[str, Any]:
    """The stop study's figures for one run (names in lab.metric_names); None where there is no stop.
    `fx`: the run's effects (default: the backend's record in `events`, the booking's words)."""
    fx = fx or effects.from_backend(events)
    m: dict[str, Any] = {name: None for name in ("stop_ms", "interrupted_after_stop_ms", "calls_before_stop",
                                                 "calls_after_stop", "first_call_after_stop_ms", "booked_after_stop",
                                                 "stop_statements", "false_claims", "told_after_stop",
                                                 "truth_after_stop", "told_truth_after_stop", "stop_failures")}
    m["cancellations"] = sum(1 for e in events if e.kind == "tool.cancellation")
    resp = _first(events, "tool.response")
    m["spoke_after_response"] = (resp is not None and _first(events, "model.audio", after=resp.ms) is not None)
    stop = next((e for e in events if e.kind == "user.say" and intents.is_stop(e.get("text"), fx.tools.words)), None)
    if stop is None:
        return m
    t = stop.ms
    m["stop_ms"] = _r(t)
    intr = _first(events, "model.interrupted", after=t)
    m["interrupted_after_stop_ms"] = _r(intr.ms - t) if intr else None
    # the calls of the action (every call in a run with no conversation of its own, as it always was)
    calls = [e for e in events if e.kind == "tool.call" and (fx.tools.default or fx.tools.effect(e.get("name")))]
    before = {e.get("id") for e in calls if e.ms < t}
    after = [e for e in calls if e.ms >= t and e.get("id") not in before]
    m["calls_before_stop"] = len(before)
    m["calls_after_stop"] = len({e.get("id") for e in after})
    m["first_call_after_stop_ms"] = _r(after[0].ms - t) if after else None
    commits = fx.done
    m["booked_after_stop"] = sum(1 for e in commits if e.ms >= t)
    st = statements_after(events, t, fx)
    m["stop_statements"] = st
    m["false_claims"] = sum(1 for d in st if d["false"])
    said = [d for d in st if d["claim"] != claims.UNKNOWN]
    told = ([d for d in said if d["who"] == "client"] or said)
    last = told[-1] if told else None
    m["told_after_stop"] = last["claim"] if last else "never"
    m["truth_after_stop"] = last["backend"] if last else fx.truth_at(math.inf)
    m["told_truth_after_stop"] = (last["claim"] == last["backend"]) if last else None
    fails = []
    if m["booked_after_stop"]:
        fails.append("booked_after_stop")
    if len(commits) > 1:
        fails.append("double_booking")
    if m["false_claims"]:
        fails.append("false_claim")
    m["stop_failures"] = fails
    return m
