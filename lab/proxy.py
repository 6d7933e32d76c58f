"""The freezable HTTP CONNECT proxy: an application-level freeze (round 2 of the seed).

A client that sets `HTTPS_PROXY=http://HOST:PORT` (websockets >= 15 and so the google-genai SDK honour
it) opens its connection to the endpoint through a CONNECT tunnel here. While the proxy is *frozen*,
no byte is forwarded in either direction: the proxy keeps reading (so its kernel keeps ACKing and
answering TCP probes, exactly the seed's caveat) and holds the bytes. `unfreeze` delivers the held
bytes in order, including a FIN that arrived while frozen; `close` ends tunnels cleanly (FIN both ways).

A small HTTP control API on a second port drives it:
    POST /freeze[?tunnel=N]    POST /unfreeze[?tunnel=N]    POST /close[?tunnel=N]    GET /state
`--freeze-first N` makes only the first N tunnels subject to a global freeze ("freeze only tunnel 1":
the resume attempts that follow go through unfrozen tunnels).
`--idle-timeout S` makes it a corporate proxy with an idle timeout: a tunnel that has
carried no byte in either direction for S seconds is closed (FIN both ways, reason "idle timeout").
`--resolve NAME=ADDR` (repeatable, as curl's `--resolve`) makes the proxy dial ADDR for a CONNECT to
NAME: a proxy resolves the names its clients ask for, and the lab's names the API by its real
hostnames, which must reach the endpoint the scenario stands up rather than the one DNS knows.

The protocol logic (CONNECT parsing, the per-tunnel pipes and the freeze state machine, control
routing) is pure and has no I/O; `FreezeProxy` is the thin asyncio shell around it. This module
knows nothing of the twin.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from lab.errors import LabError, run_command

MAX_HEAD = 16 * 1024            # a CONNECT request head larger than this is refused (431)
DEFAULT_HOLD_LIMIT = 64 << 20   # per direction: past this, a frozen tunnel stops reading (backpressure)
READ_SIZE = 64 * 1024

UP, DOWN = "up", "down"          # up: client -> target, down: target -> client


# ----------------------------------------------------------------------------------------------------
# pure protocol logic


class ProxyProtocolError(Exception):
    """A request the proxy refuses; `status` and `reason` become the HTTP answer."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class ConnectRequest:
    host: str
    port: int
    version: str
    headers: dict[str, str]

    @property
    def target(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_hostport(text: str, default_host: str | None = None) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or (with a default host) `:port` / `port` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1:].startswith(":"):
            raise ValueError(f"bad address {text!r}: expected [v6]:port")
        host, port_s = text[1:end], text[end + 2:]
    elif ":" in text:
        host, _, port_s = text.rpartition(":")
        if ":" in host:
            raise ValueError(f"bad address {text!r}: write IPv6 as [addr]:port")
    elif default_host is not None:
        host, port_s = "", text
    else:
        raise ValueError(f"bad address {text!r}: expected host:port")
    if not host:
        if default_host is None:
            raise ValueError(f"bad address {text!r}: no host")
        host = default_host
    if not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ValueError(f"bad address {text!r}: port must be 1-65535")
    return host, int(port_s)


def head_end(buf: bytes | bytearray) -> int:
    """Index just past the blank line ending an HTTP head, or -1 if it is not complete yet."""
    i = buf.find(b"\r\n\r\n")
    return -1 if i < 0 else i + 4


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    try:
        text = head.decode("latin-1")
    except Exception:  # pragma: no cover - latin-1 decodes anything
        raise ProxyProtocolError(400, "Bad Request")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not all(parts):
        raise ProxyProtocolError(400, "Bad Request")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ProxyProtocolError(505, "HTTP Version Not Supported")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ProxyProtocolError(400, "Bad Request")
        headers[name.lower()] = value.strip()
    return method, target, version, headers


def parse_connect(head: bytes) -> ConnectRequest:
    """Parse a CONNECT request head (request line + headers, up to the blank line)."""
    if len(head) > MAX_HEAD:
        raise ProxyProtocolError(431, "Request Header Fields Too Large")
    method, target, version, headers = _parse_head(head.split(b"\r\n\r\n", 1)[0])
    if method != "CONNECT":
        raise ProxyProtocolError(405, "Method Not Allowed")
    try:
        host, port = parse_hostport(target)
    except ValueError:
        raise ProxyProtocolError(400, "Bad Request")
    return ConnectRequest(host=host, port=port, version=version, headers=headers)


def http_response(status: int, reason: str, body: bytes = b"", content_type: str | None = None,
                  close: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    if body or status not in (200,) or content_type:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


CONNECT_OK = b"HTTP/1.1 200 Connection Established\r\n\r\n"


@dataclass
class Pipe:
    """One direction of a tunnel: forwards, or holds while frozen. No I/O."""

    direction: str
    hold_limit: int = DEFAULT_HOLD_LIMIT
    frozen: bool = False
    held: bytearray = field(default_factory=bytearray)
    forwarded: int = 0            # bytes passed on (immediately or on thaw)
    received: int = 0             # bytes read from the source
    eof: bool = False             # the source sent FIN
    eof_sent: bool = False        # the FIN was passed on

    def feed(self, data: bytes) -> bytes:
        """Bytes read from the source -> the bytes to write to the destination now."""
        self.received += len(data)
        if self.frozen:
            self.held += data
            return b""
        self.forwarded += len(data)
        return data

    def feed_eof(self) -> bool:
        """The source sent FIN; True if it is to be passed on now."""
        self.eof = True
        if self.frozen:
            return False
        self.eof_sent = True
        return True

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> tuple[bytes, bool]:
        """Unfreeze: (held bytes to deliver now, whether a held FIN follows them)."""
        out = bytes(self.held)
        self.held.clear()
        self.frozen = False
        self.forwarded += len(out)
        send_eof = self.eof and not self.eof_sent
        if send_eof:
            self.eof_sent = True
        return out, send_eof

    @property
    def full(self) -> bool:
        return self.frozen and len(self.held) >= self.hold_limit

    def as_dict(self) -> dict:
        return {"received": self.received, "forwarded": self.forwarded, "held": len(self.held),
                "eof": self.eof, "frozen": self.frozen}


@dataclass
class Tunnel:
    id: int
    client: str
    target: str
    subject: bool                 # takes part in a global freeze (see ProxyCore.freeze_first)
    opened_at: float
    up: Pipe
    down: Pipe
    state: str = "open"           # open | closed
    closed_at: float | None = None
    close_reason: str | None = None

    @property
    def frozen(self) -> bool:
        return self.up.frozen or self.down.frozen

    @property
    def held(self) -> int:
        return len(self.up.held) + len(self.down.held)

    def pipe(self, direction: str) -> Pipe:
        return self.up if direction == UP else self.down

    def as_dict(self) -> dict:
        return {"id": self.id, "client": self.client, "target": self.target, "state": self.state,
                "frozen": self.frozen, "subject": self.subject, "held": self.held,
                "opened_at": round(self.opened_at, 6),
                "closed_at": None if self.closed_at is None else round(self.closed_at, 6),
                "close_reason": self.close_reason, "up": self.up.as_dict(), "down": self.down.as_dict()}


@dataclass(frozen=True)
class Release:
    """Held bytes to deliver on unfreeze: write `data` in `direction` of `tunnel`, then FIN if `eof`."""

    tunnel: int
    direction: str
    data: bytes
    eof: bool


class ProxyCore:
    """The freeze state machine over all tunnels; no I/O, fully unit-testable.

    A global freeze applies to every open tunnel that is `subject` and to subject tunnels opened
    while frozen; with `freeze_first=N` (N > 0) only tunnels 1..N are subject. A freeze aimed at one
    tunnel (`tunnel=N`) applies to that tunnel whatever the policy.
    """

    def __init__(self, freeze_first: int = 0, hold_limit: int = DEFAULT_HOLD_LIMIT,
                 clock=time.time):
        if freeze_first < 0:
            raise ValueError("freeze_first must be >= 0")
        self.freeze_first = freeze_first
        self.hold_limit = hold_limit
        self.frozen = False
        self.tunnels: dict[int, Tunnel] = {}
        self._next = 1
        self._clock = clock

    def is_subject(self, tunnel_id: int) -> bool:
        return self.freeze_first == 0 or tunnel_id <= self.freeze_first

    def open_tunnel(self, client: str, target: str) -> Tunnel:
        tid = self._next
        self._next += 1
        t = Tunnel(id=tid, client=client, target=target, subject=self.is_subject(tid),
                   opened_at=self._clock(), up=Pipe(UP, self.hold_limit), down=Pipe(DOWN, self.hold_limit))
        if self.frozen and t.subject:
            t.up.freeze()
            t.down.freeze()
        self.tunnels[tid] = t
        return t

    def _select(self, tunnel: int | None) -> list[Tunnel]:
        if tunnel is None:
            return [t for t in self.tunnels.values() if t.state == "open"]
        t = self.tunnels.get(tunnel)
        if t is None:
            raise KeyError(tunnel)
        return [t] if t.state == "open" else []

    def freeze(self, tunnel: int | None = None) -> list[int]:
        """Freeze all subject tunnels (and later ones), or one tunnel; the ids now frozen."""
        if tunnel is None:
            self.frozen = True
            chosen = [t for t in self._select(None) if t.subject]
        else:
            chosen = self._select(tunnel)
        for t in chosen:
            t.up.freeze()
            t.down.freeze()
        return [t.id for t in chosen]

    def unfreeze(self, tunnel: int | None = None) -> list[Release]:
        """Thaw all tunnels (and end the global freeze), or one; the held bytes to deliver, in order."""
        if tunnel is None:
            self.frozen = False
        out: list[Release] = []
        for t in self._select(tunnel):
            for p in (t.up, t.down):
                if p.frozen:
                    data, eof = p.thaw()
                    out.append(Release(t.id, p.direction, data, eof))
        return out

    def closed(self, tunnel: int, reason: str) -> None:
        t = self.tunnels.get(tunnel)
        if t is not None and t.state != "closed":
            t.state = "closed"
            t.closed_at = self._clock()
            t.close_reason = reason

    def state(self) -> dict:
        open_ = [t for t in self.tunnels.values() if t.state == "open"]
        return {"frozen": self.frozen, "freeze_first": self.freeze_first,
                "open": len(open_), "bytes_held": sum(t.held for t in open_),
                "tunnels": [t.as_dict() for t in self.tunnels.values()]}


@dataclass(frozen=True)
class ControlRequest:
    method: str
    path: str
    tunnel: int | None


def parse_control(head: bytes) -> ControlRequest:
    """Parse a control API request head: `POST /freeze?tunnel=1 HTTP/1.1` ..."""
    method, target, _version, _headers = _parse_head(head.split(b"\r\n\r\n", 1)[0])
    url = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(url.query)
    tunnel = None
    if "tunnel" in query:
        value = query["tunnel"][-1]
        if not value.isdigit() or int(value) < 1:
            raise ProxyProtocolError(400, "Bad Request")
        tunnel = int(value)
    return ControlRequest(method=method, path=url.path.rstrip("/") or "/", tunnel=tunnel)


CONTROL_ROUTES = {"/freeze": "POST", "/unfreeze": "POST", "/close": "POST", "/state": "GET"}


def route_control(req: ControlRequest) -> str:
    """The action name for a control request, or ProxyProtocolError (404/405)."""
    want = CONTROL_ROUTES.get(req.path)
    if want is None:
        raise ProxyProtocolError(404, "Not Found")
    if req.method != want:
        raise ProxyProtocolError(405, "Method Not Allowed")
    return req.path[1:]


# ----------------------------------------------------------------------------------------------------
# asyncio shell


def _peer(writer: asyncio.StreamWriter) -> str:
    p = writer.get_extra_info("peername")
    if not p:
        return "?"
    return f"[{p[0]}]:{p[1]}" if ":" in p[0] else f"{p[0]}:{p[1]}"


class _Live:
    """The I/O side of one tunnel: its streams, pump tasks and thaw events."""

    def __init__(self, rec: Tunnel, c_reader, c_writer, t_reader, t_writer):
        self.rec = rec
        self.readers = {UP: c_reader, DOWN: t_reader}
        self.writers = {UP: t_writer, DOWN: c_writer}   # where each direction writes
        self.thawed = {UP: asyncio.Event(), DOWN: asyncio.Event()}
        self.tasks: list[asyncio.Task] = []
        self.done = asyncio.Event()
        self.last_byte = time.monotonic()  # either direction: what an idle timeout counts from


class FreezeProxy:
    """`await start()`; `.port`, `.control_port`; `freeze()`/`unfreeze()`/`close_tunnels()`; `await stop()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, control_host: str = "127.0.0.1",
                 control_port: int = 0, freeze_first: int = 0, hold_limit: int = DEFAULT_HOLD_LIMIT,
                 connect_timeout: float = 10.0, log=None, idle_timeout_s: float | None = None,
                 resolve: dict[str, str] | None = None):
        # a CONNECT to one of these names dials its address (names compare case-insensitively, as DNS does)
        self.resolve = {k.lower(): v for k, v in (resolve or {}).items()}
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ValueError("idle_timeout_s must be > 0 (or None: no idle timeout)")
        self.core = ProxyCore(freeze_first=freeze_first, hold_limit=hold_limit)
        self.idle_timeout_s = idle_timeout_s
        self.host, self._port = host, port
        self.control_host, self._control_port = control_host, control_port
        self.connect_timeout = connect_timeout
        self._log = log
        self._live: dict[int, _Live] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._handlers: set[asyncio.Task] = set()
        self._pending: set[asyncio.StreamWriter] = set()

    # -- lifecycle
    async def start(self) -> "FreezeProxy":
        self._servers.append(await asyncio.start_server(self._on_client, self.host, self._port))
        if self._control_port is not None:
            self._servers.append(await asyncio.start_server(self._on_control, self.control_host,
                                                            self._control_port))
        return self

    @property
    def port(self) -> int:
        return self._servers[0].sockets[0].getsockname()[1]

    @property
    def control_port(self) -> int:
        return self._servers[1].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.control_host}:{self.control_port}"

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        await self.close_tunnels(reason="proxy stopped")
        for w in list(self._pending):
            w.close()                       # connections that never completed a CONNECT
        if self._handlers:
            _, late = await asyncio.wait(list(self._handlers), timeout=2)
            for t in late:
                t.cancel()
        for s in self._servers:
            await s.wait_closed()
        self._servers.clear()

    async def serve_forever(self) -> None:
        await asyncio.gather(*(s.serve_forever() for s in self._servers))

    def log(self, what: str, **fields) -> None:
        if self._log:
            self._log(json.dumps({"t": round(time.time(), 6), "src": "proxy", "kind": what, **fields}))

    # -- control operations
    def freeze(self, tunnel: int | None = None) -> list[int]:
        ids = self.core.freeze(tunnel)
        for tid in ids:
            live = self._live.get(tid)
            if live:
                for ev in live.thawed.values():
                    ev.clear()
        self.log("proxy.freeze", tunnels=ids, scope="all" if tunnel is None else tunnel)
        return ids

    def unfreeze(self, tunnel: int | None = None) -> list[Release]:
        releases = self.core.unfreeze(tunnel)
        for r in releases:
            live = self._live.get(r.tunnel)
            if live is None:
                continue
            w = live.writers[r.direction]
            try:
                if r.data:
                    w.write(r.data)
                if r.eof and w.can_write_eof():
                    w.write_eof()
            except (OSError, RuntimeError):
                pass
            live.thawed[r.direction].set()
        self.log("proxy.unfreeze", delivered=sum(len(r.data) for r in releases),
                 scope="all" if tunnel is None else tunnel)
        return releases

    async def close_tunnels(self, tunnel: int | None = None, reason: str = "closed by control") -> list[int]:
        ids = [tid for tid in list(self._live) if tunnel is None or tid == tunnel]
        for tid in ids:
            await self._close(tid, reason)
        return ids

    # -- tunnels
    async def _on_client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        self._pending.add(c_writer)
        try:
            await self._tunnel(c_reader, c_writer)
        except asyncio.CancelledError:
            pass                            # stop() ran out of patience; the streams are closed anyway
        finally:
            self._handlers.discard(task)
            self._pending.discard(c_writer)

    async def _tunnel(self, c_reader, c_writer) -> None:
        client = _peer(c_writer)
        try:
            head = await asyncio.wait_for(c_reader.readuntil(b"\r\n\r\n"), 30)
            req = parse_connect(head)
        except asyncio.LimitOverrunError:
            return await self._refuse(c_writer, ProxyProtocolError(431, "Request Header Fields Too Large"))
        except ProxyProtocolError as e:
            return await self._refuse(c_writer, e)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, OSError):
            c_writer.close()
            return
        try:
            t_reader, t_writer = await asyncio.wait_for(
                asyncio.open_connection(self.resolve.get(req.host.lower(), req.host), req.port), self.connect_timeout)
        except asyncio.TimeoutError:
            return await self._refuse(c_writer, ProxyProtocolError(504, "Gateway Timeout"))
        except OSError:
            return await self._refuse(c_writer, ProxyProtocolError(502, "Bad Gateway"))
        self._pending.discard(c_writer)
        rec = self.core.open_tunnel(client, req.target)
        live = _Live(rec, c_reader, c_writer, t_reader, t_writer)
        for d in (UP, DOWN):
            if not rec.pipe(d).frozen:
                live.thawed[d].set()
        self._live[rec.id] = live
        self.log("proxy.tunnel.open", tunnel=rec.id, client=client, target=req.target, frozen=rec.frozen)
        try:
            c_writer.write(CONNECT_OK)
            await c_writer.drain()
        except OSError:
            await self._close(rec.id, "client gone before 200")
            return
        live.tasks = [asyncio.create_task(self._pump(live, UP)), asyncio.create_task(self._pump(live, DOWN))]
        if self.idle_timeout_s is not None:
            live.tasks.append(asyncio.create_task(self._idle_watch(live)))
        await live.done.wait()

    async def _idle_watch(self, live: _Live) -> None:
        """Close the tunnel once it has been idle for idle_timeout_s (a byte either way re-arms it)."""
        while True:
            left = live.last_byte + self.idle_timeout_s - time.monotonic()
            if left <= 0:
                await self._close(live.rec.id, "idle timeout")
                return
            await asyncio.sleep(left)

    async def _refuse(self, writer: asyncio.StreamWriter, err: ProxyProtocolError) -> None:
        try:
            writer.write(http_response(err.status, err.reason))
            await writer.drain()
        except OSError:
            pass
        writer.close()

    async def _pump(self, live: _Live, d: str) -> None:
        pipe = live.rec.pipe(d)
        reader, writer = live.readers[d], live.writers[d]
        reason = None
        try:
            while True:
                if pipe.full:
                    await live.thawed[d].wait()
                data = await reader.read(READ_SIZE)
                live.last_byte = time.monotonic()
                if not data:
                    if pipe.feed_eof() and writer.can_write_eof():
                        writer.write_eof()
                    break
                out = pipe.feed(data)
                if out:
                    writer.write(out)
                    await writer.drain()
        except (ConnectionError, OSError) as e:
            reason = f"{d}: {type(e).__name__}"
        if reason is not None:
            await self._close(live.rec.id, reason)
        elif live.rec.up.eof and live.rec.down.eof:
            # both sides sent FIN; once the FINs are passed on (now or on thaw), the tunnel is over
            while not (live.rec.up.eof_sent and live.rec.down.eof_sent):
                await asyncio.gather(live.thawed[UP].wait(), live.thawed[DOWN].wait())
                await asyncio.sleep(0)
            await self._close(live.rec.id, "both sides closed")

    async def _close(self, tid: int, reason: str) -> None:
        live = self._live.pop(tid, None)
        if live is None:
            return
        self.core.closed(tid, reason)
        current = asyncio.current_task()
        for t in live.tasks:
            if t is not current:
                t.cancel()
        for w in live.writers.values():
            try:
                if w.can_write_eof() and not w.is_closing():
                    w.write_eof()
            except (OSError, RuntimeError):
                pass
            w.close()
        for w in live.writers.values():
            try:
                await asyncio.wait_for(w.wait_closed(), 2)
            except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
                pass
        self.log("proxy.tunnel.close", tunnel=tid, reason=reason)
        live.done.set()

    # -- control API
    async def _on_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            req = parse_control(head)
            clen = 0
            for line in head.decode("latin-1").split("\r\n")[1:]:
                if line.lower().startswith("content-length:"):
                    clen = int(line.split(":", 1)[1].strip() or 0)
            if clen:
                await reader.readexactly(min(clen, MAX_HEAD))
            action = route_control(req)
            if action == "freeze":
                body = {"frozen": self.freeze(req.tunnel)}
            elif action == "unfreeze":
                rel = self.unfreeze(req.tunnel)
                body = {"delivered": sum(len(r.data) for r in rel)}
            elif action == "close":
                body = {"closed": await self.close_tunnels(req.tunnel)}
            else:
                body = {}
            body.update(self.core.state())
            status, reason = 200, "OK"
        except KeyError as e:
            status, reason, body = 404, "Not Found", {"error": f"no tunnel {e.args[0]}"}
        except ProxyProtocolError as e:
            status, reason, body = e.status, e.reason, {"error": e.reason}
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
            status, reason, body = 400, "Bad Request", {"error": "bad request"}
        try:
            writer.write(http_response(status, reason, json.dumps(body).encode(), "application/json"))
            await writer.drain()
        except OSError:
            pass
        writer.close()


class ProxyControl:
    """A client of the control API (for the agent): `ProxyControl("http://proxy:8081").freeze()`."""

    def __init__(self, url: str, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, tunnel: int | None = None) -> dict:
        q = f"?tunnel={tunnel}" if tunnel is not None else ""
        req = urllib.request.Request(self.url + path + q, method=method, data=b"" if method == "POST" else None)
        # the control API is always reached directly, whatever HTTP(S)_PROXY says
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=self.timeout) as r:
            return json.loads(r.read())

    def freeze(self, tunnel: int | None = None) -> dict:
        return self._call("POST", "/freeze", tunnel)

    def unfreeze(self, tunnel: int | None = None) -> dict:
        return self._call("POST", "/unfreeze", tunnel)

    def close(self, tunnel: int | None = None) -> dict:
        return self._call("POST", "/close", tunnel)

    def state(self) -> dict:
        return self._call("GET", "/state")


# ----------------------------------------------------------------------------------------------------
# CLI: lab proxy serve --listen HOST:PORT --control HOST:PORT [--freeze-first N]


def parse_resolve(items: list[str]) -> dict[str, str]:
    """`NAME=ADDR` items -> {name: addr}; LabError (one line) for one written wrong."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, addr = item.partition("=")
        if not sep or not name.strip() or not addr.strip() or any(c.isspace() for c in item.strip()):
            raise LabError(f"proxy: --resolve {item!r}: write NAME=ADDR, e.g. generativelanguage.googleapis.com=10.0.0.2")
        out[name.strip().lower()] = addr.strip()
    return out


def _serve(args: argparse.Namespace) -> int:
    try:
        host, port = parse_hostport(args.listen, default_host="0.0.0.0")
        chost, cport = parse_hostport(args.control, default_host="127.0.0.1")
    except ValueError as e:
        raise LabError(f"proxy: {e}")
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise LabError(f"proxy: --idle-timeout must be seconds > 0, got {args.idle_timeout}")
    resolve = parse_resolve(args.resolve or [])

    async def main() -> None:
        proxy = FreezeProxy(host, port, chost, cport, freeze_first=args.freeze_first,
                            idle_timeout_s=args.idle_timeout, resolve=resolve,
                            log=(lambda line: print(line, flush=True)) if not args.quiet else None)
        try:
            await proxy.start()
        except OSError as e:
            raise LabError(f"proxy: cannot listen: {e}")
        print(f"proxy: CONNECT on {host}:{proxy.port}, control on {chost}:{proxy.control_port}"
              f"{f', freezing only tunnels 1..{args.freeze_first}' if args.freeze_first else ''}",
              file=sys.stderr, flush=True)
        try:
            await proxy.serve_forever()
        finally:
            await proxy.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("proxy", help="the freezable HTTP CONNECT proxy (round 2)")
    psub = p.add_subparsers(dest="proxy_command", metavar="ACTION")
    s = psub.add_parser("serve", help="run the proxy with its control API")
    s.add_argument("--listen", default="0.0.0.0:8080", help="HOST:PORT for CONNECT (default 0.0.0.0:8080)")
    s.add_argument("--control", default="127.0.0.1:8081",
                   help="HOST:PORT of the control API: POST /freeze /unfreeze /close, GET /state")
    s.add_argument("--freeze-first", type=int, default=0, metavar="N",
                   help="only tunnels 1..N take part in a freeze (0: all)")
    s.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                   help="close a tunnel after S seconds without a byte either way (a corporate proxy's idle timeout)")
    s.add_argument("--resolve", action="append", metavar="NAME=ADDR",
                   help="dial ADDR for a CONNECT to NAME (repeatable)")
    s.add_argument("--quiet", action="store_true", help="no JSON log lines on stdout")
    s.set_defaults(func=_serve)
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.proxy")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["proxy", *(argv if argv is not None else sys.argv[1:])])
    return run_command(args.func, args)


if __name__ == "__main__":
    raise SystemExit(main())
