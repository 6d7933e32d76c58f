"""The twin's session and protocol core: pure, sans-I/O (no sockets, no asyncio, no clock).

The shell (lab.twin.server) feeds it events with an explicit `now` (seconds, monotonic):

    core.check_upgrade(path, headers)            -> Upgrade (HTTP status to refuse with, or route)
    core.connection_opened(conn, now, route)     -> [actions]
    core.frame_received(conn, data, now)         -> [actions]   (one data message, text or bytes)
    core.connection_ended(conn, how, now)        -> [actions]   (how: close_frame | eof | rst)
    core.timer_fired(key, now)                   -> [actions]

and performs the actions it returns, in order:

    Send(conn, data, frame, at)     send one frame (data: bytes for binary, str for text) at `at`
    Close(conn, code, reason, at)   close that connection with a close frame at `at`
    Timer(key, at)                  call timer_fired(key, ...) at `at` (timers are never cancelled:
                                    a stale one finds nothing to do)
    Log(kind, fields)               one twin.jsonl record (no raw handles or keys)

Sessions are keyed by id; every handle ever issued maps to its session (the latest state). A
session has at most one connection; a resume is refused while the server still holds the old one
(000 finding 3), and for `idle_release_s` after an idle drop (000 round 1). The profile
(lab.twin.profile) holds every timing and code; the scripted model (lab.twin.model) decides what
the model says.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import random
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from lab.events import redact_handle
from lab.twin import model as M
from lab.twin.profile import Profile, load_profile

# ---------------------------------------------------------------------------------------------
# Actions


@dataclass
class Send:
    conn: int
    data: bytes | str
    frame: dict
    at: float


@dataclass
class Close:
    conn: int
    code: int
    reason: str
    at: float


@dataclass
class Timer:
    key: tuple
    at: float


@dataclass
class Log:
    kind: str
    fields: dict


Action = Send | Close | Timer | Log

# ---------------------------------------------------------------------------------------------
# Routing and auth at the upgrade

ROUTE_RE = re.compile(
    r"/ws/(?:google\.ai\.generativelanguage\.(?P<ver>v1|v1beta|v1alpha)\.GenerativeService\."
    r"(?P<method>BidiGenerateContent(?:Constrained)?)"
    r"|(?P<vertex>google\.cloud\.aiplatform\.v1beta1\.LlmBidiService/BidiGenerateContent))$")


@dataclass
class Upgrade:
    status: int | None          # None = accept; else the HTTP status to answer
    reason: str = ""
    route: str = ""             # "v1", "v1beta", "v1alpha", "v1alpha-constrained", "vertex"
    key_source: str = ""        # where the key came from (never the key itself)


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    get = getattr(headers, "get", None)
    if get is not None:
        v = get(name)
        if v is None and isinstance(headers, dict):
            for k, val in headers.items():
                if k.lower() == name.lower():
                    return val
        return v
    for k, val in headers:
        if k.lower() == name.lower():
            return val
    return None


def check_upgrade(path: str, headers: Any, api_key: str | None = None) -> Upgrade:
    """Route an upgrade request: 404 for an unknown path; with a configured api_key, 401 when no key
    was sent and 403 when none of the sent keys matches. Keys are read from x-goog-api-key, ?key=,
    and Authorization: Token|Bearer. Double slashes and a path prefix are tolerated."""
    # not urlsplit: a request path "//ws/..." (what the SDK sends) would parse "ws" as a host
    raw_path, _, query = (path or "/").partition("?")
    p = re.sub(r"/{2,}", "/", raw_path or "/").rstrip("/")
    m = ROUTE_RE.search(p)
    if not m:
        return Upgrade(404, f"no Live API route at {raw_path!r}")
    if m.group("vertex"):
        route = "vertex"
    else:
        route = m.group("ver") + ("-constrained" if m.group("method").endswith("Constrained") else "")
    keys: list[tuple[str, str]] = []
    v = _header(headers, "x-goog-api-key")
    if v:
        keys.append(("x-goog-api-key", v.strip()))
    q = parse_qs(query).get("key")
    if q:
        keys.append(("query", q[0]))
    auth = _header(headers, "authorization")
    if auth:
        scheme, _, tok = auth.strip().partition(" ")
        if scheme.lower() in ("token", "bearer") and tok.strip():
            keys.append(("authorization", tok.strip()))
    if api_key:
        if not keys:
            return Upgrade(401, "missing API key", route)
        for src, k in keys:
            if secrets.compare_digest(k.encode(), api_key.encode()):
                return Upgrade(None, "", route, src)
        return Upgrade(403, "API key not valid", route)
    return Upgrade(None, "", route, keys[0][0] if keys else "")


# ---------------------------------------------------------------------------------------------
# Client frames: parsing and normalisation

TOP_LEVEL = ("setup", "clientContent", "realtimeInput", "toolResponse", "contextUpdate")
# Values below these keys are user data (function args, JSON schemas): their keys stay as sent.
OPAQUE = frozenset({"args", "response", "parameters", "parametersJsonSchema", "responseJsonSchema",
                    "labels", "partialArgs"})


class BadInput(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def camel(key: str) -> str:
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def normalise(obj: Any) -> Any:
    """camelCase every key at every level (both spellings are accepted), except user data."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            ck = camel(k) if isinstance(k, str) else k
            out[ck] = v if ck in OPAQUE else normalise(v)
        return out
    if isinstance(obj, list):
        return [normalise(x) for x in obj]
    return obj


_B64_OK = re.compile(r"^[A-Za-z0-9+/\-_]*={0,2}$")


def b64decode_any(s: Any, where: str = "data") -> bytes:
    """Standard or URL-safe base64, padding optional."""
    if not isinstance(s, str):
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), expected a base64 string")
    t = "".join(s.split())
    if not _B64_OK.match(t) or len(t.rstrip("=")) % 4 == 1:
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed")
    t = t.rstrip("=").replace("-", "+").replace("_", "/")
    t += "=" * (-len(t) % 4)
    try:
        return base64.b64decode(t, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed") from None


def parse_client_frame(data: bytes | str, max_bytes: int | None = None) -> tuple[str, dict]:
    """(kind, body) of one client message, kind one of TOP_LEVEL; raises BadInput."""
    size = len(data.encode() if isinstance(data, str) else data)
    if max_bytes and size > max_bytes:
        raise BadInput(f"Request payload size exceeds the limit: {max_bytes} bytes.")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadInput("Invalid JSON payload received. Unexpected token.") from None
    if not isinstance(obj, dict):
        raise BadInput("Invalid JSON payload received. Expected an object.")
    known = []
    for k in obj:
        ck = camel(k) if isinstance(k, str) else k
        if ck not in TOP_LEVEL:
            raise BadInput(f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.')
        known.append((ck, obj[k]))
    if not known:
        raise BadInput("Request contains an invalid argument.")
    if len(known) > 1:
        raise BadInput("Invalid JSON payload received. Only one of the message fields may be set.")
    kind, body = known[0]
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadInput(f"Invalid JSON payload received. Expected an object for '{kind}'.")
    return kind, normalise(body)


def encode_frame(frame: dict, binary: bool = True) -> bytes | str:
    s = json.dumps(frame, separators=(",", ":"))
    return s.encode() if binary else s


# ---------------------------------------------------------------------------------------------
# State


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
class Session:
    id: str
    model: M.ScriptedModel
    detector: M.AudioTurnDetector
    handles: set = field(default_factory=set)
    conn: int | None = None
    dead: bool = False
    ended_at: float | None = None
    last_data_at: float | None = None
    speaking_at_end: bool = False
    had_audio: bool = False
    had_video: bool = False
    gen: int = 0
    turn: Turn | None = None
    queue: list = field(default_factory=list)
    input_transcription: bool = False
    output_transcription: bool = False
    last_audio_at: float = 0.0
    flush_armed: bool = False


@dataclass
class Conn:
    id: int
    opened_at: float
    route: str = ""
    phase: str = "open"         # open | setting_up | live | closing | ended
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
    ended_how: str = ""


class TwinCore:
    """All sessions and connections of one twin."""

    _call_seq = 0   # call ids are numbered across sessions (see _next_call_id)

    def _next_call_id(self) -> str:
        self._call_seq += 1
        return f"fc-{self._call_seq}"

    def __init__(self, profile: Profile | str = "developer-api", overrides=None, seed: int | None = None,
                 api_key: str | None = None):
        self.profile = load_profile(profile, overrides) if isinstance(profile, str) else \
            profile.with_overrides(overrides)
        self.api_key = api_key
        self.rng = random.Random(seed)
        self._handle_rng = random.Random(seed) if seed is not None else None
        self.sessions: dict[str, Session] = {}
        self.handles: dict[str, str] = {}
        self.conns: dict[int, Conn] = {}
        self._session_seq = 0
        self.binary = str(self.profile["frame_type"]).lower() != "text"
        self.model_cfg = M.ModelConfig.from_profile(self.profile)

    # ---- helpers ---------------------------------------------------------------------------
    def p(self, name: str) -> Any:
        return self.profile[name]

    def draw(self, name: str) -> float:
        return self.profile.draw(name, self.rng)

    def _send(self, conn: Conn, frame: dict, at: float) -> Send:
        conn.last_activity_at = max(conn.last_activity_at, at)
        return Send(conn.id, encode_frame(frame, self.binary), frame, at)

    def _new_handle(self) -> str:
        alphabet = string.ascii_letters + string.digits + "-_"
        if self._handle_rng is not None:
            return "".join(self._handle_rng.choice(alphabet) for _ in range(48))
        return "".join(secrets.choice(alphabet) for _ in range(48))

    def _close(self, conn: Conn, code: int, reason: str, at: float, why: str, kills: bool = False) -> list:
        if conn.phase in ("closing", "ended"):
            return []
        conn.phase = "closing"
        conn.close_why = why
        conn.closing_kills = kills
        return [Close(conn.id, code, reason, at)]

    def _bad(self, conn: Conn, reason: str, now: float, why: str = "bad_input") -> list:
        acts: list = [Log("twin.refuse" if conn.phase in ("open", "setting_up") else "twin.bad_input",
                          {"conn": conn.id, "session": conn.session, "code": int(self.p("bad_input_code")),
                           "reason": reason, "why": why})]
        return acts + self._close(conn, int(self.p("bad_input_code")), reason,
                                  now + float(self.p("bad_input_close_s")), why)

    def session_of(self, conn: Conn) -> Session | None:
        return self.sessions.get(conn.session) if conn.session else None

    def live_session_count(self) -> int:
        return sum(1 for s in self.sessions.values() if s.conn is not None)

    # ---- events ----------------------------------------------------------------------------
    def check_upgrade(self, path: str, headers: Any) -> Upgrade:
        return check_upgrade(path, headers, self.api_key)

    def connection_opened(self, conn_id: int, now: float, route: str = "", peer: Any = None) -> list:
        c = Conn(conn_id, now, route=route, last_data_at=now)
        self.conns[conn_id] = c
        acts: list = [Log("twin.conn.open", {"conn": conn_id, "route": route, "peer": peer})]
        return acts + self._arm_freeze(c)

    def _arm_freeze(self, c: Conn) -> list:
        fz = self.p("freeze_close_s")
        if fz is None:
            return []
        return [Timer(("freeze", c.id), c.last_data_at + float(fz))]

    def frame_received(self, conn_id: int, data: bytes | str, now: float) -> list:
        c = self.conns.get(conn_id)
        if c is None or c.phase in ("closing", "ended"):
            return []
        c.last_data_at = now
        c.last_activity_at = max(c.last_activity_at, now)
        try:
            kind, body = parse_client_frame(data, self.p("max_client_frame_bytes"))
        except BadInput as e:
            return self._bad(c, e.reason, now)
        if c.phase == "setting_up":
            if kind == "setup":
                return self._bad(c, "Request contains an invalid argument.", now, "second_setup")
            c.pending.append((kind, body))
            return []
        if c.phase == "open":
            if kind != "setup":
                return self._bad(c, "Request contains an invalid argument.", now, "input_before_setup")
            return self._on_setup(c, body, now)
        if kind == "setup":
            return self._bad(c, "Request contains an invalid argument.", now, "second_setup")
        return self._dispatch(c, kind, body, now)

    def _dispatch(self, c: Conn, kind: str, body: dict, now: float) -> list:
        s = self.session_of(c)
        if s is None:
            return []
        c.msg_index += 1
        acts: list = []
        if kind in ("clientContent", "realtimeInput", "toolResponse"):
            if (c.resumed and c.inputs == 0 and self.p("av_resume_fail") and s.had_audio and s.had_video):
                c.inputs += 1
                reason = self.p("av_fail_reason")
                return [Log("twin.bad_input", {"conn": c.id, "session": s.id, "code": int(self.p("av_fail_code")),
                                               "reason": reason, "why": "audio_video_resume"})] + \
                    self._close(c, int(self.p("av_fail_code")), reason, now, "audio_video_resume")
            c.inputs += 1
        try:
            if kind == "clientContent":
                acts += self._on_client_content(c, s, body, now)
            elif kind == "realtimeInput":
                acts += self._on_realtime_input(c, s, body, now)
            elif kind == "toolResponse":
                acts += self._on_tool_response(c, s, body, now)
            elif kind == "contextUpdate":
                s.model.configure(body)
        except BadInput as e:
            return acts + self._bad(c, e.reason, now)
        return acts

    def connection_ended(self, conn_id: int, how: str, now: float) -> list:
        c = self.conns.pop(conn_id, None)
        if c is None:
            return []
        server_initiated = c.phase == "closing"
        if server_initiated and c.close_why:
            how_rec = "server_timeout" if c.close_why == "freeze" else f"server_{c.close_why}"
        else:
            how_rec = how
        c.phase = "ended"
        acts: list = []
        s = self.session_of(c)
        fields = {"conn": c.id, "how": how_rec, "session": c.session,
                  "age_ms": round((now - c.opened_at) * 1000, 1),
                  "idle_ms": round((now - c.last_data_at) * 1000, 1)}
        if s is not None and s.conn == c.id:
            s.conn = None
            s.ended_at = now
            # the session was last active at its last data frame in either direction (a frame the
            # server scheduled but never sent, cut by the end, does not count)
            s.last_data_at = min(now, max(c.last_data_at, c.last_activity_at))
            s.speaking_at_end = bool(s.turn and s.turn.speaking)
            fields["speaking"] = s.speaking_at_end
            s.gen += 1          # the turn in flight dies with the connection
            s.turn = None
            s.queue.clear()
            if c.closing_kills:
                s.dead = True
            fields["dead"] = s.dead
        acts.append(Log("twin.conn.end", fields))
        return acts

    def timer_fired(self, key: tuple, now: float) -> list:
        kind = key[0]
        if kind == "freeze":
            return self._on_freeze(key[1], now)
        if kind == "setup_done":
            return self._on_setup_done(key[1], now)
        if kind == "handle_update":
            c = self.conns.get(key[1])
            return self._handle_update(c, now) if c and c.phase == "live" else []
        if kind == "goaway":
            return self._on_goaway(key[1], now)
        if kind == "goaway_close":
            c = self.conns.get(key[1])
            if c and c.phase == "live":
                return [Log("twin.goaway_close", {"conn": c.id})] + self._close(
                    c, int(self.p("goaway_close_code")), self.p("goaway_close_reason"), now, "goaway")
            return []
        if kind in ("step", "chunk", "flush"):
            s = self.sessions.get(key[1])
            if s is None:
                return []
            if kind == "flush":
                return self._on_flush(s, now)
            if s.turn is None or s.turn.gen != key[2] or s.gen != key[2]:
                return []
            return self._on_step(s, now) if kind == "step" else self._on_chunk(s, now)
        return []

    # ---- setup and resumption -------------------------------------------------------------
    def _on_setup(self, c: Conn, setup: dict, now: float) -> list:
        c.phase = "setting_up"
        sr = setup.get("sessionResumption")
        c.resumption = isinstance(sr, dict) or sr is not None
        sr = sr if isinstance(sr, dict) else {}
        handle = sr.get("handle") or None
        c.transparent = bool(sr.get("transparent"))
        log = {"conn": c.id, "resume": bool(handle), **redact_handle(handle), "route": c.route,
               "model": setup.get("model")}
        acts: list = [Log("twin.setup", log)]
        err_at = now + float(self.p("setup_error_close_s"))
        if "transparent" in sr and not self.p("transparent_supported"):
            reason = self.p("transparent_reject_reason")
            code = int(self.p("transparent_reject_code"))
            acts.append(Log("twin.refuse", {"conn": c.id, "code": code, "reason": reason, "why": "transparent"}))
            return acts + self._close(c, code, reason, err_at, "transparent")
        gen_cfg = setup.get("generationConfig") or {}
        mods = [str(m).upper() for m in (gen_cfg.get("responseModalities") or [])]
        if self.p("reject_text_only") and mods and "AUDIO" not in mods:
            reason = "Request contains an invalid argument."
            acts.append(Log("twin.refuse", {"conn": c.id, "code": 1007, "reason": reason, "why": "text_only"}))
            return acts + self._close(c, 1007, reason, err_at, "text_only")
        if handle:
            return acts + self._resume(c, setup, handle, now)
        self._session_seq += 1
        sid = f"s{self._session_seq}"
        mdl = M.ScriptedModel(self.model_cfg, random.Random(self.rng.random()), next_call_id=self._next_call_id)
        det = M.AudioTurnDetector(self.p("vad_threshold_rms"), self.p("vad_onset_ms"), self.p("vad_silence_ms"))
        s = Session(sid, mdl, det)
        self.sessions[sid] = s
        self._apply_setup(s, setup)
        s.conn = c.id
        c.session = sid
        return acts + [Timer(("setup_done", c.id), now + self.draw("new_setup_s"))]

    def _apply_setup(self, s: Session, setup: dict) -> None:
        s.model.configure(setup)
        s.input_transcription = setup.get("inputAudioTranscription") is not None
        s.output_transcription = setup.get("outputAudioTranscription") is not None

    def _resume(self, c: Conn, setup: dict, handle: str, now: float) -> list:
        sid = self.handles.get(handle)
        s = self.sessions.get(sid) if sid else None
        why = None
        code, reason = int(self.p("refuse_code")), self.p("refuse_reason")
        if s is None:
            why, code = "unknown_handle", int(self.p("unknown_handle_code"))
        elif s.dead:
            why = "session_dead"
        elif s.conn is not None:
            why = "old_connection_open"
        elif (not (s.speaking_at_end and self.p("speaking_release_immediate"))
              and s.last_data_at is not None
              and now < s.last_data_at + float(self.p("idle_release_s"))):
            why = "idle_release"
        if why:
            at = now + self.draw("refuse_close_s")
            fields = {"conn": c.id, "session": sid, "code": code, "reason": reason, "why": why,
                      "close_in_ms": round((at - now) * 1000, 1)}
            if s is not None and s.last_data_at is not None and why == "idle_release":
                fields["release_in_ms"] = round((s.last_data_at + float(self.p("idle_release_s")) - now) * 1000, 1)
            return [Log("twin.refuse", fields)] + self._close(c, code, reason, at, "refuse")
        # accepted: the new connection claims the session at once (a second attempt is refused)
        s.conn = c.id
        c.session = s.id
        c.resumed = True
        self._apply_setup(s, setup)
        return [Timer(("setup_done", c.id), now + self.draw("resume_setup_s"))]

    def _on_setup_done(self, conn_id: int, now: float) -> list:
        c = self.conns.get(conn_id)
        if c is None or c.phase != "setting_up":
            return []
        s = self.session_of(c)
        if s is None or s.conn != c.id:
            return []
        c.phase = "live"
        acts: list = [self._send(c, {"setupComplete": {}}, now),
                      Log("twin.accept", {"conn": c.id, "session": s.id, "resume": c.resumed,
                                          "setup_ms": round((now - c.opened_at) * 1000, 1)})]
        if c.resumption:
            d = float(self.p("handle_update_delay_s") or 0)
            if d > 0:
                acts.append(Timer(("handle_update", c.id), now + d))
            else:
                acts += self._handle_update(c, now)
        ga = self.p("goaway_after_s")
        if ga is not None:
            acts.append(Timer(("goaway", c.id), now + float(ga)))
        pending, c.pending = c.pending, []
        for kind, body in pending:
            if c.phase != "live":
                break
            acts += self._dispatch(c, kind, body, now)
        return acts

    def _handle_update(self, c: Conn, now: float) -> list:
        s = self.session_of(c)
        if s is None:
            return []
        h = self._new_handle()
        s.handles.add(h)
        self.handles[h] = s.id
        upd: dict = {"newHandle": h, "resumable": True}
        if c.transparent:
            upd["lastConsumedClientMessageIndex"] = str(c.msg_index)
        return [self._send(c, {"sessionResumptionUpdate": upd}, now),
                Log("twin.handle", {"conn": c.id, "session": s.id, **redact_handle(h)})]

    def _on_freeze(self, conn_id: int, now: float) -> list:
        c = self.conns.get(conn_id)
        fz = self.p("freeze_close_s")
        if c is None or c.phase in ("closing", "ended") or fz is None:
            return []
        due = c.last_data_at + float(fz)
        if now + 1e-6 < due:
            return [Timer(("freeze", c.id), due)]
        kills = bool(self.p("server_close_kills_session"))
        s = self.session_of(c)
        if s is not None and kills and s.conn == c.id:
            s.dead = True
        return [Log("twin.freeze_close", {"conn": c.id, "session": c.session,
                                          "idle_ms": round((now - c.last_data_at) * 1000, 1)})] + \
            self._close(c, int(self.p("freeze_close_code")), self.p("freeze_close_reason"), now, "freeze", kills)

    def _on_goaway(self, conn_id: int, now: float) -> list:
        c = self.conns.get(conn_id)
        if c is None or c.phase != "live":
            return []
        tl = str(self.p("goaway_time_left"))
        try:
            secs = float(tl.rstrip("s"))
        except ValueError:
            secs = 0.0
        return [self._send(c, {"goAway": {"timeLeft": tl}}, now), Log("twin.goaway", {"conn": c.id, "time_left": tl}),
                Timer(("goaway_close", c.id), now + secs)]

    # ---- inputs ----------------------------------------------------------------------------
    def _on_client_content(self, c: Conn, s: Session, body: dict, now: float) -> list:
        turns = body.get("turns") or []
        if not isinstance(turns, list):
            raise BadInput("Invalid value at 'client_content.turns', expected a list")
        turn_complete = bool(body.get("turnComplete", False))
        texts: list[tuple[str, str]] = []
        for t in turns:
            if not isinstance(t, dict):
                raise BadInput("Invalid value at 'client_content.turns', expected objects")
            for part in t.get("parts") or []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("inlineData"), dict):
                    blob = part["inlineData"]
                    b64decode_any(blob.get("data", ""), "client_content.turns.parts.inline_data.data")
                    self._note_media(s, str(blob.get("mimeType", "")))
                if isinstance(part.get("text"), str):
                    texts.append((str(t.get("role") or "user"), part["text"]))
        if not turns:
            # `turns: [], turnComplete: true` closes a user turn sent earlier with turnComplete false
            # (LiveKit's typed-message path on 3.x models): the model answers that pending turn.
            if turn_complete and s.model.history and s.model.history[-1][0] == "user":
                _, text = s.model.history.pop()
                return self._user_text(c, s, text, now, source="client_content")
            return []
        simple = (len(turns) == 1 and str(turns[0].get("role") or "user") == "user" and texts
                  and not any("system note" in x.lower() for _, x in texts))
        if simple:
            if not turn_complete:
                s.model.history.append(("user", " ".join(x for _, x in texts)))
                return []
            return self._user_text(c, s, " ".join(x for _, x in texts), now, source="client_content")
        plan = s.model.restore(turns, turn_complete)
        acts: list = [Log("twin.restore", {"conn": c.id, "session": s.id, "turns": len(turns),
                                           "note": s.model.note_status, "plan": plan.why if plan else None})]
        if plan:
            acts += self._interrupt(c, s, now)
            acts += self._start_plan(s, plan, now)
        return acts

    def _note_media(self, s: Session, mime: str) -> None:
        mime = mime.lower()
        if mime.startswith("audio/"):
            s.had_audio = True
        elif mime.startswith("image/") or mime.startswith("video/"):
            s.had_video = True

    def _on_realtime_input(self, c: Conn, s: Session, body: dict, now: float) -> list:
        acts: list = []
        blobs: list[tuple[str, dict]] = []
        if isinstance(body.get("audio"), dict):
            blobs.append(("realtime_input.audio.data", body["audio"]))
        if isinstance(body.get("video"), dict):
            blobs.append(("realtime_input.video.data", body["video"]))
        for i, ch in enumerate(body.get("mediaChunks") or []):
            if isinstance(ch, dict):
                blobs.append((f"realtime_input.media_chunks[{i}].data", ch))
        for where, blob in blobs:
            raw = b64decode_any(blob.get("data", ""), where)
            mime = str(blob.get("mimeType") or ("audio/pcm" if "audio" in where else "image/jpeg")).lower()
            if "video" in where and not mime.startswith("audio/"):
                s.had_video = True
                continue
            self._note_media(s, mime)
            if mime.startswith("audio/"):
                rate = 16000
                m = re.search(r"rate=(\d+)", mime)
                if m:
                    rate = int(m.group(1))
                acts += self._on_audio(c, s, raw, rate, now)
        if isinstance(body.get("text"), str) and body["text"].strip():
            acts += self._user_text(c, s, body["text"], now, source="realtime_text")
        if body.get("activityStart") is not None:
            acts += self._interrupt(c, s, now)
            s.detector.in_voice = True
        if body.get("activityEnd") is not None or body.get("audioStreamEnd"):
            acts += self._detector_events(c, s, s.detector.flush(), now)
        return acts

    def _on_audio(self, c: Conn, s: Session, pcm: bytes, rate: int, now: float) -> list:
        s.last_audio_at = now
        acts = self._detector_events(c, s, s.detector.feed(pcm, rate), now)
        if (s.detector.in_voice or s.detector.candidate) and not s.flush_armed:
            s.flush_armed = True
            acts.append(Timer(("flush", s.id), now + float(self.p("vad_silence_ms")) / 1000 + 0.1))
        return acts

    def _on_flush(self, s: Session, now: float) -> list:
        s.flush_armed = False
        c = self.conns.get(s.conn) if s.conn is not None else None
        if c is None or not (s.detector.in_voice or s.detector.candidate):
            return []
        due = s.last_audio_at + float(self.p("vad_silence_ms")) / 1000 + 0.1
        if now + 1e-6 < due:
            s.flush_armed = True
            return [Timer(("flush", s.id), due)]
        return self._detector_events(c, s, s.detector.flush(), now)

    def _detector_events(self, c: Conn, s: Session, events: list[str], now: float) -> list:
        acts: list = []
        for ev in events:
            if ev == "onset":
                acts.append(Log("twin.vad", {"conn": c.id, "session": s.id, "event": "onset"}))
                acts += self._interrupt(c, s, now)
            elif ev == "end":
                line = s.model.next_script_line()
                acts.append(Log("twin.vad", {"conn": c.id, "session": s.id, "event": "end",
                                             "line": s.model.utterances - 1}))
                if s.input_transcription and line:
                    acts.append(self._send(c, {"serverContent": {"inputTranscription": {"text": line,
                                                                                        "finished": True}}}, now))
                if line:
                    acts += self._user_text(c, s, line, now, source="speech", interrupt=False)
        return acts

    def _user_text(self, c: Conn, s: Session, text: str, now: float, source: str, interrupt: bool = True) -> list:
        acts: list = []
        if interrupt:
            acts += self._interrupt(c, s, now)
        else:
            s.gen += 1
            s.turn = None
        plan = s.model.user_turn(text)
        acts.append(Log("twin.user", {"conn": c.id, "session": s.id, "source": source,
                                      "intent": M.classify(text), "plan": plan.why if plan else None}))
        if plan:
            acts += self._start_plan(s, plan, now)
        return acts

    def _interrupt(self, c: Conn, s: Session, now: float) -> list:
        """Barge-in: a turn that already reached the client is cut with interrupted (no cancellation)."""
        acts: list = []
        t = s.turn
        if t is not None and (t.emitted or t.holding):
            acts.append(self._send(c, {"serverContent": {"interrupted": True}}, now))
            acts.append(Log("twin.interrupted", {"conn": c.id, "session": s.id, "speaking": t.speaking}))
        if t is not None:
            s.gen += 1
            s.turn = None
        s.queue.clear()
        return acts

    def _on_tool_response(self, c: Conn, s: Session, body: dict, now: float) -> list:
        frs = body.get("functionResponses") or []
        if not isinstance(frs, list):
            raise BadInput("Invalid value at 'tool_response.function_responses', expected a list")
        acts: list = []
        for fr in frs:
            if not isinstance(fr, dict):
                continue
            known, status, plan = s.model.tool_response(fr)
            sched = M.response_scheduling(fr)
            acts.append(Log("twin.tool_response", {"conn": c.id, "session": s.id, "id": fr.get("id"),
                                                   "name": fr.get("name"), "known": known, "status": status,
                                                   "scheduling": sched or None}))
            if not plan:
                continue
            t = s.turn
            if t is not None and t.holding:
                s.gen += 1          # the held BLOCKING turn continues with the answer
                s.turn = None
                acts += self._start_plan(s, plan, now, emitted=True)
            elif t is None:
                acts += self._start_plan(s, plan, now)
            elif sched == "INTERRUPT":
                acts += self._interrupt(c, s, now)
                acts += self._start_plan(s, plan, now)
            else:
                s.queue.append(plan)
        return acts

    # ---- output ----------------------------------------------------------------------------
    def _start_plan(self, s: Session, plan: M.Plan, now: float, emitted: bool = False) -> list:
        s.gen += 1
        s.turn = Turn(plan, s.gen, emitted=emitted)
        if not plan.steps:
            s.turn = None
            return []
        return [Timer(("step", s.id, s.gen), now + plan.steps[0].delay)]

    def _conn_live(self, s: Session) -> Conn | None:
        c = self.conns.get(s.conn) if s.conn is not None else None
        return c if c is not None and c.phase == "live" else None

    def _on_step(self, s: Session, now: float) -> list:
        c = self._conn_live(s)
        t = s.turn
        if c is None or t is None:
            s.turn = None
            return []
        step = t.plan.steps[t.idx]
        if step.kind == "say":
            t.speaking = True
            t.emitted = True
            dur = len(step.text) * float(self.p("speech_ms_per_char")) / 1000.0
            t.chunks_left = max(1, math.ceil(dur * 1000 / float(self.p("audio_chunk_ms"))))
            acts: list = [Log("twin.say", {"conn": c.id, "session": s.id, "text": step.text})]
            if s.output_transcription:
                acts.append(self._send(c, {"serverContent": {"outputTranscription": {"text": step.text}}}, now))
            return acts + self._on_chunk(s, now)
        if step.kind == "call":
            call = s.model.new_call()
            t.emitted = True
            frame = {"toolCall": {"functionCalls": [{"id": call.id, "name": call.name,
                                                     "args": {"slot": call.slot}}]}}
            acts = [self._send(c, frame, now),
                    Log("twin.tool_call", {"conn": c.id, "session": s.id, "id": call.id, "name": call.name,
                                           "args": {"slot": call.slot}, "blocking": call.blocking})]
            return acts + self._advance(s, now)
        if step.kind == "turn_complete":
            acts = []
            if c.resumption and (c.transparent or self.p("handle_updates") == "per_turn"):
                acts += self._handle_update(c, now)   # before turnComplete, so receive() still sees it
            acts.append(self._send(c, {"serverContent": {"turnComplete": True}}, now))
            return acts + self._advance(s, now)
        return self._advance(s, now)

    def _on_chunk(self, s: Session, now: float) -> list:
        c = self._conn_live(s)
        t = s.turn
        if c is None or t is None:
            return []
        chunk_s = float(self.p("audio_chunk_ms")) / 1000.0
        pcm = M.tone(chunk_s, 24000, float(self.p("tone_hz")))
        frame = {"serverContent": {"modelTurn": {"parts": [{"inlineData": {
            "mimeType": "audio/pcm;rate=24000", "data": base64.b64encode(pcm).decode()}}]}}}
        acts: list = [self._send(c, frame, now)]
        t.chunks_left -= 1
        if t.chunks_left > 0:
            acts.append(Timer(("chunk", s.id, t.gen), now + chunk_s))
            return acts
        t.speaking = False
        acts.append(self._send(c, {"serverContent": {"generationComplete": True}}, now))
        return acts + self._advance(s, now, after=chunk_s)

    def _advance(self, s: Session, now: float, after: float = 0.0) -> list:
        t = s.turn
        if t is None:
            return []
        t.idx += 1
        if t.idx < len(t.plan.steps):
            return [Timer(("step", s.id, t.gen), now + after + t.plan.steps[t.idx].delay)]
        if t.plan.hold:
            t.holding = True
            return []
        s.turn = None
        if s.queue:
            return self._start_plan(s, s.queue.pop(0), now + after)
        return []
