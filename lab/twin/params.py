"""The twin's parameter declarations: every name the twin reads, once, with the shape of its value.

A profile (lab.twin.profile) is checked against DECLARED when it is loaded, so a profile file or a
`--set` with an unknown name or a value of the wrong shape fails with one line before the twin
listens. The rooms that read parameters (session, turns, the model, the shell) name them in small
frozen dataclasses built by `read_view()` at construction: a field that is not declared here
raises UnknownParameter then, never later inside a timer.

Shapes: Number (optionally integer, bounded, nullable), Delay (seconds: a number, a [lo, hi]
range drawn uniformly per event, or a quantile table {min, pNN.., max} sampled by inverse CDF, see
lab.stats.quantiles), Flag (true/false), Text (optionally matching a pattern), Choice (one of a
few words, case-insensitive), Lines (a list of strings; `--set a | b` on the command line).

Knows nothing of files, YAML, sockets, clocks or what the parameters mean to a session.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, TypeVar

from lab.errors import LabError
from lab.protocols import GEMINI, OPENAI, PROTOCOLS
from lab.stats.distributions import is_number, is_range
from lab.stats.quantiles import BadTable, Quantiles


class UnknownParameter(LabError, KeyError):
    """A parameter name the twin does not declare (a KeyError too, for callers that index)."""

    __str__ = Exception.__str__     # KeyError would quote the whole message


class BadParameter(LabError):
    """A parameter value of the wrong shape."""


def _number_from_text(v: Any) -> Any:
    # YAML reads "1e3" as a string; a number written that way on the command line is still a number
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


@dataclass(frozen=True)
class Spec:
    nullable: bool = False

    def check(self, name: str, value: Any) -> Any:
        """The value in its canonical form, or BadParameter naming the parameter."""
        if value is None:
            if self.nullable:
                return None
            raise BadParameter(f"bad value for {name}: null (expected {self.expected()})")
        try:
            out = self._check(value)
        except BadTable as e:         # a shape that can say what is wrong says it
            raise BadParameter(f"bad value for {name}: {e} (expected {self.expected()})") from None
        if out is _BAD:
            raise BadParameter(f"bad value for {name}: {value!r} (expected {self.expected()})")
        return out

    says: ClassVar[str] = ""        # what a value looks like, for the error line

    def expected(self) -> str:
        return self._says() + (" or null" if self.nullable else "")

    def _says(self) -> str:
        return self.says

    def _check(self, value: Any) -> Any:
        raise NotImplementedError


_BAD = object()


@dataclass(frozen=True)
class Number(Spec):
    lo: float | None = None
    hi: float | None = None
    integer: bool = False

    def _says(self) -> str:
        what = "an integer" if self.integer else "a number"
        if self.lo is not None and self.hi is not None:
            what += f" in [{self.lo:g}, {self.hi:g}]"
        elif self.lo is not None:
            what += f" >= {self.lo:g}"
        return what

    def _check(self, value: Any) -> Any:
        value = _number_from_text(value)
        if not is_number(value):
            return _BAD
        if self.integer:
            if value != int(value):
                return _BAD
            value = int(value)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return _BAD
        return value


@dataclass(frozen=True)
class Delay(Spec):
    """Seconds: one number, a [lo, hi] range drawn uniformly per event, or a quantile table of a
    recorded distribution (a mapping {min: .., p50: .., max: ..}) sampled per event by inverse CDF."""
    says: ClassVar[str] = "seconds >= 0, [lo, hi] or a quantile table {min: .., pNN: .., max: ..}"

    def _check(self, value: Any) -> Any:
        value = _number_from_text(value)
        if is_number(value):
            return value if value >= 0 else _BAD
        if is_range(value) and 0 <= value[0] <= value[1]:
            return list(value)
        if isinstance(value, Mapping):
            value = Quantiles.parse(value)      # BadTable says which quantile is wrong
        if isinstance(value, Quantiles):
            if value.lo < 0:
                raise BadTable(f"min = {value.lo:g} is below 0 s")
            return value
        return _BAD


@dataclass(frozen=True)
class Flag(Spec):
    says: ClassVar[str] = "true or false"

    def _check(self, value: Any) -> Any:
        return value if isinstance(value, bool) else _BAD


@dataclass(frozen=True)
class Text(Spec):
    pattern: str | None = None
    hint: str = "a string"

    def _says(self) -> str:
        return self.hint

    def _check(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return _BAD
        value = str(value)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return _BAD
        return value


@dataclass(frozen=True)
class Choice(Spec):
    options: tuple[str, ...] = ()

    def _says(self) -> str:
        return "one of " + ", ".join(self.options)

    def _check(self, value: Any) -> Any:
        if not isinstance(value, str):
            return _BAD
        for opt in self.options:
            if opt.lower() == value.strip().lower():
                return opt
        return _BAD


@dataclass(frozen=True)
class Lines(Spec):
    says: ClassVar[str] = "a list of strings (on the command line: a | b)"

    def _check(self, value: Any) -> Any:
        if isinstance(value, str):
            value = [x.strip() for x in value.split("|")]
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
            return _BAD
        return list(value)


@dataclass(frozen=True)
class Subset(Spec):
    """A list of names, each one of `options` (an empty list is valid)."""
    options: tuple[str, ...] = ()

    def _says(self) -> str:
        return "a list of: " + ", ".join(self.options)

    def _check(self, value: Any) -> Any:
        value = Lines()._check(value)
        if value is _BAD or not all(x in self.options for x in value):
            return _BAD
        return value


# the client-side mitigations 002 tried that the twin can see at a resume (lab.twin.session)
AV_MITIGATIONS = ("video_stopped", "audio_stream_end", "delayed", "latest_handle")

CLOSE_CODE = Number(lo=1000, hi=4999, integer=True)
SECONDS = Number(lo=0)

DECLARED: dict[str, Spec] = {
    # wire
    "frame_type": Choice(options=("binary", "text")),
    "max_client_frame_bytes": Number(lo=1, integer=True, nullable=True),
    "bad_input_code": CLOSE_CODE,
    "bad_input_close_s": SECONDS,
    "ping_interval": Number(lo=0, nullable=True),
    "ping_timeout": Number(lo=0, nullable=True),
    # setup and resumption
    "new_setup_s": Delay(),
    "resume_setup_s": Delay(),
    "refuse_close_s": Delay(),
    "resume_hang_s": Delay(nullable=True),
    "refuse_code": CLOSE_CODE,
    "refuse_reason": Text(),
    "idle_release_s": SECONDS,
    "speaking_release_immediate": Flag(),
    "unknown_handle_code": CLOSE_CODE,
    "handle_updates": Choice(options=("once", "per_turn")),
    "handle_update_delay_s": Delay(nullable=True),
    "resumed_handle_update_delay_s": Delay(),
    "transparent_supported": Flag(),
    "transparent_reject_code": CLOSE_CODE,
    "transparent_reject_reason": Text(),
    "setup_error_close_s": SECONDS,
    "replay_check": Choice(options=("log", "close")),
    "replay_reject_code": CLOSE_CODE,
    "replay_reject_reason": Text(),
    "handle_expiry_s": Number(lo=0, nullable=True),
    "reject_text_only": Flag(),
    # the server ending connections itself
    "freeze_close_s": Number(lo=0, nullable=True),
    "freeze_close_code": CLOSE_CODE,
    "freeze_close_reason": Text(),
    "server_close_kills_session": Flag(),
    "goaway_after_s": Number(lo=0, nullable=True),
    "goaway_time_left": Text(pattern=r"\d+(\.\d+)?s", hint="a duration like '50s'"),
    "goaway_close_code": CLOSE_CODE,
    "goaway_close_reason": Text(),
    # error channel, lifecycle and the server's own faults (the wire room)
    "key_refusal": Choice(options=("close", "http")),
    "wrong_key_code": CLOSE_CODE,
    "wrong_key_reason": Text(),
    "missing_key_code": CLOSE_CODE,
    "missing_key_reason": Text(),
    "served_models": Lines(),
    "unknown_model_code": CLOSE_CODE,
    "unknown_model_reason": Text(hint="a string; {model} and {version} are filled in"),
    "native_audio_models": Lines(),
    "text_only_reason": Text(),
    "mixed_modalities_reason": Text(),
    "role_required_models": Text(hint="a regular expression over the model name"),
    "roleless_turn_reason": Text(),
    "quota_exhausted": Flag(),
    "quota_code": CLOSE_CODE,
    "quota_reason": Text(),
    "held_sessions_max": Number(lo=1, integer=True, nullable=True),
    "connection_max_s": Number(lo=0, nullable=True),
    "goaway_lead_s": Number(lo=0),
    "goaway_resume_release_s": SECONDS,
    "session_max_audio_s": Number(lo=0, nullable=True),
    "session_max_av_s": Number(lo=0, nullable=True),
    "session_cap_code": CLOSE_CODE,
    "session_cap_reason": Text(),
    "tcp_user_timeout_s": Number(lo=0, nullable=True),
    "fin_after_close": Flag(),
    "slow_pongs": Flag(),
    "pong_delay_s": Delay(),
    "stall": Flag(),
    "unresumable_updates": Flag(),
    # audio + video history (002): post-resume utterances that work before the 1007 (null: no rule),
    # and which mitigations the client can take that avoid it
    "av_resume_ok_utterances": Number(lo=0, integer=True, nullable=True),
    "av_resume_helped_by": Subset(options=AV_MITIGATIONS),
    "av_fail_code": CLOSE_CODE,
    "av_fail_reason": Text(),
    # scripted model
    "script": Lines(),
    "tool_name": Text(),
    "tool_slot": Text(),
    "default_tool_behavior": Choice(options=("NON_BLOCKING", "BLOCKING")),
    "tool_call_delay_s": Delay(),
    "reply_delay_s": Delay(),
    "response_reply_delay_s": Delay(),
    "reissue_delay_s": Delay(),
    "restore_first_audio_s": Delay(),
    "stop_while_pending_reply": Text(),
    # the stop study (001, fidelity.md section 4): what "stop" does to an in-flight call
    "stop_claim_delay_s": Delay(),
    "silent_after_stop_response_p": Number(lo=0, hi=1),
    "reissue_p": Number(lo=0, hi=1),
    "stop_contradict_reply": Text(),
    "stop_after_commit_reply": Text(),
    "early_stop_call_p": Number(lo=0, hi=1),
    "early_stop_call_delay_s": Delay(),
    "reissue_text_p": Number(lo=0, hi=1),
    "restore_reissue_call_s": Delay(),
    "restore_reissue_say_s": Delay(),
    "text_interrupt_s": Delay(),
    "conversation_scope": Choice(options=("client", "session")),
    "vad_threshold_rms": Number(lo=0),
    "vad_onset_ms": Number(lo=0),
    "vad_silence_ms": Number(lo=0),
    "speech_ms_per_char": Number(lo=0),
    "audio_chunk_ms": Number(lo=1),
    "tone_hz": Number(lo=0),
    # turn order and realtimeInputConfig (read by lab.twin.turns)
    "interrupt_turn_complete_s": Delay(),
    "audio_send_speed": Number(lo=1),
    "vad_end_s": Delay(),
    "vad_end_stop_s": Delay(),
    "vad_end_request_s": Delay(),
    "stray_audio_close": Flag(),
    "hear_speech": Flag(),
    "usage_audio_tokens_per_s": Number(lo=0),
    "usage_text_chars_per_token": Number(lo=1),
}


# ---- protocols ---------------------------------------------------------------------------------
# The twin speaks two protocols (`lab twin serve --protocol`). A profile says which one it is for
# (`protocol:` in its file, default gemini) and carries exactly that protocol's names: the Gemini
# names above, or the OpenAI Realtime names below, and for both the SHARED ones (the asyncio shell's
# socket settings, the conversation engine's delays and stop behaviours, the VAD and the voice).
# the protocols' names are lab.protocols' (GEMINI, OPENAI, PROTOCOLS, imported above)
# the profile each protocol's twin is served with unless a scenario or `--profile` names another
DEFAULT_PROFILE = {GEMINI: "developer-api", OPENAI: "openai-realtime"}

# OpenAI Realtime (lab.twin.openai_session, lab.twin.openai_wire); values and sources in
# lab/twin/profiles/openai-realtime.yaml
OPENAI_DECLARED: dict[str, Spec] = {
    "openai_bad_key_close_code": CLOSE_CODE,
    "openai_bad_key_close_reason": Text(),
    "openai_bad_key_message": Text(),
    "openai_session_max_s": Number(lo=0, nullable=True),
    "openai_session_expired_message": Text(hint="a string; {minutes} is filled in"),
    "openai_session_expired_code": CLOSE_CODE,
    "openai_server_error_message": Text(hint="a string; {session} is filled in"),
    "openai_server_error_close_code": CLOSE_CODE,
    "openai_check_call_id": Flag(),
    "openai_auto_response_after_tool_output": Flag(),
    "openai_default_model": Text(),
    "openai_default_turn_detection": Choice(options=("server_vad", "none")),
    "openai_session_created_s": Delay(),
    "openai_rate_limit_requests": Number(lo=0, integer=True),
    "openai_rate_limit_tokens": Number(lo=0, integer=True),
    "openai_vad_prefix_padding_ms": Number(lo=0),
}
DECLARED.update(OPENAI_DECLARED)

SHARED = frozenset({
    # the asyncio shell (lab.twin.server) and its run-time faults
    "ping_interval", "ping_timeout", "tcp_user_timeout_s", "fin_after_close", "slow_pongs", "pong_delay_s", "stall",
    # the conversation engine's parameters (lab.twin.model.ModelConfig.from_profile)
    "script", "tool_name", "tool_slot", "default_tool_behavior", "tool_call_delay_s", "reply_delay_s",
    "response_reply_delay_s", "reissue_delay_s", "restore_first_audio_s", "stop_while_pending_reply",
    "stop_claim_delay_s", "silent_after_stop_response_p", "reissue_p", "stop_contradict_reply",
    "stop_after_commit_reply", "early_stop_call_p", "early_stop_call_delay_s", "reissue_text_p",
    "restore_reissue_call_s", "restore_reissue_say_s",
    # hearing and speaking: the energy VAD, the voice's length and chunking
    "vad_threshold_rms", "vad_onset_ms", "vad_silence_ms", "speech_ms_per_char", "audio_chunk_ms", "tone_hz",
    "hear_speech",
})


def declared_for(protocol: str) -> list[str]:
    """The names a profile of `protocol` carries, in DECLARED's order."""
    if protocol == OPENAI:
        return [n for n in DECLARED if n in SHARED or n in OPENAI_DECLARED]
    if protocol == GEMINI:
        return [n for n in DECLARED if n not in OPENAI_DECLARED]
    raise BadParameter(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def spec_of(name: str) -> Spec:
    try:
        return DECLARED[name]
    except KeyError:
        raise UnknownParameter(f"unknown twin parameter {name!r}; known: {', '.join(sorted(DECLARED))}") from None


V = TypeVar("V")


def read_view(view: type[V], values: Mapping[str, Any]) -> V:
    """Build a room's frozen dataclass of parameters from checked values; every field must be a
    declared parameter (UnknownParameter otherwise), so a misspelt read fails at construction."""
    kw = {}
    for f in fields(view):  # type: ignore[arg-type]
        spec_of(f.name)
        kw[f.name] = values[f.name]
    return view(**kw)
