"""Drift: does the real endpoint still behave the way the twin's profile says it does?

The twin's profile is loaded with the twin's own loader (`lab.twin.profile.load_profile`, so
`extends:` and `--set` overrides hold exactly as in `lab twin serve`). Each row below compares one
thing the endpoint did, in the runs under a folder, with the one twin parameter that sets it, or,
where no parameter sets it, with the twin rule it is (said so in the row). Each row names the
catalogue scenarios whose runs observe it; a folder without such runs shows "not observed".

| row | twin parameter | observed in | observed by |
| --- | --- | --- | --- |
| resume refused while the old connection is held | (rule) | resumes after a path-cutting loss, before the old connection's close | b1, b2, r2 |
| refusal code | `refuse_code` | close codes of refused resumes | r1, b1, b2, r2, s2 |
| refusal delay | `refuse_close_s` | each refused resume's setup frame -> close | r1, b1, b2, r2, s2 |
| resumed session setup | `resume_setup_s` | each resumed connection's setup frame -> setupComplete | r1, b2, r2 |
| new session setup | `new_setup_s` | each initial or fallback connection's setup frame -> setupComplete | every scenario |
| goAway | `goaway_after_s` | goAway frames in frames.jsonl | every scenario |
| pending call after resume | (rule) | the pre-loss call's result sent on the resumed session | r1, b2, r2 |
| handle updates per connection | `handle_updates` | handle.update records per connection | every scenario |

After those rows come two more kinds:

- one row per timed parameter (lab.live.samples.MEASURES, the figures `lab twin calibrate` fits):
  the records' median with its bootstrap error against the profile's, and the one-sample KS distance
  D of the records from the profile's distribution; changed when D exceeds its 1 % critical value
  at that n (lab.live.fit), so a handful of records flags only a large move;
- what the runs did that the twin never does with this profile: a frame kind its wire never builds
  (toolCallCancellation, say), a server close code no parameter of the profile holds, a close reason
  none gives, a setup the server never answered. Each is changed when seen at all.

The loss is the agent's `loss` event and nothing else: its `ms`, and its `cuts_path` (the server
cannot see the connection end; a record without that field does not count for the lockout row).
A "transparent mode" row is gone: no client or scenario asks for transparent resumption, so no
run could ever observe it.

Ranges are checked with a tolerance (default 25 % of each bound) because the profile's ranges
come from 3 to 12 runs; parameters named `*_s` are seconds and are compared in ms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from lab.errors import LabError
from lab.events import Event
from lab.live.calibrate import Calibration, calibrate
from lab.live.fit import LEVEL
from lab.live.samples import Record, Sample, new_setups, read_record, refusals, resumed_setups
from lab.record.frames import kind_of
from lab.report.metrics import compute
from lab.report.summary import fmt_range, runs_under
from lab.report.verdict import load_meta
from lab.twin import wire
from lab.protocols import GEMINI, OPENAI
from lab.twin.params import CLOSE_CODE, DECLARED, DEFAULT_PROFILE
from lab.twin.profile import Profile, bounds, load_profile

UNCHANGED, CHANGED, NOT_OBSERVED = "unchanged", "changed", "not observed"
ERROR_CLOSE_CODES = (1007, 1008, 1011)   # a close this soon after a tool response means it was refused
ANSWER_GRACE_MS = 5000


@dataclass
class Behaviour:
    name: str
    parameter: str       # the twin parameter compared, or "(rule)"
    expected: str
    observed: str
    status: str
    source: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunObs:
    """What drift reads from one run folder."""
    scenario: str
    events: list[Event]
    metrics: dict[str, Any]      # lab.report.metrics.compute: resume attempts and connections
    goaways: int | None          # goAway frames in frames.jsonl; None when the run recorded no frames
    record: Record | None = None  # the folder as lab.live.samples reads it (the timed rows and the unmodelled)
    protocol: str = GEMINI       # run.json's protocol (lab.protocols); a run that names none spoke gemini

    @property
    def loss(self) -> Event | None:
        return next((e for e in self.events if e.kind == "loss"), None)


def read_run(run_dir: Path) -> RunObs:
    rec = read_record(run_dir)
    meta, _ = load_meta(run_dir)
    goaways = None if rec.frames is None else sum(1 for f in rec.frames if f.get("kind") == "goAway")
    return RunObs(rec.scenario, rec.events, compute(rec.events, meta), goaways, rec,
                  str(meta.get("protocol") or GEMINI))


# ---- what each row reads -------------------------------------------------------------------------
def _attempts(runs: list[RunObs], outcome: str) -> list[dict[str, Any]]:
    return [a for r in runs for a in r.metrics.get("resume_attempts", []) if a.get("outcome") == outcome]


def _timed(runs: list[RunObs], take: Callable[[Record, str], list[Sample]]) -> list[float]:
    """One lab.live.samples measure over the runs, in ms: the setup figures start at the setup
    frame, as the twin's delays do (the client's own latencies start at connect_start)."""
    return [smp.value for r in runs if r.record is not None for smp in take(r.record, "ms")]


def _lost_conn(r: RunObs, loss: Event) -> Any:
    before = [c for c in r.metrics.get("connections", []) if c.get("open_ms") is not None and c["open_ms"] <= loss.ms]
    return before[-1]["conn"] if before else None


def _held_until(r: RunObs, loss: Event) -> float:
    """When the server could first have seen the lost connection end: its close, echoed or sent."""
    lost = _lost_conn(r, loss)
    ends = [e.ms for e in r.events if e.ms >= loss.ms and (
        (e.kind == "conn.closed" and e.get("conn") == lost and (e.get("code") == 1000 or e.get("by") == "server"))
        or (e.kind == "action" and e.get("what") == "close"))]
    return min(ends, default=math.inf)


def _held_attempts(r: RunObs) -> list[dict[str, Any]]:
    """Resumes with a result, after a loss that cut the path and before the old connection's close."""
    loss = r.loss
    if loss is None or loss.get("cuts_path") is not True:
        return []
    until = _held_until(r, loss)
    return [{**a, "after_loss_ms": a["ms"] - loss.ms} for a in r.metrics.get("resume_attempts", [])
            if a.get("outcome") in ("accepted", "refused") and loss.ms <= a["ms"] < until]


def _pending_answered(r: RunObs) -> bool | None:
    """Was the result of a call issued before the loss taken by the resumed session? None: not tried."""
    loss = r.loss
    if loss is None:
        return None
    accepted = [a for a in r.metrics.get("resume_attempts", []) if a.get("outcome") == "accepted" and a["ms"] >= loss.ms]
    if not accepted:
        return None
    pending = {e.get("id") for e in r.events if e.kind == "tool.call" and e.ms <= loss.ms}
    sent = next((e for e in r.events if e.kind == "tool.response" and e.get("id") in pending
                 and e.ms >= accepted[0]["ms"]), None)
    if sent is None:
        return None
    refused = any(e.kind == "conn.closed" and e.get("conn") == sent.get("conn") and e.get("code") in ERROR_CLOSE_CODES
                  and 0 <= e.ms - sent.ms <= ANSWER_GRACE_MS for e in r.events)
    return str(sent.get("status", "ok")).lower() not in ("error", "failed") and not refused


# ---- the rows ------------------------------------------------------------------------------------
Compare = Callable[[Profile, list[RunObs], float, "Row"], Behaviour]


@dataclass(frozen=True)
class Row:
    name: str
    parameter: str | None           # the exact twin parameter; None for a twin rule
    rule: str                       # what is compared when no parameter sets it, and its source
    observed_by: tuple[str, ...]    # catalogue scenarios whose runs exercise this row
    compare: Compare

    def behaviour(self, prof: Profile, expected: str, observed: str, status: str,
                  numbers: dict[str, Any] | None = None) -> Behaviour:
        src = prof.source(self.parameter) if self.parameter else self.rule
        return Behaviour(self.name, self.parameter or "(rule)", expected, observed, status, src, numbers or {})

    def value(self, prof: Profile) -> Any:
        """The profile's value of this row's parameter (None for a rule)."""
        return prof[self.parameter] if self.parameter else None

    def unseen(self, prof: Profile, expected: str) -> Behaviour:
        return self.behaviour(prof, expected, f"- (observed by {', '.join(self.observed_by)})", NOT_OBSERVED)


def _range_ms(row: Row, prof: Profile) -> tuple[float, float]:
    value = row.value(prof)
    scale = 1000.0 if (row.parameter or "").endswith("_s") else 1.0
    b = bounds(value)       # a number, a [lo, hi] range or a recorded distribution's min and max
    if b is not None:
        return b[0] * scale, b[1] * scale
    raise LabError(f"twin parameter {row.parameter} = {value!r} is not a number or [lo, hi] (drift row {row.name!r})")


def _in_range(row: Row, prof: Profile, values: list[float], tol: float, slack_ms: float = 0.0) -> Behaviour:
    """The values within the profile's bounds, each widened by `tol` of itself and by `slack_ms`."""
    lo, hi = _range_ms(row, prof)
    exp = f"{lo:.0f} ms" if lo == hi else f"{lo:.0f}\u2013{hi:.0f} ms"    # the profile's bounds, not a sample
    if not values:
        return row.unseen(prof, exp)
    ok = min(values) >= lo * (1 - tol) - slack_ms and max(values) <= hi * (1 + tol) + slack_ms
    return row.behaviour(prof, exp, f"{fmt_range(values)} ms (n={len(values)})", UNCHANGED if ok else CHANGED,
                         {"min": min(values), "max": max(values), "n": len(values), "lo": lo, "hi": hi, "tolerance": tol})


def _lockout(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    held = [att for att in map(_held_attempts, runs) if att]
    atts = [a for att in held for a in att]
    if not atts:
        return row.unseen(prof, "refused")
    broke = sum(1 for a in atts if a["outcome"] == "accepted")
    last = max(a["after_loss_ms"] for a in atts)
    return row.behaviour(prof, "refused", f"{len(atts) - broke} of {len(atts)} refused in {len(held)} runs "
                         f"(last at +{last / 1000:.1f} s)", UNCHANGED if broke == 0 else CHANGED,
                         {"attempts": len(atts), "accepted": broke, "runs": len(held)})


def _one_code(row: Row, prof: Profile, seen: Iterable[Any]) -> Behaviour:
    """The close codes seen (None left out) against the one code the row's parameter holds."""
    codes: dict[str, int] = {}
    for code in seen:
        if code is not None:
            codes[str(code)] = codes.get(str(code), 0) + 1
    want = str(row.value(prof))
    if not codes:
        return row.unseen(prof, want)
    obs = ", ".join(f"{c} \u00d7{n}" for c, n in sorted(codes.items()))
    return row.behaviour(prof, want, obs, UNCHANGED if set(codes) == {want} else CHANGED, {"codes": codes})


def _refusal_code(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    return _one_code(row, prof, (a.get("code") for a in _attempts(runs, "refused")))


def _refusal_delay(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    return _in_range(row, prof, _timed(runs, refusals), tol)


def _resumed_setup(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    return _in_range(row, prof, _timed(runs, resumed_setups), tol)


def _new_setup(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    return _in_range(row, prof, _timed(runs, new_setups), tol)


def _goaway(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    after = row.value(prof)
    framed = [r for r in runs if r.goaways is not None]
    exp = "never sent" if after is None else f"after {after} s"
    if not framed:
        return row.unseen(prof, exp)
    seen = sum(r.goaways or 0 for r in framed)
    longest = max((r.metrics.get("duration_ms") or 0) for r in framed)
    obs = f"{seen} seen in {len(framed)} runs (longest {longest / 1000:.0f} s)"
    if after is None:
        return row.behaviour(prof, exp, obs, UNCHANGED if seen == 0 else CHANGED, {"seen": seen})
    if longest < float(after) * 1000.0:
        return row.unseen(prof, exp)
    return row.behaviour(prof, exp, obs, UNCHANGED if seen else CHANGED, {"seen": seen})


def _pending_call(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    vals = [v for v in map(_pending_answered, runs) if v is not None]
    if not vals:
        return row.unseen(prof, "answerable")
    ok = sum(vals)
    return row.behaviour(prof, "answerable", f"answered in {ok} of {len(vals)} resumed runs",
                         UNCHANGED if ok == len(vals) else CHANGED, {"answered": ok, "runs": len(vals)})


def _handle_updates(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    mode = str(row.value(prof))
    per_conn = []       # (updates, turns completed) for each connection that got setupComplete
    for r in runs:
        for c in r.metrics.get("connections", []):
            if c.get("setup_ms") is None:
                continue
            turns = sum(1 for e in r.events if e.kind == "model.turn_complete" and e.get("conn") == c["conn"])
            per_conn.append((c.get("handle_updates") or 0, turns))
    per_conn = [(n, t) for n, t in per_conn if n]   # a connection closed before its update says nothing
    if not per_conn:
        return row.unseen(prof, mode)
    counts = [n for n, _ in per_conn]
    if mode == "once":
        ok = max(counts) == 1
    elif mode == "per_turn":
        ok = all(n <= 1 + t for n, t in per_conn) and any(n > 1 for n, t in per_conn if t)
    else:
        raise LabError(f"twin parameter handle_updates = {mode!r}: drift knows 'once' and 'per_turn'")
    return row.behaviour(prof, mode, f"{fmt_range(counts)} per set-up connection", UNCHANGED if ok else CHANGED,
                         {"max": max(counts)})


ALL_SCENARIOS = ("control",)     # a row every run observes: the plainest scenario stands for all
REFUSING = ("r1-idle-abort-immediate", "b1-silent-loss", "b2-path-return", "r2-freeze", "s2-recovery")
RESUMING = ("r1-idle-abort-immediate", "b2-path-return", "r2-freeze")

ROWS: tuple[Row, ...] = (
    Row("resume refused while the old connection is held", None,
        "twin rule (old_connection_open): a resume is refused while the server still holds the old connection; "
        "000 finding 3: every resume refused while the server held the old connection",
        ("b1-silent-loss", "b2-path-return", "r2-freeze"), _lockout),
    Row("refusal code", "refuse_code", "", REFUSING, _refusal_code),
    Row("refusal delay", "refuse_close_s", "", REFUSING, _refusal_delay),
    Row("resumed session setup", "resume_setup_s", "", RESUMING, _resumed_setup),
    Row("new session setup", "new_setup_s", "", ALL_SCENARIOS + ("s2-recovery",), _new_setup),
    Row("goAway", "goaway_after_s", "", ALL_SCENARIOS, _goaway),
    Row("pending call after resume", None,
        "twin rule (the scripted model takes the result of any call id it issued): "
        "000 finding 1: the resumed session accepted the response for the old call id (14 of 14)",
        RESUMING, _pending_call),
    Row("handle updates per connection", "handle_updates", "", ALL_SCENARIOS, _handle_updates),
)


# ---- the timed parameters' distributions (the same figures as lab twin calibrate) -------------------
def _ms_of(c: Calibration, v: float) -> float:
    return v * 1000.0 if c.measure.unit == "s" else v


def timed(prof: Profile, runs: list[RunObs]) -> list[Behaviour]:
    """One row per timed parameter: the records' median against the profile's, and the KS distance
    D of the records from the profile's distribution with its critical value at n (lab.live.fit.LEVEL)."""
    records = [r.record for r in runs if r.record is not None]
    out = []
    for c in calibrate(records, prof):
        name = f"{c.measure.what} (distribution)"
        src = f"{c.measure.clock}; profile: {prof.source(c.parameter)}"
        if c.fit is None:
            out.append(Behaviour(name, c.parameter, "-", f"- (observed by {', '.join(c.measure.observed_by)})",
                                 NOT_OBSERVED, src))
            continue
        f = c.fit
        i = min(range(len(f.probabilities)), key=lambda k: abs(f.probabilities[k] - 0.5))
        exp = f"p50 {_ms_of(c, f.profile[i]):.0f} ms"
        obs = f"p50 {_ms_of(c, f.fitted[i]):.0f} \u00b1 {_ms_of(c, f.stderr[i]):.0f} ms (n={c.n}); "
        obs += (f"|p50 - value| {_ms_of(c, f.median_gap):.0f} ms vs {_ms_of(c, f.median_allowed):.0f} allowed"
                if f.point else f"KS D {f.ks:.2f} vs {f.ks_crit:.2f} at {LEVEL:.0%}")
        out.append(Behaviour(name, c.parameter, exp, obs, CHANGED if f.changed else UNCHANGED, src,
                             {"n": c.n, "ks": f.ks, "ks_crit": f.ks_crit, "p50_ms": _ms_of(c, f.fitted[i])}))
    return out


# ---- what the live runs did that the twin never does -------------------------------------------------
# the kinds the twin's wire builds (lab.twin.wire): a frame of any other kind is one it never sends
TWIN_FRAME_KINDS = frozenset(kind_of(f) for f in (
    wire.setup_complete(), wire.resumption_update("h"), wire.go_away("1s"), wire.tool_calls([]),
    wire.turn_complete(), wire.voice_activity("ACTIVITY_START"), wire.usage_metadata({}, {})))
UNANSWERED = "TimeoutError"     # a resume.result reason: the setup got neither setupComplete nor a close


def _twin_close_codes(prof: Profile) -> set[int]:
    """Every close code the profile lets the twin send (each parameter shaped as a close code)."""
    # the profile's own names: a profile carries only its protocol's (lab.twin.params.declared_for)
    return {int(prof[n]) for n, spec in DECLARED.items() if spec is CLOSE_CODE and n in prof.params
            and prof[n] is not None}


def _twin_reasons(prof: Profile) -> list[str]:
    """The close reasons the profile's twin sends: a templated one ({model}) by its fixed start."""
    return [str(prof[n]).split("{")[0] for n in prof.params if n.endswith("_reason") and prof[n]]


def unmodelled(prof: Profile, runs: list[RunObs]) -> list[Behaviour]:
    """Rows for what the runs showed that the twin, with this profile, never does: a frame kind it never
    sends, a server close code or reason it never uses, a setup the server never answered."""
    kinds: dict[str, int] = {}
    codes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    hung = 0
    known_codes, known_reasons = _twin_close_codes(prof), _twin_reasons(prof)
    for r in runs:
        for f in (r.record.frames if r.record is not None and r.record.frames is not None else []):
            if f.get("kind") != "close" and f.get("kind") not in TWIN_FRAME_KINDS:
                kinds[str(f.get("kind"))] = kinds.get(str(f.get("kind")), 0) + 1
        for e in r.events:
            if e.kind == "conn.closed" and e.get("by") == "server" and e.get("code") not in (None, 1006):
                code, reason = int(e["code"]), str(e.get("reason") or "")
                if code not in known_codes:
                    codes[str(code)] = codes.get(str(code), 0) + 1
                elif reason and not any(reason.startswith(k) or k.startswith(reason) for k in known_reasons if k):
                    reasons[f"{code} {reason!r}"] = reasons.get(f"{code} {reason!r}", 0) + 1
            elif e.kind == "resume.result" and not e.get("ok") and str(e.get("reason") or "").startswith(UNANSWERED):
                hung += 1
    out = []
    src = "(not modelled) the twin never does this with this profile"

    def row(name: str, seen: dict[str, int], never: str) -> None:
        obs = ", ".join(f"{k} \u00d7{n}" for k, n in sorted(seen.items()))
        out.append(Behaviour(name, "(not modelled)", never, obs or "none", CHANGED if seen else UNCHANGED, src,
                             {"seen": seen}))
    row("frame kinds the twin never sends", kinds, "none (twin: " + ", ".join(sorted(TWIN_FRAME_KINDS)) + ")")
    row("server close codes the twin never sends", codes, "none (twin: " + ", ".join(map(str, sorted(known_codes))) + ")")
    row("server close reasons the twin never gives", reasons, "none")
    row("setups never answered (neither setupComplete nor a close)", {"attempts": hung} if hung else {}, "none")
    return out


# ---- OpenAI Realtime (a profile with protocol: openai) ------------------------------------------------
# What the OpenAI clients' records support today (lab.clients.openai_realtime): their events, not
# frames (they record no frames.jsonl). The rows:
#
# | row | twin parameter | observed in |
# | session.created after the upgrade | openai_session_created_s | conn.setup_complete's created_ms |
# | session cap | openai_session_max_s | a session's age at the close after its session_expired error |
# | close after the session cap | openai_session_expired_code | that close's code |
# | server close codes / reasons the twin never sends | (not modelled) | conn.closed records |
#
# Not compared (docs/live.md): the refused key's close (a refused key stops the run before any
# record of its close), rate_limits.updated (a frame, not recorded), the error codes of recoverable
# errors, and the timed distributions (lab.live.samples' measures are the Live API's).
SESSION_EXPIRED = "session_expired"
NORMAL_CLOSE = 1000     # either side's plain close: the OpenAI clients' conn.closed does not say whose


def _expiries(r: RunObs) -> list[tuple[Event, Event | None, Event | None]]:
    """(the session_expired error, that connection's close after it, its conn.open) per expiry seen."""
    out = []
    for e in r.events:
        if e.kind == "client.error" and e.get("task") == "server" and SESSION_EXPIRED in str(e.get("error") or ""):
            conn = e.get("conn")
            close = next((c for c in r.events if c.kind == "conn.closed" and c.get("conn") == conn
                          and c.ms >= e.ms), None)
            opened = next((o for o in r.events if o.kind == "conn.open" and o.get("conn") == conn), None)
            out.append((e, close, opened))
    return out


def _end_ms(r: RunObs) -> float:
    """The run's last record: how long a connection that never closed lived at most."""
    return max((e.ms for e in r.events), default=0.0)


def _session_cap(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    ages = [close.ms - opened.ms for r in runs for _, close, opened in _expiries(r)
            if close is not None and opened is not None]
    cap = row.value(prof)
    if cap is None:                     # the profile's twin never ends a session
        seen = sum(len(_expiries(r)) for r in runs)
        return row.behaviour(prof, "none", f"{seen} session_expired", UNCHANGED if not seen else CHANGED)
    if not ages:
        # no expiry seen: a session that outlived the cap (with the tolerance) says it moved
        lived = [(c["closed_ms"] if c.get("closed_ms") is not None else _end_ms(r)) - c["open_ms"]
                 for r in runs for c in r.metrics.get("connections", []) if c.get("open_ms") is not None]
        if lived and max(lived) > float(cap) * 1000.0 * (1 + tol):
            return row.behaviour(prof, f"{float(cap) * 1000:.0f} ms", f"a session lived {max(lived) / 1000:.0f} s "
                                 "with no session_expired", CHANGED, {"longest_ms": max(lived)})
    return _in_range(row, prof, ages, tol)


def _expiry_close(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    return _one_code(row, prof, (close.get("code") for r in runs for _, close, _ in _expiries(r) if close is not None))


# the client's own share of created_ms: its event loop between the frame's arrival and its read.
# Assumption, from this machine (2 shared cores): 0.1-5.6 ms against a twin that sends at once
CLIENT_SLACK_MS = 20.0


def _session_created(prof: Profile, runs: list[RunObs], tol: float, row: Row) -> Behaviour:
    created = [float(e["created_ms"]) for r in runs for e in r.events
               if e.kind == "conn.setup_complete" and e.get("created_ms") is not None]
    return _in_range(row, prof, created, tol, CLIENT_SLACK_MS)


OPENAI_ROWS: tuple[Row, ...] = (
    Row("session.created after the upgrade", "openai_session_created_s", "", ALL_SCENARIOS, _session_created),
    Row("session cap", "openai_session_max_s", "", ("l1-session-cap",), _session_cap),
    Row("close after the session cap", "openai_session_expired_code", "", ("l1-session-cap",), _expiry_close),
)


def openai_unmodelled(prof: Profile, runs: list[RunObs]) -> list[Behaviour]:
    """Server closes the OpenAI twin, with this profile, never makes: a code none of its close-code
    parameters holds, or a reason none of its reasons starts (the SDK reconnect's own records and
    the plain 1000 close, whose side the records do not say, left out)."""
    codes: dict[str, int] = {}
    reasons: dict[str, int] = {}
    # the cap's close gives the session_expired message as its reason (the profile's source says so)
    known_codes = _twin_close_codes(prof)
    known_reasons = _twin_reasons(prof) + [str(prof["openai_session_expired_message"]).split("{")[0]]
    for r in runs:
        for e in r.events:
            if (e.kind != "conn.closed" or e.get("how") == "reconnect"
                    or e.get("code") in (None, 1005, 1006, NORMAL_CLOSE)):
                continue
            code, reason = int(e["code"]), str(e.get("reason") or "")
            if code not in known_codes:
                codes[str(code)] = codes.get(str(code), 0) + 1
            elif reason and not any(reason.startswith(k) or k.startswith(reason) for k in known_reasons if k):
                reasons[f"{code} {reason!r}"] = reasons.get(f"{code} {reason!r}", 0) + 1
    src = "(not modelled) the twin never does this with this profile"
    out = []
    for name, seen, never in (
            ("server close codes the twin never sends", codes,
             "none (twin: " + ", ".join(map(str, sorted(known_codes))) + ")"),
            ("server close reasons the twin never gives", reasons, "none")):
        obs = ", ".join(f"{k} \u00d7{n}" for k, n in sorted(seen.items()))
        out.append(Behaviour(name, "(not modelled)", never, obs or "none", CHANGED if seen else UNCHANGED, src,
                             {"seen": seen}))
    return out


def compare_openai(runs: list[RunObs], prof: Profile, tolerance: float = 0.25) -> list[Behaviour]:
    """The OpenAI rows: the runs against an OpenAI profile, then the closes its twin never makes."""
    for row in OPENAI_ROWS:
        if row.parameter and row.parameter not in prof.params:
            raise LabError(f"twin profile {prof.name!r} has no parameter {row.parameter!r} (drift row {row.name!r})")
    return [row.compare(prof, runs, tolerance, row) for row in OPENAI_ROWS] + openai_unmodelled(prof, runs)


def compare(runs: Iterable[RunObs], prof: Profile, tolerance: float = 0.25) -> list[Behaviour]:
    """Each row's behaviour: the runs against the profile; then the timed parameters' distances and
    what the runs did that the twin never does. An OpenAI profile gets the OpenAI rows."""
    runs = list(runs)
    if prof.protocol == OPENAI:
        return compare_openai(runs, prof, tolerance)
    for row in ROWS:
        if row.parameter and row.parameter not in prof.params:
            raise LabError(f"twin profile {prof.name!r} has no parameter {row.parameter!r} (drift row {row.name!r})")
    return [row.compare(prof, runs, tolerance, row) for row in ROWS] + timed(prof, runs) + unmodelled(prof, runs)


def render(behaviours: list[Behaviour], title: str, profile_name: str, runs: int, left_out: int = 0,
           protocol: str = GEMINI) -> str:
    changed = [b for b in behaviours if b.status == CHANGED]
    lines = [f"# Drift: {title}", "",
             f"{runs} runs compared with the twin profile `{profile_name}` ({protocol})"
             + (f" ({left_out} runs of another protocol left out: drift them with that protocol's profile)"
                if left_out else "") + ". "
             + (f"**{len(changed)} behaviour(s) changed**: {', '.join(b.name for b in changed)}." if changed
                else "No behaviour changed."), "",
             "| behaviour | twin parameter | profile | observed | status | source of the profile value |",
             "| --- | --- | --- | --- | --- | --- |"]
    for b in behaviours:
        status = f"**{b.status}**" if b.status == CHANGED else b.status
        src = b.source.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {b.name} | {b.parameter} | {b.expected} | {b.observed} | {status} | {src} |")
    lines += ["", "Ranges allow a tolerance on each bound; \"not observed\" means no run in this folder exercised "
              "that behaviour (the scenarios named there do). \"(rule)\" is twin behaviour no parameter sets.", ""]
    return "\n".join(lines)


def drift_dir(d: Path | str | Iterable[Path | str], profile: str | None = None, tolerance: float = 0.25,
              overrides: Iterable[str] | None = None) -> tuple[Path, list[Behaviour]]:
    """Compare every run under `d` (a folder or several) with the profile (and its overrides): by
    default the runs' protocol's (lab.twin.params.DEFAULT_PROFILE; runs of both protocols need a
    profile named); only the runs of the profile's protocol are compared. Writes drift.md into the
    first folder."""
    dirs = [Path(d)] if isinstance(d, (str, Path)) else [Path(x) for x in d]
    runs = [read_run(r) for x in dirs for r in runs_under(x)]
    if profile is None:
        spoken = sorted({r.protocol for r in runs}) or [GEMINI]
        if len(spoken) > 1:
            raise LabError(f"runs of {' and '.join(spoken)} under {', '.join(map(str, dirs))}: name the profile "
                           f"to drift against (--profile {' or --profile '.join(DEFAULT_PROFILE[p] for p in spoken)})")
        profile = DEFAULT_PROFILE[spoken[0]]
    prof = load_profile(profile, list(overrides or []), protocol=None)     # either protocol's: its rows follow it
    ours = [r for r in runs if r.protocol == prof.protocol]
    behaviours = compare(ours, prof, tolerance)
    out = dirs[0] / "drift.md"
    out.write_text(render(behaviours, ", ".join(x.name for x in dirs), prof.name, len(ours),
                          len(runs) - len(ours), prof.protocol))
    return out, behaviours
