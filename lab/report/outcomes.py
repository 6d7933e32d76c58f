"""What the agent's user got: the user outcomes every client is judged by, whatever its design.

A scenario's `expect:` rows say what the study's own client did (the probe's 1011s, its resume
0.5 s after the close): they are *reproduction* rows, for the client they were recorded for. What a
run means for any other agent is what its user got, and that is judged here, the same way for the
lab's clients, a framework's agent and a black-box app:

| outcome | the user got |
| --- | --- |
| `effects_once` | each side effect they asked for happened exactly once: none twice, none lost, none after they withdrew it |
| `truthful_claims` | what they were told about it (each status answer, the client's own status lines, anything after a stop) was true at the moment it was said |
| `conversation_back` | after a loss that cut the path, a model reply again within BACK_WITHIN_S of the path allowing a new connection |
| `last_line_answered` | the last thing they said got a reply |
| `owed_results_delivered` | every tool result owed reached the session that asked (the conformance rule of that name) |
| `no_invented_turn` | no user turn they did not say (the rule `no_spurious_reply`) |
| `no_zombie_left` | no connection left open at the server once the path allowed closing it (`close_reaches_server`, `leaves_zombie_connection`) |

Each outcome is a pure function of one run's record (`lab.report.rules.Record`) giving PASS, FAIL or
NA with what it observed; `BEHIND` names the conformance rules that are the how-to behind each
(their FAILs say what to change). A conversation whose tools only read has no side effect to do
once or to be told about: it is judged on its answers.

    outcomes = judge_all(record)       # {name: Outcome}, in OUTCOMES order
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from lab.conversation import intents
from lab.report import claims
from lab.report import effects as effects_mod
from lab.report import loss_shape
from lab.report.metrics import USER_STATUS_CLAIM, heard_from, statements_after, turn_starts
from lab.report.rules import FAIL, NA, PASS, RULES, Outcome, Record, path_back_ms

# How long after the path allowed a new connection the user may wait for a reply. The studies give
# no bound; 20 s is an assumption: the reference pattern's 6-7 s to a new session (000 §4) plus a
# turn, with room for a resume schedule's retry, and far from the probe's minutes of refusals.
BACK_WITHIN_S = 20.0
# How long a line may wait for its reply before the run's end makes it unanswered (assumption: the
# twin's slowest reply, a status answer after a restore, is under 5 s)
REPLY_WITHIN_S = 10.0


def _na(why: str) -> Outcome:
    return Outcome(NA, why)


def _ms(v: float) -> str:
    return f"{v:.0f} ms"


def _read_only(r: Record) -> bool:
    """The run's conversation has tools, none with a side effect."""
    return not r.tools.default and not r.tools.side_effecting


def _tool_names(r: Record) -> str:
    return ", ".join(r.tools.tools) or "none"


# ---- each side effect once ----------------------------------------------------------------------
def _stop_ms(r: Record) -> float | None:
    """When the user withdrew what they asked (the first stop line, lab.conversation.intents)."""
    return next((e.ms for e in r.kind("user.say") if intents.is_stop(e.get("text"), r.tools.words)), None)


def _asked(r: Record) -> dict[Any, float]:
    """Each side effect asked for, by business key (else its job or call id), with when it was first asked."""
    asked: dict[Any, float] = {}
    if r.effects.source == effects_mod.BACKEND:
        for e in r.kind("backend.request"):
            asked.setdefault(effects_mod.backend_key(e) or e.get("job"), e.ms)
    else:
        for c in r.effect_calls():
            asked.setdefault(r.tools.key_of(c) or c.get("id"), c.ms)
    return asked


def _effects_once(r: Record) -> Outcome:
    if _read_only(r):
        return _na(f"no tool with a side effect ({_tool_names(r)} only read): nothing to do once")
    fx = r.effects
    asked = _asked(r)
    done: dict[Any, list[float]] = {}
    for d in fx.done:
        done.setdefault(d.key if d.key is not None else d.call_id, []).append(d.ms)
    for k, ms in done.items():
        asked.setdefault(k, min(ms))
    if not asked:
        return _na("no side effect was asked for" + r.how_known())
    stop = _stop_ms(r)
    twice, after_stop, lost, unseen, pending = [], [], [], [], []
    for key in asked:
        times = done.get(key, [])
        if len(times) > 1:
            twice.append(key)
        elif stop is not None and any(t >= stop for t in times):
            after_stop.append(key)
        elif not times and (stop is None or asked[key] > stop):
            if fx.truth_at(math.inf) == claims.IN_PROGRESS:
                pending.append(key)      # still under way when the run ended: not yet lost
            elif fx.source == effects_mod.TWIN:
                unseen.append(key)       # its response never reached the twin: done or not, unknown
            else:
                lost.append(key)
    parts = [f"{len(asked)} asked, {sum(len(v) for v in done.values())} done{r.how_known()}"]
    for what, keys in (("done twice", twice), ("done after the user withdrew it", after_stop),
                       ("never done", lost), ("not seen done (its response never reached the twin)", unseen),
                       ("still under way at the run's end", pending)):
        if keys:
            parts.append(f"{what}: {', '.join(map(repr, keys))}")
    failed = twice or after_stop or lost
    if not failed and (unseen or pending) and len(unseen) + len(pending) == len(asked):
        return _na("; ".join(parts))
    return Outcome(FAIL if failed else PASS, "; ".join(parts), float(len(twice) + len(after_stop) + len(lost)))


# ---- what the user was told ----------------------------------------------------------------------
def _told(r: Record) -> list[dict[str, Any]]:
    """The statements the user was given about the side effect and relied on, each with when it was said
    (ms), what it claimed and the truth then: the answer to each status question (the first model turn
    heard after it that says something about it, from the turn's first audio), every status line the
    client itself told the user, and every statement after a stop (the stop study's, which a later
    status line of the client may correct). A model's passing remark nobody asked for is not judged."""
    words, fx = r.tools.words, r.effects
    starts = turn_starts(r.events)
    says = r.kind("user.say")
    texts = [e for e in r.events if e.kind == "model.text" and str(e.get("text") or "").strip()]
    out = []
    for i, q in enumerate(says):
        if not intents.is_status(q.get("text"), words):
            continue
        heard = heard_from(r.events, q)
        nxt = says[i + 1].ms if i + 1 < len(says) else math.inf
        answer = next((e for e in texts if heard <= starts[id(e)] < nxt
                       and claims.classify(e.get("text"), words) != claims.UNKNOWN), None)
        if answer is not None:
            # the turn was composed between hearing the question and its first audio: a claim true at
            # either end was true when it was said (an "in progress" begun 80 ms after the commit
            # was not a lie; a "booked" before any commit is one at both ends)
            at = starts[id(answer)]
            cls = claims.classify(answer.get("text"), words)
            out.append({"ms": at, "who": "model", "text": answer.get("text"), "claim": cls,
                        "backend": fx.truth_at(at), "false": cls not in (fx.truth_at(at), fx.truth_at(heard))})
    for e in r.kind("user.status"):
        cls = USER_STATUS_CLAIM.get(str(e.get("status")))
        if cls is not None:
            out.append({"ms": e.ms, "who": "client", "text": e.get("text") or e.get("status"), "claim": cls,
                        "backend": fx.truth_at(e.ms), "false": cls != fx.truth_at(e.ms)})
    stop = _stop_ms(r)
    if stop is not None:
        seen = {(d["ms"], d["who"]) for d in out}
        out += [d for d in statements_after(r.events, stop, fx)
                if d["claim"] != claims.UNKNOWN and (d["ms"], d["who"]) not in seen]
    return sorted(out, key=lambda d: d["ms"])


def _truthful(r: Record) -> Outcome:
    if _read_only(r):
        return _na(f"no side effect to be told about ({_tool_names(r)} only read)")
    said = _told(r)
    if not said:
        return _na("the user was given no status of the side effect (no status question answered, no status "
                   "line)" + r.how_known())
    words = r.tools.words
    false = [s for s in said if s["false"]]
    if false:
        s = false[0]
        return Outcome(FAIL, f"{len(false)} of {len(said)} statement(s) false when said; the first at {_ms(s['ms'])}: "
                             f"\"{str(s['text'])[:80]}\" ({claims.label(s['claim'], words)}, truth "
                             f"{claims.label(s['backend'], words)}){r.how_known()}", float(len(false)))
    last = said[-1]
    return Outcome(PASS, f"{len(said)} statement(s), each true when said; the last: {claims.label(last['claim'], words)}"
                         f"{r.how_known()}", 0.0)


# ---- a working conversation again ----------------------------------------------------------------
def _allowed_ms(r: Record) -> tuple[float | None, str]:
    """When the path let a new connection through after the loss, and how: at once for a fault on
    the old connection's flow or a client action (a new flow passes), when it healed for a fault on
    every flow to the endpoint; None when it never did during the run."""
    apply = next((e for e in r.kind("fault.apply") if r.loss_ms is not None and e.ms >= r.loss_ms - 1), None)
    target = (apply.get("spec") or {}).get("target") if apply is not None else None
    if apply is None or (isinstance(target, dict) and target.get("sport") is not None):
        return r.loss_ms, "at the loss (a new connection was not blocked)"
    return path_back_ms(r), "when the path to the endpoint healed"


def _replies(r: Record) -> list[tuple[float, Any]]:
    """(ms, conn) of each model turn's start: its first audio, else its transcript (an app's, seen by the twin)."""
    out = [(e.ms, e.get("conn")) for e in r.kind("model.audio") if e.get("first")]
    audio_conns = {c for _, c in out}
    out += [(e.ms, e.get("conn")) for e in r.kind("model.text") if e.get("conn") not in audio_conns]
    return sorted(out, key=lambda x: x[0])


def _back(r: Record) -> Outcome:
    m = r.metrics
    if r.loss_ms is None:
        return _na("no loss")
    shape = loss_shape.of_metrics(m)
    if shape not in (loss_shape.CUT, loss_shape.ZOMBIE):
        return _na(f"the loss ({m.get('loss_kind')}) did not cut the path"
                   + (" (only degraded it: no_false_alarm judges it)" if shape == loss_shape.DEGRADE else ""))
    allowed, how = _allowed_ms(r)
    if allowed is None:
        return _na("the path never allowed a new connection during the run")
    lost = m.get("lost_conn")
    healed = path_back_ms(r) or math.inf
    # a reply on another connection, or on the lost one once its path healed (b2's old connection lives again)
    reply = next(((ms, c) for ms, c in _replies(r) if ms > max(allowed, r.loss_ms)
                  and (c != lost or ms > healed)), None)
    end = r.teardown_ms if r.teardown_ms is not None else r.end_ms
    if reply is None:
        if end - allowed < BACK_WITHIN_S * 1000:
            return _na(f"the run ended {(end - allowed) / 1000:.0f} s after the path allowed a new connection, "
                       f"before the {BACK_WITHIN_S:g} s bound")
        return Outcome(FAIL, f"no model reply in the {(end - allowed) / 1000:.0f} s after the path allowed a new "
                             f"connection ({how})")
    gap = reply[0] - allowed
    status = PASS if gap <= BACK_WITHIN_S * 1000 else FAIL
    return Outcome(status, f"a model reply {_ms(gap)} after the path allowed a new connection ({how})"
                           + ("" if status == PASS else f", later than {BACK_WITHIN_S:g} s"), gap)


def _answered(r: Record) -> Outcome:
    says = r.kind("user.say")
    if not says:
        return _na("the user said nothing")
    last = says[-1]
    heard = heard_from(r.events, last)
    reply = next((ms for ms, _ in _replies(r) if ms >= heard), None)
    text = str(last.get("text") or "")[:60]
    if reply is not None:
        return Outcome(PASS, f"the last line (\"{text}\") got a reply {_ms(reply - heard)} after it was heard",
                       reply - heard)
    end = r.teardown_ms if r.teardown_ms is not None else r.end_ms
    if end - heard < REPLY_WITHIN_S * 1000:
        return _na(f"the run ended {_ms(end - heard)} after the last line, before a reply was due")
    return Outcome(FAIL, f"the last line (\"{text}\") got no reply in the {(end - heard) / 1000:.0f} s left")


# ---- the rules that are themselves what the user got --------------------------------------------
def _rule(name: str) -> Callable[[Record], Outcome]:
    return lambda r: RULES[name].applies(r) or RULES[name].judge(r)


def _no_zombie(r: Record) -> Outcome:
    judged = [RULES[n].judge(r) for n in ("close_reaches_server", "leaves_zombie_connection")]
    failed = [o for o in judged if o.status == FAIL]
    if failed:
        return failed[0]
    passed = [o for o in judged if o.status == PASS]
    return passed[0] if passed else _na("; ".join(o.observed for o in judged))


@dataclass(frozen=True)
class UserOutcome:
    name: str
    about: str              # what the user got, in words
    source: str             # the record it follows from
    judge: Callable[[Record], Outcome]


OUTCOMES: dict[str, UserOutcome] = {o.name: o for o in (
    UserOutcome("effects_once", "each side effect the user asked for happened exactly once (none twice, none lost, "
                "none after they withdrew it)", "000 §What a client must do 7; 001 §What it means for an app",
                _effects_once),
    UserOutcome("truthful_claims", "what the user was told about a side effect was true at the moment it was said",
                "000 §Results 1 and 4; 001 §What it means for an app", _truthful),
    UserOutcome("conversation_back", f"after a loss that cut the path, a model reply again within {BACK_WITHIN_S:g} s "
                "of the path allowing a new connection (bound: assumption)", "000 §What a client must do 3 and 5",
                _back),
    UserOutcome("last_line_answered", "the user's last line got a reply", "000 §Results 3 (the user never told)",
                _answered),
    UserOutcome("owed_results_delivered", RULES["owed_results_delivered"].about, RULES["owed_results_delivered"].source,
                _rule("owed_results_delivered")),
    UserOutcome("no_invented_turn", RULES["no_spurious_reply"].about, RULES["no_spurious_reply"].source,
                _rule("no_spurious_reply")),
    UserOutcome("no_zombie_left", "no connection left open at the server once the path allowed the client to end it",
                "000 §What a client must do 3 and 4", _no_zombie),
)}

# the conformance rules behind each outcome: the how-to its FAIL points at
BEHIND: dict[str, tuple[str, ...]] = {
    "effects_once": ("dedupe_by_business_key", "status_from_backend"),
    "truthful_claims": ("ledger_old_id_after_resume", "status_from_backend"),
    "conversation_back": ("own_loss_detection", "resume_cutoff_fallback", "retry_refused_resume",
                          "close_reaches_server", "no_reliance_on_goaway"),
    "last_line_answered": ("own_loss_detection", "resume_cutoff_fallback", "no_reliance_on_goaway"),
    "owed_results_delivered": ("owed_results_delivered", "ledger_old_id_after_resume"),
    "no_invented_turn": ("no_spurious_reply",),
    "no_zombie_left": ("close_reaches_server", "leaves_zombie_connection"),
}


def judge_all(record: Record) -> dict[str, Outcome]:
    """Every user outcome of one run, in OUTCOMES order."""
    return {name: o.judge(record) for name, o in OUTCOMES.items()}


def tally(outcomes: dict[str, Any]) -> Counter:
    """How many outcomes passed, failed, were not applicable (Outcomes or their JSON)."""
    return Counter((o.get("status") if isinstance(o, dict) else o.status) for o in outcomes.values())
