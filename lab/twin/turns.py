"""The twin's turn room: what a session hears and says, timed.

Per session: the scripted model (lab.twin.model) and the energy VAD on its audio; a user turn (text,
a restored transcript, the Nth utterance of speech) becomes the model's Plan, played step by step
on timers: speech as real-time audio chunks with its transcription, tool calls, turnComplete. A
new user turn or VAD onset barges in: a turn that already reached the client is cut with
`interrupted` (no toolCallCancellation, as the real server). A BLOCKING call holds the turn until
its FunctionResponse.

Every turn carries a generation number; a Step or Chunk timer of an older generation is stale and
does nothing. Knows nothing of handles, locks, phases or sockets: it asks its `Outlet` (the session
room, through the core) which connection a session is live on, and builds frames with lab.twin.wire.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Protocol

from lab.twin import model as M
from lab.twin import wire
from lab.twin.actions import Log, Timer, TimerKey, UnknownSession, UnknownTimer


@dataclass(frozen=True)
class TurnParams:
    """The profile parameters this room reads (each declared in lab.twin.params)."""
    speech_ms_per_char: float
    audio_chunk_ms: float
    tone_hz: float
    vad_threshold_rms: float
    vad_onset_ms: float
    vad_silence_ms: float


# ---- timers (subclasses inherit the frozen dataclass: equal only to their own type) -----------

@dataclass(frozen=True)
class SessionTimer(TimerKey):
    session: str


@dataclass(frozen=True)
class TurnTimer(SessionTimer):
    gen: int        # the turn it belongs to: stale once the session's generation moved on


class Step(TurnTimer):
    """Play the turn's next step (a say, a call, turnComplete)."""


class Chunk(TurnTimer):
    """Send the next audio chunk of the sentence being spoken."""


class Flush(SessionTimer):
    """End an utterance whose audio stopped (no audio for vad_silence_ms on the wall clock)."""


# ---- state ----------------------------------------------------------------------------------

@dataclass
class Turn:
    plan: M.Plan
    gen: int
    idx: int = 0
    speaking: bool = False
    chunks_left: int = 0
    emitted: bool = False       # something of this turn reached the client
    holding: bool = False       # BLOCKING: waiting for the function response


@dataclass
class Playback:
    """One session's side of the conversation."""
    model: M.ScriptedModel
    detector: M.AudioTurnDetector
    gen: int = 0
    turn: Turn | None = None
    queue: list = field(default_factory=list)
    input_transcription: bool = False
    output_transcription: bool = False
    had_audio: bool = False
    had_video: bool = False
    last_audio_at: float = 0.0
    flush_armed: bool = False

    def drop_turn(self) -> None:
        self.gen += 1
        self.turn = None


class Outlet(Protocol):
    """Where a session's frames go (the session room answers, through the core)."""

    def live_conn(self, sid: str) -> int | None: ...        # the connection, if live
    def open_conn(self, sid: str) -> int | None: ...        # the connection, live or closing
    def before_turn_complete(self, sid: str, now: float) -> list: ...


class Turns:
    """Every session's playback; implements the session room's TurnHooks."""

    def __init__(self, prm: TurnParams, model_cfg: M.ModelConfig, frames: wire.Wire, rng: random.Random,
                 outlet: Outlet):
        self.prm = prm
        self.model_cfg = model_cfg
        self.wire = frames
        self.rng = rng
        self.outlet = outlet
        self.plays: dict[str, Playback] = {}
        self._call_ids: set[str] = set()     # call ids are unique across sessions
        self._inputs: dict[str, Callable[[str, int, dict, float], list]] = {
            "clientContent": self._on_client_content, "realtimeInput": self._on_realtime_input,
            "toolResponse": self._on_tool_response, "contextUpdate": self._on_context_update}
        self._timers: dict[type, Callable[[str, Playback, TimerKey, float], list]] = {
            Step: self._on_step_timer, Chunk: self._on_step_timer, Flush: self._on_flush}

    def _next_call_id(self, blocking: bool) -> str:
        """An id shaped like the real service's (fidelity §2 [records]): `call_` + 6-7 digits for a
        NON_BLOCKING call, `fc_` + 19-20 digits for a BLOCKING one; from the seeded rng, never reused."""
        while True:
            cid = (f"fc_{self.rng.randrange(10**18, 10**20)}" if blocking
                   else f"call_{self.rng.randrange(10**5, 10**7)}")
            if cid not in self._call_ids:
                self._call_ids.add(cid)
                return cid

    def play(self, sid: str) -> Playback:
        try:
            return self.plays[sid]
        except KeyError:
            raise UnknownSession(f"no playback for session {sid!r}") from None

    # ---- TurnHooks ----------------------------------------------------------------------------
    def begin(self, sid: str, setup: dict) -> None:
        mdl = M.ScriptedModel(self.model_cfg, random.Random(self.rng.random()), next_call_id=self._next_call_id)
        det = M.AudioTurnDetector(self.prm.vad_threshold_rms, self.prm.vad_onset_ms, self.prm.vad_silence_ms)
        self.plays[sid] = Playback(mdl, det)
        self.configure(sid, setup)

    def configure(self, sid: str, setup: dict) -> None:
        p = self.play(sid)
        p.model.configure(setup)
        p.input_transcription = setup.get("inputAudioTranscription") is not None
        p.output_transcription = setup.get("outputAudioTranscription") is not None

    def stop(self, sid: str) -> bool:
        p = self.play(sid)
        speaking = bool(p.turn and p.turn.speaking)
        p.drop_turn()
        p.queue.clear()
        return speaking

    def used_audio_and_video(self, sid: str) -> bool:
        p = self.play(sid)
        return p.had_audio and p.had_video

    # ---- events -------------------------------------------------------------------------------
    def deliver(self, sid: str, conn: int, kind: str, body: dict, now: float) -> list:
        """One client message on the session's live connection; raises wire.BadInput."""
        try:
            handler = self._inputs[kind]
        except KeyError:
            raise wire.BadInput(wire.INVALID_ARGUMENT) from None
        return handler(sid, conn, body, now)

    def fire(self, key: TimerKey, now: float) -> list:
        handler = self._timers.get(type(key))
        if handler is None or not isinstance(key, SessionTimer):
            raise UnknownTimer(f"the turn room has no timer {key!r}")
        return handler(key.session, self.play(key.session), key, now)

    # ---- inputs -------------------------------------------------------------------------------
    def _on_context_update(self, sid: str, conn: int, body: dict, now: float) -> list:
        self.play(sid).model.configure(body)
        return []

    def _note_media(self, p: Playback, mime: str) -> None:
        if mime.startswith("audio/"):
            p.had_audio = True
        elif mime.startswith("image/") or mime.startswith("video/"):
            p.had_video = True

    def _on_client_content(self, sid: str, conn: int, body: dict, now: float) -> list:
        cc = wire.client_content(body)
        p = self.play(sid)
        for mime in cc.mimes:
            self._note_media(p, mime)
        if not cc.turns:
            # `turns: [], turnComplete: true` closes a user turn sent earlier with turnComplete false
            # (LiveKit's typed-message path on 3.x models): the model answers that pending turn.
            if cc.turn_complete and p.model.history and p.model.history[-1][0] == "user":
                _, text = p.model.history.pop()
                return self._user_text(sid, conn, text, now, source="client_content")
            return []
        texts = cc.texts
        simple = (len(cc.turns) == 1 and str(cc.turns[0].get("role") or "user") == "user" and texts
                  and not any("system note" in x.lower() for _, x in texts))
        if simple:
            line = " ".join(x for _, x in texts)
            if not cc.turn_complete:
                p.model.history.append(("user", line))
                return []
            return self._user_text(sid, conn, line, now, source="client_content")
        plan = p.model.restore(cc.turns, cc.turn_complete)
        acts: list = [Log("twin.restore", {"conn": conn, "session": sid, "turns": len(cc.turns),
                                           "note": p.model.note_status, "plan": plan.why if plan else None})]
        if plan:
            acts += self._interrupt(sid, conn, now)
            acts += self._start_plan(sid, plan, now)
        return acts

    def _on_realtime_input(self, sid: str, conn: int, body: dict, now: float) -> list:
        ri = wire.realtime_input(body)
        p = self.play(sid)
        acts: list = []
        for blob in ri.blobs:
            if "video" in blob.where and not blob.mime.startswith("audio/"):
                p.had_video = True
                continue
            self._note_media(p, blob.mime)
            if blob.mime.startswith("audio/"):
                acts += self._on_audio(sid, conn, blob.data, blob.audio_rate, now)
        if ri.text is not None:
            acts += self._user_text(sid, conn, ri.text, now, source="realtime_text")
        if ri.activity_start:
            acts += self._interrupt(sid, conn, now)
            p.detector.in_voice = True
        if ri.activity_end:
            acts += self._detector_events(sid, conn, p.detector.flush(), now)
        return acts

    def _vad_flush_due(self, p: Playback) -> float:
        return p.last_audio_at + self.prm.vad_silence_ms / 1000 + 0.1

    def _on_audio(self, sid: str, conn: int, pcm: bytes, rate: int, now: float) -> list:
        p = self.play(sid)
        p.last_audio_at = now
        acts = self._detector_events(sid, conn, p.detector.feed(pcm, rate), now)
        if (p.detector.in_voice or p.detector.candidate) and not p.flush_armed:
            p.flush_armed = True
            acts.append(Timer(Flush(sid), self._vad_flush_due(p)))
        return acts

    def _on_flush(self, sid: str, p: Playback, key: TimerKey, now: float) -> list:
        p.flush_armed = False
        conn = self.outlet.open_conn(sid)
        if conn is None or not (p.detector.in_voice or p.detector.candidate):
            return []
        due = self._vad_flush_due(p)
        if now + 1e-6 < due:
            p.flush_armed = True
            return [Timer(Flush(sid), due)]
        return self._detector_events(sid, conn, p.detector.flush(), now)

    def _detector_events(self, sid: str, conn: int, events: list[str], now: float) -> list:
        p = self.play(sid)
        acts: list = []
        for ev in events:
            if ev == "onset":
                acts.append(Log("twin.vad", {"conn": conn, "session": sid, "event": "onset"}))
                acts += self._interrupt(sid, conn, now)
            elif ev == "end":
                line = p.model.next_script_line()
                acts.append(Log("twin.vad", {"conn": conn, "session": sid, "event": "end",
                                             "line": p.model.utterances - 1}))
                if p.input_transcription and line:
                    acts.append(self.wire.send(conn, wire.input_transcription(line), now))
                if line:
                    acts += self._user_text(sid, conn, line, now, source="speech", interrupt=False)
        return acts

    def _user_text(self, sid: str, conn: int, text: str, now: float, source: str, interrupt: bool = True) -> list:
        p = self.play(sid)
        acts: list = []
        if interrupt:
            acts += self._interrupt(sid, conn, now)
        else:
            p.drop_turn()
        plan = p.model.user_turn(text)
        acts.append(Log("twin.user", {"conn": conn, "session": sid, "source": source,
                                      "intent": M.classify(text), "plan": plan.why if plan else None}))
        if plan:
            acts += self._start_plan(sid, plan, now)
        return acts

    def _interrupt(self, sid: str, conn: int, now: float) -> list:
        """Barge-in: a turn that already reached the client is cut with interrupted (no cancellation)."""
        p = self.play(sid)
        acts: list = []
        t = p.turn
        if t is not None and (t.emitted or t.holding):
            acts.append(self.wire.send(conn, wire.interrupted(), now))
            acts.append(Log("twin.interrupted", {"conn": conn, "session": sid, "speaking": t.speaking}))
        if t is not None:
            p.drop_turn()
        p.queue.clear()
        return acts

    def _on_tool_response(self, sid: str, conn: int, body: dict, now: float) -> list:
        p = self.play(sid)
        acts: list = []
        for fr in wire.function_responses(body):
            known, status, plan = p.model.tool_response(fr)
            sched = M.response_scheduling(fr)
            acts.append(Log("twin.tool_response", {"conn": conn, "session": sid, "id": fr.get("id"),
                                                   "name": fr.get("name"), "known": known, "status": status,
                                                   "scheduling": sched or None}))
            if not plan:
                continue
            t = p.turn
            if t is not None and t.holding:
                p.drop_turn()       # the held BLOCKING turn continues with the answer
                acts += self._start_plan(sid, plan, now, emitted=True)
            elif t is None:
                acts += self._start_plan(sid, plan, now)
            elif sched == "INTERRUPT":
                acts += self._interrupt(sid, conn, now)
                acts += self._start_plan(sid, plan, now)
            else:
                p.queue.append(plan)
        return acts

    # ---- output -------------------------------------------------------------------------------
    def _start_plan(self, sid: str, plan: M.Plan, now: float, emitted: bool = False) -> list:
        p = self.play(sid)
        p.gen += 1
        p.turn = Turn(plan, p.gen, emitted=emitted)
        if not plan.steps:
            p.turn = None
            return []
        return [Timer(Step(sid, p.gen), now + plan.steps[0].delay)]

    def _on_step_timer(self, sid: str, p: Playback, key: TimerKey, now: float) -> list:
        assert isinstance(key, TurnTimer)
        if p.turn is None or p.turn.gen != key.gen or p.gen != key.gen:
            return []           # a turn since cut or finished
        return self._on_step(sid, p, now) if isinstance(key, Step) else self._on_chunk(sid, p, now)

    def _on_step(self, sid: str, p: Playback, now: float) -> list:
        conn = self.outlet.live_conn(sid)
        t = p.turn
        if conn is None or t is None:
            p.turn = None
            return []
        step = t.plan.steps[t.idx]
        if step.kind == "say":
            t.speaking = True
            t.emitted = True
            dur = len(step.text) * self.prm.speech_ms_per_char / 1000.0
            t.chunks_left = max(1, math.ceil(dur * 1000 / self.prm.audio_chunk_ms))
            acts: list = [Log("twin.say", {"conn": conn, "session": sid, "text": step.text})]
            if p.output_transcription:
                acts.append(self.wire.send(conn, wire.output_transcription(step.text), now))
            return acts + self._on_chunk(sid, p, now)
        if step.kind == "call":
            call = p.model.new_call()
            t.emitted = True
            args = {"slot": call.slot}
            acts = [self.wire.send(conn, wire.tool_call(call.id, call.name, args), now),
                    Log("twin.tool_call", {"conn": conn, "session": sid, "id": call.id, "name": call.name,
                                           "args": dict(args), "blocking": call.blocking})]
            return acts + self._advance(sid, p, now)
        if step.kind == "turn_complete":
            # a per-turn handle goes out before turnComplete, so receive() still sees it
            acts = self.outlet.before_turn_complete(sid, now)
            acts.append(self.wire.send(conn, wire.turn_complete(), now))
            return acts + self._advance(sid, p, now)
        return self._advance(sid, p, now)

    def _on_chunk(self, sid: str, p: Playback, now: float) -> list:
        conn = self.outlet.live_conn(sid)
        t = p.turn
        if conn is None or t is None:
            return []
        chunk_s = self.prm.audio_chunk_ms / 1000.0
        pcm = M.tone(chunk_s, 24000, self.prm.tone_hz)
        acts: list = [self.wire.send(conn, wire.audio_chunk(pcm, 24000), now)]
        t.chunks_left -= 1
        if t.chunks_left > 0:
            acts.append(Timer(Chunk(sid, t.gen), now + chunk_s))
            return acts
        t.speaking = False
        acts.append(self.wire.send(conn, wire.generation_complete(), now))
        return acts + self._advance(sid, p, now, after=chunk_s)

    def _advance(self, sid: str, p: Playback, now: float, after: float = 0.0) -> list:
        t = p.turn
        if t is None:
            return []
        t.idx += 1
        if t.idx < len(t.plan.steps):
            return [Timer(Step(sid, t.gen), now + after + t.plan.steps[t.idx].delay)]
        if t.plan.hold:
            t.holding = True
            return []
        p.turn = None
        if p.queue:
            return self._start_plan(sid, p.queue.pop(0), now + after)
        return []
