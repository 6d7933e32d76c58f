"""The twin's scripted model for the booking story: pure and deterministic, no ML, no I/O, no clock.

What it models (seeds 000 and 001):
- intents by keywords in the user's text: BOOK, STATUS ("did you book", "is it booked"), STOP
  ("stop", "don't book"); anything else is OTHER;
- BOOK -> a book_slot toolCall (NON_BLOCKING by default: the turn holds only the call); a BOOK line
  that names two or more times ("the 3pm and the 4pm slots") -> one toolCall carrying one
  functionCall per time, all pending at once (functionCalls is a list: protocol.md, the toolCall
  row; one toolCall rather than one per call is an assumption, no seed records the real split);
- STATUS before a FunctionResponse -> an in-progress sentence (000: 3/3);
- a FunctionResponse for a known id, also one issued before a resume, is accepted and answered;
- STOP (seed 001, fidelity.md section 4; every rate and delay a profile parameter, drawn from the
  session's seeded rng, so a run id replays the same branch):
  - NON_BLOCKING call pending (A, B, E): the false "already booked" claim `stop_claim_delay_s` after
    the stop; after the tool response silent with probability `silent_after_stop_response_p`;
  - BLOCKING call pending (C): the turn room cuts the held turn with `interrupted`; with probability
    `reissue_p` a second call with a new id and the same slot `reissue_delay_s` after the stop (the
    first, superseded response then gets no reply), otherwise the reply to the response is
    `stop_contradict_reply` ("not made") whatever the response said;
  - the booking already committed (D): `stop_after_commit_reply` ("already made");
  - no call yet but one planned (F, the stop before the call): with probability `early_stop_call_p`
    the call still comes `early_stop_call_delay_s` after the stop, else "I haven't made that booking";
  - never a toolCallCancellation (84 sessions of both studies had none);
- a new session restored from a transcript: with a "System note" saying book_slot is booked the
  model answers from it and does not call again; without it the model re-issues book_slot (000 s2).

Speech input is not transcribed: the Nth utterance found by `AudioTurnDetector` stands for line N of
the script. The model returns `Plan`s (steps with delays); the turn room (lab.twin.turns) times and
sends them, turns text into audio, and handles barge-in.
"""
from __future__ import annotations

import array
import functools
import math
import operator
import random
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from lab.twin.params import draw

BOOK, STATUS, STOP, OTHER = "BOOK", "STATUS", "STOP", "OTHER"

SAY_BOOKED = "Your 3 pm slot tomorrow is booked."
SAY_STATUS_BOOKED = "Yes, your 3 pm slot tomorrow is booked."
SAY_NOTE_BOOKED = "Your 3 pm slot tomorrow has been booked."
SAY_STATUS_NOTE_BOOKED = "Yes, your 3 pm slot tomorrow has been booked."
SAY_IN_PROGRESS = "I'm booking the 3 pm slot tomorrow for you now."
SAY_REBOOKING = "I'm booking the 3 pm slot tomorrow for you."
SAY_ALREADY_BOOKING = "I'm already booking the 3 pm slot tomorrow for you."
SAY_NOT_BOOKED = "The 3 pm slot tomorrow was not booked."
SAY_STATUS_NOT_BOOKED = "No, the 3 pm slot tomorrow was not booked."
SAY_NO_BOOKING = "I haven't made that booking for you."
SAY_STOPPED = "Okay, I won't book it."
SAY_OTHER = "Sure. Would you like me to book a slot for you?"
# 001 G2: asked something else while book_slot was pending, the model spoke about the booking
SAY_PENDING_OTHER = ("I am booking the 3 PM slot for you now. Please bring your ID and any necessary paperwork "
                     "to the appointment.")

_STATUS_PATTERNS = ("did you book", "is it booked", "was it booked", "have you booked", "is the booking",
                    "did it book", "has it been booked")
# a time in a user line ("3pm", "4 pm"): two or more distinct ones ask for that many bookings at once
_TIME = re.compile(r"\b(\d{1,2})\s?(am|pm)\b")
_STOP_PATTERNS = ("stop", "don't book", "dont book", "do not book", "cancel")

BOOKED_WORDS = ("booked", "committed", "confirmed", "done", "ok", "success", "succeeded", "completed")
NOT_BOOKED_WORDS = ("failed", "cancelled", "canceled", "not_booked", "not booked", "error", "rejected")
PENDING_WORDS = ("pending", "in_progress", "in progress", "processing", "running", "queued")


def classify(text: str) -> str:
    """The intent of one user line (case-insensitive keywords; STOP wins over BOOK)."""
    t = " " + re.sub(r"\s+", " ", (text or "").lower().replace("\u2019", "'")) + " "
    if any(p in t for p in _STATUS_PATTERNS):
        return STATUS
    if any(p in t for p in _STOP_PATTERNS):
        return STOP
    if re.search(r"\bbook", t):
        return BOOK
    return OTHER


def slots_asked(text: str) -> tuple[str, ...]:
    """The slots a BOOK line asks for when it names two or more distinct times ("tomorrow 3pm",
    "tomorrow 4pm"); () otherwise, so every one-slot script keeps the profile's slot and one call."""
    times: list[str] = []
    for hour, half in _TIME.findall((text or "").lower()):
        t = f"{int(hour)}{half}"
        if t not in times:
            times.append(t)
    return tuple(f"tomorrow {t}" for t in times) if len(times) > 1 else ()


def status_word(value: Any) -> str | None:
    """'booked' | 'not_booked' | 'pending' | None from a status string."""
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if any(w == v or w in v for w in NOT_BOOKED_WORDS):
        return "not_booked"
    if any(w == v or w in v for w in PENDING_WORDS):
        return "pending"
    if any(w == v or w in v for w in BOOKED_WORDS):
        return "booked"
    return None


def response_status(response: Any) -> str:
    """Booking status carried by a FunctionResponse.response: looks for a 'status' (or 'error') at
    the top or one level down (e.g. {"output": {"status": "booked"}}). No status and no error = booked."""
    def find(obj: Any, depth: int = 0) -> str | None:
        if isinstance(obj, dict):
            if obj.get("error"):
                return "not_booked"
            for k in ("status", "state", "result"):
                s = status_word(obj.get(k))
                if s:
                    return s
            if depth < 2:
                for v in obj.values():
                    s = find(v, depth + 1)
                    if s:
                        return s
        elif isinstance(obj, str):
            return status_word(obj)
        return None
    return find(response) or "booked"


def response_scheduling(fr: dict) -> str:
    """SILENT | WHEN_IDLE | INTERRUPT | '' (the field, or pipecat's copy inside response)."""
    resp = fr.get("response")
    v = fr.get("scheduling") or (resp.get("scheduling") if isinstance(resp, dict) else None) or ""
    return str(v).upper()


# --------------------------------------------------------------------------------------------
# Plans


@dataclass
class Step:
    kind: str                 # "say" | "call" | "turn_complete"
    delay: float = 0.0        # seconds after the previous step finished (or after the plan started)
    text: str = ""            # say: the sentence
    slot: str = ""            # call: the slot argument
    also: tuple[str, ...] = ()  # call: further slots, each its own functionCall in the same toolCall


@dataclass
class Plan:
    steps: list[Step]
    hold: bool = False        # BLOCKING: the turn stays open after the call until its response
    why: str = ""             # for the log and tests

    def texts(self) -> list[str]:
        return [s.text for s in self.steps if s.kind == "say"]

    def has_call(self) -> bool:
        return any(s.kind == "call" for s in self.steps)


@dataclass
class Call:
    id: str
    name: str
    slot: str
    blocking: bool
    status: str = "pending"   # pending | booked | not_booked
    batch: tuple[str, ...] = ()  # the ids issued in the same toolCall, this one included


@dataclass
class ModelConfig:
    script: list[str] = field(default_factory=lambda: ["Book me the 3pm slot tomorrow, please.",
                                                       "Did you book it?"])
    tool_name: str = "book_slot"
    slot: str = "tomorrow 3pm"
    default_behavior: str = "NON_BLOCKING"
    tool_call_delay_s: Any = (0.5, 0.9)
    reply_delay_s: Any = (0.5, 0.9)
    response_reply_delay_s: Any = (0.5, 0.9)
    reissue_delay_s: Any = (0.6, 0.8)
    restore_first_audio_s: Any = (0.76, 1.2)
    stop_while_pending_reply: str = "Your 3 pm slot tomorrow is already booked."
    stop_claim_delay_s: Any = (0.522, 0.937)
    silent_after_stop_response_p: float = 0.889
    reissue_p: float = 0.583
    stop_contradict_reply: str = "The booking was not made, so nothing has been scheduled."
    stop_after_commit_reply: str = "The booking was already made."
    early_stop_call_p: float = 0.667
    early_stop_call_delay_s: Any = (1.047, 1.115)

    @classmethod
    def from_profile(cls, profile) -> "ModelConfig":
        return cls(script=list(profile["script"]), tool_name=profile["tool_name"], slot=profile["tool_slot"],
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
                   early_stop_call_delay_s=profile["early_stop_call_delay_s"])


class ScriptedModel:
    """One session's model state. Deterministic for a given config and rng seed."""

    def __init__(self, config: ModelConfig | None = None, rng: random.Random | None = None,
                 next_call_id=None):
        self.cfg = config or ModelConfig()
        # call ids are unique across the twin's sessions, as the real service's are: a re-issued call
        # in a new session must not look like the old one (the client never answers the old id there)
        self._next_call_id = next_call_id
        self.rng = rng or random.Random(0)
        self.script = list(self.cfg.script)
        self.behavior = self.cfg.default_behavior
        self.tool_name = self.cfg.tool_name
        self.calls: dict[str, Call] = {}
        self.call_seq = 0
        self.utterances = 0
        self.note_status: str | None = None   # from a restore's "System note"
        self.history: list[tuple[str, str]] = []
        self.call_planned = False             # a BOOK turn's call step is on its way (F: the early stop)
        self.quiet_ids: set[str] = set()      # calls whose response gets no reply (superseded, or A's silence)
        self.contradict = False               # C without a re-issue: the next reply says "not made"
        self.pending_at_utterance: set[str] | None = None   # calls pending when the user began speaking

    # ---- configuration from the setup frame (normalised camelCase dict) ----
    def configure(self, setup: dict) -> None:
        for tool in setup.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            for fd in tool.get("functionDeclarations") or []:
                if isinstance(fd, dict) and "book" in str(fd.get("name", "")).lower():
                    self.tool_name = str(fd["name"])
                    if fd.get("behavior"):
                        self.behavior = str(fd["behavior"]).upper()

    @property
    def blocking(self) -> bool:
        return self.behavior == "BLOCKING"

    # ---- state ----
    def pending_calls(self) -> list[Call]:
        return [c for c in self.calls.values() if c.status == "pending"]

    def booking_status(self) -> tuple[str | None, str]:
        """(status, source): status None|'pending'|'booked'|'not_booked', source 'tool'|'note'."""
        statuses = [c.status for c in self.calls.values()]
        if "booked" in statuses:
            return "booked", "tool"
        if "pending" in statuses:
            return "pending", "tool"
        if self.note_status:
            return self.note_status, "note"
        if "not_booked" in statuses:
            return "not_booked", "tool"
        return None, ""

    def new_call(self, slot: str | None = None) -> Call:
        """Called by the core when a call step is actually sent: only then does the id exist.
        `slot`: a further slot of a multi-slot request; the profile's slot otherwise."""
        self.call_seq += 1
        self.call_planned = False
        c = Call(id=self._next_call_id(self.blocking) if self._next_call_id else f"fc-{self.call_seq}",
                 name=self.tool_name, slot=slot or self.cfg.slot, blocking=self.blocking)
        self.calls[c.id] = c
        return c

    def new_calls(self, slots: tuple[str, ...]) -> list[Call]:
        """The calls of one toolCall, one per slot, each knowing its batch (see tool_response)."""
        calls = [self.new_call(slot) for slot in slots]
        for c in calls:
            c.batch = tuple(x.id for x in calls)
        return calls

    def next_script_line(self) -> str:
        """The text the next detected utterance stands for (line N of the script; '' past its end)."""
        i = self.utterances
        self.utterances += 1
        return self.script[i] if i < len(self.script) else ""

    # ---- inputs ----
    def utterance_started(self) -> None:
        """The user began speaking (ACTIVITY_START). A spoken stop is judged against the calls as they
        stood then: the end of speech is detected ~1.2 s later, and in the stop study's spoken C runs
        the tool response that came in between did not make the model treat the stop as one after the
        commit (001 part 2: "I have not booked the slot" although the response said booked)."""
        self.pending_at_utterance = {c.id for c in self.pending_calls()}

    def user_turn(self, text: str) -> Plan | None:
        self.history.append(("user", text))
        spoken_from, self.pending_at_utterance = self.pending_at_utterance or set(), None
        intent = classify(text)
        status, source = self.booking_status()
        d = lambda: draw(self.cfg.reply_delay_s, self.rng)  # noqa: E731
        if intent == BOOK:
            if status == "pending":
                return Plan([Step("say", d(), SAY_ALREADY_BOOKING), Step("turn_complete")], why="book-pending")
            if status == "booked":
                return Plan([Step("say", d(), "Your 3 pm slot tomorrow is already booked."),
                             Step("turn_complete")], why="book-booked")
            return self._call_plan(draw(self.cfg.tool_call_delay_s, self.rng), why="book", slots=slots_asked(text))
        if intent == STATUS:
            if status == "pending":
                return Plan([Step("say", d(), SAY_IN_PROGRESS), Step("turn_complete")], why="status-pending")
            if status == "booked":
                text = SAY_STATUS_NOTE_BOOKED if source == "note" else SAY_STATUS_BOOKED
                return Plan([Step("say", d(), text), Step("turn_complete")], why="status-booked")
            if status == "not_booked":
                return Plan([Step("say", d(), SAY_STATUS_NOT_BOOKED), Step("turn_complete")], why="status-not")
            return Plan([Step("say", d(), SAY_NO_BOOKING), Step("turn_complete")], why="status-none")
        if intent == STOP:
            return self._stop_plan(status, spoken_from)
        if status == "pending":
            return Plan([Step("say", d(), SAY_PENDING_OTHER), Step("turn_complete")], why="other-pending")
        return Plan([Step("say", d(), SAY_OTHER), Step("turn_complete")], why="other")

    def _stop_plan(self, status: str | None, then: set[str] = frozenset()) -> Plan:
        """The user said stop (001, scenario by scenario; see the module docstring). `then`: the calls
        pending when a spoken stop began (utterance_started)."""
        cfg = self.cfg
        pending = self.pending_calls()
        answered_since = [self.calls[i] for i in then if i in self.calls and self.calls[i].status != "pending"]
        if any(c.blocking for c in pending + answered_since):
            if self.rng.random() < cfg.reissue_p:
                self.quiet_ids.update(c.id for c in pending + answered_since)
                return self._call_plan(draw(cfg.reissue_delay_s, self.rng), why="stop-reissue")
            if pending:
                self.contradict = True
                return Plan([], why="stop-blocking-no-reissue")
            # the response came while the user was still saying stop: the contradiction is said now
            return Plan([Step("say", draw(cfg.reply_delay_s, self.rng), cfg.stop_contradict_reply),
                         Step("turn_complete")], why="stop-blocking-answered-while-speaking")
        if pending:
            if self.rng.random() < cfg.silent_after_stop_response_p:
                self.quiet_ids.update(c.id for c in pending)
            return Plan([Step("say", draw(cfg.stop_claim_delay_s, self.rng), cfg.stop_while_pending_reply),
                         Step("turn_complete")], why="stop-pending")
        if status == "booked":
            return Plan([Step("say", draw(cfg.reply_delay_s, self.rng), cfg.stop_after_commit_reply),
                         Step("turn_complete")], why="stop-after-commit")
        if self.call_planned and not self.calls:
            if self.rng.random() < cfg.early_stop_call_p:
                return self._call_plan(draw(cfg.early_stop_call_delay_s, self.rng), why="stop-early-late-call")
            self.call_planned = False
            return Plan([Step("say", draw(cfg.reply_delay_s, self.rng), SAY_NO_BOOKING), Step("turn_complete")],
                        why="stop-early-no-call")
        return Plan([Step("say", draw(cfg.reply_delay_s, self.rng), SAY_STOPPED), Step("turn_complete")],
                    why="stop")

    def _call_plan(self, delay: float, why: str, say_first: str | None = None,
                   say_delay: float = 0.0, slots: tuple[str, ...] = ()) -> Plan:
        self.call_planned = True
        steps: list[Step] = []
        if say_first:
            steps.append(Step("say", say_delay, say_first))
        steps.append(Step("call", 0.0 if say_first else delay, slot=slots[0] if slots else self.cfg.slot,
                          also=slots[1:]))
        if self.blocking:
            return Plan(steps, hold=True, why=why)
        steps.append(Step("turn_complete"))
        return Plan(steps, why=why)

    def tool_response(self, fr: dict) -> tuple[bool, str, Plan | None]:
        """(known, status, plan) for one normalised FunctionResponse."""
        cid = fr.get("id")
        call = self.calls.get(cid) if isinstance(cid, str) else None
        status = response_status(fr.get("response"))
        if call is None:
            return False, status, None
        if call.status != "pending":
            return True, status, None   # answered twice: nothing new to say
        call.status = status
        if status == "pending":
            call.status = "pending"
            return True, status, None
        scheduling = response_scheduling(fr)
        if any(self.calls[i].status == "pending" for i in call.batch if i != cid):
            # assumption (no seed has a multi-call toolCall): the model answers a batch once, when
            # its last response is in; until then it waits, so a lost one leaves the turn hanging
            return True, status, None
        if cid in self.quiet_ids:
            return True, status, (Plan([Step("turn_complete")], why="response-quiet")
                                  if call.blocking and not any(c.status == "pending" for c in self.calls.values())
                                  else None)
        text = SAY_BOOKED if status == "booked" else SAY_NOT_BOOKED
        if self.contradict:
            self.contradict = False
            text = self.cfg.stop_contradict_reply
        if scheduling == "SILENT":
            return True, status, (Plan([Step("turn_complete")], why="response-silent-end")
                                  if call.blocking else None)
        return True, status, Plan([Step("say", draw(self.cfg.response_reply_delay_s, self.rng), text),
                                   Step("turn_complete")], why=f"response-{status}")

    def restore(self, turns: list[dict], turn_complete: bool) -> Plan | None:
        """A clientContent with history (a new session restored from a transcript, or a replay)."""
        user_texts: list[str] = []
        booked_requested = False
        for turn in turns:
            role = str(turn.get("role") or "user")
            for text in _texts_of(turn):
                if "system note" in text.lower():
                    self._read_note(text)
                    continue
                self.history.append((role, text))
                if role == "user":
                    user_texts.append(text)
                    if classify(text) == BOOK:
                        booked_requested = True
            for part in turn.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    fr = part["functionResponse"]
                    s = response_status(fr.get("response"))
                    if s in ("booked", "not_booked"):
                        self.note_status = s
        if not turn_complete:
            return None
        delay = draw(self.cfg.restore_first_audio_s, self.rng)
        status, source = self.booking_status()
        last = user_texts[-1] if user_texts else ""
        if classify(last) == STATUS:
            if status == "booked":
                text = SAY_STATUS_NOTE_BOOKED if source == "note" else SAY_STATUS_BOOKED
                return Plan([Step("say", delay, text), Step("turn_complete")], why="restore-status-booked")
            if status is None and booked_requested:
                return self._call_plan(0.0, why="restore-reissue", say_first=SAY_REBOOKING, say_delay=delay)
            plan = self.user_turn(last)
            if plan and plan.steps:
                plan.steps[0].delay = delay
            return plan
        if status == "booked":
            return Plan([Step("say", delay, SAY_NOTE_BOOKED if source == "note" else SAY_BOOKED),
                         Step("turn_complete")], why="restore-booked")
        if status == "pending" and source == "note":
            return Plan([Step("say", delay, SAY_IN_PROGRESS), Step("turn_complete")], why="restore-pending")
        if status is None and booked_requested:
            return self._call_plan(0.0, why="restore-reissue", say_first=SAY_REBOOKING, say_delay=delay)
        if last:
            plan = self.user_turn(last)
            if plan and plan.steps:
                plan.steps[0].delay = delay
            return plan
        return None

    def _read_note(self, text: str) -> None:
        for line in text.splitlines() or [text]:
            low = line.lower()
            if self.tool_name.lower() in low or "book" in low:
                if any(w in low for w in NOT_BOOKED_WORDS) or "not booked" in low:
                    self.note_status = "not_booked"
                elif any(w in low for w in PENDING_WORDS) or "still being processed" in low:
                    self.note_status = "pending"
                elif re.search(r"\b(booked|committed|confirmed|done)\b", low):
                    self.note_status = "booked"


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

    def feed(self, pcm: bytes, rate: int = 16000) -> list[str]:
        """Events in order: 'onset' (speech started) and 'end' (utterance over)."""
        if rate != self._rate:
            self._rate, self._rest = rate, b""
        data = self._rest + pcm
        frame_bytes = max(2, int(rate * self.FRAME_MS / 1000) * 2)
        events: list[str] = []
        n = len(data) // frame_bytes
        for i in range(n):
            frame = data[i * frame_bytes:(i + 1) * frame_bytes]
            events.extend(self._frame(rms16(frame)))
        self._rest = data[n * frame_bytes:]
        return events

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
    _audioop = None


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
