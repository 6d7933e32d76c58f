"""The twin's control channel: a small HTTP API a scenario's agent calls to act at an anchor.

    POST /fault   {"name": "slow_pongs" | "stall" | "unresumable" | "quota", "on": true}
    POST /goaway  {"time_left_s": 5}        (optional; default the profile's goaway_lead_s)
    GET  /state

Each answers JSON (`{"faults": [...], "connections": N}`); a bad request gets 400/404/405 with
`{"error": "<one line>"}`. Like the freeze proxy's control port, it is bound where the agent in the
client's namespace can reach it. The twin's operations are the server's (`set_fault`, `go_away`):
this module only reads requests and writes answers.
"""
from __future__ import annotations

import asyncio
import io
import json
from http.client import parse_headers
from typing import Any, Protocol

from lab.errors import LabError

MAX_BODY = 4096
ROUTES = {"/fault": "POST", "/goaway": "POST", "/state": "GET"}


class Twin(Protocol):
    core: Any

    def set_fault(self, name: str, on: bool) -> None: ...
    def go_away(self, time_left_s: float | None = None) -> None: ...
    def open_connections(self) -> int: ...


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def parse_request(head: bytes) -> tuple[str, str, int]:
    """(method, path, content length) of a request head; BadRequest on a malformed one."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest(400, "malformed request line")
    headers = parse_headers(io.BytesIO(rest))
    try:
        length = int(headers.get("Content-Length") or 0)
    except ValueError:
        raise BadRequest(400, "bad Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise BadRequest(400, f"body over {MAX_BODY} bytes")
    method, path = parts[0].upper(), parts[1].split("?", 1)[0].rstrip("/") or "/"
    want = ROUTES.get(path)
    if want is None:
        raise BadRequest(404, f"no control route {path!r}; known: {', '.join(sorted(ROUTES))}")
    if method != want:
        raise BadRequest(405, f"{path} takes {want}")
    return method, path, length


def parse_body(raw: bytes) -> dict:
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadRequest(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "the body must be a JSON object")
    return body


def perform(twin: Twin, path: str, body: dict) -> dict:
    """Do what the request asks; BadRequest (400/404) names what is wrong."""
    if path == "/fault":
        name, on = body.get("name"), body.get("on", True)
        if not isinstance(name, str) or not isinstance(on, bool):
            raise BadRequest(400, 'fault takes {"name": <fault>, "on": true|false}')
        try:
            twin.set_fault(name, on)
        except LabError as e:
            raise BadRequest(404, str(e)) from None
    elif path == "/goaway":
        tl = body.get("time_left_s")
        if tl is not None and (isinstance(tl, bool) or not isinstance(tl, (int, float)) or tl < 0):
            raise BadRequest(400, "time_left_s takes seconds >= 0")
        twin.go_away(None if tl is None else float(tl))
    return {"faults": sorted(twin.core.faults), "connections": twin.open_connections()}


class ControlServer:
    def __init__(self, twin: Twin, host: str = "127.0.0.1", port: int = 0):
        self.twin, self.host, self._port = twin, host, port
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_request, self.host, self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1] if self._server else self._port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}"

    async def _on_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            _method, path, length = parse_request(head)
            raw = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
            status, answer = 200, perform(self.twin, path, parse_body(raw))
        except BadRequest as e:
            status, answer = e.status, {"error": str(e)}
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            status, answer = 400, {"error": "incomplete request"}
        data = json.dumps(answer).encode()
        try:
            writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
            await writer.drain()
        except OSError:
            pass
        writer.close()
