"""The twin's session room: connections, sessions, handles, the lock and the release rules.

A session has at most one connection; every handle ever issued maps to its session (the latest
state). A resume is refused while the server still holds the old connection (000 finding 3), for
`idle_release_s` after an idle drop (000 round 1), and for good once the server itself closed it
(000 round 2); a handle older than `handle_expiry_s` is refused like an unknown one. On a
transparent connection each message is judged against what its resume owes (lab.twin.transparent,
seed 004). A connection's phase is a `Phase`; its timers are the frozen dataclasses below,
each dispatched by type. An id this room never issued raises UnknownConnection / UnknownSession.

Knows nothing of sockets, clocks (`now` comes in), JSON, or what the model says: it hands a
session's turns to the turn room through `TurnHooks` and builds frames with lab.twin.wire.
"""
from __future__ import annotations

import random
import re
import secrets
import string
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Protocol

from lab.errors import LAB_REASON
from lab.events import redact_handle
from lab.stats.distributions import bounds, draw
from lab.twin import wire
from lab.twin.io_actions import Log, Send, Timer, TimerKey, TwinBug, UnknownConnection, UnknownSession, UnknownTimer
from lab.twin.modalities import MIC, Carried, Media, media_of
from lab.twin.transparent import WRONG_REPLAYS, Replays


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
    resume_hang_s: Any              # [lo, hi] after the old connection's last data: a resume hangs (F11)
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
    av_resume_ok_utterances: int | None
    av_resume_helped_by: list
    av_fail_code: int
    av_fail_reason: str
    wrong_key_code: int
    wrong_key_reason: str
    missing_key_code: int
    missing_key_reason: str
    served_models: list
    unknown_model_code: int
    unknown_model_reason: str
    native_audio_models: list
    text_only_reason: str
    mixed_modalities_reason: str
    role_required_models: str
    roleless_turn_reason: str
    quota_code: int
    quota_reason: str
    held_sessions_max: int | None
    connection_max_s: float | None
    goaway_lead_s: float
    goaway_resume_release_s: float
    session_max_audio_s: float | None
    session_max_av_s: float | None
    session_cap_code: int
    session_cap_reason: str
    # transparent resumption (lab.twin.transparent) and how long a handle stays valid
    replay_check: str
    replay_reject_code: int
    replay_reject_reason: str
    handle_expiry_s: float | None


# the server faults this room honours (lab.twin.core owns the switches; this room reads the set)
QUOTA, UNRESUMABLE = "quota", "unresumable"


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
    """Close the connection when the goAway's timeLeft has run out (or at connection_max_s)."""


class CapGoAway(ConnTimer):
    """The goAway goaway_lead_s before the connection cap (connection_max_s after the upgrade)."""


class SessionCap(ConnTimer):
    """End a session without context compression at its cap (audio-only or audio+video)."""


# ---- state ----------------------------------------------------------------------------------

@dataclass(slots=True)
class Conn:
    id: int
    opened_at: float
    route: str = ""
    phase: Phase = Phase.OPEN
    session: str | None = None
    resumed: bool = False
    resumption: bool = False    # sessionResumption present in setup
    setup_drawn_s: float = 0.0  # the setup delay drawn for it: twin.accept logs it beside what it took
    transparent: bool = False
    last_data_at: float = 0.0   # last data frame the client sent (the freeze timer)
    last_activity_at: float = 0.0   # last data frame either way (the idle-release rule)
    inputs: int = 0             # client inputs since setupComplete
    msg_index: int = 0          # client messages on this connection (setup = 0)
    pending: list = field(default_factory=list)   # frames received while setting up
    close_why: str = ""
    closing_kills: bool = False
    key: str = ""               # wire.KEY_*: the upgrade's verdict on the API key ("" = none needed)
    client: str = ""            # the peer's address without its port: which client this is
    model: str = ""
    goaway_sent: bool = False   # the twin told this connection to go away
    media: Carried = field(default_factory=Carried)     # the modalities this connection carried
    av_doomed: bool = False     # 002: resumed with audio+video history, no mitigation that helps
    turns_at_resume: int = 0    # the session's user turns when this connection resumed it

    @property
    def closing(self) -> bool:
        return self.phase in (Phase.CLOSING, Phase.ENDED)


@dataclass(slots=True)
class Session:
    id: str
    handles: set = field(default_factory=set)
    conn: int | None = None
    dead: bool = False
    ended_at: float | None = None
    last_data_at: float | None = None
    speaking_at_end: bool = False
    started_at: float = 0.0
    compressed: bool = False                # contextWindowCompression set: no session cap
    goaway_release_at: float | None = None  # its last connection ended after the twin's goAway
    locked_until: float | None = None       # the server's TCP gave up; the session stays held
    media: Carried = field(default_factory=Carried)     # the modalities the session ever carried
    latest_handle: str | None = None        # the last handle issued (002's "latest handle" mitigation)


class TurnHooks(Protocol):
    """What the session rules need from the turn room."""

    def begin(self, sid: str, setup: dict, client: str = "") -> list: ...   # a new session's model (its logs)
    def configure(self, sid: str, setup: dict) -> list: ...        # a resumed session's new setup (its logs)
    def stop(self, sid: str) -> bool: ...                          # drop the turn in flight; was it speaking
    def user_turns(self, sid: str) -> int: ...                     # user turns begun (utterances, texts)
    def undeclared(self, sid: str) -> tuple[list[str], list[str]]: ...   # conversation tools the setup lacks,
                                                                          # and the names it declares


INPUT_KINDS = ("clientContent", "realtimeInput", "toolResponse")

# A close for the lab's own configuration (not a service behaviour): 1008, policy, with a reason that
# starts with lab.errors.LAB_REASON, so a client's record of it ends the run with that one line
LAB_CONFIG_CLOSE = 1008
CLOSE_REASON_MAX = 123      # bytes a WebSocket close reason may hold (RFC 6455 5.5: 125 less the code)


def undeclared_reason(missing: list[str], have: list[str]) -> str:
    """The close reason for a conversation whose tools the client does not declare, cut to fit."""
    text = (f"{LAB_REASON}the conversation calls {', '.join(missing)}, which the client does not declare "
            f"(it declares {', '.join(str(h) for h in have) or 'no tools'})")
    raw = text.encode()
    return text if len(raw) <= CLOSE_REASON_MAX else raw[:CLOSE_REASON_MAX - 3].decode(errors="ignore") + "..."

# 002's mitigations as the twin sees them at a resume: video "turned off before reconnect" is no
# frame in the old connection's last VIDEO_STOPPED_S (assumption: two frame periods at the lab's
# default 1 fps; the report gives no rate), "delaying reconnect by 5 seconds" is DELAYED_S
VIDEO_STOPPED_S = 2.0
DELAYED_S = 5.0


class Sessions:
    """Every connection and session of one twin, and the rules between them."""

    def __init__(self, prm: SessionParams, frames: wire.Wire, rng: random.Random, turns: TurnHooks,
                 handle_rng: random.Random | None = None, faults: set | None = None):
        self.prm = prm
        self.faults = faults if faults is not None else set()   # the server faults switched on (QUOTA, ...)
        self.wire = frames
        self.rng = rng
        self.turns = turns
        self._handle_rng = handle_rng
        self.sessions: dict[str, Session] = {}
        self.handles: dict[str, str] = {}
        self.conns: dict[int, Conn] = {}
        self._ended: set[int] = set()
        self._session_seq = 0
        self.replays = Replays()                        # what transparent resumes must resend
        self.handle_issued_at: dict[str, float] = {}    # for handle_expiry_s
        self._timers: dict[type, Callable[[Conn, float], list]] = {
            FreezeCheck: self._on_freeze, SetupDone: self._on_setup_done, HandleUpdate: self._on_handle_timer,
            GoAway: self._on_goaway, GoAwayClose: self._on_goaway_close, CapGoAway: self._on_cap_goaway,
            SessionCap: self._on_session_cap}

    # ---- lookups ----------------------------------------------------------------------------
    def find(self, conn_id: int) -> Conn | None:
        """The connection, None once it ended; UnknownConnection for an id never opened."""
        c = self.conns.get(conn_id)
        if c is None and conn_id not in self._ended:
            raise UnknownConnection(f"connection {conn_id} was never opened")
        return c

    def conn(self, conn_id: int) -> Conn:
        """A connection still open (events from the shell name one)."""
        c = self.conns.get(conn_id)
        if c is None:
            self.find(conn_id)      # raises for an id never opened
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
        kind = "twin.refuse" if c.phase in (Phase.OPEN, Phase.SETTING_UP) else "twin.bad_input"
        return self._refuse(c, self.prm.bad_input_code, reason, now + self.prm.bad_input_close_s, why, kind)

    def _refuse(self, c: Conn, code: int, reason: str, at: float, why: str, kind: str = "twin.refuse") -> list:
        return [Log(kind, {"conn": c.id, "session": c.session, "code": code, "reason": reason, "why": why})] + \
            self.close(c, code, reason, at, why)

    # ---- events -----------------------------------------------------------------------------
    def opened(self, conn_id: int, now: float, route: str = "", peer: Any = None, key: str = "") -> list:
        if conn_id in self.conns or conn_id in self._ended:
            raise TwinBug(f"connection {conn_id} opened twice")
        c = Conn(conn_id, now, route=route, last_data_at=now, key=key,
                 client=str(peer).rsplit(":", 1)[0] if peer else "")
        self.conns[conn_id] = c
        acts: list = [Log("twin.conn.open", {"conn": conn_id, "route": route, "peer": peer})]
        if self.prm.freeze_close_s is not None:
            acts.append(Timer(FreezeCheck(c.id), c.last_data_at + self.prm.freeze_close_s))
        cap = self.prm.connection_max_s
        if cap is not None:
            acts += [Timer(CapGoAway(c.id), now + max(0.0, cap - self.prm.goaway_lead_s)),
                     Timer(GoAwayClose(c.id), now + cap)]
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

    def in_turns(self, c: Conn) -> bool:
        """Whether a message on `c` other than a setup goes straight to the session's turns: the
        connection live in a session and no transparent replay to judge, so that admit() and
        replay_arrived() would pass it on untouched (input_arrived() still counts it)."""
        return c.phase is Phase.LIVE and c.session is not None and not c.transparent

    def input_arrived(self, c: Conn, kind: str, body: dict, now: float, media: Media | None = None) -> list | None:
        """Count one message on a live connection: the refusal's actions if the session cannot
        take it (002: a resumed session with audio and video history fails once its user has begun
        more turns than av_resume_ok_utterances since the resume; a 3.x model refuses a client turn
        with no role). Every input's modalities are recorded on the connection and its session
        (`media`: what media_of(kind, body) is already known to be)."""
        c.msg_index += 1
        if kind not in INPUT_KINDS:
            return None
        c.inputs += 1
        if media is None:
            media = media_of(kind, body)
        c.media.note(media, now)
        if c.session is not None:
            self.session(c.session).media.note(media, now)
        if (kind == "clientContent" and re.fullmatch(self.prm.role_required_models, c.model)
                and wire.has_roleless_turn(body)):
            return self._refuse(c, self.prm.bad_input_code, self.prm.roleless_turn_reason, now,
                                      "roleless_turn", kind="twin.bad_input")
        ok = self.prm.av_resume_ok_utterances
        if c.av_doomed and ok is not None and self.turns.user_turns(c.session) - c.turns_at_resume > ok:
            reason, code = self.prm.av_fail_reason, self.prm.av_fail_code
            return [Log("twin.bad_input", {"conn": c.id, "session": c.session, "code": code,
                                           "reason": reason, "why": "audio_video_resume"})] + \
                self.close(c, code, reason, now, "audio_video_resume")
        return None

    def mic_input(self, c: Conn, session_media: Carried, now: float) -> list | None:
        """input_arrived(c, "realtimeInput", chunk, now, media=MIC) for a microphone chunk on a
        connection in_turns(), with the session's record of what it carried handed in (lab.twin.core's
        MicLane holds it) instead of looked up. A connection whose resume doomed it takes the
        reference way: that rule may refuse the chunk."""
        if c.av_doomed:
            return self.input_arrived(c, "realtimeInput", {}, now, media=MIC)
        c.msg_index += 1
        c.inputs += 1
        c.media.note(MIC, now)
        session_media.note(MIC, now)
        return None

    def replay_arrived(self, c: Conn, kind: str, body: dict, now: float) -> tuple[list, bool]:
        """A message on a transparent connection, judged against what its resume owes (seed 004
        §5): (the actions, whether the message is refused). A twin.replay record when it settles
        the replay; with replay_check `close` a wrong replay is closed 1007 and goes no further."""
        judged = self.replays.message(c.id, kind, body) if c.transparent else None
        if judged is None:
            return [], False
        acts: list = [Log("twin.replay", {"conn": c.id, "session": c.session, **judged})]
        if judged["verdict"] in WRONG_REPLAYS and self.prm.replay_check == "close":
            code, reason = self.prm.replay_reject_code, self.prm.replay_reject_reason
            return acts + self.close(c, code, reason, now, "wrong_replay"), True
        return acts, False

    def _expired(self, handle: str, now: float) -> bool:
        ttl = self.prm.handle_expiry_s
        at = self.handle_issued_at.get(handle)
        return ttl is not None and at is not None and now - at > ttl

    def take_pending(self, c: Conn) -> list[tuple[str, dict]]:
        pending, c.pending = c.pending, []
        return pending

    def ended(self, conn_id: int, how: str, now: float) -> list:
        c = self.conn(conn_id)
        del self.conns[conn_id]
        self._ended.add(conn_id)
        self.replays.ended(conn_id)
        server_initiated = c.phase is Phase.CLOSING
        if server_initiated and c.close_why:
            how = "server_timeout" if c.close_why == "freeze" else f"server_{c.close_why}"
        c.phase = Phase.ENDED
        fields: dict = {"conn": c.id, "how": how, "session": c.session,
                        "age_ms": round((now - c.opened_at) * 1000, 1),
                        "idle_ms": round((now - c.last_data_at) * 1000, 1), "modalities": c.media.names()}
        s = self.sessions.get(c.session) if c.session else None
        if s is not None:
            fields["session_modalities"] = s.media.names()
        if s is not None and s.conn == c.id:
            s.conn = None
            s.ended_at = now
            s.goaway_release_at = now + self.prm.goaway_resume_release_s if c.goaway_sent else None
            if how == "tcp_timeout" and self.prm.freeze_close_s is not None:
                # 000: the server's TCP gave up after ~2 min of retransmissions, yet the session stayed
                # locked until the server's own close at ~480 s after its last message
                s.locked_until = c.last_data_at + self.prm.freeze_close_s
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
        c.model = wire.model_name(setup)
        log = {"conn": c.id, "resume": bool(handle), **redact_handle(handle), "route": c.route,
               "model": setup.get("model")}
        acts: list = [Log("twin.setup", log)]
        refusal = self._setup_refusal(c, setup, sr, now)
        if refusal is not None:
            code, reason, why = refusal
            return acts + self._refuse(c, code, reason, now + self.prm.setup_error_close_s, why)
        if handle:
            return acts + self._resume(c, setup, handle, now)
        self._session_seq += 1
        s = Session(f"s{self._session_seq}", started_at=now)
        s.compressed = setup.get("contextWindowCompression") is not None
        self.sessions[s.id] = s
        acts += self.turns.begin(s.id, setup, client=c.client)
        s.conn = c.id
        c.session = s.id
        missing, have = self.turns.undeclared(s.id)
        if missing:
            # the lab's own configuration error, not a service behaviour (assumption: the real
            # service has no conversation file): one line for the run, in the close's reason
            return acts + self._refuse(c, LAB_CONFIG_CLOSE, undeclared_reason(missing, have),
                                       now + self.prm.setup_error_close_s, "undeclared_tool")
        if c.transparent:
            self.replays.started(c.id, s.id)
        c.setup_drawn_s = draw(self.prm.new_setup_s, self.rng)
        return acts + [Timer(SetupDone(c.id), now + c.setup_drawn_s)]

    def held_sessions(self, now: float) -> int:
        """Sessions the server still holds: on a connection it has not seen end (a silent loss keeps
        it open for ~2 min of retransmissions), or locked after its TCP gave up (000), and not dead."""
        return sum(1 for s in self.sessions.values() if not s.dead and (
            s.conn is not None or (s.locked_until is not None and now < s.locked_until)))

    def _setup_refusal(self, c: Conn, setup: dict, sr: dict, now: float) -> tuple[int, str, str] | None:
        """(code, reason, why) when the setup is refused before any session rule, in the real
        service's order: the key, the quota, the fields, the model, the modalities (fidelity §5)."""
        p = self.prm
        if c.key == wire.KEY_MISSING:
            return p.missing_key_code, p.missing_key_reason, "missing_key"
        if c.key == wire.KEY_WRONG:
            return p.wrong_key_code, p.wrong_key_reason, "wrong_key"
        if QUOTA in self.faults:
            return p.quota_code, p.quota_reason, "quota"
        if (p.held_sessions_max is not None and not sr.get("handle")
                and self.held_sessions(now) >= p.held_sessions_max):
            # assumption (000 left "how many lost sessions the server holds at once" untested): a new
            # session past the limit is refused as a held session's resume is (1011, the study's reason)
            return p.refuse_code, p.refuse_reason, "held_sessions"
        if "transparent" in sr and not p.transparent_supported:
            return p.transparent_reject_code, p.transparent_reject_reason, "transparent"
        if c.model not in p.served_models:
            reason = p.unknown_model_reason.replace("{model}", c.model).replace("{version}", wire.api_version(c.route))
            return p.unknown_model_code, reason, "unknown_model"
        mods = wire.response_modalities(setup)
        if "AUDIO" in mods and "TEXT" in mods:
            return p.bad_input_code, p.mixed_modalities_reason, "audio_and_text"
        if p.reject_text_only and mods and "AUDIO" not in mods and c.model in p.native_audio_models:
            return p.bad_input_code, p.text_only_reason, "text_only"
        return None

    def _resume(self, c: Conn, setup: dict, handle: str, now: float) -> list:
        sid = self.handles.get(handle)
        s = self.sessions.get(sid) if sid else None
        why = None
        code, reason = self.prm.refuse_code, self.prm.refuse_reason
        release_at = None
        if s is not None and s.last_data_at is not None:
            release_at = s.last_data_at + self.prm.idle_release_s
        if s is not None and s.goaway_release_at is not None:
            release_at = s.goaway_release_at    # the twin sent this client away: its own rule
        if (s is not None and s.locked_until is not None and now >= s.locked_until
                and self.prm.server_close_kills_session):
            s.dead = True       # the ~480 s close came, with no socket left to carry it
        if s is None:
            why, code = "unknown_handle", self.prm.unknown_handle_code
        elif self._expired(handle, now):
            why, code = "handle_expired", self.prm.unknown_handle_code   # assumption: refused as unknown
        elif s.dead:
            why = "session_dead"
        elif s.conn is not None:
            why = "old_connection_open"
        elif s.locked_until is not None and now < s.locked_until:
            why = "tcp_gave_up"
        elif (not (s.speaking_at_end and self.prm.speaking_release_immediate)
              and release_at is not None and now < release_at):
            why = "idle_release"
        hang = self.prm.resume_hang_s
        if why == "old_connection_open" and hang is not None and s is not None:
            old = self.conns.get(s.conn)
            since = now - old.last_data_at if old is not None else -1.0
            lo, hi = bounds(hang)   # type: ignore[misc]  # a shape the profile loader checked
            if lo <= since <= hi:
                # fidelity §8 F11 (P4, a 13 min freeze): between ~+244 and +454 s four resume attempts
                # got neither setupComplete nor a close; the client's own timeout ends them
                return [Log("twin.resume_hang", {"conn": c.id, "session": sid, "since_ms": round(since * 1000, 1)})]
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
        s.compressed = setup.get("contextWindowCompression") is not None
        acts: list = self.turns.configure(s.id, setup) + self._av_resume(c, s, handle, now)
        owed = self.replays.resumed(c.id, s.id, handle) if c.transparent else None
        if owed is not None:
            acts.append(Log("twin.replay", {"conn": c.id, "session": s.id, "verdict": "owed", "owed": owed}))
        c.setup_drawn_s = draw(self.prm.resume_setup_s, self.rng)
        return acts + [Timer(SetupDone(c.id), now + c.setup_drawn_s)]

    def _av_resume(self, c: Conn, s: Session, handle: str, now: float) -> list:
        """002: a session that ever carried audio and video is resumed (the resume itself works); it
        fails later unless the client took a mitigation that av_resume_helped_by lists (the report:
        none helped). Logs which mitigations the twin saw, so a variant shows it really took one."""
        if self.prm.av_resume_ok_utterances is None or not s.media.audio_and_video:
            return []
        seen = self._mitigations_seen(s, handle, now)
        helped = [m for m in seen if m in self.prm.av_resume_helped_by]
        c.av_doomed = not helped
        c.turns_at_resume = self.turns.user_turns(s.id)
        return [Log("twin.av_resume", {"conn": c.id, "session": s.id, "mitigations": seen, "helped_by": helped,
                                       "fails_after": self.prm.av_resume_ok_utterances if c.av_doomed else None})]

    @staticmethod
    def _mitigations_seen(s: Session, handle: str, now: float) -> list[str]:
        """Which of lab.twin.params.AV_MITIGATIONS the client took before this resume."""
        seen = []
        last_video, ended = s.media.last_video_at, s.ended_at if s.ended_at is not None else now
        if last_video is None or ended - last_video >= VIDEO_STOPPED_S:
            seen.append("video_stopped")
        if s.media.stream_ended:
            seen.append("audio_stream_end")
        if now - ended >= DELAYED_S:
            seen.append("delayed")
        if handle == s.latest_handle:
            seen.append("latest_handle")
        return seen

    def _on_setup_done(self, c: Conn, now: float) -> list:
        """setupComplete; the caller then hands the frames held during setup to the turns."""
        if c.phase is not Phase.SETTING_UP:
            return []
        s = self.session(c.session) if c.session else None
        if s is None or s.conn != c.id:
            return []
        c.phase = Phase.LIVE
        d = None
        if c.resumption:
            wait = self.prm.resumed_handle_update_delay_s if c.resumed else self.prm.handle_update_delay_s
            d = 0.0 if wait is None else draw(wait, self.rng)
        # the delays as drawn, beside what the twin's clock saw: on a loaded machine a timer fires
        # late, and a client's figure is the draw plus that lateness plus the path
        acts: list = [self.wire.send(c.id, wire.setup_complete(), now),
                      Log("twin.accept", {"conn": c.id, "session": s.id, "resume": c.resumed,
                                          "setup_ms": round((now - c.opened_at) * 1000, 1),
                                          "drawn_ms": round(c.setup_drawn_s * 1000, 1),
                                          "handle_drawn_ms": None if d is None else round(d * 1000, 1)})]
        if d is not None:
            if d > 0:
                acts.append(Timer(HandleUpdate(c.id), now + d))
            else:
                acts += self._handle_update(c, now)
        if self.prm.goaway_after_s is not None:
            acts.append(Timer(GoAway(c.id), now + self.prm.goaway_after_s))
        cap_at = self._session_cap_at(s, now)
        if cap_at is not None:
            acts.append(Timer(SessionCap(c.id), cap_at))
        return acts

    def _on_handle_timer(self, c: Conn, now: float) -> list:
        return self._handle_update(c, now) if c.phase is Phase.LIVE else []

    def _handle_update(self, c: Conn, now: float) -> list:
        s = self.session(c.session) if c.session else None
        if s is None:
            return []
        if UNRESUMABLE in self.faults:
            return [self.wire.send(c.id, wire.unresumable_update(), now),
                    Log("twin.handle", {"conn": c.id, "session": s.id, "resumable": False})]
        h = self._new_handle()
        s.handles.add(h)
        s.latest_handle = h
        self.handles[h] = s.id
        self.handle_issued_at[h] = now
        if c.transparent:
            self.replays.handle_issued(c.id, h, c.msg_index)
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

    def go_away(self, c: Conn, now: float, time_left_s: float, close: bool = True) -> list:
        """goAway with timeLeft, and the close when it has run out (unless a cap timer closes it)."""
        if c.phase is not Phase.LIVE or c.goaway_sent:
            return []
        c.goaway_sent = True
        tl = f"{time_left_s:g}s"
        acts = [self.wire.send(c.id, wire.go_away(tl), now), Log("twin.goaway", {"conn": c.id, "time_left": tl})]
        return acts + ([Timer(GoAwayClose(c.id), now + time_left_s)] if close else [])

    def go_away_all(self, now: float, time_left_s: float) -> list:
        """goAway on every live connection now (the control channel's action)."""
        acts: list = []
        for c in list(self.conns.values()):
            acts += self.go_away(c, now, time_left_s)
        return acts

    def unresumable_now(self, now: float) -> list:
        """Once the switch is on, every live connection that asked for resumption hears it at once."""
        acts: list = []
        for c in list(self.conns.values()):
            if c.phase is Phase.LIVE and c.resumption:
                acts += self._handle_update(c, now)
        return acts

    def _on_goaway(self, c: Conn, now: float) -> list:
        return self.go_away(c, now, float(self.prm.goaway_time_left.rstrip("s")))   # declared as '<seconds>s'

    def _on_cap_goaway(self, c: Conn, now: float) -> list:
        # the cap's own GoAwayClose (armed at the upgrade) closes it
        return self.go_away(c, now, self.prm.goaway_lead_s, close=False)

    def _on_goaway_close(self, c: Conn, now: float) -> list:
        if c.closing:
            return []
        c.goaway_sent = True    # a cap reached before the goAway could go out is the twin's own end too
        return [Log("twin.goaway_close", {"conn": c.id})] + self.close(
            c, self.prm.goaway_close_code, self.prm.goaway_close_reason, now, "goaway")

    def _session_cap_at(self, s: Session, now: float) -> float | None:
        """When the session's cap is next checked: the audio+video cap while it may still apply,
        then the audio-only one; None with context compression or no cap."""
        if s.compressed:
            return None
        av, audio = self.prm.session_max_av_s, self.prm.session_max_audio_s
        if s.media.audio_and_video:
            return s.started_at + av if av is not None else (s.started_at + audio if audio is not None else None)
        if av is not None and (audio is None or av < audio):
            # video may still come: look again every second once the audio+video cap has passed
            nxt = max(now + 1.0, s.started_at + av)
            return nxt if audio is None else min(nxt, s.started_at + audio)
        return s.started_at + audio if audio is not None else None

    def _on_session_cap(self, c: Conn, now: float) -> list:
        s = self.sessions.get(c.session) if c.session else None
        if c.closing or s is None or s.conn != c.id:
            return []
        due = self._session_cap_at(s, now)
        if due is None:
            return []
        av = s.media.audio_and_video
        cap = self.prm.session_max_av_s if av else self.prm.session_max_audio_s
        if cap is None or now + 1e-6 < s.started_at + cap:
            return [Timer(SessionCap(c.id), due)]
        s.dead = True       # the context is full: the session cannot go on, resumed or not
        return [Log("twin.session_cap", {"conn": c.id, "session": s.id, "audio_video": av,
                                         "age_ms": round((now - s.started_at) * 1000, 1)})] + \
            self.close(c, self.prm.session_cap_code, self.prm.session_cap_reason, now, "session_cap", True)
