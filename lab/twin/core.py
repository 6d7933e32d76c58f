"""The twin's core: the composition of its sans-I/O rooms that the asyncio shell (lab.twin.server) drives.

The shell feeds it events with an explicit `now` (seconds, monotonic):

    core.check_upgrade(path, headers)            -> Upgrade (HTTP status to refuse with, or route and key)
    core.connection_opened(conn, now, route, peer, key) -> [actions]
    core.frame_received(conn, data, now)         -> [actions]   (one data message, text or bytes)
    core.connection_ended(conn, how, now)        -> [actions]   (how: close_frame | eof | rst)
    core.timer_fired(key, now)                   -> [actions]
    core.set_fault(name, on, now)                -> [actions]   (a server fault switched at run time)
    core.go_away(now, time_left_s=None)          -> [actions]   (goAway on every live connection now)
    core.pong_delay()                            -> seconds to hold a pong (0 at once, inf never)
    core.ear = True                              (the shell can run a recognizer; core.hears: it is used)
    core.speech_heard(sid, utt, heard, match, now) -> [actions]   (the recognizer's answer to a Hear)

and performs the actions it returns, in order (lab.twin.io_actions: Send, Close, Timer, Log).

The rooms: lab.twin.wire (routes, auth, parsing, frames, close reasons), lab.twin.session (handles,
locks, release rules, the connection's Phase), lab.twin.turns (playback, barge-in, VAD), over a
profile validated as it loads (lab.twin.profile, lab.twin.params). This module only wires them:
it routes a parsed message through the session rules to the turns, and each timer to the room that
armed it. An id or timer no room issued raises (lab.twin.io_actions.TwinBug). Knows nothing of
sockets, asyncio or the clock.
"""
from __future__ import annotations

import math
import random
from typing import Any

from lab.conversation.format import Conversation
from lab.conversation.format import load as load_conversation
from lab.errors import LabError
from lab.stats.distributions import draw
from lab.twin import model as M
from lab.twin import session as S
from lab.twin import wire
from lab.twin.io_actions import Action, Log, Send, TimerKey, UnknownTimer
from lab.twin.modalities import Carried
from lab.twin.profile import Profile, load_profile
from lab.twin.session import Conn, Phase, SessionParams, Sessions, SetupDone
from lab.twin.turns import Playback, SessionTimer, TurnParams, Turns

# The server's own faults a scenario can switch at run time (POST /fault), each with the profile
# parameter that sets it at start: the only list of them.
SLOW_PONGS, STALL = "slow_pongs", "stall"
FAULTS = {SLOW_PONGS: "slow_pongs", STALL: "stall", S.UNRESUMABLE: "unresumable_updates",
          S.QUOTA: "quota_exhausted"}


class UnknownFault(LabError):
    """A fault name the twin does not have (the control channel answers 404 with this line)."""


class MicLane:
    """One connection's short way for its microphone chunks, made at its first frame once it is
    in_turns() (live in a session, no transparent replay to judge), which it stays until it closes:
    the records a chunk touches (the connection, its session's record of what it carried, the
    session's Playback), held so that a chunk reads them once instead of looking each up through
    the rooms' tables. The rules stay the rooms': Sessions.mic_input, Turns.quiet_chunk, else
    Turns.audio."""

    __slots__ = ("conn", "carried", "play")

    def __init__(self, conn: Conn, carried: Carried, play: Playback):
        self.conn = conn
        self.carried = carried
        self.play = play


class TwinCore:
    """All sessions and connections of one twin."""

    def __init__(self, profile: Profile | str = "developer-api", overrides=None, seed: int | None = None,
                 api_key: str | None = None, conversation: Conversation | str | None = None):
        self.profile = load_profile(profile, overrides) if isinstance(profile, str) else \
            profile.with_overrides(overrides)
        self.api_key = api_key
        self.rng = random.Random(seed)
        self.max_client_frame_bytes = self.profile["max_client_frame_bytes"]
        self.http_key_refusal = self.profile["key_refusal"] == "http"
        self.faults = {name for name, param in FAULTS.items() if self.profile[param]}
        self._pong_delay_s = self.profile["pong_delay_s"]
        self.wire = wire.Wire(binary=self.profile["frame_type"] != "text")
        # the conversation the model plays (lab/conversations; default the studies' booking story)
        self.conversation = load_conversation(conversation) if isinstance(conversation, str) else conversation
        self.turns = Turns(self.profile.view(TurnParams), M.ModelConfig.from_profile(self.profile, self.conversation),
                           self.wire, self.rng)
        self.sessions = Sessions(self.profile.view(SessionParams), self.wire, self.rng, self.turns,
                                 handle_rng=random.Random(seed) if seed is not None else None, faults=self.faults)
        # turns first (the session rules are built on it); it reaches them only as its Outlet, which
        # the session room is: handed over now that it exists (a reply's every step asks it)
        self.turns.outlet = self.sessions
        self._lanes: dict[int, MicLane] = {}     # by connection id, while it is in_turns()

    # ---- events -------------------------------------------------------------------------------
    def check_upgrade(self, path: str, headers: Any) -> wire.Upgrade:
        return wire.check_upgrade(path, headers, self.api_key, http_refusal=self.http_key_refusal)

    def connection_opened(self, conn_id: int, now: float, route: str = "", peer: Any = None,
                          key: str = "") -> list[Action]:
        return self.sessions.opened(conn_id, now, route, peer, key)

    def frame_received(self, conn_id: int, data: bytes | str, now: float) -> list[Action]:
        lane = self._lanes.get(conn_id)
        c = lane.conn if lane is not None else self.sessions.conn(conn_id)
        if c.closing:
            return []
        self.sessions.client_data(c, now)
        try:
            obj = wire.load_client_frame(data, self.max_client_frame_bytes)
            if lane is None and self.sessions.in_turns(c):
                lane = self._lanes[conn_id] = MicLane(c, self.sessions.session(c.session).media,
                                                      self.turns.play(c.session))
            mic = wire.mic_chunk(obj) if lane is not None else None
            if mic is not None:
                return self._mic(lane, *mic, now)
            kind, body = wire.message_of(obj)
        except wire.BadInput as e:
            return self.sessions.bad(c, e.reason, now)
        acts = self.sessions.admit(c, kind, body, now)
        if acts is None:
            acts = self._deliver(c, kind, body, now)
        return self._sent(acts) if acts else acts    # most frames (a microphone chunk) answer nothing

    # ---- the shell's ear (lab.twin.recognizer.Ear): set by the shell that can run one ----------
    @property
    def ear(self) -> bool:
        return self.turns.ear

    @ear.setter
    def ear(self, on: bool) -> None:
        self.turns.ear = on

    @property
    def hears(self) -> bool:
        """Spoken turns are read by their words (an ear, and the profile's hear_speech on)."""
        return self.turns.hears

    def speech_heard(self, sid: str, utt: int, heard, match, now: float) -> list[Action]:
        """What the shell's recognizer heard in one utterance (lab.twin.io_actions.Hear)."""
        return self._sent(self.turns.speech_heard(sid, utt, heard, match, now))

    def connection_ended(self, conn_id: int, how: str, now: float) -> list[Action]:
        acts = self.sessions.ended(conn_id, how, now)
        self._lanes.pop(conn_id, None)
        return acts

    def timer_fired(self, key: object, now: float) -> list[Action]:
        # any object: one no room armed is the caller's bug, UnknownTimer (a compiled build's typed
        # argument would raise a TypeError first)
        if isinstance(key, SessionTimer):
            return self._sent(self.turns.fire(key, now))
        if not isinstance(key, TimerKey):
            raise UnknownTimer(f"not a twin timer: {key!r}")
        acts = self.sessions.fire(key, now)
        if isinstance(key, SetupDone):
            acts += self._drain(key.conn, now)
        return self._sent(acts)

    # ---- the server's own faults and goAway, at run time -------------------------------------
    def set_fault(self, name: str, on: bool, now: float) -> list[Action]:
        if name not in FAULTS:
            raise UnknownFault(f"unknown twin fault {name!r}; known: {', '.join(sorted(FAULTS))}")
        was = name in self.faults
        (self.faults.add if on else self.faults.discard)(name)
        acts: list[Action] = [Log("twin.fault", {"name": name, "on": bool(on)})]
        if name == S.UNRESUMABLE and on and not was:
            acts += self.sessions.unresumable_now(now)
        return self._sent(acts)

    def go_away(self, now: float, time_left_s: float | None = None) -> list[Action]:
        lead = self.profile["goaway_lead_s"] if time_left_s is None else float(time_left_s)
        return self._sent(self.sessions.go_away_all(now, lead))

    def pong_delay(self) -> float:
        """How long the shell holds a pong: never while stalled, pong_delay_s with slow pongs."""
        if STALL in self.faults:
            return math.inf
        return draw(self._pong_delay_s, self.rng) if SLOW_PONGS in self.faults else 0.0

    # ---- between the rooms --------------------------------------------------------------------
    def _deliver(self, c: Conn, kind: str, body: dict, now: float) -> list[Action]:
        if c.session is None:
            return []
        judged, refused_replay = self.sessions.replay_arrived(c, kind, body, now)
        if refused_replay:
            return judged
        refused = self.sessions.input_arrived(c, kind, body, now)
        if refused is not None:
            return judged + refused
        try:
            return judged + self.turns.deliver(c.session, c.id, kind, body, now)
        except wire.BadInput as e:
            return judged + self.sessions.bad(c, e.reason, now)

    def _mic(self, lane: MicLane, body: dict, b64: str, rate: int, now: float) -> list[Action]:
        """A microphone chunk on a connection whose messages go straight to its turns (most of
        what a stream sends): what _deliver does with it, read without the general parse, on the
        records its lane holds. A bad base64 raises wire.BadInput after the chunk is counted, as
        turns.deliver's decode does. Silence outside an utterance (most chunks) ends in
        Turns.quiet_chunk; anything else is Turns.audio's."""
        c = lane.conn
        refused = self.sessions.mic_input(c, lane.carried, now)
        if refused is not None:
            return self._sent(refused)
        pcm = wire.b64decode_any(b64, wire.MIC_WHERE)
        if self.turns.quiet_chunk(lane.play, pcm, rate, now):
            return []
        acts = self.turns.audio(c.session, c.id, pcm, rate, now)
        return self._sent(acts) if acts else acts

    def _drain(self, conn_id: int, now: float) -> list[Action]:
        """The frames a client sent while its setup was in flight, once it is live."""
        c = self.sessions.find(conn_id)
        if c is None:
            return []
        acts: list[Action] = []
        for kind, body in self.sessions.take_pending(c):
            if c.phase is not Phase.LIVE:
                break
            acts += self._deliver(c, kind, body, now)
        return acts

    def _sent(self, acts: list[Action]) -> list[Action]:
        if STALL in self.faults:
            # the silent stall: the socket stays open and no frame goes out (closes still do)
            acts = [a for a in acts if not isinstance(a, Send)]
        self.sessions.note_sent(acts)
        return acts
