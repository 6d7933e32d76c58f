"""The twin's core: the composition of its sans-I/O rooms that the asyncio shell (lab.twin.server) drives.

The shell feeds it events with an explicit `now` (seconds, monotonic):

    core.check_upgrade(path, headers)            -> Upgrade (HTTP status to refuse with, or route)
    core.connection_opened(conn, now, route)     -> [actions]
    core.frame_received(conn, data, now)         -> [actions]   (one data message, text or bytes)
    core.connection_ended(conn, how, now)        -> [actions]   (how: close_frame | eof | rst)
    core.timer_fired(key, now)                   -> [actions]

and performs the actions it returns, in order (lab.twin.actions: Send, Close, Timer, Log).

The rooms: lab.twin.wire (routes, auth, parsing, frames, close reasons), lab.twin.session (handles,
locks, release rules, the connection's Phase), lab.twin.turns (playback, barge-in, VAD), over a
profile validated as it loads (lab.twin.profile, lab.twin.params). This module only wires them:
it routes a parsed message through the session rules to the turns, and each timer to the room that
armed it. An id or timer no room issued raises (lab.twin.actions.TwinBug). Knows nothing of
sockets, asyncio or the clock.
"""
from __future__ import annotations

import random
from typing import Any

from lab.twin import model as M
from lab.twin import wire
from lab.twin.actions import Action, TimerKey, UnknownTimer
from lab.twin.profile import Profile, load_profile
from lab.twin.session import Conn, Phase, SessionParams, Sessions, SetupDone
from lab.twin.turns import SessionTimer, TurnParams, Turns


class TwinCore:
    """All sessions and connections of one twin."""

    def __init__(self, profile: Profile | str = "developer-api", overrides=None, seed: int | None = None,
                 api_key: str | None = None):
        self.profile = load_profile(profile, overrides) if isinstance(profile, str) else \
            profile.with_overrides(overrides)
        self.api_key = api_key
        self.rng = random.Random(seed)
        self.max_client_frame_bytes = self.profile["max_client_frame_bytes"]
        self.wire = wire.Wire(binary=self.profile["frame_type"] != "text")
        # turns first: it reaches the session rules only through this object (the Outlet), at run time
        self.turns = Turns(self.profile.view(TurnParams), M.ModelConfig.from_profile(self.profile), self.wire,
                           self.rng, outlet=self)
        self.sessions = Sessions(self.profile.view(SessionParams), self.wire, self.rng, self.turns,
                                 handle_rng=random.Random(seed) if seed is not None else None)

    # ---- the Outlet the turn room sends through ---------------------------------------------
    def live_conn(self, sid: str) -> int | None:
        return self.sessions.live_conn(sid)

    def open_conn(self, sid: str) -> int | None:
        return self.sessions.open_conn(sid)

    def before_turn_complete(self, sid: str, now: float) -> list:
        return self.sessions.before_turn_complete(sid, now)

    # ---- events -------------------------------------------------------------------------------
    def check_upgrade(self, path: str, headers: Any) -> wire.Upgrade:
        return wire.check_upgrade(path, headers, self.api_key)

    def connection_opened(self, conn_id: int, now: float, route: str = "", peer: Any = None) -> list[Action]:
        return self.sessions.opened(conn_id, now, route, peer)

    def frame_received(self, conn_id: int, data: bytes | str, now: float) -> list[Action]:
        c = self.sessions.conn(conn_id)
        if c.closing:
            return []
        self.sessions.client_data(c, now)
        try:
            kind, body = wire.parse_client_frame(data, self.max_client_frame_bytes)
        except wire.BadInput as e:
            return self.sessions.bad(c, e.reason, now)
        acts = self.sessions.admit(c, kind, body, now)
        if acts is None:
            acts = self._deliver(c, kind, body, now)
        return self._sent(acts)

    def connection_ended(self, conn_id: int, how: str, now: float) -> list[Action]:
        return self.sessions.ended(conn_id, how, now)

    def timer_fired(self, key: TimerKey, now: float) -> list[Action]:
        if isinstance(key, SessionTimer):
            return self._sent(self.turns.fire(key, now))
        if not isinstance(key, TimerKey):
            raise UnknownTimer(f"not a twin timer: {key!r}")
        acts = self.sessions.fire(key, now)
        if isinstance(key, SetupDone):
            acts += self._drain(key.conn, now)
        return self._sent(acts)

    # ---- between the rooms --------------------------------------------------------------------
    def _deliver(self, c: Conn, kind: str, body: dict, now: float) -> list[Action]:
        if c.session is None:
            return []
        refused = self.sessions.input_arrived(c, kind, now)
        if refused is not None:
            return refused
        try:
            return self.turns.deliver(c.session, c.id, kind, body, now)
        except wire.BadInput as e:
            return self.sessions.bad(c, e.reason, now)

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
        self.sessions.note_sent(acts)
        return acts
