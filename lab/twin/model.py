"""The twin's model: the Gemini wire's side of the conversation engine (lab.conversation.engine).

The engine plays a conversation (lab/conversations/*.yaml, default the studies' booking story, or a
team's own, or the user's lines only); this module maps the wire onto it: a setup's
functionDeclarations become the tools the client declares, a FunctionResponse (id, response,
scheduling SILENT) a tool response, a clientContent with history a restore. The booking story's
sentences and the profile's tool_name / tool_slot / script overrides keep the names the twin and its
tests have always used (SAY_*, ModelConfig, ScriptedModel).

Speech input is read by the turn room (lab.twin.turns): by its words where the shell has an ear
(lab.twin.hearing), else the Nth utterance found by `AudioTurnDetector` stands for line N of the
script. The engine returns `Plan`s (steps with delays); the turn room (lab.twin.turns) times and
sends them, turns text into audio, and handles barge-in.
"""
from __future__ import annotations

import array
import functools
import math
import operator
import re
import sys
from dataclasses import dataclass, replace
from typing import Any

from lab.conversation import engine as E
from lab.conversation import format as F
from lab.conversation import intents
from lab.conversation.engine import Call, Plan, Position, Step, Story, response_status, status_word  # noqa: F401 (the twin's names)
from lab.conversation.semantics import BOOKING

BOOK, STATUS, STOP, OTHER, GREETING = "BOOK", intents.STATUS, intents.STOP, intents.OTHER, intents.GREETING


@functools.lru_cache(maxsize=1)
def booking() -> F.Conversation:
    return F.load(F.DEFAULT)


def _say(key: str) -> str:
    return booking().tools[BOOKING.name].say[key]


SAY_BOOKED = _say("done")
SAY_STATUS_BOOKED = _say("status_done")
SAY_NOTE_BOOKED = _say("note_done")
SAY_STATUS_NOTE_BOOKED = _say("status_note_done")
SAY_IN_PROGRESS = _say("pending")
SAY_REBOOKING = _say("reissue")
SAY_ALREADY_BOOKING = _say("again_pending")
SAY_ALREADY_BOOKED = _say("again_done")
SAY_NOT_BOOKED = _say("failed")
SAY_STATUS_NOT_BOOKED = _say("status_failed")
SAY_NO_BOOKING = _say("status_none")
SAY_STOPPED = _say("stopped")
SAY_OTHER = booking().answers["other"]
SAY_PENDING_OTHER = _say("other_pending")


@functools.lru_cache(maxsize=256)
def classify(text: str) -> str:
    """The intent of one user line in the booking story: STOP, STATUS, GREETING (the shared
    vocabulary, lab.conversation.intents), BOOK (the word "book"), else OTHER. Cached: a harness
    says the same few lines again and again (a status question after every turn)."""
    it = intents.intent(text, BOOKING.words)
    if it != intents.OTHER:
        return it
    return BOOK if re.search(r"\bbook", intents.norm(text)) else OTHER


def slots_asked(text: str) -> tuple[str, ...]:
    """The slots a BOOK line asks for when it names two or more distinct times ("tomorrow 3pm",
    "tomorrow 4pm"); () otherwise, so every one-slot script keeps the profile's slot and one call."""
    batch, _ = E.L.fill(booking().tools[BOOKING.name], text, {"slot": ""})
    return tuple(a["slot"] for a in batch) if len(batch) > 1 else ()


def response_scheduling(fr: dict) -> str:
    """SILENT | WHEN_IDLE | INTERRUPT | '' (the field, or pipecat's copy inside response)."""
    resp = fr.get("response")
    v = fr.get("scheduling") or (resp.get("scheduling") if isinstance(resp, dict) else None) or ""
    return str(v).upper()


@dataclass
class ModelConfig(E.Params):
    script: list[str] | None = None         # the spoken lines in order; None: the conversation's
    tool_name: str = "book_slot"            # the booking story's tool and slot, as profile overrides
    slot: str = "tomorrow 3pm"
    conversation: F.Conversation | None = None   # None: the booking story

    def __post_init__(self):
        if self.script is None and self.conversation is None:
            self.script = booking().lines

    @classmethod
    def from_profile(cls, profile, conversation: F.Conversation | None = None) -> "ModelConfig":
        script = list(profile["script"])
        if conversation is not None and conversation.source == F.SOURCE_LINES:
            script = conversation.lines         # the user's lines are the script
        return cls(script=script, tool_name=profile["tool_name"], slot=profile["tool_slot"],
                   conversation=conversation,
                   default_behavior=str(profile["default_tool_behavior"]).upper(),
                   tool_call_delay_s=profile["tool_call_delay_s"], reply_delay_s=profile["reply_delay_s"],
                   response_reply_delay_s=profile["response_reply_delay_s"],
                   reissue_delay_s=profile["reissue_delay_s"],
                   restore_first_audio_s=profile["restore_first_audio_s"],
                   stop_while_pending_reply=profile["stop_while_pending_reply"],
                   stop_claim_delay_s=profile["stop_claim_delay_s"],
                   silent_after_stop_response_p=profile["silent_after_stop_response_p"],
                   reissue_p=profile["reissue_p"], stop_contradict_reply=profile["stop_contradict_reply"],
                   stop_after_commit_reply=profile["stop_after_commit_reply"],
                   early_stop_call_p=profile["early_stop_call_p"],
                   early_stop_call_delay_s=profile["early_stop_call_delay_s"],
                   reissue_text_p=profile["reissue_text_p"],
                   restore_reissue_call_s=profile["restore_reissue_call_s"],
                   restore_reissue_say_s=profile["restore_reissue_say_s"])


def conversation_for(cfg: ModelConfig) -> F.Conversation:
    """The conversation with the profile's booking overrides: tool_name renames the booking tool,
    tool_slot is its slot (only the booking story has them). Public: the OpenAI twin's model
    (lab.twin.openai_model) plays the same conversation from the same profile."""
    conv = cfg.conversation or booking()
    if conv.name != F.DEFAULT or BOOKING.name not in conv.tools:
        return conv
    tool = conv.tools[BOOKING.name]
    args = tuple(replace(a, value=cfg.slot) if a.name == "slot" else a for a in tool.args)
    tool = replace(tool, args=args)
    if cfg.tool_name != BOOKING.name:
        tool = E.L.renamed(tool, cfg.tool_name)
    tools = {(cfg.tool_name if n == BOOKING.name else n): (tool if n == BOOKING.name else t)
             for n, t in conv.tools.items()}
    return replace(conv, tools=tools,
                   turns=tuple(replace(t, call=cfg.tool_name) if t.call == BOOKING.name else t for t in conv.turns))


class ScriptedModel(E.Engine):
    """One session's model: the engine over the configured conversation, fed from the Gemini wire."""

    def __init__(self, config: ModelConfig | None = None, rng=None, next_call_id=None, story: Story | None = None):
        cfg = config or ModelConfig()
        super().__init__(conversation_for(cfg), cfg, rng, next_call_id=next_call_id, story=story, script=cfg.script)

    # ---- configuration from the setup frame (normalised camelCase dict) ----
    def configure(self, setup: dict) -> None:
        self.declare(declarations(setup))

    def undeclared(self) -> list[str]:
        """The conversation's tools the client's setup does not declare (by name or by the tool's
        `asks` words): a conversation of the user's own asks for tools the agent must have. The
        studies' booking story, every catalogue scenario's default, is exempt: it is put on the
        agent's tool where the words allow and is otherwise the scenario's story, judged as such;
        a lines-only conversation is built from the declarations, so it has none."""
        if self.conv.source == F.SOURCE_LINES or self.conv.name == F.DEFAULT:
            return []
        names = {d.get("name") for d in self.declared}
        return [n for n in self.tools if n not in names]

    @property
    def tool_name(self) -> str:
        t = self.main_tool()
        return t.name if t else ""

    @property
    def blocking(self) -> bool:
        return self.is_blocking(self.tool_name)

    @property
    def note_status(self) -> str | None:
        return next(iter(self.story.notes.values()), None)

    def booking_status(self) -> tuple[str | None, str]:
        status, source, _ = self.status_of(self.tool_name or None)
        return status, source

    def new_call(self, slot: Any = None, tool: str | None = None) -> Call:
        """`slot`: the booking story's slot (a string) or the call's arguments (a mapping)."""
        if isinstance(slot, str):
            slot = {**self.default_args(tool or self.tool_name), "slot": slot}
        return super().new_call(slot, tool)

    def new_calls(self, batch, tool: str | None = None) -> list[Call]:
        batch = [{**self.default_args(tool or self.tool_name), "slot": a} if isinstance(a, str) else a for a in batch]
        return super().new_calls(batch, tool)

    def next_script_line(self) -> str:
        return self.next_line()

    def tool_response(self, fr: dict) -> tuple[bool, str, Plan | None]:  # type: ignore[override]
        """(known, status, plan) for one normalised FunctionResponse."""
        return super().tool_response(fr.get("id"), fr.get("response"), silent=response_scheduling(fr) == "SILENT")

    def restore(self, turns: list[dict], turn_complete: bool) -> Plan | None:  # type: ignore[override]
        """A clientContent with history (a new session restored from a transcript, or a replay)."""
        entries: list[tuple[str, str]] = []
        responses: list[Any] = []
        for turn in turns:
            role = str(turn.get("role") or "user")
            entries += [(role, t) for t in _texts_of(turn)]
            for part in turn.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    responses.append(part["functionResponse"].get("response"))
        return super().restore(entries, responses, turn_complete)


def declarations(setup: dict) -> list[dict]:
    """The setup's (or a contextUpdate's) functionDeclarations as the engine's declared tools."""
    out = []
    for tool in setup.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        for fd in tool.get("functionDeclarations") or []:
            if isinstance(fd, dict) and fd.get("name"):
                out.append({"name": str(fd["name"]), "description": str(fd.get("description") or ""),
                            "parameters": fd.get("parameters") or fd.get("parametersJsonSchema") or {},
                            "behavior": fd.get("behavior")})
    return out


def _texts_of(content: Any) -> list[str]:
    """Text parts of a Content-like value (a dict with parts, a list of parts, or a string)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, dict):
        parts = content.get("parts")
        if parts is None and isinstance(content.get("text"), str):
            return [content["text"]]
        content = parts or []
    out = []
    if isinstance(content, list):
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                out.append(p["text"])
            elif isinstance(p, str):
                out.append(p)
    return out


# --------------------------------------------------------------------------------------------
# Audio


class AudioTurnDetector:
    """Energy-based turn detection on 16-bit little-endian mono PCM, timed by the audio itself.

    An utterance starts when `onset_ms` of voiced audio (20 ms frames with RMS above `threshold`)
    has been heard and ends after `silence_ms` of unvoiced audio. Time is the audio's own sample
    count, so the result does not depend on how the chunks arrive. `flush()` ends an utterance when
    the audio stops (audioStreamEnd, or no audio for the silence time on the wall clock).
    """

    FRAME_MS = 20
    __slots__ = ("threshold", "onset_ms", "silence_ms", "in_voice", "voiced_ms", "silent_ms", "candidate",
                 "_rest", "_rate")

    def __init__(self, threshold: float = 500, onset_ms: float = 140, silence_ms: float = 500):
        self.threshold = float(threshold)
        self.onset_ms = float(onset_ms)
        self.silence_ms = float(silence_ms)
        self.in_voice = False       # onset reported, end not yet
        self.voiced_ms = 0.0        # voiced audio since the candidate utterance began
        self.silent_ms = 0.0        # unvoiced audio since the last voiced frame
        self.candidate = False      # voiced audio seen, onset not yet reached
        self._rest = b""
        self._rate = 16000

    def feed(self, pcm: bytes, rate: int = 16000, peak: int | None = None) -> list[str]:
        """Events in order: 'onset' (speech started) and 'end' (utterance over). `peak`: the
        caller's peak16(pcm), if it has one (used when the frames are exactly pcm)."""
        if rate != self._rate:
            self._rate, self._rest = rate, b""
        exact = not self._rest
        data = self._rest + pcm
        frame_bytes = max(2, int(rate * self.FRAME_MS / 1000) * 2)
        events: list[str] = []
        n = len(data) // frame_bytes
        if peak is None or not exact or n * frame_bytes != len(pcm):
            peak = None
        if not (self.in_voice or self.candidate) and (
                peak if peak is not None else peak16(data[:n * frame_bytes])) < self.threshold:
            # no frame's RMS can reach the threshold when no sample does, and with no utterance
            # under way an unvoiced frame changes nothing: silence (most of a stream) skips the frames
            self._rest = data[n * frame_bytes:]
            return events
        for i in range(n):
            frame = data[i * frame_bytes:(i + 1) * frame_bytes]
            events.extend(self._frame(rms16(frame)))
        self._rest = data[n * frame_bytes:]
        return events

    def skips(self, pcm: bytes, rate: int = 16000) -> bool:
        """Whether feed(pcm, rate) would take the chunk whole as silence and change nothing: no
        utterance under way, no part of a frame held from the last chunk, the same rate, whole
        frames only, and no sample reaching the threshold. The microphone's short way asks this
        (lab.twin.turns.Turns.quiet_chunk); feed() itself stays the reference."""
        if self.in_voice or self.candidate or self._rest or rate != self._rate:
            return False
        if len(pcm) % max(2, int(rate * self.FRAME_MS / 1000) * 2):
            return False
        return peak16(pcm) < self.threshold

    def _frame(self, rms: float) -> list[str]:
        ev: list[str] = []
        if rms >= self.threshold:
            self.silent_ms = 0.0
            self.voiced_ms += self.FRAME_MS
            if not self.in_voice:
                self.candidate = True
                if self.voiced_ms >= self.onset_ms:
                    self.in_voice = True
                    self.candidate = False
                    ev.append("onset")
        else:
            if self.in_voice or self.candidate:
                self.silent_ms += self.FRAME_MS
                if self.silent_ms >= self.silence_ms:
                    if self.in_voice:
                        ev.append("end")
                    self._reset()
        return ev

    def flush(self) -> list[str]:
        """The audio stopped: an utterance in progress ends now (a short blip counts if voiced)."""
        ev: list[str] = []
        if self.in_voice:
            ev.append("end")
        elif self.candidate and self.voiced_ms > 0:
            ev += ["onset", "end"]
        self._reset()
        self._rest = b""
        return ev

    def _reset(self) -> None:
        self.in_voice = False
        self.candidate = False
        self.voiced_ms = 0.0
        self.silent_ms = 0.0


try:  # C speed where the stdlib still has it (removed in Python 3.13)
    import warnings as _w
    with _w.catch_warnings():
        _w.simplefilter("ignore", DeprecationWarning)
        import audioop as _audioop
except ImportError:  # pragma: no cover
    _audioop = None  # type: ignore[assignment]


def peak16(frame: bytes) -> int:
    """The largest absolute value of 16-bit little-endian samples (an upper bound of their RMS)."""
    frame = frame[: len(frame) // 2 * 2]
    if not frame:
        return 0
    if _audioop is not None and sys.byteorder == "little":
        return _audioop.max(frame, 2)
    a = array.array("h")
    a.frombytes(frame)
    if sys.byteorder != "little":
        a.byteswap()
    return max(max(a), -min(a))


def rms16(frame: bytes) -> float:
    """RMS of 16-bit little-endian samples."""
    frame = frame[: len(frame) // 2 * 2]
    if not frame:
        return 0.0
    if _audioop is not None and sys.byteorder == "little":
        return float(_audioop.rms(frame, 2))
    a = array.array("h")
    a.frombytes(frame)
    if sys.byteorder != "little":
        a.byteswap()
    return math.sqrt(sum(map(operator.mul, a, a)) / len(a))


@functools.lru_cache(maxsize=32)
def tone(duration_s: float, rate: int = 24000, hz: float = 220.0, amplitude: int = 6000) -> bytes:
    """A sine tone as 16-bit little-endian mono PCM: the model's 'voice'.

    Cached: every audio chunk of every turn is the same few tones, and computing one sample at a
    time was half the twin's CPU with 50 sessions talking (py-spy, lab bench twin --mode stream)."""
    n = max(0, int(round(duration_s * rate)))
    w = 2 * math.pi * hz / rate
    return array.array("h", (int(amplitude * math.sin(w * i)) for i in range(n))).tobytes()
