"""The twin's thin asyncio shell: websockets in, lab.twin.core decides, actions out.

This room is the only one with sockets, TLS and a clock; it knows nothing of sessions, turns or
frames' meaning (it moves bytes and runs timers when the core says).

Real TCP state is the point: the server never pings (ping_interval=None unless the profile sets it)
and never enables TCP keepalive, so a connection whose client went silent stays open server-side
until a close frame, EOF/FIN or RST reaches it, or the profile's freeze timeout closes it. The
session lock lives as long as that server-side socket, and past it when the socket's TCP gave up
(TCP_USER_TIMEOUT, `tcp_user_timeout_s`, as the real server's ~2 min of retransmissions). After its
own close frame the twin waits for the peer's close without a deadline (`fin_after_close: false`):
no FIN goes out unless the peer closes, as recorded.

The server's own faults act here where they are about frames the protocol library sends itself:
pongs are held for `core.pong_delay()` seconds (slow pongs; never while stalled). A small HTTP
control channel (lab.twin.control, `control=(host, port)`) switches them at run time.

    twin = TwinServer(profile="developer-api", port=0)
    await twin.start()
    client = genai.Client(api_key="test", http_options={"base_url": twin.base_url,
        "async_client_args": {"ssl": ssl.create_default_context(cafile=twin.ca_path), "ping_interval": None}})
    ...
    await twin.stop()
"""
from __future__ import annotations

import asyncio
import collections
import errno
import itertools
import math
import os
import shutil
import signal
import socket
import ssl
import tempfile
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Opcode
from websockets.protocol import State

from lab.events import EventLog
from lab.twin import recognizer
from lab.twin.io_actions import Close, Hear, Log, Send, Timer, WakeEar
from lab.twin.control import ControlServer
from lab.twin.core import TwinCore
from lab.twin.openai_core import OpenAICore
from lab.twin.params import DEFAULT_PROFILE, GEMINI, OPENAI

# the core each protocol is served by, and its default profile (`lab twin serve --protocol`)
CORES = {GEMINI: (TwinCore, DEFAULT_PROFILE[GEMINI]), OPENAI: (OpenAICore, DEFAULT_PROFILE[OPENAI])}

DEFAULT_SANS = ("localhost", "127.0.0.1", "endpoint")


def make_certs(cert_dir: str | Path, san: list[str] | tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for localhost, 127.0.0.1, 'endpoint' and `san`.
    Returns (ca.pem, server chain pem, server key pem)."""
    import trustme

    d = Path(cert_dir)
    d.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys([*DEFAULT_SANS, *(san or ())]))
    ca = trustme.CA(organization_name="livelab twin")
    cert = ca.issue_cert(*names)
    ca_path, chain_path, key_path = d / "ca.pem", d / "twin-cert.pem", d / "twin-key.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    with open(chain_path, "wb") as fh:
        for blob in cert.cert_chain_pems:
            fh.write(blob.bytes())
    cert.private_key_pem.write_to_path(str(key_path))
    os.chmod(key_path, 0o600)
    return ca_path, chain_path, key_path


def stop_signal() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (how `lab twin serve` and its kin are stopped). Call it
    before printing the address a parent waits for: a parent may signal as soon as it reads it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):   # not the main thread, or no signals here
            pass
    return stop


class TwinServer:
    def __init__(self, profile: str | None = None, host: str = "127.0.0.1", port: int = 0, tls: bool = True,
                 cert_dir: str | Path | None = None, api_key: str | None = None, overrides: Any = None,
                 log_path: str | Path | None = None, seed: int | None = None, san: list[str] | None = None,
                 log: EventLog | None = None, t0: float | None = None,
                 control: tuple[str, int] | None = None, conversation: Any = None, keep_events: bool = True,
                 protocol: str = "gemini"):
        # keep_events=False (`lab twin serve`): its events go to the log file only, not into memory
        if protocol not in CORES:
            raise ValueError(f"unknown twin protocol {protocol!r}; known: {', '.join(CORES)}")
        core, default_profile = CORES[protocol]
        self.protocol = protocol
        self.core = core(profile or default_profile, overrides, seed=seed, api_key=api_key, conversation=conversation)
        self.profile = self.core.profile
        # read here, not in start(): a bad profile fails before anything listens
        self._ping_interval = self.profile["ping_interval"]
        self._ping_timeout = self.profile["ping_timeout"]
        self._tcp_user_timeout_s = self.profile["tcp_user_timeout_s"]
        self._close_timeout = 10.0 if self.profile["fin_after_close"] else None   # websockets' default
        self.control = ControlServer(self, *control) if control is not None else None
        self.host = host
        self._port = port
        self.tls = tls
        self._cert_dir = Path(cert_dir) if cert_dir else None
        self._own_cert_dir = cert_dir is None
        self.san = list(san or [])
        # t0: the run's clock, so the twin's marks line up with the client's events (and the pcap)
        self.log = log if log is not None else EventLog(log_path, t0=t0, keep=keep_events)
        self._own_log = log is None
        self.ca_path: str | None = None
        self._server = None
        self._ids = itertools.count(1)
        self._conns: dict[int, _ConnIO] = {}
        # every pending timer's handle (stop() cancels them), by id of its Timer: no closure per timer
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # the twin hears speech in a worker process (lab.twin.recognizer), made as the first speech begins;
        # why_deaf: why it cannot, when the profile asks it to (the twin then reads turns by position)
        self._ear = None
        wants_ear = bool(self.profile.get("hear_speech", False))
        self.why_deaf = recognizer.missing() if wants_ear else None
        if wants_ear:
            self.core.ear = self.why_deaf is None

    # ---- lifecycle --------------------------------------------------------------------------
    async def start(self) -> "TwinServer":
        self._loop = asyncio.get_running_loop()
        ctx = None
        if self.tls:
            if self._cert_dir is None:
                self._cert_dir = Path(tempfile.mkdtemp(prefix="livelab-twin-"))
            ca, chain, key = make_certs(self._cert_dir, self.san)
            self.ca_path = str(ca)
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(chain), str(key))
            if os.environ.get("SSLKEYLOGFILE"):
                ctx.keylog_filename = os.environ["SSLKEYLOGFILE"]
        pi, pt = self._ping_interval, self._ping_timeout
        self._server = await serve(
            self._handler, self.host, self._port, ssl=ctx, process_request=self._process_request,
            ping_interval=float(pi) if pi is not None else None,
            ping_timeout=float(pt) if (pi is not None and pt is not None) else None,
            compression=None, max_size=64 * 1024 * 1024, max_queue=64, server_header=None,
            close_timeout=self._close_timeout)
        if self.control is not None:
            await self.control.start()
        self.log.write("twin.start", src="twin", profile=self.profile.name, port=self.port, tls=self.tls,
                       overrides={k: p.value for k, p in self.profile.params.items() if p.overridden},
                       hears=self.hearing)
        return self

    async def stop(self) -> None:
        if self.control is not None:
            await self.control.stop()
        self._cancel_timers()
        if self._server is not None:
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except (asyncio.TimeoutError, Exception):
                pass
            self._server = None
        for io in list(self._conns.values()):
            io.ws.transport.abort() if io.ws.transport else None
        self._cancel_timers()
        if self._ear is not None:
            self._ear.close()
            self._ear = None
        if self._own_log:
            self.log.close()
        if self._own_cert_dir and self._cert_dir is not None:
            shutil.rmtree(self._cert_dir, ignore_errors=True)
            self._cert_dir = None

    def _cancel_timers(self) -> None:
        for h in list(self._timers.values()):
            h.cancel()
        self._timers.clear()

    async def __aenter__(self) -> "TwinServer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    @property
    def hearing(self) -> str:
        """How spoken turns are read: by their words, or by position (and why, when hearing was asked for)."""
        if self.core.hears:
            return "speech, by its words"
        return f"speech by position: {self.why_deaf}" if self.why_deaf else "speech by position"

    @property
    def port(self) -> int:
        if self._server is None:
            return self._port
        return self._server.sockets[0].getsockname()[1]

    @property
    def url_host(self) -> str:
        return "127.0.0.1" if self.host in ("", "0.0.0.0", "::", None) else self.host

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.url_host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return (f"{'wss' if self.tls else 'ws'}://{self.url_host}:{self.port}"
                "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent")

    def open_connections(self) -> int:
        return len(self._conns)

    # ---- websockets plumbing ----------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request):
        up = self.core.check_upgrade(request.path, request.headers)
        if up.status is not None:
            self.log.write("twin.http_refuse", src="twin", status=up.status, reason=up.reason,
                           path=request.path.split("?")[0])
            return connection.respond(up.status, up.reason + "\n")
        connection.twin_upgrade = up  # type: ignore[attr-defined]
        return None

    # ---- the control channel's operations (lab.twin.control calls these) -----------------
    def set_fault(self, name: str, on: bool) -> None:
        self._dispatch(self.core.set_fault(name, on, asyncio.get_running_loop().time()))

    def go_away(self, time_left_s: float | None = None) -> None:
        self._dispatch(self.core.go_away(asyncio.get_running_loop().time(), time_left_s))

    async def _handler(self, ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        cid = next(self._ids)
        sock = ws.transport.get_extra_info("socket") if ws.transport else None
        if sock is not None:
            _tune_socket(sock, self._tcp_user_timeout_s)
        self._hold_pongs(ws)
        io = _ConnIO(ws)
        self._conns[cid] = io
        peer = ws.remote_address
        up = getattr(ws, "twin_upgrade", None)
        self._dispatch(self.core.connection_opened(cid, loop.time(), up.route if up else "",
                                                   f"{peer[0]}:{peer[1]}" if peer else None,
                                                   up.key if up else ""))
        how = "eof"
        try:
            async for message in ws:
                self._dispatch(self.core.frame_received(cid, message, loop.time()))
            how = _how_closed(ws, None)
        except ConnectionClosed as e:
            how = _how_closed(ws, e)
        except Exception as e:  # never let one connection take the twin down
            self.log.write("twin.error", src="twin", conn=cid, error=repr(e))
            how = "error"
        finally:
            self._conns.pop(cid, None)
            self._dispatch(self.core.connection_ended(cid, how, loop.time()))
            await io.stop()

    def _dispatch(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, Send) or isinstance(a, Close):
                io = self._conns.get(a.conn)
                if io is not None:
                    io.put(a)
            elif isinstance(a, Timer):
                self._schedule(a)
            elif isinstance(a, Log):
                if self.log.recording:      # `lab twin serve` without --log: no call, no copy of its fields
                    self.log.write(a.kind, src="twin", **a.fields)
            elif isinstance(a, Hear):
                self._hear(a)
            elif isinstance(a, WakeEar) and self._ear is None:
                self._ear = recognizer.Ear()

    def _hear(self, a: Hear) -> None:
        loop = self._loop or asyncio.get_running_loop()
        if self._ear is None:
            self._ear = recognizer.Ear()

        def done(heard, match) -> None:
            if self._server is None:
                return          # the twin stopped meanwhile
            try:
                self._dispatch(self.core.speech_heard(a.sid, a.utt, heard, match, loop.time()))
            except Exception as e:  # as for a timer: recorded, and the other sessions go on
                self.log.write("twin.error", src="twin", hear=a.sid, error=repr(e))

        self._ear.hear(loop, a.script, a.asks, a.expected, a.pcm, a.rate, done)

    def _hold_pongs(self, ws: ServerConnection) -> None:
        """websockets answers pings itself: hold each pong for the core's pong_delay()."""
        proto, loop = ws.protocol, asyncio.get_running_loop()
        send_frame = proto.send_frame

        def late(frame) -> None:
            try:
                send_frame(frame)
                ws.send_data()
            except Exception:   # the connection ended meanwhile: the pong has nowhere to go
                pass

        def held_send_frame(frame) -> None:
            if frame.opcode is Opcode.PONG:
                delay = self.core.pong_delay()
                if delay > 0:
                    if not math.isinf(delay):
                        h = loop.call_later(delay, late, frame)
                        self._timers[id(h)] = h
                    return
            send_frame(frame)

        proto.send_frame = held_send_frame  # type: ignore[method-assign]

    def _schedule(self, t: Timer) -> None:
        loop = self._loop or asyncio.get_running_loop()
        self._timers[id(t)] = loop.call_at(t.at, self._fire, t)

    def _fire(self, t: Timer) -> None:
        self._timers.pop(id(t), None)
        try:
            self._dispatch(self.core.timer_fired(t.key, (self._loop or asyncio.get_running_loop()).time()))
        except Exception as e:  # a bug in one session must not stop the others, but it is recorded
            self.log.write("twin.error", src="twin", timer=type(t.key).__name__, error=repr(e))


def _tune_socket(sock: socket.socket, user_timeout_s: float | None) -> None:
    """No TCP keepalive (the real server sent none); the TCP give-up of the records."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 0)
        if user_timeout_s is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(user_timeout_s * 1000))
    except OSError:
        pass


def write_now(ws: ServerConnection, data: bytes | str) -> bool:
    """What websockets' send does when it need not wait: the frame, then the socket write; False
    (nothing written) when it would have to wait (not open, paused by flow control, a send under
    way, the transport closing). The cheapest correct write of a frame, for the twin's outbox and
    the bench's baseline alike."""
    transport = ws.transport
    if (ws.protocol.state is not State.OPEN or ws.paused or ws.send_in_progress is not None
            or transport is None or transport.is_closing()):
        return False
    if isinstance(data, str):
        ws.protocol.send_text(data.encode())
    else:
        ws.protocol.send_binary(data)
    ws.send_data()
    return True


def _how_closed(ws: ServerConnection, exc: BaseException | None) -> str:
    proto = ws.protocol
    if getattr(proto, "close_rcvd", None) is not None:
        return "close_frame"
    # why the socket was lost: websockets keeps it on the connection (connection_lost's exception)
    cause = getattr(ws, "connection_exc", None) or exc
    seen = 0
    while cause is not None and seen < 10:
        if isinstance(cause, (ConnectionResetError, BrokenPipeError)):
            return "rst"
        if isinstance(cause, TimeoutError) or getattr(cause, "errno", None) == errno.ETIMEDOUT:
            return "tcp_timeout"     # TCP_USER_TIMEOUT: the server's TCP gave up retransmitting
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return "eof"


class _ConnIO:
    """One connection's ordered outbox: each action waits for its `at`, then goes out, in order.

    A frame due now with nothing queued ahead of it is written at once, as websockets' own send
    would (the connection open, its writes not paused by flow control); anything else (a later
    `at`, a close, a paused or closing connection) goes to a writer task that lives while it has
    work, and every action after it waits its turn. An idle connection holds no task and no queue."""

    __slots__ = ("ws", "pending", "writer", "closed")

    def __init__(self, ws: ServerConnection):
        self.ws = ws
        self.pending: collections.deque | None = None
        self.writer: asyncio.Task | None = None
        self.closed = False

    def put(self, action) -> None:
        if self.closed:
            return
        if (self.writer is None and type(action) is Send and action.at <= self.ws.loop.time()
                and write_now(self.ws, action.data)):
            return
        if self.pending is None:
            self.pending = collections.deque()
        self.pending.append(action)
        if self.writer is None:
            self.writer = self.ws.loop.create_task(self._run())

    async def stop(self) -> None:
        self.closed = True
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.cancel()
            try:
                await writer
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        loop, q = self.ws.loop, self.pending
        try:
            while q and not self.closed:
                delay = q[0].at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                a = q.popleft()
                if isinstance(a, Send):
                    await self.ws.send(a.data)
                else:
                    self.closed = True
                    await self.ws.close(a.code, a.reason)
                del a   # a sent frame is not kept alive by the writer
        except ConnectionClosed:
            self.closed = True
        finally:
            if self.writer is asyncio.current_task():
                self.writer = None
