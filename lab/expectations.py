"""What a scenario's `expect:` may say: each expectation a named, pure checker of a run's metrics.

    exp = resolve("bookings")          # an Expectation, or None for a name nobody defined
    exp.check(1, metrics)              # {name, expected, observed, held, note?, origin}

The scenario loader refuses any name `resolve` does not know (and a value of the wrong shape), so a
misspelt expectation never runs; the verdict evaluates through the same definitions. Besides the
named checkers below, two generic forms work on any scalar metric of `lab.metric_names`:

| form | expected | held when |
| --- | --- | --- |
| `<metric>` | value, or [lo, hi] (either may be null) | the metric equals it / lies in it |
| `max_<metric>` / `min_<metric>` | number | the metric is at most / at least it (absent = failed) |

Every row carries `origin`: `twin-input` when any metric it reads is a twin parameter echoed back
(lab.metric_names), else `emerged`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from lab import metric_names

# Keys of `expect:` that configure the report rather than check anything.
SETTINGS = {"status_question": "the user's line that asks for the action's status "
                               "(default: found by wording, lab.conversation.intents)"}


@dataclass(frozen=True)
class Expectation:
    name: str
    reads: tuple[str, ...]          # metric names (lab.metric_names)
    about: str
    takes: str                      # the expected value's shape, as a user reads it
    valid: Callable[[Any], bool]    # does an expected value have that shape
    judge: Callable[[Any, dict], tuple[Any, Any, bool, str | None]]   # (expected, m) -> shown, observed, held, note

    @property
    def origin(self) -> str:
        return (metric_names.TWIN_INPUT if any(metric_names.origin(r) == metric_names.TWIN_INPUT for r in self.reads)
                else metric_names.EMERGED)

    def check(self, expected: Any, m: dict[str, Any]) -> dict[str, Any]:
        shown, observed, held, note = self.judge(expected, m)
        return row(self.name, shown, observed, bool(held), note, self.origin)


def row(name: str, expected: Any, observed: Any, held: bool | None, note: str | None = None,
        origin: str | None = None) -> dict[str, Any]:
    """One verdict row; held None means the expectation was not checked."""
    r = {"name": name, "expected": expected, "observed": observed, "held": held, "origin": origin}
    if note:
        r["note"] = note
    return r


# ---- value shapes ---------------------------------------------------------------------------------
def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _range(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and len(v) == 2 and all(x is None or _number(x) for x in v)
            and not all(x is None for x in v))


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _value_or_range(v: Any) -> bool:
    return _range(v) or isinstance(v, (bool, int, float, str)) or v is None


def in_range(obs: Any, rng: Any) -> bool:
    """obs equals rng, or lies in [lo, hi] (a None bound is open); an absent obs never holds."""
    if obs is None:
        return False
    if isinstance(rng, (list, tuple)) and len(rng) == 2:
        lo, hi = rng
        return (lo is None or obs >= lo) and (hi is None or obs <= hi)
    return obs == rng


# ---- the named checkers ---------------------------------------------------------------------------
# How a verdict names the source of a run's truth when it is not the lab's backend (lab.report.effects)
TWIN_OBSERVATION = ("a twin observation: the calls it issued and the responses the app sent, with their status; "
                    "not the app's own record")


def _own_action(m: dict[str, Any]) -> bool:
    """The run's truth is about a conversation's own tools, or known other than from the lab's backend:
    its rows say which action and how it is known. A run with neither reads as it always did."""
    return m.get("tools_from", "booking default") != "booking default" or m.get("effects_from", "backend") != "backend"


def _about(m: dict[str, Any]) -> str:
    how = TWIN_OBSERVATION if m.get("effects_from") == "twin" else "the lab's backend"
    return f"{m.get('action')} ({how})"


def _said(cls: Any, m: dict[str, Any]) -> Any:
    """A claim class in the action's words ('refunded', 'not refunded'), for a run with its own action."""
    done = m.get("action_word") or "done"
    return {"booked": done, "not_booked": f"not {done}", "in_progress": "in progress"}.get(cls, cls)


def _told_truth(exp, m):
    want = "never" if exp in (None, "never") else bool(exp)
    got = "never" if m["told_truth"] is None else bool(m["told_truth"])
    truth = m["truth_at_answer"] or m["truth_final"]
    if not _own_action(m):
        return want, got, want == got, f"told {m['told']}, truth {truth}"
    return want, got, want == got, f"told {_said(m['told'], m)}, truth {_said(truth, m)}: {_about(m)}"


def _bookings(exp, m):
    note = None
    if _own_action(m):
        note = f"{m['bookings']} done of {m['booking_requests']} asked: {_about(m)}"
        if m.get("effects_from") == "twin" and m["booking_requests"] > m["bookings"]:
            # a response lost in a dead path hides an effect the app may well have made
            note += "; one not seen done may still have happened in the app (its response never reached the twin)"
    return exp, m["bookings"], in_range(m["bookings"], exp), note


def _all_refused(exp, m):
    got = m["accepted"] == 0 and m["refused"] > 0
    return bool(exp), got, got == bool(exp), f"{m['refused']} of {m['attempts']} refused, {m['accepted']} accepted"


def _refusal_code(exp, m):
    codes = sorted(m["refusal_codes"])
    held = bool(codes) and all(c == str(exp) for c in codes)
    return (exp, [int(c) if c.lstrip("-").isdigit() else c for c in codes], held,
            None if codes else "no refusal seen")


def _after_close(exp, m):
    obs = m["resumed_after_close_ms"]
    return exp, obs, in_range(obs, exp), None if obs is not None else "no resume after a close"


def _loss_to_audio(exp, m):
    obs = m["loss_to_first_audio_ms"]
    return exp, obs, obs is not None and obs <= exp, None if obs is not None else "no audio after recovery"


def _reissued(exp, m):
    got = m["tool_calls_reissued"] > 0
    return bool(exp), got, got == bool(exp), f"{m['tool_calls_reissued']} re-issued"


STOP_FAILURE_WORDS = ("booked_after_stop", "double_booking", "false_claim")


def _failure_set(v: Any) -> bool:
    return isinstance(v, list) and all(w in STOP_FAILURE_WORDS for w in v)


def _stop_failures_valid(v: Any) -> bool:
    """'none', a list of failure words, or {one_of: [lists]} (a branch the twin draws per run, by seed)."""
    if v == "none" or _failure_set(v):
        return True
    return (isinstance(v, dict) and set(v) == {"one_of"} and isinstance(v["one_of"], list) and bool(v["one_of"])
            and all(x == "none" or _failure_set(x) for x in v["one_of"]))


def _stop_failures(exp, m):
    got = sorted(m["stop_failures"] or [])
    options = exp["one_of"] if isinstance(exp, dict) else [exp]
    wanted = [sorted([] if o == "none" else o) for o in options]
    note = None if m["stop_failures"] is not None else "no stop in the record"
    return exp, got or "none", m["stop_failures"] is not None and got in wanted, note


def _replay_ok(exp, m):
    wrong, seen = m["wrong_replays"], m["transparent_resumes"]
    if seen is None:
        return bool(exp), None, False, "no twin.jsonl"
    got = seen > 0 and not wrong
    note = f"{seen} transparent resume(s), {m['replayed_messages']} message(s) owed; wrong: {', '.join(wrong) or 'none'}"
    return bool(exp), got, got == bool(exp), note


def _flag(metric: str):
    def judge(exp, m):
        return bool(exp), m[metric], m[metric] == bool(exp), None
    return judge


def _define(name, reads, about, takes, valid, judge) -> Expectation:
    return Expectation(name, tuple(reads.split()), about, takes, valid, judge)


NAMED: dict[str, Expectation] = {e.name: e for e in (
    _define("bookings", "bookings", "the action's effects done (backend commits, or as the twin observed)",
        "a count or [lo, hi]", _value_or_range, _bookings),
    _define("told_truth", "told_truth told truth_at_answer truth_final",
        "the status answer against the backend (never: the question was never answered)", "true, false or never",
        lambda v: v in (True, False, "never", None), _told_truth),
    _define("all_resumes_refused", "accepted refused attempts", "no attempt accepted and at least one refused",
        "true or false", _is_bool, _all_refused),
    _define("refusal_code", "refusal_codes", "every refusal carried this close code", "a close code",
        lambda v: isinstance(v, int) and not isinstance(v, bool), _refusal_code),
    _define("resumed", "resumed", "an attempt was accepted", "true or false", _is_bool, _flag("resumed")),
    _define("resumed_after_close_ms", "resumed_after_close_ms", "close of the old connection -> resumed setupComplete",
        "[lo, hi] ms", _range, _after_close),
    _define("max_loss_to_first_audio_ms", "loss_to_first_audio_ms", "loss -> first model audio after recovery "
        "(absent = failed)", "a number of ms", _number, _loss_to_audio),
    _define("fallback", "fallback", "a new session was opened by the fallback", "true or false", _is_bool,
        _flag("fallback")),
    _define("stop_failures", "stop_failures booked_after_stop bookings false_claims",
        "how the app failed the user after the stop (001): booked_after_stop, double_booking, false_claim",
        "none, a list of those words, or {one_of: [lists]}", _stop_failures_valid, _stop_failures),
    _define("replay_ok", "transparent_resumes replayed_messages wrong_replays",
        "at least one transparent resume, and the twin found every resend right: from the first unconsumed "
        "message, in order, each once, before new input (seed 004; none lost or duplicated)", "true or false",
        _is_bool, _replay_ok),
    _define("reissued_call", "tool_calls_reissued", "the model issued the tool call again under a new id",
        "true or false", _is_bool, _reissued),
)}


def _generic_equal(metric: str) -> Expectation:
    return Expectation(metric, (metric,), f"{metric} equals the value or lies in [lo, hi]", "a value or [lo, hi]",
                       _value_or_range, lambda exp, m: (exp, m[metric], in_range(m[metric], exp), None))


def _generic_bound(name: str) -> Expectation:
    metric, most = name[4:], name.startswith("max_")

    def judge(exp, m):
        obs = m[metric]
        return exp, obs, obs is not None and (obs <= exp if most else obs >= exp), None
    return Expectation(name, (metric,), f"{metric} is at {'most' if most else 'least'} the value", "a number",
                       _number, judge)


def resolve(name: str) -> Expectation | None:
    """The checker for an `expect:` name: a named one, or a generic form over a scalar metric."""
    if name in NAMED:
        return NAMED[name]
    scalars = metric_names.scalar_names()
    if name in scalars:
        return _generic_equal(name)
    if name[:4] in ("max_", "min_") and name[4:] in scalars:
        return _generic_bound(name)
    return None


def known_summary() -> str:
    """The known names, for an error message."""
    return (", ".join(sorted(NAMED)) + "; or <metric>, max_<metric>, min_<metric> for a metric of "
            "lab.metric_names (e.g. duplicate_bookings, max_refused, detection_ms); settings: "
            + ", ".join(sorted(SETTINGS)))


def evaluate(expect: dict[str, Any], m: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per expectation; a name no checker knows (an old record's) is a row with held None."""
    rows = []
    for name, exp in (expect or {}).items():
        if name in SETTINGS:
            continue
        checker = resolve(name)
        rows.append(checker.check(exp, m) if checker is not None
                    else row(name, exp, None, None, "not checked: unknown expectation"))
    return rows
