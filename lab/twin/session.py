"""The twin's session room: connections, sessions, handles, the lock and the release rules.

A session has at most one connection; every handle ever issued maps to its session (the latest
state). A resume is refused while the server still holds the old connection (000 finding 3), for
`idle_release_s` after an idle drop (000 round 1), and for good once the server itself closed it
(000 round 2). A connection's phase is a `Phase`; its timers are the frozen dataclasses below,
each dispatched by type. An id this room never issued raises UnknownConnection / UnknownSession.

Knows nothing of sockets, clocks (`now` comes in), JSON, or what the model says: it hands a
session's turns to the turn room through `TurnHooks` and builds frames with lab.twin.wire.
"""
from __future__ import annotations

import random
import secrets
import string
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Protocol

from lab.events import redact_handle
from lab.twin import wire
from lab.twin.actions import Log, Send, Timer, TimerKey, TwinBug, UnknownConnection, UnknownSession, UnknownTimer
from lab.twin.params import draw


class Phase(Enum):
    OPEN = "open"                   # upgraded, no setup yet
    SETTING_UP = "setting_up"       # setup received, setupComplete not sent
    LIVE = "live"
    CLOSING = "closing"             # the server sent (or scheduled) its close frame
    ENDED = "ended"


@dataclass(frozen=True)
class SessionParams:
    """The profile parameters this room reads (each declared in lab.twin.params)."""
    bad_input_code: int
    bad_input_close_s: float
    new_setup_s: Any
    resume_setup_s: Any
    refuse_close_s: Any
    refuse_code: int
    refuse_reason: str
    idle_release_s: float
    speaking_release_immediate: bool
    unknown_handle_code: int
    handle_updates: str
    handle_update_delay_s: Any
    resumed_handle_update_delay_s: Any
    transparent_supported: bool
    transparent_reject_code: int
    transparent_reject_reason: str
    setup_error_close_s: float
    reject_text_only: bool
    freeze_close_s: float | None
    freeze_close_code: int
    freeze_close_reason: str
    server_close_kills_session: bool
    goaway_after_s: float | None
    goaway_time_left: str
    goaway_close_code: int
    goaway_close_reason: str
    av_resume_fail: bool
    av_fail_code: int
    av_fail_reason: str


# ---- timers (subclasses inherit the frozen dataclass: equal only to their own type) -----------

@dataclass(frozen=True)
class ConnTimer(TimerKey):
    conn: int


class FreezeCheck(ConnTimer):
    """Close a connection the client has sent no data on for freeze_close_s (re-armed on data)."""


class SetupDone(ConnTimer):
    """Send setupComplete (new_setup_s or resume_setup_s after the setup)."""


class HandleUpdate(ConnTimer):
    """The first sessionResumptionUpdate, handle_update_delay_s after setupComplete."""


class GoAway(ConnTimer):
    """Send goAway goaway_after_s after setupComplete."""


class GoAwayClose(ConnTimer):
    """Close the connection when the goAway's timeLeft has run out."""


# ---- state ----------------------------------------------------------------------------------

@dataclass
class Conn:
    id: int
    opened_at: float
    route: str = ""
    phase: Phase = Phase.OPEN
    session: str | None = None
    resumed: bool = False
    resumption: bool = False    # sessionResumption present in setup
    transparent: bool = False
    last_data_at: float = 0.0   # last data frame the client sent (the freeze timer)
    last_activity_at: float = 0.0   # last data frame either way (the idle-release rule)
    inputs: int = 0             # client inputs since setupComplete
    msg_index: int = 0          # client messages on this connection (setup = 0)
    pending: list = field(default_factory=list)   # frames received while setting up
    close_why: str = ""
    closing_kills: bool = False

    @property
    def closing(self) -> bool:
        return self.phase in (Phase.CLOSING, Phase.ENDED)


@dataclass
class Session:
    id: str
    handles: set = field(default_factory=set)
    conn: int | None = None
    dead: bool = False
    ended_at: float | None = None
    last_data_at: float | None = None
    speaking_at_end: bool = False


class TurnHooks(Protocol):
    """What the session rules need from the turn room."""

    def begin(self, sid: str, setup: dict) -> None: ...            # a new session's model
    def configure(self, sid: str, setup: dict) -> None: ...        # a resumed session's new setup
    def stop(self, sid: str) -> bool: ...                          # drop the turn in flight; was it speaking
    def used_audio_and_video(self, sid: str) -> bool: ...


INPUT_KINDS = ("clientContent", "realtimeInput", "toolResponse")


class Sessions:
    """Every connection and session of one twin, and the rules between them."""

    def __init__(self, prm: SessionParams, frames: wire.Wire, rng: random.Random, turns: TurnHooks,
                 handle_rng: random.Random | None = None):
        self.prm = prm
        self.wire = frames
        self.rng = rng
        self.turns = turns
        self._handle_rng = handle_rng
        self.sessions: dict[str, Session] = {}
        self.handles: dict[str, str] = {}
        self.conns: dict[int, Conn] = {}
        self._ended: set[int] = set()
        self._session_seq = 0
        self._timers: dict[type, Callable[[Conn, float], list]] = {
            FreezeCheck: self._on_freeze, SetupDone: self._on_setup_done, HandleUpdate: self._on_handle_timer,
            GoAway: self._on_goaway, GoAwayClose: self._on_goaway_close}

    # ---- lookups ----------------------------------------------------------------------------
    def find(self, conn_id: int) -> Conn | None:
        """The connection, None once it ended; UnknownConnection for an id never opened."""
        c = self.conns.get(conn_id)
        if c is None and conn_id not in self._ended:
            raise UnknownConnection(f"connection {conn_id} was never opened")
        return c

    def conn(self, conn_id: int) -> Conn:
        """A connection still open (events from the shell name one)."""
        c = self.find(conn_id)
        if c is None:
            raise UnknownConnection(f"connection {conn_id} already ended")
        return c

    def session(self, sid: str) -> Session:
        try:
            return self.sessions[sid]
        except KeyError:
            raise UnknownSession(f"no session {sid!r}") from None

    def live_conn(self, sid: str) -> int | None:
        """The id of the session's connection if it is live (the turn room sends only then)."""
        s = self.session(sid)
        c = self.conns.get(s.conn) if s.conn is not None else None
        return c.id if c is not None and c.phase is Phase.LIVE else None

    def open_conn(self, sid: str) -> int | None:
        """The id of the session's connection while the server holds it, live or closing."""
        return self.session(sid).conn      # cleared when that connection ends

    def note_sent(self, acts: list) -> None:
        """A data frame the server sends is activity for the idle-release rule."""
        for a in acts:
            if isinstance(a, Send):
                c = self.conns.get(a.conn)
                if c is not None:
                    c.last_activity_at = max(c.last_activity_at, a.at)

    # ---- closing ----------------------------------------------------------------------------
    def close(self, c: Conn, code: int, reason: str, at: float, why: str, kills: bool = False) -> list:
        if c.closing:
            return []
        c.phase = Phase.CLOSING
        c.close_why = why
        c.closing_kills = kills
        return [self.wire.close(c.id, code, reason, at)]

    def bad(self, c: Conn, reason: str, now: float, why: str = "bad_input") -> list:
        code = self.prm.bad_input_code
        kind = "twin.refuse" if c.phase in (Phase.OPEN, Phase.SETTING_UP) else "twin.bad_input"
        return [Log(kind, {"conn": c.id, "session": c.session, "code": code, "reason": reason, "why": why})] + \
            self.close(c, code, reason, now + self.prm.bad_input_close_s, why)

    # ---- events -----------------------------------------------------------------------------
    def opened(self, conn_id: int, now: float, route: str = "", peer: Any = None) -> list:
        if conn_id in self.conns or conn_id in self._ended:
            raise TwinBug(f"connection {conn_id} opened twice")
        c = Conn(conn_id, now, route=route, last_data_at=now)
        self.conns[conn_id] = c
        acts: list = [Log("twin.conn.open", {"conn": conn_id, "route": route, "peer": peer})]
        if self.prm.freeze_close_s is not None:
            acts.append(Timer(FreezeCheck(c.id), c.last_data_at + self.prm.freeze_close_s))
        return acts

    def client_data(self, c: Conn, now: float) -> None:
        c.last_data_at = now
        c.last_activity_at = max(c.last_activity_at, now)

    def admit(self, c: Conn, kind: str, body: dict, now: float) -> list | None:
        """The phase rules for one parsed client message: the actions that settle it (a setup, a
        refusal, a frame held until setupComplete), or None when it is for the session's turns."""
        if c.phase is Phase.SETTING_UP:
            if kind == "setup":
                return self.bad(c, wire.INVALID_ARGUMENT, now, "second_setup")
            c.pending.append((kind, body))
            return []
        if c.phase is Phase.OPEN:
            if kind != "setup":
                return self.bad(c, wire.INVALID_ARGUMENT, now, "input_before_setup")
            return self._on_setup(c, body, now)
        if kind == "setup":
            return self.bad(c, wire.INVALID_ARGUMENT, now, "second_setup")
        return None

    def input_arrived(self, c: Conn, kind: str, now: float) -> list | None:
        """Count one message on a live connection: the refusal's actions if the session cannot
        take it (002: a resumed session with audio and video history fails its first input)."""
        c.msg_index += 1
        if kind not in INPUT_KINDS:
            return None
        c.inputs += 1
        if c.resumed and c.inputs == 1 and self.prm.av_resume_fail and self.turns.used_audio_and_video(c.session):
            reason, code = self.prm.av_fail_reason, self.prm.av_fail_code
            return [Log("twin.bad_input", {"conn": c.id, "session": c.session, "code": code,
                                           "reason": reason, "why": "audio_video_resume"})] + \
                self.close(c, code, reason, now, "audio_video_resume")
        return None

    def take_pending(self, c: Conn) -> list[tuple[str, dict]]:
        pending, c.pending = c.pending, []
        return pending

    def ended(self, conn_id: int, how: str, now: float) -> list:
        c = self.conn(conn_id)
        del self.conns[conn_id]
        self._ended.add(conn_id)
        server_initiated = c.phase is Phase.CLOSING
        if server_initiated and c.close_why:
            how = "server_timeout" if c.close_why == "freeze" else f"server_{c.close_why}"
        c.phase = Phase.ENDED
        fields: dict = {"conn": c.id, "how": how, "session": c.session,
                        "age_ms": round((now - c.opened_at) * 1000, 1),
                        "idle_ms": round((now - c.last_data_at) * 1000, 1)}
        s = self.sessions.get(c.session) if c.session else None
        if s is not None and s.conn == c.id:
            s.conn = None
            s.ended_at = now
            # the session was last active at its last data frame in either direction (a frame the
            # server scheduled but never sent, cut by the end, does not count)
            s.last_data_at = min(now, max(c.last_data_at, c.last_activity_at))
            s.speaking_at_end = self.turns.stop(s.id)     # the turn in flight dies with the connection
            fields["speaking"] = s.speaking_at_end
            if c.closing_kills:
                s.dead = True
            fields["dead"] = s.dead
        return [Log("twin.conn.end", fields)]

    def fire(self, key: TimerKey, now: float) -> list:
        handler = self._timers.get(type(key))
        if handler is None or not isinstance(key, ConnTimer):
            raise UnknownTimer(f"the session room has no timer {key!r}")
        c = self.find(key.conn)
        return [] if c is None else handler(c, now)    # a connection that ended: nothing to do

    def before_turn_complete(self, sid: str, now: float) -> list:
        """Vertex (per_turn) and transparent sessions get a fresh handle with each turnComplete."""
        cid = self.live_conn(sid)
        c = self.conns[cid] if cid is not None else None
        if c is not None and c.resumption and (c.transparent or self.prm.handle_updates == "per_turn"):
            return self._handle_update(c, now)
        return []

    # ---- setup and resumption -------------------------------------------------------------
    def _new_handle(self) -> str:
        alphabet = string.ascii_letters + string.digits + "-_"
        size = 36       # 000 records: every handle the real service issued was 36 characters long
        if self._handle_rng is not None:
            return "".join(self._handle_rng.choice(alphabet) for _ in range(size))
        return "".join(secrets.choice(alphabet) for _ in range(size))

    def _on_setup(self, c: Conn, setup: dict, now: float) -> list:
        c.phase = Phase.SETTING_UP
        sr = setup.get("sessionResumption")
        c.resumption = isinstance(sr, dict) or sr is not None
        sr = sr if isinstance(sr, dict) else {}
        handle = sr.get("handle") or None
        if not isinstance(handle, (str, type(None))) or not isinstance(setup.get("generationConfig") or {}, dict) \
                or not isinstance(setup.get("tools") or [], list):
            return self.bad(c, wire.INVALID_ARGUMENT, now, "setup_field_type")   # found by the fuzz: a crash before
        c.transparent = bool(sr.get("transparent"))
        log = {"conn": c.id, "resume": bool(handle), **redact_handle(handle), "route": c.route,
               "model": setup.get("model")}
        acts: list = [Log("twin.setup", log)]
        err_at = now + self.prm.setup_error_close_s
        if "transparent" in sr and not self.prm.transparent_supported:
            reason, code = self.prm.transparent_reject_reason, self.prm.transparent_reject_code
            acts.append(Log("twin.refuse", {"conn": c.id, "code": code, "reason": reason, "why": "transparent"}))
            return acts + self.close(c, code, reason, err_at, "transparent")
        gen_cfg = setup.get("generationConfig") or {}
        mods = [str(m).upper() for m in (gen_cfg.get("responseModalities") or [])]
        if self.prm.reject_text_only and mods and "AUDIO" not in mods:
            reason = wire.INVALID_ARGUMENT
            acts.append(Log("twin.refuse", {"conn": c.id, "code": 1007, "reason": reason, "why": "text_only"}))
            return acts + self.close(c, 1007, reason, err_at, "text_only")
        if handle:
            return acts + self._resume(c, setup, handle, now)
        self._session_seq += 1
        s = Session(f"s{self._session_seq}")
        self.sessions[s.id] = s
        self.turns.begin(s.id, setup)
        s.conn = c.id
        c.session = s.id
        return acts + [Timer(SetupDone(c.id), now + draw(self.prm.new_setup_s, self.rng))]

    def _resume(self, c: Conn, setup: dict, handle: str, now: float) -> list:
        sid = self.handles.get(handle)
        s = self.sessions.get(sid) if sid else None
        why = None
        code, reason = self.prm.refuse_code, self.prm.refuse_reason
        release_at = None
        if s is not None and s.last_data_at is not None:
            release_at = s.last_data_at + self.prm.idle_release_s
        if s is None:
            why, code = "unknown_handle", self.prm.unknown_handle_code
        elif s.dead:
            why = "session_dead"
        elif s.conn is not None:
            why = "old_connection_open"
        elif (not (s.speaking_at_end and self.prm.speaking_release_immediate)
              and release_at is not None and now < release_at):
            why = "idle_release"
        if why:
            at = now + draw(self.prm.refuse_close_s, self.rng)
            fields = {"conn": c.id, "session": sid, "code": code, "reason": reason, "why": why,
                      "close_in_ms": round((at - now) * 1000, 1)}
            if why == "idle_release" and release_at is not None:
                fields["release_in_ms"] = round((release_at - now) * 1000, 1)
            return [Log("twin.refuse", fields)] + self.close(c, code, reason, at, "refuse")
        assert s is not None
        # accepted: the new connection claims the session at once (a second attempt is refused)
        s.conn = c.id
        c.session = s.id
        c.resumed = True
        self.turns.configure(s.id, setup)
        return [Timer(SetupDone(c.id), now + draw(self.prm.resume_setup_s, self.rng))]

    def _on_setup_done(self, c: Conn, now: float) -> list:
        """setupComplete; the caller then hands the frames held during setup to the turns."""
        if c.phase is not Phase.SETTING_UP:
            return []
        s = self.session(c.session) if c.session else None
        if s is None or s.conn != c.id:
            return []
        c.phase = Phase.LIVE
        acts: list = [self.wire.send(c.id, wire.setup_complete(), now),
                      Log("twin.accept", {"conn": c.id, "session": s.id, "resume": c.resumed,
                                          "setup_ms": round((now - c.opened_at) * 1000, 1)})]
        if c.resumption:
            wait = self.prm.resumed_handle_update_delay_s if c.resumed else self.prm.handle_update_delay_s
            d = 0.0 if wait is None else draw(wait, self.rng)
            if d > 0:
                acts.append(Timer(HandleUpdate(c.id), now + d))
            else:
                acts += self._handle_update(c, now)
        if self.prm.goaway_after_s is not None:
            acts.append(Timer(GoAway(c.id), now + self.prm.goaway_after_s))
        return acts

    def _on_handle_timer(self, c: Conn, now: float) -> list:
        return self._handle_update(c, now) if c.phase is Phase.LIVE else []

    def _handle_update(self, c: Conn, now: float) -> list:
        s = self.session(c.session) if c.session else None
        if s is None:
            return []
        h = self._new_handle()
        s.handles.add(h)
        self.handles[h] = s.id
        frame = wire.resumption_update(h, c.msg_index if c.transparent else None)
        return [self.wire.send(c.id, frame, now),
                Log("twin.handle", {"conn": c.id, "session": s.id, **redact_handle(h)})]

    # ---- the server ending connections itself ---------------------------------------------
    def _on_freeze(self, c: Conn, now: float) -> list:
        fz = self.prm.freeze_close_s
        if c.closing or fz is None:
            return []
        due = c.last_data_at + fz
        if now + 1e-6 < due:
            return [Timer(FreezeCheck(c.id), due)]
        kills = self.prm.server_close_kills_session
        s = self.sessions.get(c.session) if c.session else None
        if s is not None and kills and s.conn == c.id:
            s.dead = True
        return [Log("twin.freeze_close", {"conn": c.id, "session": c.session,
                                          "idle_ms": round((now - c.last_data_at) * 1000, 1)})] + \
            self.close(c, self.prm.freeze_close_code, self.prm.freeze_close_reason, now, "freeze", kills)

    def _on_goaway(self, c: Conn, now: float) -> list:
        if c.phase is not Phase.LIVE:
            return []
        tl = self.prm.goaway_time_left
        secs = float(tl.rstrip("s"))        # the declared shape is '<seconds>s'
        return [self.wire.send(c.id, wire.go_away(tl), now), Log("twin.goaway", {"conn": c.id, "time_left": tl}),
                Timer(GoAwayClose(c.id), now + secs)]

    def _on_goaway_close(self, c: Conn, now: float) -> list:
        if c.phase is not Phase.LIVE:
            return []
        return [Log("twin.goaway_close", {"conn": c.id})] + self.close(
            c, self.prm.goaway_close_code, self.prm.goaway_close_reason, now, "goaway")
