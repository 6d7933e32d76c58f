"""The names of a run's metrics: what each one is and where its value comes from.

Defined here, below both of their readers, because two rooms ask them and neither may import the
other's way: `lab.report.metrics` computes exactly these names (a unit test holds it to that), and
`lab.expectations` checks a scenario's `<metric>` and `max_/min_<metric>` expectations against
them while the report imports `lab.expectations` (so it cannot import `lab.report` back).

`origin` says whether a figure can be read as a finding (docs/DESIGN.md):

- `twin-input`: against the twin the figure is one of its profile parameters echoed back (`param`
  names it): the refusal code and delay, the resume setup time, the idle release. Agreement with the
  study there is by construction, not a result.
- `emerged`: the figure came out of the run: kernel timers, the client's logic, real packets, or a
  twin behaviour that no single parameter sets.
"""
from __future__ import annotations

from dataclasses import dataclass

TWIN_INPUT = "twin-input"
EMERGED = "emerged"


@dataclass(frozen=True)
class Metric:
    name: str
    about: str
    origin: str = EMERGED
    param: str | None = None        # the twin parameter a twin-input figure echoes
    scalar: bool = True             # a number, bool or string (an expectation may bound it); else a table
    # the scripted client action (lab.actions) without which the figure cannot exist: an app the lab
    # cannot ask it (a black box under --client-cmd or a framework) leaves an absent figure unjudged
    needs_action: str | None = None


def _m(name: str, about: str, origin: str = EMERGED, param: str | None = None, scalar: bool = True,
       needs_action: str | None = None) -> Metric:
    return Metric(name, about, origin, param, scalar, needs_action)


def needs_action(name: str) -> str | None:
    m = METRICS.get(name)
    return m.needs_action if m is not None else None


METRICS: dict[str, Metric] = {m.name: m for m in (
    # the record itself
    _m("complete", "the record ends with run.end"),
    _m("status", "run.end's status (ok, error, interrupted)"),
    _m("error", "run.end's error line"),
    _m("n_events", "events in the record"),
    _m("duration_ms", "run.start to the last event"),
    # the loss and its detection
    _m("loss_ms", "the agent's loss event (the first fault start or path-cutting action)"),
    _m("loss_kind", "what the loss was: fault:<kind> or action:<name>"),
    _m("loss_cuts_path", "the loss cut the path (false: it only degraded it; None: an old record)"),
    _m("loss_shape", "what the loss did to the path, as its fault kind or action declares it: cut, degrade, "
                     "zombie or armed (None: no loss, or a kind this lab does not know)"),
    _m("connections", "each connection: purpose, open, setup, close", scalar=False),
    _m("lost_conn", "the connection open at the loss"),
    _m("lost_conn_server_close_ms", "loss -> the server's own close of the lost connection reaching the client"),
    _m("detected_ms", "the client's first loss.detected after the loss"),
    _m("detection_ms", "loss -> the client detected it (its ping timing against the dead path)"),
    # resume attempts
    _m("resume_attempts", "each attempt with its outcome and latency", scalar=False),
    _m("attempts", "resume attempts"),
    _m("refused", "attempts refused"),
    _m("accepted", "attempts accepted"),
    _m("no_result", "attempts the record ends before answering"),
    _m("refusal_codes", "close code of each refusal, counted", TWIN_INPUT, "refuse_code", scalar=False,
       needs_action="resume"),
    _m("refusal_latency_ms", "attempt start -> its refusal (min, max, p50)", TWIN_INPUT, "refuse_close_s", scalar=False),
    _m("resumed", "an attempt was accepted"),
    _m("first_accept_latency_ms", "the accepted attempt's start -> its setupComplete", TWIN_INPUT, "resume_setup_s"),
    _m("first_accept_after_loss_ms", "loss -> the start of the accepted attempt"),
    _m("refused_before_accept", "refusals before the accepted attempt"),
    # recovery
    _m("recovered_ms", "the first resumed or new setupComplete after the loss"),
    _m("recovered_via", "resume or new"),
    _m("loss_to_setup_ms", "loss -> resumed or new setupComplete"),
    _m("first_audio_ms", "the first model audio after the recovery"),
    _m("loss_to_first_audio_ms", "loss -> the first model audio after the recovery"),
    _m("resumed_after_close_ms", "the old connection's (echoed) close -> the resumed setupComplete: the twin's resume "
       "setup time once idle_release_s has passed since the last data frame", TWIN_INPUT, "resume_setup_s",
       needs_action="close"),
    _m("close_ms", "the close that unlocked the session"),
    _m("fallback", "the client opened a new session by its fallback"),
    _m("fallback_note", "the fallback carried a status note"),
    _m("recovery", "the fallback's breakdown (the recovery.* entries)", scalar=False),
    _m("recovery.detection_ms", "loss -> detected"),
    _m("recovery.resume_window_ms", "detected -> the fallback started (the client's resume window)"),
    _m("recovery.new_setup_ms", "the new session's open -> setupComplete", TWIN_INPUT, "new_setup_s"),
    _m("recovery.restore_to_first_audio_ms", "restored -> the first model audio", TWIN_INPUT, "restore_first_audio_s"),
    _m("recovery.loss_to_first_audio_ms", "loss -> the first model audio after the recovery"),
    # the action's effects: the lab's backend, or (an app with tools of its own) what the twin observed
    _m("action", "the side-effecting tools the truth is about (the conversation's; book_slot before conversations)"),
    _m("tools_from", "where the tools' meaning came from: twin.conversation, conversation.json or booking default"),
    _m("action_word", "the action's own word for done ('booked', 'refunded'): how a verdict says the claims"),
    _m("effects_from", "how the effects are known: backend (the lab's) or twin (calls and responses it observed)"),
    _m("bookings", "effects done: backend commits, or side-effecting calls the twin saw answered done"),
    _m("booking_requests", "effects asked: backend requests, or side-effecting calls the twin issued"),
    _m("distinct_keys", "distinct business keys done"),
    _m("duplicate_bookings", "effects done beyond one per business key"),
    _m("commit_after_loss_ms", "loss -> each effect done", scalar=False),
    # tool calls
    _m("tool_calls", "distinct tool call ids"),
    _m("tool_calls_reissued", "the first call issued again under a new id"),
    _m("tool_dedups", "calls the backend answered from an existing job"),
    _m("pending_call_answered_after_resume", "a call pending at the loss answered on the resumed session"),
    # tool results by call id, as the twin received them (lab.report.tool_results; seed 003, pipecat#5465)
    _m("tool_results_missing", "call ids the twin issued that no tool response answered"),
    _m("tool_results_repeated", "call ids the twin received more than one response for"),
    _m("tool_results_unknown", "tool responses for an id the receiving session never issued"),
    _m("replies_per_tool_result", "most model lines between one tool response and the next user line"),
    _m("unscripted_user_turns", "user turns the twin heard beyond the scenario's lines"),
    # speech spoken during the gap (000 'Not tested'; lab.report.metrics.gap_speech_metrics)
    _m("speech_lines", "the user's lines spoken as audio"),
    _m("utterances_heard", "utterances the twin's VAD ended, every session (None: no twin record)"),
    _m("last_utterance_heard_ms", "audio time the twin heard in the last of them"),
    _m("speech_replayed", "lines cut by a loss that the client spoke again on the resumed session"),
    _m("speech_restored_as_text", "lines cut by a loss that a new session's restore carried as text"),
    _m("handle_updates", "resumption handle updates per connection", scalar=False),
    _m("max_handle_updates_per_conn", "most handle updates on one connection"),
    # what the user was told
    _m("asked_ms", "the status question was said"),
    _m("answer_ms", "its answer (its turn's transcript complete)"),
    _m("answer_said_ms", "its answer began to be heard (the turn's first audio): the moment its claim is judged at"),
    _m("answer_after_question_ms", "question -> answer"),
    _m("answer_text", "the model's answer"),
    _m("told", "what the answer claimed: booked, in_progress, not_booked, unknown, never"),
    _m("truth_at_answer", "the effects' state when answered (effects_from says how it is known)"),
    _m("truth_final", "the effects' state at the end"),
    _m("told_truth", "the claim matched the effects (None: never answered)"),
    _m("answers_heard", "model lines the user heard about the booking after the status question (2: told twice)"),
    _m("loss_to_answer_ms", "loss -> the status answer"),
    # while the server holds the lost session (lab.clients.held; lab.report.metrics.held_metrics)
    _m("new_sessions_failed", "new sessions the client could not open after the loss (fallback.new_failed)"),
    _m("loss_to_status_ms", "loss -> the client's first status line to the user (user.status) after it"),
    _m("false_status_lines", "the client's status lines after the loss that contradicted the backend at that moment"),
    _m("first_text_after_recovery", "the model's first words after the recovery"),
    _m("first_claim_after_recovery", "what they claimed"),
    # the stop study (001): what "stop" did to the call in flight, the backend, and what the user was told
    _m("stop_ms", "the user's stop line was said (the first user.say that withdraws the booking)"),
    _m("cancellations", "toolCallCancellation messages seen (the study: 0 in 41 sessions)"),
    _m("interrupted_after_stop_ms", "stop -> the first `interrupted` after it"),
    _m("calls_before_stop", "distinct tool call ids before the stop"),
    _m("calls_after_stop", "distinct tool call ids after the stop (re-issued or late)"),
    _m("first_call_after_stop_ms", "stop -> the first tool call after it"),
    _m("booked_after_stop", "backend commits after the stop"),
    _m("stop_statements", "what the user got after the stop (model turns, the client's status lines): "
       "the claim against the backend at that moment", scalar=False),
    _m("false_claims", "statements after the stop that contradicted the backend at that moment, not corrected "
       "by a later status line of the client"),
    _m("told_after_stop", "what the user was told last after the stop (the client's status line if any)"),
    _m("truth_after_stop", "the backend's state at that moment"),
    _m("told_truth_after_stop", "told_after_stop matched the backend (None: nothing said)"),
    _m("spoke_after_response", "model audio after the first tool response"),
    _m("stop_failures", "what the stop study counts as the app failing the user: booked_after_stop, "
       "double_booking, false_claim", scalar=False),
    # after the resume (002: a session with audio+video history fails some turns after its resume)
    _m("answers_after_resume", "model turns with text on the first accepted resumed connection (against the twin "
       "and a session with audio+video history: its av_resume_ok_utterances echoed back)", TWIN_INPUT,
       "av_resume_ok_utterances"),
    _m("resumed_failed", "the server closed the first accepted resumed connection with an error code "
       "(against the twin and audio+video history: its 002 rule)", TWIN_INPUT, "av_resume_ok_utterances"),
    _m("resumed_close_code", "that close's code (None: the server did not close it)", TWIN_INPUT, "av_fail_code"),
    _m("video_frames", "camera frames the client made (lab.clients.video)"),
    _m("resume_mitigations", "002's mitigations the twin saw at the first resume of an audio+video session, "
       "comma-joined (video_stopped, audio_stream_end, delayed, latest_handle; None: no such resume or no twin)"),
    # protocol observations (drift)
    _m("go_away", "goAway messages seen"),
    _m("transparent_requested", "the client asked for transparent resumption"),
    _m("transparent_refused", "the setup with transparent was closed 1007", TWIN_INPUT, "transparent_supported"),
    _m("transparent_resumes", "transparent resumes the twin accepted and checked (twin.replay owed; None: no twin.jsonl)"),
    _m("replayed_messages", "unconsumed messages those resumes owed the twin, summed"),
    _m("wrong_replays", "the twin's verdict on each wrong resend: resent_consumed, gap, duplicate, new_input_first",
       scalar=False),
    _m("server_closes", "close codes of connections the server closed", scalar=False),
    _m("twin", "the twin's own record: refusals, accepts, connection ends (None: no twin.jsonl)", TWIN_INPUT,
       scalar=False),
)}

TOP_LEVEL = tuple(n for n in METRICS if "." not in n)


def origin(name: str) -> str | None:
    """The origin of a metric name (a dotted recovery.* name included); None for an unknown name."""
    m = METRICS.get(name)
    return m.origin if m is not None else None


def scalar_names() -> list[str]:
    """Top-level metrics an expectation may compare or bound."""
    return [n for n in TOP_LEVEL if METRICS[n].scalar]
