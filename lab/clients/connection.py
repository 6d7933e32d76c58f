"""One Live API connection (one google-genai SDK session), held open and read in its own task.

It opens the session, runs the receive loop, pings on its own to detect a silent loss, sends, and
closes or aborts; `flow()` is its TCP 4-tuple. What happens to it reaches its owner only through
`ConnectionEvents` (four callbacks), never by touching the owner; what it needs from the owner comes
in at construction: the SDK `connect` to call, the event log, the frame recorder and its `Timing`.

The SDK is used as a user would use it: no monkey-patching. Two public websockets options are passed
through `async_client_args` (`make_genai_client`): `ping_interval=None` (the connection pings
itself, on the raw `_ws`) and `create_connection=` a `ClientConnection` subclass that reports the
TCP/TLS 4-tuple as soon as the socket is up, so a refused resume still has its `conn.open` with
local and remote addresses.
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import ssl
import time
from dataclasses import dataclass
from typing import Any, AsyncContextManager, Callable

from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from lab.clients.base import Endpoint
from lab.clients.liveness import LOST, SUSPECT, Detector, TcpView, read_tcp
from lab.events import EventLog

SRC = "client"          # the `src` of every event a client writes


@dataclass(frozen=True)
class ConnectionEvents:
    """What a connection tells its owner. `closed` comes only for a connection whose setup completed
    (a refusal during setup is raised by `open()` instead)."""
    message: Callable[["Connection", types.LiveServerMessage], None]
    pong: Callable[["Connection", float], None]          # (conn, monotonic time the ping was sent)
    lost: Callable[["Connection", float], None]          # (conn, ms without a frame or a pong)
    closed: Callable[["Connection", int | None, str | None, str], None]   # (conn, code, reason, by)
    # (conn, True) when a Detector first suspects the connection, (conn, False) when it is heard again
    suspect: Callable[["Connection", bool], None] | None = None


@dataclass(frozen=True)
class Timing:
    ping_interval_s: float              # one WebSocket ping this often
    lost_after_s: float                 # this long without a frame or a pong: loss.detected
    send_timeout_s: float               # a send blocked this long (dead path, full buffer) is dropped
    detector: Detector | None = None    # TCP-witnessed detection (lab.clients.liveness); None: silence only
    probe_interval_s: float | None = None   # while suspected, ping this often (None: ping_interval_s)


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
        self._lab_setup_sent = False

    async def send(self, message: Any, *, text: bool | None = None) -> None:
        # the first frame a Live client sends is its setup: the server's setup delays count from its
        # arrival, not from connect_start, so the record marks when it left (lab twin calibrate)
        if not self._lab_setup_sent and self._lab_conn is not None:
            self._lab_setup_sent = True
            try:
                self._lab_conn._setup_sent()
            except Exception:
                pass
        await super().send(message, text=text)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._lab_conn is not None:
            try:
                self._lab_conn._socket_up(self, transport)
            except Exception:
                pass


def make_genai_client(ep: Endpoint, **ws_args: Any) -> genai.Client:
    # the SDK's first LiveServerMessage parse builds its validator, tens of ms: done now, so the first
    # connection's setupComplete is not recorded that much late (setup times are records the twin is
    # calibrated from, lab.live.samples; docs/calibration.md)
    types.LiveServerMessage.model_validate({"setupComplete": {}})
    http: dict[str, Any] = {"async_client_args": {"ssl": ssl_context(ep), "ping_interval": None,
                                                  "create_connection": _TapConnection, **ws_args}}
    if ep.base_url:
        http["base_url"] = ep.base_url
    if ep.api_version:
        http["api_version"] = ep.api_version
    return genai.Client(api_key=ep.api_key, http_options=http)


def _addr(a: Any) -> str | None:
    if not a:
        return None
    try:
        return f"{a[0]}:{a[1]}" if ":" not in str(a[0]) else f"[{a[0]}]:{a[1]}"
    except Exception:
        return str(a)


def _api_reason(e: genai_errors.APIError) -> str:
    return e.details if isinstance(e.details, str) else str(e.details or "")


def _close_info(e: BaseException) -> tuple[int | None, str | None, str | None]:
    if isinstance(e, genai_errors.APIError):
        return e.code, _api_reason(e), None
    if isinstance(e, ConnectionClosed):
        if e.rcvd is not None:
            return e.rcvd.code, e.rcvd.reason, None
        return 1006, str(e), None
    return None, f"{type(e).__name__}: {e}", "abnormal"


class Connection:
    """One Live API connection: opened, held and read in its own task.

    `purpose` is 'initial' | 'resume' | 'new'; `session_no` the lineage it continues; `connect()`
    returns the SDK's `client.aio.live.connect(...)` context manager for this connection.
    """

    def __init__(self, n: int, purpose: str, handle: str | None, session: int, *,
                 connect: Callable[[], AsyncContextManager[Any]], log: EventLog, events: ConnectionEvents,
                 timing: Timing, frames: Any = None):
        self.n = n
        self.purpose = purpose
        self.handle = handle
        self.session_no = session
        self._connect = connect
        self.log = log
        self._events = events
        self._timing = timing
        self._frames = frames              # lab's FrameRecorder (frame(), close_frame()), or None
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
        self._suspected: float | None = None   # monotonic time the detector began to suspect it
        self._unacked_since: float | None = None  # monotonic time TCP began to wait for an ack
        # (monotonic send time, TCP sent it at once) of the recent pings: the detector's probes
        self._pings: collections.deque[tuple[float, bool]] = collections.deque(maxlen=16)
        self._last_ping = 0.0
        self._probing = False                   # a ping waits for its answer: more follow it
        # monotonic start of the newest other connection to this endpoint that has been answered
        self._path_answered_from: float | None = None
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.closed_by: str | None = None
        self._by_us: str | None = None     # 'close' | 'abort' once the client ended it
        self._opened_logged = False
        self._setup_fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._end = asyncio.Event()        # set: leave the context manager (after a close)
        self.closed_event = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def ended_by_us(self) -> str | None:
        """'close' or 'abort' once the client itself ended this connection, else None."""
        return self._by_us

    # ---- opening ---------------------------------------------------------------------------
    def _socket_up(self, ws: ClientConnection, transport: asyncio.BaseTransport) -> None:
        self._raw_ws = ws
        self.t_socket = time.monotonic()
        self.local = transport.get_extra_info("sockname")
        self.remote = transport.get_extra_info("peername")
        self._log_open()

    def _setup_sent(self) -> None:
        self._log_open()
        self.log.write("conn.setup_sent", src=SRC, conn=self.n)

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
        try:
            async with self._connect() as s:
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
                if self._frames:
                    self._frames.frame(self.n, self.log.now_ms(),
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
            self._mark_closed(*_close_info(e))
        finally:
            self.closed = True
            self.closed_event.set()

    # ---- receiving ---------------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        try:
            while True:
                async for msg in self.session.receive():
                    self.last_rx = time.monotonic()
                    if self._frames:
                        self._frames.frame(self.n, self.log.now_ms(), msg)
                    try:
                        self._events.message(self, msg)
                    except Exception as e:   # a bug in handling must not look like a network fault
                        self.log.write("client.error", src=SRC, conn=self.n, error=f"{type(e).__name__}: {e}")
        except genai_errors.APIError as e:
            self._mark_closed(e.code, _api_reason(e), None)
        except ConnectionClosed as e:
            self._mark_closed(*_close_info(e))
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
        if self._frames and self._opened_logged:
            self._frames.close_frame(self.n, self.log.now_ms(), code, reason, by)
        if self._opened_logged:
            self.log.write("conn.closed", src=SRC, conn=self.n, code=code, reason=reason, by=by,
                           **({"how": self._by_us} if self._by_us else {}),
                           **({} if self.setup_done else {"during": "setup"}))
        if self.setup_done:
            self._events.closed(self, code, reason, by)
        self._end.set()
        self.closed_event.set()

    # ---- loss detection ----------------------------------------------------------------------
    async def _watchdog(self) -> None:
        iv = self._timing.ping_interval_s
        probe = self._timing.probe_interval_s if self._timing.detector is not None else None
        next_ping = time.monotonic() + iv
        tick = min(0.05, iv / 2, probe / 2 if probe else 0.05)
        while not self.closed:
            await asyncio.sleep(tick)
            now = time.monotonic()
            if self.closed:
                break
            # a ping waits for its answer: probes closer together, several out before TCP's own timeout
            probing = bool(probe) and self._probing and not self.lost
            if now >= (self._last_ping + probe if probing else next_ping):
                next_ping = now + iv
                await self.ping(iv)
            if not self.lost:
                self._judge(time.monotonic() - self.last_rx)

    def _judge(self, silent: float) -> None:
        """One look at the connection: loss.suspected / loss.cleared / loss.detected as they change."""
        det = self._timing.detector
        tcp: TcpView | None = None
        if det is None:
            verdict = LOST if silent >= self._timing.lost_after_s else "ok"
        else:
            tcp = read_tcp(self._socket())
            now = time.monotonic()
            if tcp is None or tcp.unacked == 0:
                self._unacked_since = None
            elif self._unacked_since is None:
                self._unacked_since = now          # sampled each tick: at most one tick late
            outstanding = None if self._unacked_since is None else now - self._unacked_since
            pings = [now - at for at, sent in self._pings if sent]
            answered = None if self._path_answered_from is None else now - self._path_answered_from
            verdict = det.judge(silent, tcp, outstanding, self._timing.ping_interval_s, pings, answered)
            self._probing = verdict in (SUSPECT, LOST) or det.wants_probes(tcp, pings)
        tcp_fields = {} if tcp is None else {"ack_silent_ms": round(tcp.ack_silent_s * 1000),
                                             "rto_ms": round(tcp.rto_s * 1000), "rtt_ms": round(tcp.rtt_s * 1000, 2),
                                             "unacked": tcp.unacked}
        if verdict == SUSPECT and self._suspected is None:
            self._suspected = time.monotonic()
            self.log.write("loss.suspected", src=SRC, conn=self.n, silent_ms=round(silent * 1000, 1), **tcp_fields)
            if self._events.suspect is not None:
                self._events.suspect(self, True)
        elif verdict == "ok" and self._suspected is not None:
            self.log.write("loss.cleared", src=SRC, conn=self.n,
                           after_ms=round((time.monotonic() - self._suspected) * 1000, 1))
            self._suspected = None
            if self._events.suspect is not None:
                self._events.suspect(self, False)
        elif verdict == LOST:
            self.lost = True
            self.log.write("loss.detected", src=SRC, conn=self.n, silent_ms=round(silent * 1000, 1), **tcp_fields)
            self._events.lost(self, silent * 1000)

    def _socket(self) -> Any:
        ws = self.ws or self._raw_ws
        transport = getattr(ws, "transport", None)
        return transport.get_extra_info("socket") if transport is not None else None

    async def ping(self, timeout: float) -> None:
        """One WebSocket ping; its pong counts as a frame heard and is reported as `events.pong`."""
        ws = self.ws
        if ws is None:
            return
        sent_at = time.monotonic()
        self._last_ping = sent_at
        tcp = read_tcp(self._socket()) if self._timing.detector is not None else None
        try:
            fut = await asyncio.wait_for(ws.ping(), timeout)
        except (ConnectionClosed, asyncio.TimeoutError, Exception):
            return
        # a ping written while TCP backs off waits behind the retransmission: not a probe of its own
        self._pings.append((sent_at, tcp is None or not tcp.backing_off))

        def pong(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            self.last_rx = max(self.last_rx, time.monotonic())
            self._events.pong(self, sent_at)
        fut.add_done_callback(pong)

    def path_answered(self, other: "Connection") -> None:
        """`other`, a connection to the same endpoint, has been answered (its session set up): the
        path carried a round trip begun at its start (the detector's witness, lab.clients.liveness)."""
        if self._path_answered_from is None or other.t_start > self._path_answered_from:
            self._path_answered_from = other.t_start

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
            await asyncio.wait_for(coro_fn(self.session), self._timing.send_timeout_s)
            return True
        except (ConnectionClosed, genai_errors.APIError, OSError, asyncio.TimeoutError):
            return False
