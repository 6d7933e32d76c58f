"""The twin's turn room: what a session hears and says, timed.

Per session: the scripted model (lab.twin.model) and the energy VAD on its audio, or the client's
own activityStart..activityEnd windows when its realtimeInputConfig turns automatic detection off
(lab.twin.activity); a user turn (text, a restored transcript, an utterance of speech read by its
words or its position) becomes the model's Plan, played step by step on timers, in the order the real service sends (fidelity.md §3):

- speech as audio_chunk_ms chunks (~300 ms in the records) sent in a burst faster than real time
  (audio_send_speed; 1 is real-time pacing), each with its piece of outputTranscription in the
  same frame; generationComplete at the end of the generation; turnComplete, with usageMetadata in
  the same frame, when playback should have ended (first chunk + duration);
- the user's speech: voiceActivity ACTIVITY_START ~150 ms after it starts (wall time) and
  ACTIVITY_END after it ends, inputTranscription in pieces while it lasts;
- a barge-in (new user text, VAD onset, activityStart) cuts any turn in flight with `interrupted`
  (in the same ms as ACTIVITY_START) and then turnComplete 0-36 ms later: a turn is never left
  without turnComplete. No toolCallCancellation, as the real server. NO_INTERRUPTION queues the
  user's turn behind the model's instead.

A BLOCKING call holds the turn until its FunctionResponse.

Every turn carries a generation number; a Step or Chunk timer of an older generation is stale and
does nothing. Knows nothing of handles, locks, phases or sockets: it asks its `Outlet` (the session
room, handed to it by the core) which connection a session is live on, and builds frames with lab.twin.wire.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from lab.stats.distributions import draw
from lab.twin import model as M
from lab.twin import pieces, spoken, wire
from lab.twin import hearing as H
from lab.twin.io_actions import Log, Timer, TimerKey, UnknownSession, UnknownTimer, WakeEar
from lab.twin.activity import ActivityConfig, activity_config
from lab.twin.usage import Usage


@dataclass(frozen=True)
class TurnParams:
    """The profile parameters this room reads (each declared in lab.twin.params)."""
    speech_ms_per_char: float
    audio_chunk_ms: float
    tone_hz: float
    vad_threshold_rms: float
    vad_onset_ms: float
    vad_silence_ms: float
    vad_end_s: Any                      # a Delay: seconds or a range drawn per utterance
    vad_end_stop_s: Any                 # ... when the utterance stands for a stop
    vad_end_request_s: Any              # ... when it stands for a request of a tool
    interrupt_turn_complete_s: Any      # a Delay, drawn per interrupted turn
    audio_send_speed: float
    stray_audio_close: bool
    hear_speech: bool                   # recognize spoken turns when the shell has an ear
    usage_audio_tokens_per_s: float
    usage_text_chars_per_token: float
    text_interrupt_s: Any               # a Delay: a typed turn's interrupted after it arrives
    conversation_scope: str             # "client": a client's sessions share one conversation; "session"


# a chunk counts as sound (the fade of a clip, not digital silence) above this share of the VAD
# threshold (assumption: a tenth; the records give the clips' end, not their levels)
SOUND_FLOOR = 0.1


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


@dataclass(frozen=True)
class UtteranceTimer(SessionTimer):
    utt: int        # the utterance it belongs to: stale once another one began


class VadStart(UtteranceTimer):
    """Send ACTIVITY_START (and barge in) vad_onset_ms after the speech began, wall time."""


class VadEnd(UtteranceTimer):
    """Send ACTIVITY_END and hand the utterance to the model, vad_end_s after the speech ended."""


# ---- state ----------------------------------------------------------------------------------

@dataclass(slots=True)
class Turn:
    plan: M.Plan
    gen: int
    idx: int = 0
    speaking: bool = False
    chunks_left: int = 0
    emitted: bool = False       # something of this turn reached the client
    holding: bool = False       # BLOCKING: waiting for the function response
    pieces: list = field(default_factory=list)     # outputTranscription piece per chunk still to send
    first_audio_at: float | None = None
    audio_s: float = 0.0        # audio sent in this turn
    generated: bool = False     # generationComplete sent: only turnComplete is left


@dataclass(slots=True)
class Playback:
    """One session's side of the conversation."""
    model: M.ScriptedModel
    detector: M.AudioTurnDetector
    gen: int = 0
    turn: Turn | None = None
    queue: list = field(default_factory=list)
    input_transcription: bool = False
    output_transcription: bool = False
    turns_begun: int = 0        # user turns begun: utterances (speech or a manual window) and texts
    last_audio_at: float = 0.0
    flush_armed: bool = False
    activity: ActivityConfig = field(default_factory=ActivityConfig)
    utt: int = 0                # utterances begun (speech or a manual window): names its VAD timers
    voice_at: float = 0.0       # wall time the current utterance's speech began
    voiced_at: float = 0.0      # wall time of its last voiced chunk
    started: bool = False       # ACTIVITY_START sent (or the manual window opened)
    ending: bool = False        # the utterance is over, ACTIVITY_END not yet sent
    heard_ms: float = 0.0       # speech heard in the current utterance (audio time)
    voiced_ms: float = 0.0      # of it, the voiced chunks only (what a line's length is compared with)
    hearing: bool = False       # between ACTIVITY_START (or a window's start) and its end
    deferred: list = field(default_factory=list)   # replies held while the user speaks (F4)
    audio_in_s: float = 0.0     # input audio received in this session (audio time): voiceActivity's offset
    voice_audio_s: float = 0.0  # that offset where the current utterance's speech began
    sound_at: float = 0.0       # wall time of the utterance's last chunk with any sound in it
    window: bool = False        # a manual activityStart..activityEnd window is open
    window_voiced: bool = False
    usage: Usage | None = None
    line_pending: bool = False  # the last user turn came with turnComplete false and is unanswered
    # with an ear (the twin hears speech): the utterance's audio until it is handed to the recognizer,
    # what each utterance was heard as, and the utterance whose end waits for its words
    audio: bytearray | None = None
    audio_rate: int = 16000
    heard: dict = field(default_factory=dict)
    awaiting: int = 0

    def drop_turn(self) -> None:
        self.gen += 1
        self.turn = None


class _LazyRandom:
    """A session model's random.Random, seeded when the session begins (so the twin's draws are
    those of a seeded run) but made at its first use: its 2.5 KB of state is most of what a session
    that never takes a turn would hold."""

    __slots__ = ("_seed", "_rng")

    def __init__(self, seed: float):
        self._seed = seed
        self._rng: random.Random | None = None

    def __getattr__(self, name: str) -> Any:
        if self._rng is None:
            self._rng = random.Random(self._seed)
        return getattr(self._rng, name)


class Outlet(Protocol):
    """Where a session's frames go (the session room answers; the core hands it over once both exist)."""

    def live_conn(self, sid: str) -> int | None: ...        # the connection, if live
    def open_conn(self, sid: str) -> int | None: ...        # the connection, live or closing
    def before_turn_complete(self, sid: str, now: float) -> list: ...


class Turns:
    """Every session's playback; implements the session room's TurnHooks."""

    def __init__(self, prm: TurnParams, model_cfg: M.ModelConfig, frames: wire.Wire, rng: random.Random,
                 outlet: Outlet | None = None):
        self.prm = prm
        self.model_cfg = model_cfg
        self.wire = frames
        self.rng = rng
        self.outlet = outlet    # None until its owner hands it one, before any session begins (lab.twin.core)
        self.plays: dict[str, Playback] = {}
        # set by the shell that can run a recognizer (lab.twin.recognizer.Ear); without one, or with
        # hear_speech off, the Nth utterance stands for line N of the script
        self.ear = False
        self._ear_woken = False
        # the user's spoken lines go on across a client's sessions (fidelity §8 F6): one Position per client
        self.positions: dict[str, M.Position] = {}
        self._call_ids: set[str] = set()     # call ids are unique across sessions
        self._inputs: dict[str, Callable[[str, int, dict, float], list]] = {
            "clientContent": self._on_client_content, "realtimeInput": self._on_realtime_input,
            "toolResponse": self._on_tool_response, "contextUpdate": self._on_context_update}
        self._timers: dict[type, Callable[[str, Playback, TimerKey, float], list]] = {
            Step: self._on_step_timer, Chunk: self._on_step_timer, Flush: self._on_flush,
            VadStart: self._on_vad_timer, VadEnd: self._on_vad_timer}

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
    def begin(self, sid: str, setup: dict, client: str = "") -> list:
        story = None
        if self.prm.conversation_scope == "client" and client:    # a client not told apart gets its own
            story = M.Story(self.positions.setdefault(client, M.Position()))
        mdl = M.ScriptedModel(self.model_cfg, _LazyRandom(self.rng.random()), next_call_id=self._next_call_id,
                              story=story)
        det = M.AudioTurnDetector(self.prm.vad_threshold_rms, self.prm.vad_onset_ms, self.prm.vad_silence_ms)
        usage = Usage(self.prm.usage_audio_tokens_per_s, self.prm.usage_text_chars_per_token)
        # the setup's instruction and tools are the first of every turn's prompt
        usage.heard_text(len(str(setup.get("systemInstruction") or "")) + len(str(setup.get("tools") or "")))
        self.plays[sid] = Playback(mdl, det, usage=usage)
        return self.configure(sid, setup)

    def configure(self, sid: str, setup: dict) -> list:
        """A setup (new or resumed) configures the session's model; twin.conversation says what it plays."""
        p = self.play(sid)
        p.model.configure(setup)
        p.input_transcription = setup.get("inputAudioTranscription") is not None
        p.output_transcription = setup.get("outputAudioTranscription") is not None
        p.activity = activity_config(setup)
        # the client's VAD settings replace the profile's: prefixPaddingMs is the speech needed
        # before the start is committed, silenceDurationMs the silence that ends it
        p.detector.onset_ms = p.activity.prefix_ms if p.activity.prefix_ms is not None else self.prm.vad_onset_ms
        p.detector.silence_ms = (p.activity.silence_ms if p.activity.silence_ms is not None
                                 else self.prm.vad_silence_ms)
        return [self._conversation_log(sid, p.model)]

    @staticmethod
    def _conversation_log(sid: str, mdl: M.ScriptedModel) -> Log:
        conv = mdl.conv
        # "twin.conversation" is semantics.EVENT_KIND, the name the report reads it by
        return Log("twin.conversation", {"session": sid, "source": conv.source, "name": conv.name,
                                          "tools": [t.semantics.to_json() for t in mdl.tools.values()],
                                          "assumed": dict(mdl.assumed) or None})

    def stop(self, sid: str) -> bool:
        p = self.play(sid)
        speaking = bool(p.turn and p.turn.speaking)
        p.drop_turn()
        p.queue.clear()
        return speaking

    def user_turns(self, sid: str) -> int:
        return self.play(sid).turns_begun

    def undeclared(self, sid: str) -> tuple[list[str], list[str]]:
        """The conversation's tools the session's setup lacks, and the names it declares (the
        model's own reading of the setup's declarations)."""
        mdl = self.play(sid).model
        return mdl.undeclared(), [str(d.get("name")) for d in mdl.declared]

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
        p = self.play(sid)
        p.model.configure(body)
        return [self._conversation_log(sid, p.model)] if M.declarations(body) else []

    def _on_client_content(self, sid: str, conn: int, body: dict, now: float) -> list:
        cc = wire.client_content(body)
        p = self.play(sid)     # which modalities it carried is the session room's record (lab.twin.modalities)
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
            if cc.turn_complete and line.strip() == "." and p.line_pending:
                # a "." user turn closing a user turn sent earlier with turnComplete false: the
                # generation nudge of LiveKit's plugin before 1.8.3 (generate_reply() appends it;
                # its typed-message path). Assumption: the model answers the pending turn, as it
                # does for the empty turn above; a "." with nothing pending is a turn of its own.
                p.line_pending = False
                _, text = p.model.history.pop()
                return self._user_text(sid, conn, text, now, source="client_content")
            if not cc.turn_complete:
                p.model.history.append(("user", line))
                p.line_pending = True
                return []
            return self._user_text(sid, conn, line, now, source="client_content")
        p.usage.heard_text(sum(len(x) for _, x in texts))
        plan = p.model.restore(cc.turns, cc.turn_complete)
        acts: list = [Log("twin.restore", {"conn": conn, "session": sid, "turns": len(cc.turns),
                                           "note": p.model.note_status, "plan": plan.why if plan else None}),
                      self._model_log(conn, sid, texts[-1][1] if texts else "", "restore", plan)]
        if plan:
            acts += self._interrupt(sid, conn, now)
            acts += self._start_plan(sid, plan, now)
        return acts

    def _on_realtime_input(self, sid: str, conn: int, body: dict, now: float) -> list:
        ri = wire.realtime_input(body)
        p = self.play(sid)
        acts: list = []
        if ri.activity_start and not p.activity.automatic:
            acts += self._window_open(sid, conn, now)
        for blob in ri.blobs:
            if "video" in blob.where and not blob.mime.startswith("audio/"):
                continue        # frames are recorded by the session room; the scripted model does not look
            if blob.mime.startswith("audio/"):
                acts += self.audio(sid, conn, blob.data, blob.audio_rate, now)
        if ri.text is not None:
            acts += self._user_text(sid, conn, ri.text, now, source="realtime_text")
        if not p.activity.automatic:
            # only activityEnd closes a window: audioStreamEnd is the mic pausing, not the turn ending
            if body.get("activityEnd") is not None:
                acts += self._window_close(sid, conn, now)
            return acts
        if ri.activity_start:
            acts += self._barge_in(sid, conn, now)
            p.detector.in_voice = True
        if ri.activity_end:
            acts += self._detector_events(sid, conn, p.detector.flush(), now)
        return acts

    # ---- speech in: the client's windows (automatic activity detection disabled) ---------------
    def _window_open(self, sid: str, conn: int, now: float) -> list:
        p = self.play(sid)
        if p.window:
            return []
        p.window, p.window_voiced = True, False
        self._new_utterance(p, now)
        p.started = p.hearing = True
        return self._wake_ear() + self._barge_in(sid, conn, now)

    def _window_close(self, sid: str, conn: int, now: float) -> list:
        p = self.play(sid)
        if not p.window:
            return []
        p.window = False
        if not p.window_voiced:
            return [Log("twin.vad", {"conn": conn, "session": sid, "event": "empty_window"})] + self._release(sid, now)
        return self._utterance_over(sid, conn, now)

    def _window_audio(self, sid: str, conn: int, pcm: bytes, rate: int, now: float) -> list:
        p = self.play(sid)
        if not p.window:
            if self.prm.stray_audio_close:
                raise wire.BadInput(wire.INVALID_ARGUMENT)
            return []       # discarded, as pipecat's docstring says the service does
        p.audio_in_s += len(pcm) / 2 / rate
        if M.rms16(pcm) >= p.detector.threshold:
            p.window_voiced = True
            p.voiced_ms += len(pcm) / 2 / rate * 1000
        # a pause inside the window is part of it: nothing here ends the utterance
        p.heard_ms += len(pcm) / 2 / rate * 1000
        if p.audio is not None:
            p.audio += pcm
            p.audio_rate = rate
        return []

    # ---- speech in: the twin's VAD -------------------------------------------------------------
    def _silence_s(self, p: Playback) -> float:
        return p.detector.silence_ms / 1000

    def _vad_flush_due(self, p: Playback) -> float:
        return p.last_audio_at + self._silence_s(p) + 0.1

    def audio(self, sid: str, conn: int, pcm: bytes, rate: int, now: float) -> list:
        """One chunk of the client's audio (16-bit PCM at `rate`) on the session's live connection:
        all a realtimeInput carrying only this audio does; raises wire.BadInput."""
        p = self.play(sid)
        if not p.activity.automatic:
            return self._window_audio(sid, conn, pcm, rate, now)
        p.last_audio_at = now
        det = p.detector
        before = det.in_voice or det.candidate
        # outside an utterance the level matters only if it reaches the threshold, which no frame
        # can when no sample does: one peak pass serves this test and the detector's silence skip
        peak = None if before else M.peak16(pcm)
        rms = M.rms16(pcm) if peak is None or peak >= det.threshold else 0.0
        voiced = rms >= det.threshold
        chunk_s = len(pcm) / 2 / rate
        events = det.feed(pcm, rate, peak=peak)
        acts: list = []
        if voiced and not before:
            if p.ending:        # the last utterance's ACTIVITY_END was still due: it ends now
                acts += self._activity_end(sid, conn, now)
            self._new_utterance(p, now)
        p.audio_in_s += chunk_s
        if voiced:
            p.voiced_at = now
        if (before or voiced) and rms >= det.threshold * SOUND_FLOOR:
            p.sound_at = now
        if before or voiced:
            p.heard_ms += len(pcm) / 2 / rate * 1000
            if p.audio is not None:
                p.audio += pcm
                p.audio_rate = rate
        if voiced:
            p.voiced_ms += len(pcm) / 2 / rate * 1000
        if events:
            acts += self._detector_events(sid, conn, events, now)
        if (det.in_voice or det.candidate) and not p.flush_armed:
            p.flush_armed = True
            acts.append(Timer(Flush(sid), self._vad_flush_due(p)))
        return acts

    def quiet_chunk(self, p: Playback, pcm: bytes, rate: int, now: float) -> bool:
        """audio() for a chunk of silence outside an utterance under the twin's VAD (most of a
        stream), done with what it changes, its two notes: True. False, with nothing changed,
        for any other chunk, which audio() takes. The microphone's short way (lab.twin.core's
        MicLane) calls it with the session's Playback it holds; tests/unit/test_twin_mic_lane.py
        holds the two ways to the same actions, times and counts."""
        if not p.activity.automatic or not p.detector.skips(pcm, rate):
            return False
        p.last_audio_at = now
        p.audio_in_s += len(pcm) / 2 / rate
        return True

    def _new_utterance(self, p: Playback, now: float) -> None:
        p.utt += 1
        p.turns_begun += 1
        p.voice_at = p.voiced_at = p.sound_at = now
        p.voice_audio_s = p.audio_in_s
        p.started = p.ending = False
        p.heard_ms = p.voiced_ms = 0.0
        p.audio = bytearray() if self.hears else None

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
        """The detector's onset and end, sent on the wall clock the records show: ACTIVITY_START
        vad_onset_ms after the speech began, ACTIVITY_END vad_end_s (or the client's
        silenceDurationMs) after its last voiced chunk."""
        p = self.play(sid)
        acts: list = []
        for ev in events:
            if ev == "onset":
                due = p.voice_at + draw(p.detector.onset_ms, self.rng) / 1000
                if due > now + 1e-6:
                    acts.append(Timer(VadStart(sid, p.utt), due))
                else:
                    acts += self._activity_start(sid, conn, now)
            elif ev == "end":
                if not p.started:
                    acts += self._activity_start(sid, conn, now)
                p.ending = True
                # the speech is over: it is heard during the end-of-speech silence, before ACTIVITY_END
                acts += self._hear(sid, p)
                end_s = (p.activity.silence_ms / 1000 if p.activity.silence_ms is not None
                         else draw(self._vad_end(p), self.rng))
                # fidelity §8 F9: the records time it from the clip's last chunk, sound in it
                # though below the speech threshold (its fade), not from the last voiced frame
                due = max(p.voiced_at, p.sound_at) + end_s
                if due > now + 1e-6:
                    acts.append(Timer(VadEnd(sid, p.utt), due))
                else:
                    acts += self._activity_end(sid, conn, now)
        return acts

    def _vad_end(self, p: Playback) -> Any:
        """ACTIVITY_END's delay for what the utterance stands for (fidelity §2, §8 F9 [records]:
        a stop clip 1188-1279 ms, the booking request 1134-1253 ms, "Did you book it?" 786-1096 ms)."""
        intent = p.model.read(p.model.line_now())["intent"] if p.model.line_now() else None
        if intent == M.STOP:
            return self.prm.vad_end_stop_s
        if intent == "CALL":
            return self.prm.vad_end_request_s
        return self.prm.vad_end_s

    def _on_vad_timer(self, sid: str, p: Playback, key: TimerKey, now: float) -> list:
        assert isinstance(key, UtteranceTimer)
        conn = self.outlet.open_conn(sid)
        if conn is None or key.utt != p.utt:
            return []
        if isinstance(key, VadStart):
            return [] if p.started else self._activity_start(sid, conn, now)
        return self._activity_end(sid, conn, now) if p.ending else []

    def _activity_start(self, sid: str, conn: int, now: float) -> list:
        p = self.play(sid)
        p.started = p.hearing = True
        p.model.utterance_started()
        acts: list = [Log("twin.vad", {"conn": conn, "session": sid, "event": "onset"}),
                      self.wire.send(conn, wire.voice_activity("ACTIVITY_START", p.voice_audio_s), now)]
        return acts + self._wake_ear() + self._barge_in(sid, conn, now)

    def _activity_end(self, sid: str, conn: int, now: float) -> list:
        p = self.play(sid)
        p.ending = False
        acts: list = [self.wire.send(conn, wire.voice_activity("ACTIVITY_END", p.audio_in_s), now)]
        return acts + self._utterance_over(sid, conn, now)

    # the user's speaking rate, ms per character of a line (fidelity §7: 49.8-68.4 over the studies' clips)
    USER_MS_PER_CHAR = (49.8, 68.4)

    def _lines_heard(self, p: Playback) -> list[str]:
        """The script lines the utterance in progress stands for: one, or two when it lasted longer
        than its line spoken at the slowest rate plus half the next at the fastest (a request and a
        stop said in one activity window, 001 F speech: one turn carrying both, fidelity §8 F7)."""
        mdl = p.model
        i = mdl.utterances
        first = mdl.script[i] if i < len(mdl.script) else ""
        nxt = mdl.script[i + 1] if i + 1 < len(mdl.script) else ""
        lo, hi = self.USER_MS_PER_CHAR
        if first and nxt and p.voiced_ms >= len(first) * hi + len(nxt) * lo / 2:
            return [first, nxt]
        return [first] if first else []

    @property
    def hears(self) -> bool:
        """Spoken turns are recognized (an ear in the shell and hear_speech on), not read by position."""
        return self.ear and self.prm.hear_speech

    def _wake_ear(self) -> list:
        """The first utterance has begun: the shell readies its recognizer while the user speaks, so
        the turn's end does not wait for its start-up."""
        if not self.hears or self._ear_woken:
            return []
        self._ear_woken = True
        return [WakeEar()]

    def _hear(self, sid: str, p: Playback) -> list:
        """Hand the utterance's audio to the shell's recognizer, once."""
        if p.audio is None:
            return []
        pcm, p.audio = bytes(p.audio), None
        return [spoken.hear_request(sid, p.utt, p.model, pcm, p.audio_rate)]

    def speech_heard(self, sid: str, utt: int, heard: Any, match: H.Match | None, now: float) -> list:
        """The recognizer's words for utterance `utt` (None, None: it failed, so the turn is read by
        position). Its turn goes on now if its end was waiting for them."""
        p = self.plays.get(sid)
        if p is None:
            return []
        p.heard[utt] = (heard, match)
        if p.awaiting != utt:
            return []
        p.awaiting = 0
        conn = self.outlet.open_conn(sid)
        return self._turn_heard(sid, conn, now) if conn is not None else []

    def _utterance_over(self, sid: str, conn: int, now: float) -> list:
        p = self.play(sid)
        p.usage.heard_audio(p.heard_ms / 1000)
        acts = self._hear(sid, p) if self.hears else []
        if self.hears and p.utt not in p.heard:
            p.awaiting = p.utt           # ACTIVITY_END is sent; the turn waits for its words
            return acts + [Log("twin.vad", {"conn": conn, "session": sid, "event": "end", "line": None,
                                            "heard_ms": round(p.heard_ms, 1), "waiting": "recognizer"})]
        return acts + self._turn_heard(sid, conn, now)

    def _turn_heard(self, sid: str, conn: int, now: float) -> list:
        """The utterance over and read: by its words (an ear) or by position; answered."""
        p = self.play(sid)
        heard, m = p.heard.pop(p.utt, (None, None))
        read: dict = {"by": "position"}
        if m is None:
            heard_lines = self._lines_heard(p)
            for _ in range(len(heard_lines) or 1):    # at least one line, heard or not
                p.model.next_script_line()
            said = " ".join(heard_lines)
            if self.hears:
                read["why"] = "the recognizer failed"
        else:
            heard_lines = list(m.lines)
            spoken.advance_position(p.model, heard_lines)
            said = m.text or m.heard
            read = spoken.by_recognizer(heard, m)
        acts: list = []
        # inputTranscription: the whole utterance once, when it ends (fidelity §3, §8 F7: the records
        # show it in the same ms as ACTIVITY_END; nothing while the user speaks)
        if p.input_transcription and said:
            acts.append(self.wire.send(conn, wire.input_transcription_piece(said), now))
        acts.append(Log("twin.vad", {"conn": conn, "session": sid, "event": "end", "line": p.model.utterances - 1,
                                     "heard_ms": round(p.heard_ms, 1)}))
        if heard_lines:
            acts += self._user_text(sid, conn, heard_lines[0], now, source="speech", interrupt=False, read=read)
        elif m is not None:
            acts += self._not_understood(sid, conn, now, read)
        acts += self._release(sid, now)
        if len(heard_lines) > 1:
            # records (001 F speech, 3/3): the request of a merged turn was acted on, book_slot 0-1 ms
            # after ACTIVITY_END; the stop in the same turn did not withdraw it
            p.model.history.append(("user", " ".join(heard_lines[1:])))
        return acts

    def _not_understood(self, sid: str, conn: int, now: float, read: dict) -> list:
        """A turn no phrase fits: the model asks again and calls nothing (assumption: the records
        hold no unclear audio; a model answers unclear speech, it does not guess a tool call)."""
        p = self.play(sid)
        plan = p.model.not_understood()
        acts: list = [Log("twin.user", {"conn": conn, "session": sid, "source": "speech", "intent": "UNCLEAR",
                                        "plan": plan.why}),
                      self._model_log(conn, sid, "", "speech", plan, read)]
        if p.turn is not None:
            p.queue.append(plan)
        else:
            acts += self._start_plan(sid, plan, now)
        return acts

    def _release(self, sid: str, now: float) -> list:
        """The user stopped speaking: a reply held meanwhile (F4) is said now, unless the user's
        turn got one of its own (G2: one sentence 0.5-0.9 s after ACTIVITY_END, 4/4)."""
        p = self.play(sid)
        p.hearing = False
        held, p.deferred = p.deferred, []
        if held and p.turn is None and not p.queue:
            return self._start_plan(sid, held[-1], now)
        return []

    def _barge_in(self, sid: str, conn: int, now: float) -> list:
        """The user started speaking: the model's turn is cut, unless activityHandling says not to."""
        return self._interrupt(sid, conn, now) if self.play(sid).activity.interrupts else []

    # ---- the user's turn ------------------------------------------------------------------------
    def _user_text(self, sid: str, conn: int, text: str, now: float, source: str, interrupt: bool = True,
                   read: dict | None = None) -> list:
        p = self.play(sid)
        p.line_pending = False      # a user turn is being answered: nothing is left pending
        acts: list = []
        if source != "speech":
            p.turns_begun += 1          # a spoken line was counted when its utterance began
            p.usage.heard_text(len(text))
        t = p.turn
        if (source != "speech" and t is not None and not t.emitted
                and p.model.read(text)["intent"] == M.STOP):
            # fidelity §8 F2: a typed stop before the model sent anything of its turn (001 F, 3/3)
            # got no interrupted; the turn under way is dropped and the stop answered
            p.drop_turn()
        elif interrupt:
            acts += self._interrupt(sid, conn, now, typed=source != "speech")
        elif p.turn is not None and p.activity.interrupts:
            acts += self._interrupt(sid, conn, now)
        plan = p.model.user_turn(text, spoken=source == "speech")
        if source == "speech" and plan and plan.steps and plan.steps[0].kind == "call":
            # fidelity §2: a spoken request's toolCall comes 0-8 ms after ACTIVITY_END (the model
            # decided during the end-of-speech silence); the typed request's delay does not apply
            plan.steps[0].delay = 0.0
        acts.append(Log("twin.user", {"conn": conn, "session": sid, "source": source,
                                      "intent": M.classify(text), "plan": plan.why if plan else None}))
        acts.append(self._model_log(conn, sid, text, source, plan, read))
        if plan:
            if p.turn is not None:
                p.queue.append(plan)        # NO_INTERRUPTION: the model finishes its turn first
            else:
                acts += self._start_plan(sid, plan, now)
        return acts

    def _model_log(self, conn: int, sid: str, text: str, source: str, plan: M.Plan | None,
                   read: dict | None = None) -> Log:
        """twin.model: one decision of the model, the user turn it matched and why; a spoken turn
        says how it was read (`heard`: by the recognizer, with its words, match and score, or by position)."""
        call = next((s for s in plan.steps if s.kind == "call"), None) if plan else None
        fields = {"conn": conn, "session": sid, "source": source, "text": text,
                  "match": dict(plan.match) if plan else {}, "plan": plan.why if plan else None,
                  "tool": call.tool if call else None, "args": dict(call.args) if call else None}
        if read is not None:
            fields["heard"] = read
        return Log("twin.model", fields)

    def _interrupt(self, sid: str, conn: int, now: float, typed: bool = False) -> list:
        """Barge-in: the turn in flight is cut with interrupted, then turnComplete (no cancellation).
        A turn the client has not heard from yet is cut the same way: it was under way. A typed
        turn's interrupted comes text_interrupt_s after it (F14); speech's at ACTIVITY_START."""
        p = self.play(sid)
        acts: list = []
        t = p.turn
        if t is not None:
            if typed:
                now += draw(self.prm.text_interrupt_s, self.rng)
            acts.append(self.wire.send(conn, wire.interrupted(), now))
            acts.append(Log("twin.interrupted", {"conn": conn, "session": sid, "speaking": t.speaking}))
            at = now + draw(self.prm.interrupt_turn_complete_s, self.rng)
            acts += self.outlet.before_turn_complete(sid, at)      # as for any turnComplete
            acts.append(self.wire.send_plain(conn, self._turn_complete_frame(p, t), at))
            p.drop_turn()
        p.queue.clear()
        return acts

    def _on_tool_response(self, sid: str, conn: int, body: dict, now: float) -> list:
        p = self.play(sid)
        acts: list = []
        for fr in wire.function_responses(body):
            p.usage.heard_text(len(str(fr.get("response") or "")))
            known, status, plan = p.model.tool_response(fr)
            sched = M.response_scheduling(fr)
            acts.append(Log("twin.tool_response", {"conn": conn, "session": sid, "id": fr.get("id"),
                                                   "name": fr.get("name"), "known": known, "status": status,
                                                   "scheduling": sched or None}))
            if not plan:
                continue
            t = p.turn
            if p.hearing and (t is None or t.holding) and p.activity.interrupts:
                # fidelity §8 F4 (001 G2, 4/4): a response while the user speaks is answered once
                # the user stopped (ACTIVITY_END), never over the user
                if t is not None:
                    p.drop_turn()
                p.deferred.append(plan)
            elif t is not None and t.holding:
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
    def _start_plan(self, sid: str, plan: M.Plan, now: float, emitted: bool = False, after: float = 0.0) -> list:
        """The plan's first step `after` seconds from now plus its own delay, on a Step timer; a
        spoken reply due now is played at once (a reply with no delay needs no timer). Only a say:
        it leaves the turn under way, as the timer would have, for the rest of the caller's event
        (a call or a turnComplete played at once could end or hold the turn before the caller's
        next decision reads it)."""
        p = self.play(sid)
        p.gen += 1
        p.turn = Turn(plan, p.gen, emitted=emitted)
        if not plan.steps:
            p.turn = None
            return []
        at = now + after + plan.steps[0].delay
        if at <= now and plan.steps[0].kind == "say" and len(plan.steps) > 1:
            return self._on_step(sid, p, now)
        return [Timer(Step(sid, p.gen), at)]

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
            t.pieces = pieces.spread(step.text, t.chunks_left) if p.output_transcription else []
            if t.first_audio_at is None:
                t.first_audio_at = now
            return [Log("twin.say", {"conn": conn, "session": sid, "text": step.text})] + self._on_chunk(sid, p, now)
        if step.kind == "call":
            # one toolCall frame; a multi-slot step carries one functionCall per slot (lab.twin.model)
            calls = p.model.new_calls([step.args, *step.more], tool=step.tool or None)
            t.emitted = True
            frame = wire.tool_calls([(c.id, c.name, c.args) for c in calls])
            p.usage.said_text(len(str(frame)))
            acts: list = [self.wire.send(conn, frame, now)]
            # drawn_ms: the call step's own delay as drawn (tool_call_delay_s when the call opens its
            # turn), beside the record's time, which a timer fired late on a loaded machine moves
            acts += [Log("twin.tool_call", {"conn": conn, "session": sid, "id": c.id, "name": c.name,
                                            "args": c.args, "blocking": c.blocking,
                                            "drawn_ms": round(step.delay * 1000, 1)}) for c in calls]
            return acts + self._advance(sid, p, now)
        if step.kind == "turn_complete":
            return self._end_turn(sid, p, conn, now)
        return self._advance(sid, p, now)

    def _end_turn(self, sid: str, p: Playback, conn: int, now: float) -> list:
        """generationComplete when the generation is done, turnComplete when the client's playback
        of the burst should have ended (its first chunk + the audio's duration)."""
        t = p.turn
        assert t is not None
        acts: list = []
        if not t.generated:
            t.generated = True
            acts.append(self.wire.send_fixed(conn, "generation_complete", wire.generation_complete, now))
        played_at = (t.first_audio_at or now) + t.audio_s
        if played_at > now + 1e-6:
            return acts + [Timer(Step(sid, t.gen), played_at)]
        t.speaking = False
        # a per-turn handle goes out before turnComplete, so receive() still sees it
        acts += self.outlet.before_turn_complete(sid, now)
        acts.append(self.wire.send_plain(conn, self._turn_complete_frame(p, t), now))
        return acts + self._advance(sid, p, now)

    def _turn_complete_frame(self, p: Playback, t: Turn) -> dict:
        """turnComplete with the turn's usageMetadata in the same frame (pipecat warns without it)."""
        prompt, response = p.usage.close_turn()
        return {**wire.turn_complete(), **wire.usage_metadata(prompt, response)}

    def _on_chunk(self, sid: str, p: Playback, now: float) -> list:
        conn = self.outlet.live_conn(sid)
        t = p.turn
        if conn is None or t is None:
            return []
        chunk_s = self.prm.audio_chunk_ms / 1000.0
        piece = t.pieces.pop(0) if t.pieces else ""
        if piece:
            frame = wire.audio_chunk(M.tone(chunk_s, 24000, self.prm.tone_hz), 24000)
            # the chunk's piece of outputTranscription in the same serverContent frame (fidelity.md
            # §3, §8 F13: audio and transcript together in one frame, not split)
            frame["serverContent"].update(wire.output_transcription(piece)["serverContent"])
            sent = self.wire.send(conn, frame, now)
        else:   # every chunk of this twin's voice is the same tone: encoded once
            sent = self.wire.send_fixed(conn, "audio_chunk", self._voice_chunk, now)
        acts: list = [sent]
        t.audio_s += chunk_s
        p.usage.said_audio(chunk_s)
        t.chunks_left -= 1
        # generated faster than real time: the next chunk follows after chunk_s / audio_send_speed
        gap = chunk_s / self.prm.audio_send_speed
        if t.chunks_left > 0:
            acts.append(Timer(Chunk(sid, t.gen), now + gap))
            return acts
        return acts + self._advance(sid, p, now, after=gap)

    def _voice_chunk(self) -> dict:
        """One audio chunk of the model's voice (lab.twin.model.tone at the profile's chunk length)."""
        return wire.audio_chunk(M.tone(self.prm.audio_chunk_ms / 1000.0, 24000, self.prm.tone_hz), 24000)

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
            return self._start_plan(sid, p.queue.pop(0), now, after=after)
        return []
