"""Shared plumbing for the lab's clients, on top of the real google-genai SDK.

Three layers:

* pure helpers (no sockets, unit-tested): `ToolLedger` (tool calls by id across connections, which
  results are still owed to which session), `restore_contents` (the one client-content restore of a
  fallback session), `ResumeSchedule` (when a probe tries to resume);
* `Connection`: one `client.aio.live.connect(...)` kept open in its own task, its receive loop, its
  own WebSocket pings for loss detection, `abort()` / `close()` / `flow()`;
* `SdkClient`: the part every lab client shares: start, say (text or synthetic speech), tool calls
  against the backend, results delivered on whatever connection is live (or owed until one is),
  resume attempts with their events, the transcript, `ready` and `last_answer`.

The SDK is used as a user would use it: no monkey-patching. Two public websockets options are passed
through `async_client_args`: `ping_interval=None` (the client pings itself, on the raw `_ws`) and
`create_connection=` a `ClientConnection` subclass that reports the TCP/TLS 4-tuple as soon as the
socket is up, so a refused resume still has its `conn.open` with local and remote addresses.
"""
from __future__ import annotations

import asyncio
import contextvars
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from lab.clients.base import Client, ClientContext, Endpoint
from lab.events import redact_handle

SRC = "client"

DEFAULT_SYSTEM_INSTRUCTION = (
    "You are a booking assistant on a voice line. When the user asks to book a slot, call the book_slot "
    "tool with the slot as the user said it. Say plainly whether a booking is made, still in progress, or "
    "not made: call it made only when a tool result or a system note says it is booked. "
    "Keep every answer to one or two short sentences."
)


# ================================================================================================
# Pure helpers
# ================================================================================================

@dataclass
class ToolCall:
    """One tool call as the client's own ledger keeps it, across connections and sessions."""
    id: str
    name: str
    args: dict[str, Any]
    conn: int                          # the connection it arrived on
    session: int                       # the session lineage (a resume keeps it, a fallback starts a new one)
    job: str | None = None             # the backend job that serves it
    result: dict[str, Any] | None = None   # the FunctionResponse payload, once there is one
    sent: list[tuple[int, float]] = field(default_factory=list)   # (conn, monotonic time) of each send
    confirmed: bool = False            # a pong for a ping sent after the response came back
    superseded: bool = False           # its session was replaced by a fallback: never answer it

    @property
    def owed(self) -> bool:
        """A result exists and the session has not been shown to have it."""
        return self.result is not None and not self.confirmed and not self.superseded


class ToolLedger:
    """Tool calls by call id across connections: what was asked, what is owed, what was delivered.

    A result counts as delivered on a connection only once a pong comes back for a ping sent after
    it (the server read the response before the ping). Anything else is still owed and is replayed,
    all of it, on the next connection of the same session.
    """

    def __init__(self) -> None:
        self.calls: dict[str, ToolCall] = {}

    def add(self, call: ToolCall) -> ToolCall:
        self.calls.setdefault(call.id, call)
        return self.calls[call.id]

    def get(self, call_id: str) -> ToolCall | None:
        return self.calls.get(call_id)

    def set_result(self, call_id: str, result: dict[str, Any]) -> ToolCall:
        c = self.calls[call_id]
        c.result = result
        return c

    def mark_sent(self, call_id: str, conn: int, at: float) -> None:
        self.calls[call_id].sent.append((conn, at))

    def confirm(self, conn: int, ping_sent_at: float) -> list[str]:
        """A pong arrived on `conn` for a ping sent at `ping_sent_at`: every response sent on that
        connection before then has reached the server. Returns the ids newly confirmed."""
        out = []
        for c in self.calls.values():
            if not c.confirmed and any(n == conn and t <= ping_sent_at for n, t in c.sent):
                c.confirmed = True
                out.append(c.id)
        return out

    def owed(self, session: int) -> list[ToolCall]:
        """Every result of `session` not yet shown delivered, in call order (the replay set)."""
        return [c for c in self.calls.values() if c.session == session and c.owed]

    def unanswered(self, session: int) -> list[ToolCall]:
        """Calls of `session` with no result yet (their job has not committed)."""
        return [c for c in self.calls.values() if c.session == session and c.result is None and not c.superseded]

    def supersede(self, session: int) -> list[ToolCall]:
        """The session was replaced by a fallback: its call ids must never be answered again."""
        out = [c for c in self.calls.values() if c.session == session and not c.superseded]
        for c in out:
            c.superseded = True
        return out


def merge_turns(transcript: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive turns of one role joined into one (user/model must alternate in contents)."""
    out: list[tuple[str, str]] = []
    for role, text in transcript:
        text = (text or "").strip()
        if not text:
            continue
        if out and out[-1][0] == role:
            out[-1] = (role, out[-1][1] + " " + text)
        else:
            out.append((role, text))
    return out


def restore_contents(transcript: list[tuple[str, str]], note: str | None, max_turns: int = 6) -> list[types.Content]:
    """The turns of ONE send_client_content that restores a fallback session.

    The last `max_turns` turns of the client's own transcript, then the status note (one
    "System note: ..." line per side effect, from the backend) as a part of a final user turn. No
    filler turn: when there is nothing to restore the list is empty and nothing is sent.
    """
    turns = merge_turns(transcript)[-max_turns:] if max_turns > 0 else []
    contents = [types.Content(role=role, parts=[types.Part(text=text)]) for role, text in turns]
    if note:
        if contents and contents[-1].role == "user":
            contents[-1].parts.append(types.Part(text=note))
        else:
            contents.append(types.Content(role="user", parts=[types.Part(text=note)]))
    return contents


@dataclass
class ResumeSchedule:
    """When a probe-style client tries to resume after a loss detected at t=0 (seconds).

    At detection if `at_detection`, then every `every_s` (or at the explicit offsets `offsets_s`),
    until `for_s` has passed; after the first refusal of an episode one quick retry
    `retry_after_refusal_s` later (the idle-drop 1011 is transient). Pure: the caller sleeps.
    """
    at_detection: bool = True
    every_s: float = 10.0
    for_s: float | None = None
    retry_after_refusal_s: float | None = None
    offsets_s: list[float] | None = None
    _k: int = 0
    _retry_at: float | None = None
    _retried: bool = False

    def __post_init__(self) -> None:
        self._k = 0 if self.at_detection else 1
        if self.offsets_s is not None:
            self._k = 0

    def _base(self, k: int) -> float | None:
        if self.offsets_s is not None:
            return self.offsets_s[k] if k < len(self.offsets_s) else None
        return k * self.every_s if self.every_s > 0 else (0.0 if k == 0 else None)

    def next_at(self, now: float) -> float | None:
        """The next attempt time (>= now), or None when the episode is over."""
        while True:                           # of slots already passed, keep only the latest
            nb = self._base(self._k + 1)
            if nb is None or nb > now + 1e-9:
                break
            self._k += 1
        b = self._base(self._k)
        cands = [x for x in (b, self._retry_at) if x is not None]
        if not cands:
            return None
        t = max(min(cands), now)
        if self.for_s is not None and t >= self.for_s:
            return None
        return t

    def attempted(self, at: float) -> None:
        if self._retry_at is not None and at >= self._retry_at - 1e-9:
            self._retry_at = None
        else:
            self._k += 1

    def refused(self, at: float) -> None:
        if self.retry_after_refusal_s is not None and not self._retried:
            self._retried = True
            self._retry_at = at + float(self.retry_after_refusal_s)


# ================================================================================================
# SDK plumbing
# ================================================================================================

def book_slot_declaration(blocking: bool = False) -> types.FunctionDeclaration:
    return types.FunctionDeclaration(
        name="book_slot",
        description="Book an appointment slot for the user. Takes a few seconds to commit.",
        parameters=types.Schema(type=types.Type.OBJECT, properties={
            "slot": types.Schema(type=types.Type.STRING, description="The slot as the user said it, e.g. 'tomorrow 3pm'."),
        }, required=["slot"]),
        behavior=types.Behavior.BLOCKING if blocking else types.Behavior.NON_BLOCKING,
    )


def ssl_context(ep: Endpoint) -> ssl.SSLContext:
    """Trust the twin's CA when given (the system store otherwise); write TLS secrets when asked."""
    ctx = ssl.create_default_context(cafile=ep.ca_path) if ep.ca_path else ssl.create_default_context()
    if ep.keylog_path:
        ctx.keylog_filename = ep.keylog_path
    return ctx


# The Connection whose socket is being opened in the current task; read by _TapConnection.__init__,
# which websockets calls synchronously from the connecting task (so the context is that task's).
_OPENING: contextvars.ContextVar["Connection | None"] = contextvars.ContextVar("livelab_opening", default=None)


class _TapConnection(ClientConnection):
    """websockets' ClientConnection that tells its lab Connection when TCP and TLS are up."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._lab_conn = _OPENING.get()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._lab_conn is not None:
            try:
                self._lab_conn._socket_up(self, transport)
            except Exception:
                pass


def make_genai_client(ep: Endpoint, **ws_args: Any) -> genai.Client:
    http: dict[str, Any] = {"async_client_args": {"ssl": ssl_context(ep), "ping_interval": None,
                                                  "create_connection": _TapConnection, **ws_args}}
    if ep.base_url:
        http["base_url"] = ep.base_url
    if ep.api_version:
        http["api_version"] = ep.api_version
    return genai.Client(api_key=ep.api_key, http_options=http)


def live_config(handle: str | None, *, blocking: bool = False, system_instruction: str = DEFAULT_SYSTEM_INSTRUCTION,
                voice: str | None = None) -> types.LiveConnectConfig:
    kw: dict[str, Any] = {}
    if voice:
        kw["speech_config"] = types.SpeechConfig(voice_config=types.VoiceConfig(
            prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name=voice)))
    return types.LiveConnectConfig(
        response_modalities=[types.Modality.AUDIO],
        output_audio_transcription=types.AudioTranscriptionConfig(),
        input_audio_transcription=types.AudioTranscriptionConfig(),
        session_resumption=types.SessionResumptionConfig(handle=handle),
        tools=[types.Tool(function_declarations=[book_slot_declaration(blocking)])],
        system_instruction=system_instruction,
        **kw,
    )


def _addr(a: Any) -> str | None:
    if not a:
        return None
    try:
        return f"{a[0]}:{a[1]}" if ":" not in str(a[0]) else f"[{a[0]}]:{a[1]}"
    except Exception:
        return str(a)


class Connection:
    """One Live API connection: opened, held and read in its own task.

    `purpose` is 'initial' | 'resume' | 'new'; `session` the lineage it continues. The owner gets
    `_on_message(conn, msg)`, `_on_lost(conn, silent_ms)` and `_on_closed(conn, code, reason, by)`.
    """

    def __init__(self, owner: "SdkClient", n: int, purpose: str, handle: str | None, session: int):
        self.owner = owner
        self.log = owner.ctx.log
        self.n = n
        self.purpose = purpose
        self.handle = handle
        self.session_no = session
        self.session: Any = None           # google.genai.live.AsyncSession
        self.ws: ClientConnection | None = None          # set once setupComplete arrived
        self._raw_ws: ClientConnection | None = None     # set as soon as TCP/TLS is up
        self.local: tuple | None = None
        self.remote: tuple | None = None
        self.t_start = time.monotonic()
        self.t_socket: float | None = None
        self.last_rx = time.monotonic()
        self.setup_done = False
        self.closed = False
        self.lost = False
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.closed_by: str | None = None
        self._by_us: str | None = None     # 'close' | 'abort' once the client ended it
        self._opened_logged = False
        self._setup_fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._end = asyncio.Event()        # set: leave the context manager (after a close)
        self.closed_event = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._turn_audio = False
        self._turn_text: list[str] = []
        self._in_text: list[str] = []

    # ---- opening ---------------------------------------------------------------------------
    def _socket_up(self, ws: ClientConnection, transport: asyncio.BaseTransport) -> None:
        self._raw_ws = ws
        self.t_socket = time.monotonic()
        self.local = transport.get_extra_info("sockname")
        self.remote = transport.get_extra_info("peername")
        self._log_open()

    def _log_open(self) -> None:
        if self._opened_logged:
            return
        self._opened_logged = True
        self.log.write("conn.open", src=SRC, conn=self.n, purpose=self.purpose, local=_addr(self.local),
                       remote=_addr(self.remote), session=self.session_no)

    async def open(self, timeout: float | None = None) -> "Connection":
        """Connect and wait for setupComplete; raises what the SDK raised (APIError on a refusal)."""
        self._task = asyncio.get_running_loop().create_task(self._hold(), name=f"livelab-conn-{self.n}")
        try:
            await asyncio.wait_for(asyncio.shield(self._setup_fut), timeout)
        except asyncio.TimeoutError:
            self._task.cancel()
            raise
        return self

    async def _hold(self) -> None:
        _OPENING.set(self)
        cfg = self.owner.live_config(self.handle)
        try:
            async with self.owner.genai.aio.live.connect(model=self.owner.ctx.endpoint.model, config=cfg) as s:
                self.session = s
                self.ws = s._ws
                if self.local is None:
                    self.local, self.remote = self.ws.local_address, self.ws.remote_address
                self._log_open()
                self.last_rx = time.monotonic()
                self.setup_done = True
                t0 = self.t_socket or self.t_start
                self.log.write("conn.setup_complete", src=SRC, conn=self.n,
                               setup_ms=round((time.monotonic() - t0) * 1000, 1), purpose=self.purpose)
                if self.owner.frames:
                    self.owner.frames.frame(self.n, self.log.now_ms(),
                                              {"setupComplete": (s.setup_complete.model_dump(
                                                  mode="json", by_alias=True, exclude_none=True)
                                                  if s.setup_complete else {})})
                if not self._setup_fut.done():
                    self._setup_fut.set_result(True)
                watch = asyncio.get_running_loop().create_task(self._watchdog())
                try:
                    await self._receive_loop()
                finally:
                    watch.cancel()
                    # stay inside the context until the client is done with the socket
                    if not self.closed:
                        await self._end.wait()
        except asyncio.CancelledError:
            if not self._setup_fut.done():
                self._setup_fut.cancel()
            raise
        except BaseException as e:  # refusal during setup, handshake failure, or a late error
            if not self._setup_fut.done():
                self._setup_fut.set_exception(e)
                self._setup_fut.exception()      # mark retrieved
            self._mark_closed(*_close_info(e, self.ws))
        finally:
            self.closed = True
            self.closed_event.set()

    # ---- receiving ---------------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        try:
            while True:
                async for msg in self.session.receive():
                    self.last_rx = time.monotonic()
                    if self.owner.frames:
                        self.owner.frames.frame(self.n, self.log.now_ms(), msg)
                    try:
                        self.owner._on_message(self, msg)
                    except Exception as e:   # a bug in handling must not look like a network fault
                        self.log.write("client.error", src=SRC, conn=self.n, error=f"{type(e).__name__}: {e}")
        except genai_errors.APIError as e:
            self._mark_closed(e.code, e.details if isinstance(e.details, str) else str(e.details or ""), None)
        except ConnectionClosed as e:
            self._mark_closed(*_close_info(e, self.ws))
        except Exception as e:
            self._mark_closed(None, f"{type(e).__name__}: {e}", "abnormal")

    def _mark_closed(self, code: int | None, reason: str | None, by: str | None) -> None:
        if self.closed_by is not None:
            return
        ws = self.ws or self._raw_ws
        proto = getattr(ws, "protocol", None)
        sent = getattr(proto, "close_sent", None)
        rcvd = getattr(proto, "close_rcvd", None)
        if by is None:
            if self._by_us == "abort":
                by = "client"
            elif sent is not None and (rcvd is None or getattr(proto, "close_rcvd_then_sent", None) is False):
                by = "client"
            elif rcvd is not None:
                by = "server"
            elif self._by_us:
                by = "client"
            else:
                by = "abnormal"
        self.close_code, self.close_reason, self.closed_by = code, reason, by
        self.closed = True
        if self.owner.frames and self._opened_logged:
            self.owner.frames.close_frame(self.n, self.log.now_ms(), code, reason, by)
        if self._opened_logged:
            self.log.write("conn.closed", src=SRC, conn=self.n, code=code, reason=reason, by=by,
                           **({"how": self._by_us} if self._by_us else {}),
                           **({} if self.setup_done else {"during": "setup"}))
        if self.setup_done:
            self.owner._on_closed(self, code, reason, by)
        self._end.set()
        self.closed_event.set()

    # ---- loss detection ----------------------------------------------------------------------
    async def _watchdog(self) -> None:
        p = self.owner.p
        iv, lost_after = float(p["ping_interval_s"]), float(p["lost_after_s"])
        next_ping = time.monotonic() + iv
        tick = min(0.05, iv / 2)
        while not self.closed:
            await asyncio.sleep(tick)
            now = time.monotonic()
            if self.closed:
                break
            if now >= next_ping:
                next_ping = now + iv
                await self._ping(iv)
            silent = time.monotonic() - self.last_rx
            if not self.lost and silent >= lost_after:
                self.lost = True
                self.log.write("loss.detected", src=SRC, conn=self.n, silent_ms=round(silent * 1000, 1))
                self.owner._on_lost(self, silent * 1000)

    async def _ping(self, timeout: float) -> None:
        ws = self.ws
        if ws is None:
            return
        sent_at = time.monotonic()
        try:
            fut = await asyncio.wait_for(ws.ping(), timeout)
        except (ConnectionClosed, asyncio.TimeoutError, Exception):
            return

        def pong(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            self.last_rx = max(self.last_rx, time.monotonic())
            self.owner._on_pong(self, sent_at)
        fut.add_done_callback(pong)

    def revive(self) -> None:
        """The client decided to use this connection again (reuse after a freeze): re-arm detection."""
        self.lost = False
        self.last_rx = time.monotonic()

    # ---- the client's own actions ------------------------------------------------------------
    @property
    def usable(self) -> bool:
        return self.setup_done and not self.closed and not self.lost

    def flow(self) -> tuple[str, int, str, int] | None:
        if not self.local or not self.remote:
            return None
        return (str(self.local[0]), int(self.local[1]), str(self.remote[0]), int(self.remote[1]))

    def abort(self) -> None:
        """Transport abort: no close frame; the server sees an RST (or EOF)."""
        self._by_us = self._by_us or "abort"
        ws = self.ws or self._raw_ws
        if ws is not None and ws.transport is not None:
            ws.transport.abort()
        elif self._task is not None:
            self._task.cancel()

    async def close(self, wait_s: float = 1.0) -> bool:
        """Clean close (1000), waiting at most `wait_s` for the server's echo. True if it completed."""
        self._by_us = self._by_us or "close"
        ws = self.ws
        if ws is None or self.closed:
            self._end.set()
            return self.closed
        t = asyncio.get_running_loop().create_task(ws.close(1000))
        done, _ = await asyncio.wait({t}, timeout=wait_s)
        self._end.set()
        return bool(done) and getattr(ws.protocol, "close_rcvd", None) is not None

    async def cancel(self) -> None:
        self._end.set()
        if not self.closed and (self.ws or self._raw_ws) is not None:
            self.abort()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass

    # ---- sending (False when the socket is gone) ---------------------------------------------
    async def send(self, coro_fn: Callable[[Any], Any]) -> bool:
        """Run one SDK send on this session. False when the socket is gone, or when the send is
        still blocked after `send_timeout_s` (a full write buffer on a dead path)."""
        if self.session is None or self.closed:
            return False
        try:
            await asyncio.wait_for(coro_fn(self.session), float(self.owner.p["send_timeout_s"]))
            return True
        except (ConnectionClosed, genai_errors.APIError, OSError, asyncio.TimeoutError):
            return False


def _close_info(e: BaseException, ws: ClientConnection | None) -> tuple[int | None, str | None, str | None]:
    if isinstance(e, genai_errors.APIError):
        return e.code, e.details if isinstance(e.details, str) else str(e.details or ""), None
    if isinstance(e, ConnectionClosed):
        if e.rcvd is not None:
            return e.rcvd.code, e.rcvd.reason, None
        return 1006, str(e), None
    return None, f"{type(e).__name__}: {e}", "abnormal"


# ================================================================================================
# The shared client
# ================================================================================================

class SdkClient(Client):
    """What probe, naive and recovery share. Subclasses decide what happens after a loss."""

    name = "sdk"
    DEFAULTS: dict[str, Any] = {
        "ping_interval_s": 0.5,
        "lost_after_s": 2.0,
        "blocking": False,                  # book_slot behavior BLOCKING instead of NON_BLOCKING
        "system_instruction": DEFAULT_SYSTEM_INSTRUCTION,
        "voice": None,
        "scheduling": None,                 # FunctionResponse scheduling (None: server default)
        "attempt_timeout_s": 10.0,          # a connect that neither completes nor is refused
        "close_wait_s": 2.0,                # how long close() waits for the echo
        "send_timeout_s": 2.0,              # a send blocked this long (dead path, full buffer) is dropped
        "answer_pending_after_resume": True,
        "hold_input_while_recovering": False,
        "hold_input_max_s": 10.0,
        "speech_tail_ms": 700,
        "open_timeout": 10.0,               # websockets opening handshake
    }

    def __init__(self, ctx: ClientContext):
        super().__init__(ctx)
        self.p: dict[str, Any] = {**self.DEFAULTS, **(ctx.params or {})}
        self.log = ctx.log
        self.backend = ctx.backend
        self.genai = make_genai_client(ctx.endpoint, open_timeout=float(self.p["open_timeout"]),
                                       close_timeout=float(self.p["close_wait_s"]))
        self.ledger = ToolLedger()
        # every server frame, secrets removed, next to the events: a live run can be replayed offline
        self.frames = None
        if getattr(ctx.log, "path", None) is not None and self.p.get("record_frames", True):
            from lab.record.frames import FrameRecorder
            self.frames = FrameRecorder(ctx.log.path.parent / "frames.jsonl")
        self.transcript: list[tuple[str, str]] = []     # (role, text), the client's own
        self.conns: list[Connection] = []
        self.current: Connection | None = None
        self.session_no = 1
        self.handles: dict[int, str] = {}               # session lineage -> latest handle
        self.ready = asyncio.Event()
        self.last_answer: str | None = None
        self.answers: list[str] = []
        self.recovering = False
        self._attempt_n = 0
        self._attempt_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        from lab.speech import PlaybackModel
        self.playback = PlaybackModel()
        self._turn_audio: list[tuple[float, int]] = []

    # ---- small utilities -----------------------------------------------------------------------
    def spawn(self, coro: Any, name: str | None = None) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(t)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None and not self._stopping:
                e = t.exception()
                self.log.write("client.error", src=SRC, error=f"{type(e).__name__}: {e}", task=t.get_name())
        t.add_done_callback(done)
        return t

    def live_config(self, handle: str | None) -> types.LiveConnectConfig:
        return live_config(handle, blocking=bool(self.p["blocking"]),
                           system_instruction=self.p["system_instruction"], voice=self.p["voice"])

    @property
    def handle(self) -> str | None:
        """The latest handle of the current session lineage."""
        return self.handles.get(self.session_no)

    def new_conn(self, purpose: str, handle: str | None, session: int) -> Connection:
        c = Connection(self, len(self.conns) + 1, purpose, handle, session)
        self.conns.append(c)
        return c

    # ---- Client interface --------------------------------------------------------------------
    async def start(self) -> None:
        self.log.write("client.params", src=SRC, client=self.name,
                       params={k: v for k, v in self.p.items() if k != "system_instruction"})
        c = self.new_conn("initial", None, self.session_no)
        await c.open(timeout=float(self.p["attempt_timeout_s"]))
        self._adopt(c)

    async def say(self, text: str, line: int) -> None:
        if self.p["hold_input_while_recovering"] and not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), float(self.p["hold_input_max_s"]))
            except asyncio.TimeoutError:
                pass
        await self._before_say()
        c = self.current
        mode = "speech" if self.ctx.speech else "text"
        self.log.write("user.say", src=SRC, conn=c.n if c else None, text=text, line=line, mode=mode)
        self.transcript.append(("user", text))
        if c is None:
            return
        if not self.ctx.speech:
            ok = await c.send(lambda s: s.send_realtime_input(text=text))
            if not ok:
                self.log.write("user.say.failed", src=SRC, conn=c.n, line=line)
            return
        from lab import speech
        pcm = speech.synth(text) + speech.silence(int(self.p["speech_tail_ms"]))
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        failed: set[int] = set()
        for i, chunk in enumerate(speech.chunks(pcm, 100)):
            delay = t0 + i * 0.1 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            cur = self.current or c      # a chunk goes to whatever connection is current now
            if cur.n in failed:
                continue                 # that socket is gone or blocked: the rest of the line is lost
            blob = types.Blob(data=chunk, mime_type="audio/pcm;rate=16000")
            if not await cur.send(lambda s: s.send_realtime_input(audio=blob)):
                failed.add(cur.n)
                self.log.write("user.say.failed", src=SRC, conn=cur.n, line=line, at_ms=i * 100)

    async def _before_say(self) -> None:
        """Hook: something to send before the user's next line (recovery's status updates)."""

    async def action(self, what: str, **kw: Any) -> None:
        c = self.current
        if what == "abort":
            if c is not None:
                c.abort()
        elif what == "close":
            target = c if c is not None and not c.closed else self._last_open_lost()
            if target is not None:
                await target.close(float(self.p["close_wait_s"]))
        elif what == "resume":
            await self.scripted_resume()
        elif what == "reuse_old":
            target = c if c is not None and not c.closed else self._last_open_lost()
            if target is not None:
                target.revive()
                self.current = target
                await target._ping(float(self.p["ping_interval_s"]))
        else:
            from lab.errors import LabError
            raise LabError(f"client {self.name!r} has no action {what!r} (known: abort, close, resume, reuse_old)")

    def _last_open_lost(self) -> Connection | None:
        for c in reversed(self.conns):
            if c.setup_done and not c.closed:
                return c
        return None

    def flow(self) -> tuple[str, int, str, int] | None:
        return self.current.flow() if self.current is not None else None

    async def stop(self) -> None:
        self._stopping = True
        try:
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            opened = [c for c in self.conns if c.setup_done and not c.closed]
            await asyncio.gather(*(c.close(1.0) for c in opened), return_exceptions=True)
            await asyncio.gather(*(c.cancel() for c in self.conns), return_exceptions=True)
        except BaseException:
            pass

    # ---- connection events -------------------------------------------------------------------
    def _adopt(self, c: Connection, ready: bool = True) -> None:
        """`c` is now the connection the client speaks on."""
        self.current = c
        self.session_no = c.session_no
        if ready:
            self.recovering = False
            self.ready.set()

    def _on_pong(self, c: Connection, ping_sent_at: float) -> None:
        self.ledger.confirm(c.n, ping_sent_at)

    def _on_lost(self, c: Connection, silent_ms: float) -> None:
        if c is self.current and not self._stopping:
            self.ready.clear()
            self.on_loss(c, "detected")

    def _on_closed(self, c: Connection, code: int | None, reason: str | None, by: str) -> None:
        if c is self.current and not c.lost and not self._stopping:
            c.lost = True
            self.ready.clear()
            self.on_loss(c, f"closed:{by}")

    def on_loss(self, c: Connection, cause: str) -> None:
        """Subclasses: the current connection is gone (detected silent, or closed)."""

    def _on_message(self, c: Connection, msg: types.LiveServerMessage) -> None:
        u = msg.session_resumption_update
        if u is not None:
            h = u.new_handle if (u.resumable and u.new_handle) else None
            if h:
                self.handles[c.session_no] = h
            self.log.write("handle.update", src=SRC, conn=c.n, resumable=bool(u.resumable), **redact_handle(u.new_handle))
        if msg.go_away is not None:
            self.log.write("conn.go_away", src=SRC, conn=c.n, time_left=msg.go_away.time_left)
        if msg.tool_call is not None:
            for fc in msg.tool_call.function_calls or []:
                self._on_tool_call(c, fc)
        if msg.tool_call_cancellation is not None:
            self.log.write("tool.cancellation", src=SRC, conn=c.n, ids=list(msg.tool_call_cancellation.ids or []))
        sc = msg.server_content
        if sc is None:
            return
        if sc.model_turn is not None:
            for part in sc.model_turn.parts or []:
                data = part.inline_data.data if part.inline_data is not None else None
                if data:
                    now = self.log.now_ms()
                    first = not c._turn_audio
                    if first:
                        c._turn_audio = True
                        self.playback.begin_turn()
                    self.playback.add(now, len(data))
                    self.log.write("model.audio", src=SRC, conn=c.n, bytes=len(data), **({"first": True} if first else {}))
        if sc.output_transcription is not None and sc.output_transcription.text:
            c._turn_text.append(sc.output_transcription.text)
        if sc.input_transcription is not None and sc.input_transcription.text:
            c._in_text.append(sc.input_transcription.text)
        if sc.interrupted:
            self._turn_interrupted(c)
        if sc.turn_complete:
            self._turn_done(c)

    def _turn_interrupted(self, c: Connection) -> None:
        """The user barged in: the turn so far is cut (its text is a partial, not an answer)."""
        self.playback.interrupt(self.log.now_ms())
        text = "".join(c._turn_text).strip()
        heard = self.playback.end_turn() if c._turn_audio else None
        c._turn_text, c._turn_audio = [], False
        self.log.write("model.interrupted", src=SRC, conn=c.n, text=text)
        if text:
            self.transcript.append(("model", text))
        if heard is not None:
            self.log.write("user.heard", src=SRC, conn=c.n, text=text, start_ms=round(heard.start_ms, 1),
                           end_ms=round(heard.end_ms, 1), interrupted=True)

    def _turn_done(self, c: Connection) -> None:
        text = "".join(c._turn_text).strip()
        heard = self.playback.end_turn() if c._turn_audio else None
        if c._in_text:
            self.log.write("user.transcript", src=SRC, conn=c.n, text="".join(c._in_text).strip())
        c._turn_text, c._in_text, c._turn_audio = [], [], False
        if text:
            self.log.write("model.text", src=SRC, conn=c.n, text=text)
            self.transcript.append(("model", text))
            self.last_answer = text
            self.answers.append(text)
        if heard is not None:
            self.log.write("user.heard", src=SRC, conn=c.n, text=text, start_ms=round(heard.start_ms, 1),
                           end_ms=round(heard.end_ms, 1))
        self.log.write("model.turn_complete", src=SRC, conn=c.n)

    # ---- tools -------------------------------------------------------------------------------
    def _on_tool_call(self, c: Connection, fc: types.FunctionCall) -> None:
        args = dict(fc.args or {})
        call = self.ledger.add(ToolCall(id=fc.id or f"noid-{len(self.ledger.calls) + 1}", name=fc.name or "?",
                                        args=args, conn=c.n, session=c.session_no))
        self.log.write("tool.call", src=SRC, conn=c.n, id=call.id, name=call.name, args=args)
        self.spawn(self._run_tool(call), name=f"tool-{call.id}")

    async def _run_tool(self, call: ToolCall) -> None:
        if call.name != "book_slot" or self.backend is None:
            await self._deliver(call, {"status": "error", "error": f"unknown tool {call.name}"})
            return
        job = await self.backend.request(call.args.get("slot"), call.id, name=call.name)
        call.job = job.id
        await job.wait()
        await self._deliver(call, job.result())

    async def _deliver(self, call: ToolCall, result: dict[str, Any]) -> None:
        """A result exists: send it now if its session is live here, otherwise it stays owed."""
        self.ledger.set_result(call.id, result)
        c = self.current
        if call.superseded:
            self.on_superseded_result(call)
            return
        if c is not None and c.usable and c.session_no == call.session and self.may_answer(call, c):
            await self.send_results(c, [call])

    def may_answer(self, call: ToolCall, c: Connection) -> bool:
        """Whether `call` may be answered on `c` (the probe can withhold calls from before a drop)."""
        return bool(self.p["answer_pending_after_resume"]) or call.conn == c.n

    def on_superseded_result(self, call: ToolCall) -> None:
        """Subclasses: a job of a replaced session committed (its id is never answered)."""

    async def send_results(self, c: Connection, calls: list[ToolCall]) -> bool:
        """ALL the given results in one toolResponse on `c`, each logged as tool.response."""
        if not calls:
            return True
        sched = self.p.get("scheduling")
        frs = [types.FunctionResponse(id=x.id, name=x.name, response=x.result,
                                      **({"scheduling": types.FunctionResponseScheduling(sched)} if sched else {}))
               for x in calls]
        ok = await c.send(lambda s: s.send_tool_response(function_responses=frs))
        now = time.monotonic()
        for x in calls:
            if ok:
                self.ledger.mark_sent(x.id, c.n, now)
            self.log.write("tool.response", src=SRC, conn=c.n, id=x.id, name=x.name,
                           status=(x.result or {}).get("status"), job=(x.result or {}).get("job"), sent=ok,
                           **({"replay": True} if x.conn != c.n else {}))
        return ok

    async def replay_owed(self, c: Connection) -> None:
        """After a resume: every result of this session not shown delivered, all in one message."""
        owed = self.ledger.owed(c.session_no)
        if not self.p["answer_pending_after_resume"]:
            withheld = [x for x in owed if x.conn != c.n]
            for x in withheld:
                self.log.write("tool.withheld", src=SRC, conn=c.n, id=x.id, name=x.name)
            owed = [x for x in owed if x.conn == c.n]
        await self.send_results(c, owed)

    # ---- resuming ----------------------------------------------------------------------------
    async def attempt_resume(self, why: str = "policy", timeout: float | None = None) -> Connection | None:
        """One resume attempt with the current lineage's handle; events resume.attempt/result."""
        if self.handle is None:
            self.log.write("resume.skip", src=SRC, reason="no handle", why=why)
            return None
        async with self._attempt_lock:
            self._attempt_n += 1
            n = self._attempt_n
            c = self.new_conn("resume", self.handle, self.session_no)
            self.log.write("resume.attempt", src=SRC, attempt=n, conn=c.n, why=why)
            t0 = time.monotonic()
            try:
                await c.open(timeout=float(self.p["attempt_timeout_s"]) if timeout is None else max(0.05, timeout))
            except genai_errors.APIError as e:
                self.log.write("resume.result", src=SRC, attempt=n, conn=c.n, ok=False, code=e.code,
                               reason=e.details if isinstance(e.details, str) else str(e.details),
                               latency_ms=round((time.monotonic() - t0) * 1000, 1))
                return None
            except BaseException as e:
                if isinstance(e, asyncio.CancelledError):
                    await c.cancel()
                    raise
                code = 1006 if isinstance(e, ConnectionClosed) else None
                self.log.write("resume.result", src=SRC, attempt=n, conn=c.n, ok=False, code=code,
                               reason=f"{type(e).__name__}: {e}"[:200],
                               latency_ms=round((time.monotonic() - t0) * 1000, 1))
                await c.cancel()
                return None
            self.log.write("resume.result", src=SRC, attempt=n, conn=c.n, ok=True, code=None, reason=None,
                           latency_ms=round((time.monotonic() - t0) * 1000, 1))
            return c

    async def accept_resume(self, c: Connection) -> None:
        """A resumed connection becomes current; owed results go out on it."""
        self._adopt(c)
        await self.replay_owed(c)

    async def scripted_resume(self) -> Connection | None:
        """action('resume'): one attempt now (a subclass may add a retry)."""
        before = self.current
        if self._attempt_lock.locked():           # let the attempt in flight finish first
            while self._attempt_lock.locked():
                await asyncio.sleep(0.01)
            if self.current is not before:
                self.log.write("resume.skip", src=SRC, reason="resumed by the attempt in flight", why="action")
                return None
        c = await self.attempt_resume("action")
        if c is not None:
            await self.accept_resume(c)
        return c
