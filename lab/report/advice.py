"""What to do about each FAIL: for every conformance rule and every expectation, what the run showed
(its figure), why it matters to the agent's user, and what to change, citing the study item.

Defined here once, keyed by name, and attached from outside the judges (lab/report/rules.py and
lab/expectations.py stay pure checkers): the verdict adds `advice` to each failed row, and the
terminal, summary.md, report.html and the JUnit files show that text.

    for_rule("own_loss_detection", outcome, metrics)   # Advice, or None unless the outcome is a FAIL
    for_expectation(row, metrics)                      # Advice for a failed verdict row, else None
    for_run(verdict)                                   # Advice for a run that failed with no row failing
    failures(verdict)                                  # [(what, advice text)]: every FAIL of a built verdict

A named expectation has an entry of its own; the generic forms (`<metric>`, `max_/min_<metric>`)
take their metric's topic (TOPICS), so every scalar metric of lab.metric_names belongs to one.
The citations: seeds 000 (resume), 001 (stop), 002 (audio+video resume), 003 (livekit/agents PR
#6481's review), 004 (the session-manager guide); fidelity.md by section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from lab import expectations, metric_names

FAIL = "fail"   # lab.report.rules.FAIL, said again: this module sits beside the rules, not above them


@dataclass(frozen=True)
class Advice:
    showed: str     # what the run showed, with its figure
    why: str        # why it matters to the user of the agent
    change: str     # what to change
    cite: str       # the study item it follows from

    def text(self) -> str:
        return f"{self.showed.rstrip('. ')}. {self.why} What to change: {self.change.rstrip('. ')}. [{self.cite}]"

    def to_json(self) -> dict[str, str]:
        return {"showed": self.showed, "why": self.why, "change": self.change, "cite": self.cite,
                "text": self.text()}


@dataclass(frozen=True)
class Entry:
    why: str
    change: str | Callable[[dict[str, Any]], str]     # a function of the run's metrics, when it depends on them
    cite: str

    def advise(self, showed: str, m: dict[str, Any] | None) -> Advice:
        change = self.change(m or {}) if callable(self.change) else self.change
        return Advice(showed, self.why, change, self.cite)


def _secs(ms: Any) -> str:
    return f"{float(ms) / 1000:.1f} s" if isinstance(ms, (int, float)) and not isinstance(ms, bool) else "never"


# ---- the rules (lab/report/rules.py RULES, by name) ------------------------------------------------
def _detection_change(m: dict[str, Any]) -> str:
    seen = (f"this client's own detector fired {_secs(m.get('detection_ms'))} after the loss; "
            if m.get("detection_ms") is not None else "")
    return (seen + "detect the dead path yourself: a WebSocket ping every 0.5 s and the loss declared after 2 s "
            "without a frame or a pong (the study's client detected it in 1.5-2.0 s), or watch the socket's "
            "unacknowledged data (TCP_INFO) as the reference client does. websockets' keepalive alone "
            "(20 s interval, 20 s timeout) takes up to 40 s, and the server never pings.")


RULE_ADVICE: dict[str, Entry] = {
    "ledger_old_id_after_resume": Entry(
        "Without the result for the call id pending at the loss the model stays at \"in progress\": asked "
        "\"Did you book it?\" it said it was still booking, 3 s after the booking had committed (3 of 3 runs).",
        "keep your own ledger of tool calls by call id across connections; after an accepted resume send the "
        "FunctionResponse for the old id, even when the side effect finished during the gap (the resumed "
        "session accepted it in 14 of 14 runs, up to 154 s after the call).",
        "seed 000, What a client must do 1; Results 1"),
    "retry_refused_resume": Entry(
        "A 1011 right after an idle drop is not a dead handle: a client that gives up there loses a session "
        "that a resume 1.5 s later restores (12 of 12 runs), and the user loses the conversation.",
        "retry a refused resume after about 1 s (or wait about 1.5 s after the drop before the first attempt) "
        "and keep the handle you have: only one arrives per connection.",
        "seed 000, What a client must do 2; Results 2"),
    "own_loss_detection": Entry(
        "On a silent loss no close, FIN or RST arrives and the server sends nothing for minutes (479 s idle in "
        "the study): until the client notices, the user talks into a dead line.",
        _detection_change,
        "seed 000, What a client must do 3; Results 3; fidelity.md section 5 (slow pongs)"),
    "close_reaches_server": Entry(
        "While the server holds the old connection every resume is refused with 1011 (40 of 40, 450 of 450 "
        "in the study); a close the server echoed unlocked the session, and the next resume worked 0.5-0.6 s "
        "later (6 of 6).",
        "when the path comes back, close the old connection (a close frame, 1000) before resuming; dropping "
        "the socket object without a close leaves the session locked.",
        "seed 000, What a client must do 4; Results 3"),
    "resume_cutoff_fallback": Entry(
        "After a silent loss on a path that does not come back the session stayed locked for the 15 minutes "
        "tried; a resume loop without a fallback got 118 refusals of 118 and never told the user anything.",
        "put a short cut-off on resuming (the reference pattern: 4 s, one attempt per second) and then open a "
        "new session without a handle, restored from your transcript and a status note; it reached first "
        "audio 6.1-7.1 s after the loss.",
        "seed 000, What a client must do 5; Results 3 and 4"),
    "status_from_backend": Entry(
        "Without each side effect's status the new session's model re-issued the call (2 of 2 runs) and its "
        "first sentence announced a booking in progress that was already done.",
        "restore the new session with a \"System note\": one status line per side effect, read from your "
        "backend (not from the model's words), in the same restore as the transcript (the Live API: one "
        "send_client_content; OpenAI Realtime: conversation items and a system message, no response.create); "
        "with it the model said the truth first and re-issued nothing (0 of 7).",
        "seed 000, What a client must do 6; Results 4"),
    "dedupe_by_business_key": Entry(
        "The user is booked twice: a re-issued call carries a new id, so only the business key ties it to the "
        "first (the BLOCKING stop runs committed both bookings, 3 of 3).",
        "deduplicate side effects by business key (the slot), in a new session too, and answer a repeated "
        "call from the existing job.",
        "seed 000, What a client must do 7; seed 001, What it means for an app"),
    "no_transparent_mode": Entry(
        "On the Gemini Developer API the server closes a setup that asks for transparent resumption with 1007: "
        "the session never starts and the user gets no answer.",
        "drop `transparent` from SessionResumptionConfig on the Developer API (the session-manager guide, "
        "seed 004, always sets it) and buffer what you need to replay yourself.",
        "seed 000, What a client must do 8; Other findings"),
    "no_reliance_on_goaway": Entry(
        "A goAway may never come (none in any of 43 sessions; a frozen connection was ended by a 1011 close): "
        "a client that moves only on goAway is left without a session, and the user with silence.",
        "treat the server's close (1011, 1000, a TCP timeout) as the cue to resume with the latest handle, "
        "falling back to a new session; do not wait for goAway.",
        "seed 000, What a client must do 9; fidelity.md section 5 (session lifecycle)"),
    "owed_results_delivered": Entry(
        "A tool result that never reaches the session that issued the call leaves the model waiting: the turn "
        "hangs or the user hears \"in progress\"; one sent to another session answers an id it never issued.",
        "buffer every tool result by call id and session until that session has it, replay all of them (not "
        "only the last: a single-slot buffer loses the earlier ones) after the reconnect, including results "
        "that finish while no session is open, and never send a result to a session that did not issue the "
        "call.",
        "seed 000, Results 1 and What a client must do 1; seed 003, review (lost and overwritten results)"),
    "no_spurious_reply": Entry(
        "An injected user turn (the \".\" nudge after a replayed result) makes the model answer twice: the "
        "user hears a second, unrelated reply, or the first is cut off.",
        "after replaying a tool result send nothing else: Gemini Live generates on its own after a function "
        "response; never send a user turn the user did not say.",
        "seed 003, review (the '.' nudge after the replay)"),
    "leaves_zombie_connection": Entry(
        "On a zombie path (a VPN's path-MTU black hole) small frames still pass, so pings may be answered, "
        "while the server's audio vanishes: the user hears nothing and nobody closes.",
        "judge liveness by the data you expect as well as by pongs (audio that stops mid-turn, bytes left "
        "unacknowledged in TCP_INFO) and, on it, leave the connection: resume or open a new session.",
        "seed 000, What a client must do 3; scenario m4 (path-MTU black hole)"),
    "no_false_alarm": Entry(
        "On a path that is only slow or lossy TCP retransmits and the session lives; a client that leaves it "
        "interrupts the user for nothing, and its resume may be refused 1011 while the server still holds the "
        "old connection.",
        "declare a loss on a window longer than the path's delay and jitter (no frame and no pong for 2 s or "
        "more, or TCP_INFO's unacknowledged data growing), not on one late pong; Gemini's pongs have been seen "
        "8-30 s late.",
        "seed 000, What a client must do 3 and Results 3; scenario h1; fidelity.md section 5 (slow pongs)"),
}


def for_rule(name: str, outcome: Any, metrics: dict[str, Any] | None = None) -> Advice | None:
    """The advice for a rule's FAIL (an Outcome or its JSON); None for a pass or an n/a."""
    status = outcome.get("status") if isinstance(outcome, dict) else getattr(outcome, "status", None)
    if status != FAIL:
        return None
    observed = outcome.get("observed") if isinstance(outcome, dict) else outcome.observed
    return RULE_ADVICE[name].advise(str(observed), metrics)


# ---- the user outcomes (lab/report/outcomes.py OUTCOMES, by name) ----------------------------------
OUTCOME_ADVICE: dict[str, Entry] = {
    "effects_once": Entry(
        "The user asked for one thing: twice is a double charge or booking, none is a promise broken, and one "
        "after they said stop is the thing they withdrew.",
        "key every side effect by its business key (the slot, the order) and do it once whatever the call id; "
        "after a new session, tell the model the effect's status instead of letting it call again; honour a "
        "stop by holding or cancelling the pending effect.",
        "seed 000, What a client must do 6 and 7; seed 001, What it means for an app"),
    "truthful_claims": Entry(
        "What the user is told is what they act on: a booking said done that is not, or said pending that is "
        "done, sends them the wrong way.",
        "take the side effect's status from your backend, not from the model's memory: send the owed result "
        "after a resume, or restore a new session with a status note, and correct the model when it is wrong.",
        "seed 000, Results 1, 3 and 4; What a client must do 1 and 6"),
    "conversation_back": Entry(
        "After a loss the user waits in silence until a session answers again: the study's client waited the "
        "whole outage (minutes of 1011 refusals) while a new session was possible at once.",
        "detect the dead path yourself (a ping every 0.5 s, 2 s of silence), resume if the server allows it, "
        "and otherwise fall back to a new session within seconds, restored from your transcript and a status "
        "note (OpenAI Realtime has no resume: a new socket is a new, empty session, so open it at once and never "
        "send the old call_id's result into it).",
        "seed 000, What a client must do 3 and 5; Results 3 and 4"),
    "last_line_answered": Entry(
        "The user's last words went unanswered: to them the agent hung up.",
        "keep a session the user can talk to: reconnect after a loss or a goAway, and say again (or restore) "
        "a line that a dead connection swallowed.",
        "seed 000, What a client must do 3, 5 and 9"),
    "owed_results_delivered": Entry(
        RULE_ADVICE["owed_results_delivered"].why, RULE_ADVICE["owed_results_delivered"].change,
        RULE_ADVICE["owed_results_delivered"].cite),
    "no_invented_turn": Entry(
        RULE_ADVICE["no_spurious_reply"].why, RULE_ADVICE["no_spurious_reply"].change,
        RULE_ADVICE["no_spurious_reply"].cite),
    "no_zombie_left": Entry(
        "A connection left open holds the session at the server: every resume is refused while it lives, and "
        "the client's resources leak.",
        "end the old connection yourself once the path is back (a close the server sees), and leave a "
        "connection whose replies stopped.",
        "seed 000, What a client must do 3 and 4"),
}


def for_outcome(name: str, outcome: Any, metrics: dict[str, Any] | None = None,
                rules_failed: list[str] | tuple[str, ...] = ()) -> Advice | None:
    """The advice for a user outcome's FAIL, naming the conformance rules behind it that failed (the
    how-to); None for a pass or an n/a."""
    status = outcome.get("status") if isinstance(outcome, dict) else getattr(outcome, "status", None)
    if status != FAIL:
        return None
    observed = outcome.get("observed") if isinstance(outcome, dict) else outcome.observed
    a = OUTCOME_ADVICE[name].advise(str(observed), metrics)
    if rules_failed:
        a = Advice(a.showed, a.why, f"{a.change.rstrip('. ')}; the rules behind it that failed: "
                                    f"{', '.join(rules_failed)}", a.cite)
    return a


# ---- the expectations (lab/expectations.py), named ones and the generic forms by metric ------------
def _want(row: dict[str, Any]) -> bool:
    return bool(row.get("expected"))


def _twin_or_drift(what: str) -> str:
    return (f"against the twin, {what} is the twin's behaviour and the scenario's own claim: check the twin's "
            "profile (lab/twin/profiles) against fidelity.md and the expectation against its seed; against the "
            "live service it is drift: record it with `lab drift`.")


EXPECTATION_ADVICE: dict[str, Entry] = {
    "bookings": Entry(
        "The backend is the ground truth: a count other than the one asked for is a user booked twice or not "
        "at all.",
        lambda m: ("deduplicate by business key and answer a re-issued call from the existing job"
                   if (m.get("bookings") or 0) > 1 else
                   # an app with tools of its own: the lab knows its effects only from the responses it sends
                   "send each side-effecting call's result to the session that asked, also after a resume (a "
                   "ledger by call id across connections): the twin counts an effect from the response it sees"
                   if m.get("effects_from") == "twin" else
                   "make sure the tool call reaches the backend and its result the model (a ledger by call id "
                   "across connections)"),
        "seed 000, What a client must do 1 and 7; seed 001"),
    "told_truth": Entry(
        "What the user was told about the booking is what they act on; the study's user was never told after a "
        "silent loss, and told \"in progress\" after a resume without the result.",
        "take the booking's status from the backend, not from the model: send the owed result after a resume, "
        "or restore a new session with a status note; where the scenario expects \"never\", the twin answered "
        "where the study's model did not: check the scenario.",
        "seed 000, Results 1, 3 and 4; What a client must do 1 and 6"),
    "all_resumes_refused": Entry(
        "The scenario reproduces the study's lockout (every resume refused while the server holds the old "
        "connection); where that did not happen the run shows something else than the study did.",
        lambda m: _twin_or_drift(f"{m.get('accepted', 0)} accepted resume(s)"),
        "seed 000, Results 2 and 3"),
    "refusal_code": Entry(
        "Clients decide what a refusal means by its close code (the study saw 1011 for every refusal); a client "
        "that treats 1011 as a dead handle gives up too early.",
        lambda m: _twin_or_drift("the refusal code"),
        "seed 000, Results 2 and 3; fidelity.md section 5 (error channel)"),
    "resumed": Entry(
        "Whether a resume was accepted decides whether the user keeps the conversation or gets a restored one.",
        "where a resume was expected: close the old connection before resuming and retry a refused resume "
        "after ~1 s; where none was expected, the twin accepted what the study's server refused: check the "
        "twin's profile.",
        "seed 000, What a client must do 2 and 4; Results 2 and 3"),
    "resumed_after_close_ms": Entry(
        "The close is what unlocks the session: the study's next resume worked 0.5-0.6 s after the echoed "
        "close.",
        "close the old connection before resuming, then resume at once (the figure is the twin's resume setup "
        "time, a twin input: outside the range, check the twin's profile).",
        "seed 000, Results 3 (closing the old connection unlocks it)"),
    "max_loss_to_first_audio_ms": Entry(
        "This is how long the user waits in silence after the loss; the reference recovery took 6.1-7.1 s, "
        "most of it the resume window.",
        "shorten what adds up: detection (pings every 0.5 s, lost after 2 s), the resume window (4 s), then a "
        "new session with a status note.",
        "seed 000, Results 4 (the breakdown)"),
    "fallback": Entry(
        "Without a fallback a client locked out of its session never reaches the user again (118 of 118 "
        "refusals, never told).",
        "after a short resume cut-off open a new session without a handle and restore it from your transcript "
        "and a status note from the backend.",
        "seed 000, What a client must do 5; Results 4"),
    "stop_failures": Entry(
        "\"Stop\" has to be handled by the app: the API sent no toolCallCancellation in 41 sessions, so a "
        "booking goes ahead and the model may claim what the backend contradicts.",
        "hold the side effect for a short grace window after the call, cancel it on the user's stop, "
        "deduplicate repeated calls by business key, and take the status from the backend, not from the "
        "model's sentence.",
        "seed 001, What it means for an app"),
    "replay_ok": Entry(
        "A transparent resume owes the server every unconsumed message, in order, once, before new input; a gap "
        "or a duplicate corrupts the conversation the user is in.",
        "keep a buffer of sent messages indexed from 1, prune it by lastConsumedClientMessageIndex, and resend "
        "what is left first on the new connection, the first of them with index 1 (on the Developer API "
        "transparent mode is refused: buffer yourself instead).",
        "seed 004, Message buffering and Reconnection with message replay; seed 000, Other findings"),
    "reissued_call": Entry(
        "A re-issued call (a new id for the same booking) is what books the user twice unless the app "
        "deduplicates it; the study's model re-issued it without a status note (2 of 2).",
        "restore a new session with a status note from the backend, and deduplicate by business key whatever "
        "the model does.",
        "seed 000, Results 4; seed 001, BLOCKING"),
}

# every scalar metric's topic: the advice for a generic `<metric>` / `max_` / `min_` expectation
TOPICS: dict[str, tuple[tuple[str, ...], Entry]] = {
    "record": (("complete", "status", "error", "n_events", "duration_ms"), Entry(
        "A run that did not finish judges nothing: the user's side of it was never seen.",
        "read run.end's error in events.jsonl and the client's log in the run folder, and fix the client's "
        "start (its module, its command, its venv) or the scenario.",
        "docs/DESIGN.md (a verdict: no checks is never a pass)")),
    "loss and detection": (("loss_ms", "loss_kind", "loss_cuts_path", "loss_shape", "lost_conn",
                            "lost_conn_server_close_ms", "detected_ms", "detection_ms"), Entry(
        RULE_ADVICE["own_loss_detection"].why, _detection_change,
        "seed 000, What a client must do 3; Results 3")),
    "resume": (("attempts", "refused", "accepted", "no_result", "resumed", "first_accept_latency_ms",
                "first_accept_after_loss_ms", "refused_before_accept", "resumed_after_close_ms", "close_ms",
                "max_handle_updates_per_conn"), Entry(
        "How the resumes went decides whether the user keeps the conversation: refused while the server holds "
        "the old connection, accepted 0.5-0.6 s after the client's close.",
        "close the old connection when the path comes back, retry a refusal right after an idle drop after "
        "~1 s, keep the latest handle (one per connection), and cut resuming off after a few seconds.",
        "seed 000, What a client must do 2, 4 and 5; Results 2 and 3")),
    "recovery": (("recovered_ms", "recovered_via", "loss_to_setup_ms", "first_audio_ms", "loss_to_first_audio_ms",
                  "fallback", "fallback_note", "new_sessions_failed", "loss_to_status_ms", "false_status_lines",
                  "first_text_after_recovery", "first_claim_after_recovery"), Entry(
        "This is the user's wait and what they hear first after the loss; the reference recovery reached first "
        "audio 6.1-7.1 s after the loss and its first sentence told the truth.",
        "after a short resume window fall back to a new session restored with a status note from the backend; "
        "while no session opens, tell the user the backend's status yourself.",
        "seed 000, What a client must do 5 and 6; Results 4")),
    "bookings and tool calls": (("action", "action_word", "tools_from", "effects_from", "bookings", "booking_requests",
                                 "distinct_keys", "duplicate_bookings", "tool_calls", "tool_calls_reissued",
                                 "tool_dedups"), EXPECTATION_ADVICE["bookings"]),
    "tool results": (("pending_call_answered_after_resume", "tool_results_missing", "tool_results_repeated",
                      "tool_results_unknown", "replies_per_tool_result", "unscripted_user_turns"),
                     Entry(RULE_ADVICE["owed_results_delivered"].why,
                           RULE_ADVICE["owed_results_delivered"].change + " " + RULE_ADVICE["no_spurious_reply"].change,
                           "seed 000, Results 1; seed 003, review")),
    "speech in the gap": (("speech_lines", "utterances_heard", "last_utterance_heard_ms", "speech_replayed",
                           "speech_restored_as_text"), Entry(
        "Speech cut by a drop is partly repeated after a resume, or lost: the model answers half a sentence.",
        "keep the user's audio since the last turn the server acknowledged and, after a resume, send it again "
        "(or carry it as text in a new session's restore).",
        "seed 000, What a client must do 10; Not tested")),
    "what the user was told": (("asked_ms", "answer_ms", "answer_after_question_ms", "answer_text", "told",
                                "truth_at_answer", "answer_said_ms", "truth_final", "told_truth", "answers_heard",
                                "loss_to_answer_ms"), EXPECTATION_ADVICE["told_truth"]),
    "stop": (("stop_ms", "cancellations", "interrupted_after_stop_ms", "calls_before_stop", "calls_after_stop",
              "first_call_after_stop_ms", "booked_after_stop", "false_claims", "told_after_stop", "truth_after_stop",
              "told_truth_after_stop", "spoke_after_response"), EXPECTATION_ADVICE["stop_failures"]),
    "audio and video resume": (("answers_after_resume", "resumed_failed", "resumed_close_code", "video_frames",
                                "resume_mitigations"), Entry(
        "A session that carried audio and video fails some turns after its resume with a 1007 close, whatever "
        "the client's hygiene: the user is cut off mid-conversation.",
        "after resuming a session with video history be ready for that close: fall back to a new session "
        "restored from the transcript (stopping video, audioStreamEnd and a delay did not help in the report).",
        "seed 002, Key observations and Mitigations already tried")),
    "protocol": (("go_away", "transparent_requested", "transparent_refused", "transparent_resumes",
                  "replayed_messages"), Entry(
        "The Developer API refuses transparent resumption (1007) and sent no goAway in 43 sessions: a client "
        "built on either waits for something that does not come.",
        "do not ask for transparent mode on the Developer API and do not wait for goAway: buffer what you need "
        "and resume on any close.",
        "seed 000, What a client must do 8 and 9; seed 004")),
}
_TOPIC_OF = {metric: topic for topic, (metrics, _) in TOPICS.items() for metric in metrics}


def topic_of(metric: str) -> str | None:
    return _TOPIC_OF.get(metric)


def _generic_metric(name: str) -> str | None:
    if name in _TOPIC_OF:
        return name
    if name[:4] in ("max_", "min_") and name[4:] in _TOPIC_OF:
        return name[4:]
    return None


def _showed(row: dict[str, Any]) -> str:
    note = f" ({row['note']})" if row.get("note") else ""
    origin = " [a twin input echoed back]" if row.get("origin") == metric_names.TWIN_INPUT else ""
    return f"{row['name']}: expected {row.get('expected')!r}, observed {row.get('observed')!r}{note}{origin}"


def entry_for_expectation(name: str) -> Entry | None:
    """The advice entry of an expectation name (a named one, or a generic form's metric topic)."""
    if name in EXPECTATION_ADVICE:
        return EXPECTATION_ADVICE[name]
    metric = _generic_metric(name)
    if metric is not None and expectations.resolve(name) is not None:
        return TOPICS[_TOPIC_OF[metric]][1]
    return None


def for_expectation(row: dict[str, Any], metrics: dict[str, Any] | None = None) -> Advice | None:
    """The advice for a verdict row that failed (held False); None otherwise or for an unknown name."""
    if row.get("held") is not False:
        return None
    entry = entry_for_expectation(str(row.get("name")))
    return entry.advise(_showed(row), metrics) if entry is not None else None


BROKEN_STATUS = ("error", "failed", "aborted", "interrupted")    # run.end statuses the verdict fails on


def for_run(verdict: dict[str, Any]) -> Advice | None:
    """The run's own advice when it failed for its record (truncated, ended in an error: whatever its
    rows say then is a symptom) or with nothing checked; None when it passed or its rows say why."""
    if verdict.get("pass") or verdict.get("passed"):
        return None
    m = verdict.get("metrics") or {}
    notes = "; ".join(verdict.get("notes") or []) or "the run did not pass"
    if not m.get("complete") or str(m.get("status")).lower() in BROKEN_STATUS:
        return TOPICS["record"][1].advise(notes, m)
    if any(r.get("held") is False for r in verdict.get("expectations", [])) or any(
            o.get("status") == FAIL for o in (verdict.get("outcomes") or {}).values()):
        return None
    return Advice(notes, "A run with nothing judged cannot tell the user's side of it.",
                  "give the user something to say that the agent must answer (the scenario's lines, or "
                  "--conversation), so its outcomes can be judged (docs/truth.md).",
                  "docs/DESIGN.md (a verdict)")


def failures(verdict: dict[str, Any]) -> list[tuple[str, str]]:
    """Each FAIL of a verdict (its expectations, the run itself, its rules) with what to change, as the
    verdict holds it: what the terminal prints under a run."""
    out = [(f"user outcome {n}", o.get("advice") or str(o.get("observed")))
           for n, o in (verdict.get("outcomes") or {}).items() if o.get("status") == FAIL]
    out += [(f"{'reproduction' if r.get('kind') == 'reproduction' else 'expectation'} {r['name']}",
             r.get("advice") or f"observed {r.get('observed')!r}")
            for r in verdict.get("expectations") or [] if r.get("held") is False]
    out += [("run", verdict["advice"])] if verdict.get("advice") else []
    return out + [(f"rule {n}", o.get("advice") or str(o.get("observed")))
                  for n, o in (verdict.get("rules") or {}).items() if o.get("status") == FAIL]
