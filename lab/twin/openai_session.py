"""The OpenAI Realtime session room: one socket, one session, and the rules between its events.

What it models (each behaviour's source is its parameter's, lab/twin/profiles/openai-realtime.yaml):
- a socket is a session: `session.created` first, a new `sess_` id and an empty conversation every
  time (no server-side resumption, md L40-43); the socket's end is the session's;
- a bad or missing key: the upgrade succeeds, then an `error` (invalid_api_key) and a close
  (openai_bad_key_*);
- `session.update` merges into the session and is answered with the whole of it (`session.updated`);
- the conversation: `conversation.item.create` is acknowledged with `conversation.item.added` then
  `.done` (GA, md L19-21); a `function_call_output` whose call_id no function_call of this session
  issued is an `error` (openai_check_call_id), so a tool result sent into a new session after a
  reconnect is an orphan;
- the input audio buffer: append (in the session's input format: 24 kHz PCM, or G.711 u-law or
  A-law), commit (an empty one is an error), clear; with server VAD (the shared energy detector of
  lab.twin.model, on the audio's own clock) speech_started / speech_stopped, then the commit and the
  user's item, then a response when the session's turn detection says create_response;
- hearing (hear_speech, with the shell's ear): a committed turn's audio goes to the recognizer
  (lab.twin.spoken, as the Gemini twin's do); its words, matched to the conversation's phrases, are
  the user's turn (`conversation.item.input_audio_transcription.completed` when the session asks
  for transcription), and a response created before they are back waits for them; a turn no phrase
  fits is not understood (the model asks again). Without an ear the Nth utterance stands for line N;
- responses: only `response.create` starts one (no auto-continue after a tool output,
  openai_auto_response_after_tool_output); one at a time (a second is an error), `response.cancel`
  (an error when none is active) and a barge-in (interrupt_response) end it `cancelled`; each starts
  with `response.created` and `rate_limits.updated` and ends with `response.done`;
- what the model says and calls is the conversation engine's plan (lab.twin.openai_model), each
  step at its drawn delay (a timer per step, so a cancel stops the rest): a sentence is one message
  item (audio deltas with its transcript, or text deltas), a call one function_call item with its
  arguments; a step's events go out together (the service streams faster than real time; how much
  faster is unmeasured);
- the session cap: `error` session_expired at openai_session_max_s, then a close 1001;
- the server's own failure (`server_error`, switched by the core): an `error` of type server_error
  on every open session, then a close 1011 (openai_server_error_close_code).

Sans-I/O: events in with an explicit `now`, actions out (lab.twin.io_actions). Knows nothing of
sockets or the clock; the frames' spelling is lab.twin.openai_wire's.
"""
from __future__ import annotations

import base64
import binascii
import copy
import math
import random
from dataclasses import dataclass, field
from typing import Any

from lab.conversation.engine import Plan, Step
from lab.stats.distributions import draw
from lab.twin import model as M
from lab.twin import openai_wire as W
from lab.twin import spoken
from lab.twin.io_actions import (Action, Close, Log, Send, Timer, TimerKey, UnknownConnection, UnknownTimer,
                                 WakeEar)
from lab.twin.openai_model import OpenAIModel
from lab.twin.wire import KEY_MISSING, KEY_WRONG, fit_close_reason

RATE = W.PCM_RATE       # the GA protocol's only PCM rate (SDK RealtimeAudioFormats: "Always 24000")
# the longest turn the twin keeps to hear when the client commits by hand (assumption: a minute; the
# recognizer is not for longer speech, and a client that never commits must not grow the twin)
MAX_HEARD_S = 60.0


@dataclass(frozen=True)
class OpenAIParams:
    """The profile's values this room reads (names and shapes: lab.twin.params)."""
    bad_key_close_code: int
    bad_key_close_reason: str
    bad_key_message: str
    session_max_s: float | None
    session_expired_message: str
    session_expired_code: int
    server_error_message: str
    server_error_close_code: int
    check_call_id: bool
    auto_response_after_tool_output: bool
    default_model: str
    default_turn_detection: str
    session_created_s: Any
    rate_limit_requests: int
    rate_limit_tokens: int
    vad_threshold_rms: float
    vad_onset_ms: float
    vad_silence_ms: float
    speech_ms_per_char: float
    audio_chunk_ms: float
    tone_hz: float
    vad_prefix_padding_ms: float
    hear_speech: bool

    @classmethod
    def from_profile(cls, profile) -> "OpenAIParams":
        return cls(profile["openai_bad_key_close_code"], profile["openai_bad_key_close_reason"],
                   profile["openai_bad_key_message"], profile["openai_session_max_s"],
                   profile["openai_session_expired_message"], profile["openai_session_expired_code"],
                   profile["openai_server_error_message"], profile["openai_server_error_close_code"],
                   profile["openai_check_call_id"], profile["openai_auto_response_after_tool_output"],
                   profile["openai_default_model"], profile["openai_default_turn_detection"],
                   profile["openai_session_created_s"], profile["openai_rate_limit_requests"],
                   profile["openai_rate_limit_tokens"], profile["vad_threshold_rms"], profile["vad_onset_ms"],
                   profile["vad_silence_ms"], profile["speech_ms_per_char"], profile["audio_chunk_ms"],
                   profile["tone_hz"], profile["openai_vad_prefix_padding_ms"], profile["hear_speech"])


# ---- timers ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepDue(TimerKey):
    """The next step of a response is due (stale when the response ended meanwhile)."""
    conn: int
    response: str


@dataclass(frozen=True)
class SessionExpiry(TimerKey):
    conn: int


# ---- state ----------------------------------------------------------------------------------

@dataclass
class Response:
    id: str
    steps: list[Step]
    modalities: list[str]
    output: list[dict] = field(default_factory=list)
    metadata: dict | None = None       # response.create's, echoed on the response (a client matches by it)
    waiting: bool = False              # created; its plan waits for a spoken turn's words


@dataclass
class UserTurn:
    """A user turn no response has answered yet: typed, or spoken and read (by its words or position)."""
    text: str                                   # what the model reads ("" for speech not understood)
    spoken: bool = False
    more: tuple[str, ...] = ()                  # a second phrase said in the same breath (fidelity §8 F7)
    read: dict | None = None                    # how a spoken turn was read (twin.model's `heard`)

    @property
    def unclear(self) -> bool:
        return self.spoken and not self.text


@dataclass
class Session:
    id: str
    conn: int
    model: str
    config: dict
    engine: OpenAIModel
    opened_at: float
    items: list[str] = field(default_factory=list)             # item ids in conversation order
    calls: dict[str, str] = field(default_factory=dict)        # call_id -> its function_call item id
    written: set[str] = field(default_factory=set)             # call_ids of function_call items the client wrote
    unanswered: list[UserTurn] = field(default_factory=list)   # user turns no response has answered yet
    reply: Plan | None = None                                  # the model's answer to tool outputs, said when asked
    audio_ms: float = 0.0                                      # audio appended since the session began
    buffer_ms: float = 0.0                                     # audio in the input buffer now
    speech_item: str | None = None                             # the item id speech_started promised
    detector: M.AudioTurnDetector | None = None
    heard_pcm: bytearray | None = None                         # the turn's audio to hear (with an ear)
    heard_rate: int = RATE
    utt: int = 0                                               # spoken turns handed to the ear
    awaiting: dict[int, tuple[str, float]] = field(default_factory=dict)   # utt -> (its item, audio s): words not back
    response: Response | None = None
    closing: bool = False
    close_why: str = ""         # the server's own close: session_cap, error, bad_key (twin.conn.end's how)

    def audio_input(self) -> dict:
        ai = (self.config.get("audio") or {}).get("input")
        return ai if isinstance(ai, dict) else {}

    def turn_detection(self) -> dict | None:
        td = self.audio_input().get("turn_detection")
        return td if isinstance(td, dict) and td.get("type") in ("server_vad", "semantic_vad") else None

    def transcribes(self) -> bool:
        """The session asked for its input audio's transcription (audio.input.transcription set)."""
        return isinstance(self.audio_input().get("transcription"), dict)


def default_config(prm: OpenAIParams) -> dict:
    """A new session's configuration as session.created shows it (RealtimeSessionCreateRequest)."""
    td = None if prm.default_turn_detection == "none" else {
        "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": int(prm.vad_prefix_padding_ms),
        "silence_duration_ms": int(prm.vad_silence_ms), "create_response": True, "interrupt_response": True,
        "idle_timeout_ms": None}
    pcm = {"type": "audio/pcm", "rate": RATE}
    return {"output_modalities": ["audio"], "instructions": "", "tools": [], "tool_choice": "auto",
            "max_output_tokens": "inf", "tracing": None, "truncation": "auto", "prompt": None,
            "audio": {"input": {"format": pcm, "transcription": None, "noise_reduction": None, "turn_detection": td},
                      "output": {"format": pcm, "voice": "alloy", "speed": 1.0}}}


def merge(into: dict, update: dict) -> dict:
    """session.update's fields over the session's: nested objects merged, everything else replaced."""
    out = copy.deepcopy(into)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class OpenAISessions:
    """Every connection's session of one twin."""

    def __init__(self, prm: OpenAIParams, model_cfg: M.ModelConfig, rng: random.Random):
        self.prm = prm
        self.model_cfg = model_cfg
        self.rng = rng
        self.events = W.Events(rng)
        self.sessions: dict[int, Session] = {}
        # set by the shell that can run a recognizer (lab.twin.recognizer.Ear); without one, or with
        # hear_speech off, the Nth utterance stands for line N of the script
        self.ear = False
        self._ear_woken = False

    @property
    def hears(self) -> bool:
        return self.ear and self.prm.hear_speech

    # ---- helpers ----------------------------------------------------------------------------
    def _send(self, conn: int, frame: dict, at: float) -> Send:
        return Send(conn, W.encode(frame), frame, at)

    def _error(self, s: Session, e: W.ClientError, now: float) -> list[Action]:
        return [Log("twin.error_event", {"conn": s.conn, "session": s.id, "code": e.code, "type": e.kind,
                                         "param": e.param}),
                self._send(s.conn, self.events.error(e.code, e.message, e.param, e.event_id, e.kind), now)]

    def _close(self, s: Session, code: int, reason: str, now: float, why: str) -> Close:
        s.closing, s.close_why = True, why
        return Close(s.conn, code, fit_close_reason(reason), now)

    def session(self, conn: int) -> Session:
        try:
            return self.sessions[conn]
        except KeyError:
            raise UnknownConnection(f"no OpenAI connection {conn}") from None

    # ---- connections ------------------------------------------------------------------------
    def opened(self, conn: int, now: float, route: str, peer: Any, key: str) -> list[Action]:
        if conn in self.sessions:
            raise UnknownConnection(f"connection {conn} opened twice")
        sid = W.new_id("sess_", self.rng)
        engine = OpenAIModel(self.model_cfg, self.rng, lambda blocking: W.new_id("call_", self.rng))
        s = Session(sid, conn, W.model_of(route) or self.prm.default_model, default_config(self.prm), engine, now)
        s.detector = self._detector(s)
        self.sessions[conn] = s
        acts: list[Action] = [Log("twin.conn.open", {"conn": conn, "route": route, "peer": peer})]
        if key in (KEY_MISSING, KEY_WRONG):
            # the service's way: accepted at the upgrade, refused on the socket (openai_bad_key_*)
            acts += self._error(s, W.ClientError("invalid_api_key", self.prm.bad_key_message), now)
            acts.append(Log("twin.refuse", {"conn": conn, "session": sid, "code": self.prm.bad_key_close_code,
                                            "reason": self.prm.bad_key_close_reason, "why": f"key {key}"}))
            return acts + [self._close(s, self.prm.bad_key_close_code, self.prm.bad_key_close_reason, now, "bad_key")]
        at = now + draw(self.prm.session_created_s, self.rng)
        acts += [self._send(conn, self.events.event("session.created", session=W.session_object(sid, s.model, s.config)), at),
                 Log("twin.accept", {"conn": conn, "session": sid, "resume": False,
                                     "setup_ms": round((at - now) * 1000, 1)})]
        if self.prm.session_max_s is not None:
            acts.append(Timer(SessionExpiry(conn), now + self.prm.session_max_s))
        return acts

    def ended(self, conn: int, how: str, now: float) -> list[Action]:
        s = self.sessions.pop(conn, None)
        if s is None:
            raise UnknownConnection(f"no OpenAI connection {conn}")
        # no resumption: the session, its conversation and its calls end with the socket. A close the
        # server began is its own end (server_session_cap, server_error, server_bad_key), as the Gemini room
        # spells it (lab.twin.session), whatever the socket then saw: the report's rules tell the
        # server's ends from the client's by it (lab.report.rules CLIENT_ENDS)
        if s.closing and s.close_why:
            how = f"server_{s.close_why}"
        return [Log("twin.conn.end", {"conn": conn, "how": how, "session": s.id,
                                      "age_ms": round((now - s.opened_at) * 1000, 1),
                                      "speaking": s.response is not None})]

    def fire(self, key: TimerKey, now: float) -> list[Action]:
        if not isinstance(key, (StepDue, SessionExpiry)):
            raise UnknownTimer(f"not an OpenAI twin timer: {key!r}")
        s = self.sessions.get(key.conn)
        if s is None or s.closing:
            return []           # timers are never cancelled: a stale one finds nothing to do
        if isinstance(key, SessionExpiry):
            return self._expire(s, now)
        if s.response is None or s.response.id != key.response:
            return []
        return self._step(s, now)

    def _expire(self, s: Session, now: float) -> list[Action]:
        minutes = self.prm.session_max_s / 60   # type: ignore[operator]  # armed only with a cap set
        message = self.prm.session_expired_message.format(minutes=f"{minutes:g}")
        return [Log("twin.session_cap", {"conn": s.conn, "session": s.id, "audio_video": False,
                                         "age_ms": round((now - s.opened_at) * 1000, 1)}),
                *self._error(s, W.ClientError("session_expired", message), now),
                self._close(s, self.prm.session_expired_code, message, now, "session_cap")]

    def server_error(self, now: float) -> list[Action]:
        """The server's own failure, on every open session: an `error` of type server_error naming the
        session, then a close (openai_server_error_close_code; the close itself is an assumption)."""
        acts: list[Action] = []
        for s in self.sessions.values():
            if s.closing:
                continue
            message = self.prm.server_error_message.format(session=s.id)
            acts += [*self._error(s, W.ClientError(None, message, kind=W.SERVER_ERROR), now),
                     self._close(s, self.prm.server_error_close_code, W.SERVER_ERROR, now, "error")]
        return acts

    # ---- client events ----------------------------------------------------------------------
    def frame(self, conn: int, data: bytes | str, now: float) -> list[Action]:
        s = self.session(conn)
        if s.closing:
            return []
        try:
            kind, ev = W.load_event(data)
            return _received(s, kind, ev) + getattr(self, "_on_" + kind.replace(".", "_"))(s, ev, now)
        except W.ClientError as e:
            return self._error(s, e, now)

    def _on_session_update(self, s: Session, ev: dict, now: float) -> list[Action]:
        upd = ev.get("session")
        if not isinstance(upd, dict):
            raise W.ClientError("missing_required_parameter", "Missing required parameter: 'session'.",
                                "session", ev.get("event_id"))
        if upd.get("type") != "realtime":
            # the GA protocol names the session's type; a Beta-shaped update has none (assumption: wording)
            raise W.ClientError("missing_required_parameter", "Missing required parameter: 'session.type'.",
                                "session.type", ev.get("event_id"))
        s.config = merge(s.config, {k: v for k, v in upd.items() if k not in ("type", "id", "object", "model")})
        s.engine.configure(s.config.get("tools"))
        s.detector = self._detector(s)
        return [self._send(s.conn, self.events.event("session.updated",
                                                     session=W.session_object(s.id, s.model, s.config)), now)]

    def _on_input_audio_buffer_append(self, s: Session, ev: dict, now: float) -> list[Action]:
        try:
            raw = base64.b64decode(ev.get("audio") or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise W.ClientError("invalid_value", "Invalid 'audio'. Expected base64-encoded audio.", "audio",
                                ev.get("event_id")) from None
        pcm, rate = W.input_pcm(W.input_format(s.audio_input()), raw)
        ms = len(pcm) / 2 / rate * 1000
        s.audio_ms += ms
        s.buffer_ms += ms
        det = s.detector if s.turn_detection() is not None else None
        idle = det is None or not (det.in_voice or det.candidate)
        self._keep(s, pcm, rate, idle and det is not None)
        if det is None:
            return []
        acts: list[Action] = []
        for event in det.feed(pcm, rate):
            acts += self._speech_started(s, now) if event == "onset" else self._speech_stopped(s, now)
        return acts

    def _keep(self, s: Session, pcm: bytes, rate: int, idle: bool) -> None:
        """Keep the audio the ear will hear: while the VAD hears no speech, only the last
        prefix_padding_ms (the audio a committed turn includes before its onset, SDK
        RealtimeAudioInputTurnDetection); without the VAD, the buffer until the client commits it."""
        if not self.hears:
            return
        if s.heard_pcm is None or s.heard_rate != rate:
            s.heard_pcm, s.heard_rate = bytearray(), rate
        s.heard_pcm += pcm
        if idle:
            # speech may begin inside this chunk: the padding before it, and the chunk
            pad = (s.turn_detection() or {}).get("prefix_padding_ms")
            pad_ms = float(pad) if isinstance(pad, (int, float)) else self.prm.vad_prefix_padding_ms
            limit = int(pad_ms / 1000 * rate) * 2 + len(pcm)
        else:
            limit = int(MAX_HEARD_S * rate) * 2
        if len(s.heard_pcm) > limit:
            del s.heard_pcm[:len(s.heard_pcm) - limit]

    def _on_input_audio_buffer_commit(self, s: Session, ev: dict, now: float) -> list[Action]:
        if s.buffer_ms < 100:
            # assumption: the wording users report for an empty commit
            raise W.ClientError("input_audio_buffer_commit_empty",
                                "Error committing input audio buffer: buffer too small. Expected at least 100ms "
                                f"of audio, but buffer only has {s.buffer_ms:.2f}ms of audio.", None, ev.get("event_id"))
        if s.detector is not None:
            s.detector.flush()
        return self._commit(s, now, respond=False)

    def _on_input_audio_buffer_clear(self, s: Session, ev: dict, now: float) -> list[Action]:
        s.buffer_ms, s.speech_item, s.heard_pcm = 0.0, None, None
        if s.detector is not None:
            s.detector.flush()
        return [self._send(s.conn, self.events.event("input_audio_buffer.cleared"), now)]

    def _on_output_audio_buffer_clear(self, s: Session, ev: dict, now: float) -> list[Action]:
        # WebRTC/SIP only: over a WebSocket the client plays the audio itself (not modelled: assumption)
        return []

    def _on_conversation_item_create(self, s: Session, ev: dict, now: float) -> list[Action]:
        item = ev.get("item")
        eid = ev.get("event_id")
        if not isinstance(item, dict):
            raise W.ClientError("missing_required_parameter", "Missing required parameter: 'item'.", "item", eid)
        kind = item.get("type")
        item_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else W.new_id("item_", self.rng)
        acts: list[Action] = []
        if kind == "function_call_output":
            call_id = item.get("call_id")
            if self.prm.check_call_id and call_id not in s.calls:
                # md L25-27: checked against this session's function_call items; a new socket has none
                acts.append(Log("twin.tool_response", {"conn": s.conn, "session": s.id, "id": call_id, "name": None,
                                                       "known": False, "status": None, "scheduling": None}))
                # its code and wording: assumption
                return acts + self._error(s, W.ClientError(
                    "invalid_value", f"Tool call ID '{call_id}' not found in conversation.", "item.call_id", eid), now)
            known, status, plan = s.engine.output_arrived(call_id, item.get("output"))
            name = s.engine.calls[call_id].name if known else None
            # history: the output of a call the client wrote itself (its history replayed into a new
            # session), not of one this session's model issued: an answer given before, sent again, or the
            # first answer of a call cut off by the drop (the record says which, by the call id)
            acts.append(Log("twin.tool_response", {"conn": s.conn, "session": s.id, "id": call_id, "name": name,
                                                   "known": known, "status": status, "scheduling": None,
                                                   "history": call_id in s.written}))
            if plan is not None:
                s.reply = plan
            full = {"id": item_id, "object": "realtime.item", "type": kind, "status": "completed",
                    "call_id": call_id, "output": item.get("output")}
        elif kind == "function_call":
            # history a client writes itself (a restore): its call_id is then known to this session
            full = W.function_call_item(item_id, str(item.get("call_id") or ""), str(item.get("name") or ""),
                                        str(item.get("arguments") or ""), "completed")
            s.calls[full["call_id"]] = item_id   # type: ignore[assignment]  # a str: the item's id, or a new one
            s.written.add(full["call_id"])
            s.engine.written_call(full["call_id"], full["name"], full["arguments"])
            _answered(s)
        elif kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise W.ClientError("invalid_value", f"Invalid value: '{role}'. Supported values are: 'user', "
                                    "'assistant', and 'system'.", "item.role", eid)
            content = item.get("content") if isinstance(item.get("content"), list) else []
            texts = [str(c.get("text") or c.get("transcript") or "") for c in content if isinstance(c, dict)]
            text = " ".join(t for t in texts if t)
            if "system note" in text.lower():
                # a client's status note (a restore's, or a later update): the model reads it as it
                # reads a Gemini restore's (lab.conversation.engine: answered from, never a user turn)
                s.engine.restore([(role, text)], [], turn_complete=False)
                # the record's restore, as the Gemini twin writes it (a status rule reads it): the items
                # the client wrote into this session so far, and the status the note gave
                acts.append(Log("twin.restore", {"conn": s.conn, "session": s.id, "turns": len(s.items) + 1,
                                                 "note": next(iter(s.engine.story.notes.values()), None),
                                                 "plan": None}))
            elif role == "user" and text:
                s.unanswered.append(UserTurn(text))
            elif text:
                if role == "assistant":
                    _answered(s)
                s.engine.history.append((role, text))
            full = W.message_item(item_id, role, content)
        else:
            raise W.ClientError("invalid_value", f"Invalid value: '{kind}'. Supported values are: 'message', "
                                "'function_call', and 'function_call_output'.", "item.type", eid)
        acts += self._item_added(s, full, now)
        if kind == "function_call_output" and self.prm.auto_response_after_tool_output and s.response is None:
            acts += self._start_response(s, now, None)
        return acts

    def _on_conversation_item_delete(self, s: Session, ev: dict, now: float) -> list[Action]:
        item_id = self._known_item(s, ev)
        s.items.remove(item_id)
        return [self._send(s.conn, self.events.event("conversation.item.deleted", item_id=item_id), now)]

    def _on_conversation_item_retrieve(self, s: Session, ev: dict, now: float) -> list[Action]:
        item_id = self._known_item(s, ev)
        # the item's content is not kept (not modelled): its id and place only
        return [self._send(s.conn, self.events.event("conversation.item.retrieved",
                                                     item={"id": item_id, "object": "realtime.item"}), now)]

    def _on_conversation_item_truncate(self, s: Session, ev: dict, now: float) -> list[Action]:
        item_id = self._known_item(s, ev)
        return [self._send(s.conn, self.events.event("conversation.item.truncated", item_id=item_id,
                                                     content_index=ev.get("content_index", 0),
                                                     audio_end_ms=ev.get("audio_end_ms", 0)), now)]

    def _known_item(self, s: Session, ev: dict) -> str:
        item_id = ev.get("item_id")
        if item_id not in s.items:
            raise W.ClientError("item_not_found", f"Item with item_id '{item_id}' not found.", "item_id",
                                ev.get("event_id"))
        return item_id

    def _on_response_create(self, s: Session, ev: dict, now: float) -> list[Action]:
        if s.response is not None:
            raise W.ClientError("conversation_already_has_active_response",
                                f"Conversation already has an active response in progress: {s.response.id}. "
                                "Wait until the response is finished before creating a new one.", None,
                                ev.get("event_id"))
        resp = ev.get("response") if isinstance(ev.get("response"), dict) else {}
        mods = resp.get("output_modalities")
        meta = resp.get("metadata")
        return self._start_response(s, now, mods if isinstance(mods, list) else None,
                                    metadata=meta if isinstance(meta, dict) else None)

    def _on_response_cancel(self, s: Session, ev: dict, now: float) -> list[Action]:
        if s.response is None:
            raise W.ClientError("response_cancel_not_active", "Cancellation failed: no active response found.",
                                None, ev.get("event_id"))
        return self._finish(s, now, "cancelled", "client_cancelled")

    # ---- the input audio buffer and server VAD ---------------------------------------------
    def _detector(self, s: Session) -> M.AudioTurnDetector | None:
        td = s.turn_detection()
        if td is None:
            return None
        silence = td.get("silence_duration_ms")
        return M.AudioTurnDetector(self.prm.vad_threshold_rms, self.prm.vad_onset_ms,
                                   float(silence) if isinstance(silence, (int, float)) else self.prm.vad_silence_ms)

    def _speech_started(self, s: Session, now: float) -> list[Action]:
        s.speech_item = W.new_id("item_", self.rng)
        start = max(0, round(s.audio_ms - self.prm.vad_onset_ms))
        acts: list[Action] = [Log("twin.vad", {"conn": s.conn, "session": s.id, "event": "onset"}),
                              self._send(s.conn, self.events.event("input_audio_buffer.speech_started",
                                                                   audio_start_ms=start, item_id=s.speech_item), now)]
        s.engine.utterance_started()
        if self.hears and not self._ear_woken:
            # the shell readies its recognizer while the user speaks, so the turn's end does not wait for it
            self._ear_woken = True
            acts.append(WakeEar())
        td = s.turn_detection() or {}
        if s.response is not None and td.get("interrupt_response", True):
            acts.append(Log("twin.interrupted", {"conn": s.conn, "session": s.id, "speaking": True}))
            acts += self._finish(s, now, "cancelled", "turn_detected")
        return acts

    def _speech_stopped(self, s: Session, now: float) -> list[Action]:
        item_id = s.speech_item or W.new_id("item_", self.rng)
        s.speech_item = item_id
        acts: list[Action] = [self._send(s.conn, self.events.event("input_audio_buffer.speech_stopped",
                                                                   audio_end_ms=round(s.audio_ms), item_id=item_id), now)]
        td = s.turn_detection() or {}
        return acts + self._commit(s, now, respond=bool(td.get("create_response", True)))

    def _commit(self, s: Session, now: float, respond: bool) -> list[Action]:
        """The buffer becomes a user message item. With an ear its audio is handed to the recognizer
        and the turn is what it heard (speech_heard); else it stands for the next line of the script
        (lab.conversation.engine.Engine.next_line)."""
        item_id = s.speech_item or W.new_id("item_", self.rng)
        pcm, audio_s = s.heard_pcm, s.buffer_ms / 1000
        s.speech_item, s.buffer_ms, s.heard_pcm = None, 0.0, None
        prev = s.items[-1] if s.items else None
        acts: list[Action] = []
        hearing = self.hears and bool(pcm)
        if hearing:
            s.utt += 1
            s.awaiting[s.utt] = (item_id, audio_s)
            acts += [Log("twin.vad", {"conn": s.conn, "session": s.id, "event": "end", "line": None,
                                      "heard_ms": round(audio_s * 1000, 1), "waiting": "recognizer"}),
                     spoken.hear_request(s.id, s.utt, s.engine, bytes(pcm), s.heard_rate)]
        else:
            line = s.engine.next_line()
            s.unanswered.append(UserTurn(line, spoken=True, read={"by": "position"}))
            acts.append(Log("twin.vad", {"conn": s.conn, "session": s.id, "event": "end",
                                         "line": s.engine.utterances - 1, "heard_ms": round(audio_s * 1000, 1)}))
        acts.append(self._send(s.conn, self.events.event("input_audio_buffer.committed", item_id=item_id,
                                                         previous_item_id=prev), now))
        acts += self._item_added(s, W.message_item(item_id, "user", [{"type": "input_audio", "transcript": None}]), now)
        if not hearing:
            acts += self._transcribed(s, item_id, s.unanswered[-1].text, audio_s, now)
        if respond and s.response is None:
            acts += self._start_response(s, now, None)
        return acts

    def _transcribed(self, s: Session, item_id: str, text: str, audio_s: float, now: float) -> list[Action]:
        """The transcription of a committed turn, when the session asked for it: what the twin heard
        (SDK ConversationItemInputAudioTranscriptionCompletedEvent: it "runs asynchronously with Response
        creation, so this event may come before or after the Response events"). Usage by duration."""
        if not s.transcribes():
            return []
        return [self._send(s.conn, self.events.event(
            "conversation.item.input_audio_transcription.completed", item_id=item_id, content_index=0,
            transcript=text, usage={"type": "duration", "seconds": round(audio_s, 3)}), now)]

    def speech_heard(self, sid: str, utt: int, heard: Any, match: Any, now: float) -> list[Action]:
        """The recognizer's words for spoken turn `utt` of session `sid` (None, None: it failed, so the
        turn stands for the next line by position). A response waiting for them goes on now."""
        s = next((x for x in self.sessions.values() if x.id == sid), None)
        if s is None or s.closing or utt not in s.awaiting:
            return []          # the session ended meanwhile
        item_id, audio_s = s.awaiting.pop(utt)
        if match is None:
            turn = UserTurn(s.engine.next_line(), spoken=True,
                            read={"by": "position", "why": "the recognizer failed"})
            said = turn.text
        else:
            spoken.advance_position(s.engine, match.lines)
            turn = UserTurn(match.lines[0] if match.lines else "", spoken=True, more=tuple(match.lines[1:]),
                            read=spoken.by_recognizer(heard, match))
            said = match.text or match.heard
        s.unanswered.append(turn)
        acts = self._transcribed(s, item_id, said, audio_s, now)
        r = s.response
        if r is not None and r.waiting and not s.awaiting:
            r.waiting = False
            acts += self._plan_response(s, now)
        return acts

    def _item_added(self, s: Session, item: dict, now: float) -> list[Action]:
        prev = s.items[-1] if s.items else None
        s.items.append(item["id"])
        return [self._send(s.conn, self.events.event("conversation.item.added", previous_item_id=prev, item=item), now),
                self._send(s.conn, self.events.event("conversation.item.done", previous_item_id=prev, item=item), now)]

    # ---- responses --------------------------------------------------------------------------
    def _plan(self, s: Session) -> tuple[Plan, list[Action]]:
        """What the model does when asked: its answer to tool outputs, else to the user's last turn
        (earlier unanswered ones are history), else to nothing new (the conversation's plain answer).
        A spoken turn is answered as the Gemini twin answers one: by what was heard, two phrases in
        one breath both acted on (fidelity §8 F7), speech no phrase fits asked again."""
        if s.reply is not None and not s.unanswered:
            plan, s.reply = s.reply, None
            return plan, []
        s.reply = None
        turns, s.unanswered = s.unanswered, []
        _to_history(s, turns[:-1])
        turn = turns[-1] if turns else UserTurn("")
        intent: str | None
        if turn.unclear:
            plan = s.engine.not_understood()
            intent = "UNCLEAR"
        else:
            plan = s.engine.user_turn(turn.text, spoken=turn.spoken) or Plan([Step("turn_complete")], why="nothing")
            intent = plan.match.get("intent")
            # records (001 F speech): the request of a merged turn was acted on; the stop in it did not withdraw it
            s.engine.history.extend(("user", line) for line in turn.more)
        call = next((st for st in plan.steps if st.kind == "call"), None)
        source = "audio" if turn.spoken else "text"
        model = {"conn": s.conn, "session": s.id, "source": source, "text": turn.text, "match": dict(plan.match),
                 "plan": plan.why, "tool": call.tool if call else None, "args": dict(call.args) if call else None}
        if turn.read is not None:
            model["heard"] = turn.read
        return plan, [Log("twin.user", {"conn": s.conn, "session": s.id, "source": source, "intent": intent,
                                        "plan": plan.why}),
                      Log("twin.model", model)]

    def _start_response(self, s: Session, now: float, modalities: list[str] | None,
                        metadata: dict | None = None) -> list[Action]:
        mods = modalities or list(s.config.get("output_modalities") or ["audio"])
        r = Response(W.new_id("resp_", self.rng), [], mods, metadata=metadata)
        s.response = r
        reserved = 4096     # the output-token reservation rate_limits.updated reflects (md L33); the figure: assumption
        acts: list[Action] = [
            self._send(s.conn, self.events.event("response.created", response=W.response_object(
                r.id, "in_progress", [], mods, metadata=r.metadata)), now),
            self._send(s.conn, self.events.event("rate_limits.updated", rate_limits=W.rate_limits(
                (self.prm.rate_limit_requests, self.prm.rate_limit_requests - 1),
                (self.prm.rate_limit_tokens, self.prm.rate_limit_tokens - reserved))), now)]
        if s.awaiting:
            # a spoken turn's words are not back: the response is under way (created) and what it
            # says waits for them (assumption: the real model hears the audio itself, unmeasured)
            r.waiting = True
            return acts + [Log("twin.vad", {"conn": s.conn, "session": s.id, "event": "response",
                                            "waiting": "recognizer"})]
        return acts + self._plan_response(s, now)

    def _plan_response(self, s: Session, now: float) -> list[Action]:
        r = s.response
        assert r is not None
        plan, acts = self._plan(s)
        r.steps = [st for st in plan.steps if st.kind != "turn_complete"]
        return acts + self._next(s, now)

    def _next(self, s: Session, now: float) -> list[Action]:
        r = s.response
        assert r is not None
        if not r.steps:
            return self._finish(s, now, "completed", None)
        return [Timer(StepDue(s.conn, r.id), now + max(0.0, r.steps[0].delay))]

    def _step(self, s: Session, now: float) -> list[Action]:
        r = s.response
        assert r is not None
        step = r.steps.pop(0)
        acts = self._say(s, r, step, now) if step.kind == "say" else self._calls(s, r, step, now)
        return acts + self._next(s, now)

    def _say(self, s: Session, r: Response, step: Step, now: float) -> list[Action]:
        ev, send = self.events.event, self._send
        item_id, index = W.new_id("item_", self.rng), len(r.output)
        audio = "audio" in r.modalities
        part_kind = "audio" if audio else "text"
        where = {"response_id": r.id, "item_id": item_id, "output_index": index, "content_index": 0}
        item = W.message_item(item_id, "assistant", [], "in_progress")
        prev = s.items[-1] if s.items else None
        s.items.append(item_id)
        c = s.conn
        acts: list[Action] = [Log("twin.say", {"conn": c, "session": s.id, "text": step.text}),
                              send(c, ev("response.output_item.added", response_id=r.id, output_index=index, item=item), now),
                              send(c, ev("conversation.item.added", previous_item_id=prev, item=item), now),
                              send(c, ev("response.content_part.added", **where, part={"type": part_kind, ("transcript" if audio else "text"): ""}), now)]
        pieces = _pieces(step.text)
        if audio:
            chunks = max(1, math.ceil(len(step.text) * self.prm.speech_ms_per_char / self.prm.audio_chunk_ms))
            pcm = base64.b64encode(M.tone(self.prm.audio_chunk_ms / 1000.0, RATE, self.prm.tone_hz)).decode()
            per = math.ceil(len(pieces) / chunks) if pieces else 0
            for i in range(chunks):
                for p in pieces[i * per:(i + 1) * per]:
                    acts.append(send(c, ev("response.output_audio_transcript.delta", **where, delta=p), now))
                acts.append(send(c, ev("response.output_audio.delta", **where, delta=pcm), now))
            acts += [send(c, ev("response.output_audio.done", **where), now),
                     send(c, ev("response.output_audio_transcript.done", **where, transcript=step.text), now)]
            content = [{"type": "output_audio", "transcript": step.text}]
        else:
            acts += [send(c, ev("response.output_text.delta", **where, delta=p), now) for p in pieces]
            acts.append(send(c, ev("response.output_text.done", **where, text=step.text), now))
            content = [{"type": "output_text", "text": step.text}]
        said = {"transcript": step.text} if audio else {"text": step.text}
        acts.append(send(c, ev("response.content_part.done", **where, part={"type": part_kind, **said}), now))
        done = W.message_item(item_id, "assistant", content, "completed")
        r.output.append(done)
        s.engine.history.append(("model", step.text))
        return acts + [send(c, ev("response.output_item.done", response_id=r.id, output_index=index, item=done), now),
                       send(c, ev("conversation.item.done", previous_item_id=prev, item=done), now)]

    def _calls(self, s: Session, r: Response, step: Step, now: float) -> list[Action]:
        """One function_call item per call of the step (a multi-value line asks several)."""
        ev, send, c = self.events.event, self._send, s.conn
        acts: list[Action] = []
        for call in s.engine.new_calls([dict(step.args), *[dict(a) for a in step.more]], step.tool):
            item_id, index = W.new_id("item_", self.rng), len(r.output)
            args = W.arguments_json(call.args)
            s.calls[call.id] = item_id
            prev = s.items[-1] if s.items else None
            s.items.append(item_id)
            item = W.function_call_item(item_id, call.id, call.name, "", "in_progress")
            done = W.function_call_item(item_id, call.id, call.name, args, "completed")
            r.output.append(done)
            where = {"response_id": r.id, "item_id": item_id, "output_index": index, "call_id": call.id}
            acts += [Log("twin.tool_call", {"conn": c, "session": s.id, "id": call.id, "name": call.name,
                                            "args": call.args, "blocking": call.blocking}),
                     send(c, ev("response.output_item.added", response_id=r.id, output_index=index, item=item), now),
                     send(c, ev("conversation.item.added", previous_item_id=prev, item=item), now),
                     send(c, ev("response.function_call_arguments.delta", **where, delta=args), now),
                     send(c, ev("response.function_call_arguments.done", **where, name=call.name, arguments=args), now),
                     send(c, ev("response.output_item.done", response_id=r.id, output_index=index, item=done), now),
                     send(c, ev("conversation.item.done", previous_item_id=prev, item=done), now)]
        return acts

    def _finish(self, s: Session, now: float, status: str, reason: str | None) -> list[Action]:
        r = s.response
        assert r is not None
        s.response = None
        details = {"type": status, "reason": reason} if reason else {"type": status}
        usage = {"total_tokens": 0, "input_tokens": 0, "output_tokens": 0}     # token counts: not modelled
        return [self._send(s.conn, self.events.event("response.done", response=W.response_object(
            r.id, status, r.output, r.modalities, details, usage, r.metadata)), now)]


def _answered(s: Session) -> None:
    """The client wrote the model's side of the conversation (a call, an assistant message): the user
    turns before it were answered there, so they are history, not turns the next response answers."""
    _to_history(s, s.unanswered)
    s.unanswered = []


def _to_history(s: Session, turns: list[UserTurn]) -> None:
    """User turns that get no answer of their own (speech not understood adds none, as on Gemini)."""
    for t in turns:
        s.engine.history.extend(("user", line) for line in (t.text, *t.more) if line)


def _received(s: Session, kind: str, ev: dict) -> list[Action]:
    """What the client sent, for the record: which event, and for the ones that shape the session its
    gist (the tools a session.update declares, an item's type, role and call_id), so a client's
    behaviour on the wire (a reconnect's session.update, history replayed without its calls, a
    response.create after a tool output) is read from twin.jsonl. Audio appends are not recorded one
    by one (one per chunk): the VAD's twin.vad says when speech came."""
    if kind == "input_audio_buffer.append":
        return []
    fields: dict[str, Any] = {"conn": s.conn, "session": s.id, "type": kind}
    update, item = ev.get("session"), ev.get("item")
    if kind == "session.update" and isinstance(update, dict) and isinstance(update.get("tools"), list):
        fields["tools"] = [t.get("name") for t in update["tools"] if isinstance(t, dict)]
    elif kind == "conversation.item.create" and isinstance(item, dict):
        for field_, key in (("item", "type"), ("role", "role"), ("call_id", "call_id")):
            if isinstance(item.get(key), str):
                fields[field_] = item[key]
    return [Log("twin.client_event", fields)]


def _pieces(text: str) -> list[str]:
    """A sentence in the pieces its deltas carry: a word and the space before it."""
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words) if w or i == 0]
