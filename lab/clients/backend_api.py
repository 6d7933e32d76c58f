"""The lab's booking backend over HTTP on loopback, for a client the lab did not write.

A black-box app (`--client-cmd`) reaches the run's backend (lab.backend.Backend, the ground truth)
here instead of through the lab's Python objects. The agent serves it on 127.0.0.1 in the client's
namespace and hands the app its URL in $LAB_BACKEND_URL. The API, all JSON:

    POST /book    {"slot": "tomorrow 3pm", "call_id": "<the tool call's id>", "wait": true}
                  -> 200 {"status": "booked" | "pending", "job": "J1", "slot": "tomorrow 3pm"}
                  with wait (the default) the answer comes when the booking commits, a few seconds
                  later (the scenario's commit_after_s), as the lab's own clients' tool returns;
                  "wait": false answers at once with the job as it stands
    GET  /status?slot=tomorrow%203pm
                  -> 200 {"status": "pending" | "booked" | null}
    anything else -> 404 {"error": ...}; a body that is not a JSON object with a slot -> 400

Bookings are idempotent by business key, as for the lab's own clients (a second POST for the same
slot returns the same job and is logged as tool.dedup). Plain asyncio streams: one request per
connection, no keep-alive, so any HTTP client works.
"""
from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

MAX_BODY = 64 * 1024
WAIT_MAX_S = 60.0        # a booking that has not committed by then is answered as pending


class BackendAPI:
    def __init__(self, backend: Any, host: str = "127.0.0.1", port: int = 0):
        self.backend, self.host, self.port = backend, host, port
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> "BackendAPI":
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def handle(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """One request -> (status, JSON answer). Separate from the socket so tests call it directly."""
        url = urllib.parse.urlsplit(target)
        if method == "POST" and url.path == "/book":
            try:
                req = json.loads(body or b"{}")
            except json.JSONDecodeError:
                req = None
            if not isinstance(req, dict) or not str(req.get("slot") or "").strip():
                return 400, {"error": 'send a JSON object with a "slot"'}
            job = await self.backend.request(req["slot"], str(req.get("call_id") or "app"))
            if req.get("wait", True):
                try:
                    await job.wait(WAIT_MAX_S)
                except asyncio.TimeoutError:
                    pass            # answered as it stands: pending
            return 200, job.result()
        if method == "GET" and url.path == "/status":
            slot = urllib.parse.parse_qs(url.query).get("slot", [""])[0]
            return 200, {"status": self.backend.status(slot)}
        return 404, {"error": f"no {method} {url.path}; the API is POST /book and GET /status"}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (request_line.split(" ", 2) + ["", ""])[:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            n = min(int(headers.get("content-length") or 0), MAX_BODY)
            body = await asyncio.wait_for(reader.readexactly(n), 10) if n else b""
            status, answer = await self.handle(method.upper(), target, body)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
            status, answer = 400, {"error": "malformed request"}
        data = json.dumps(answer).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        try:
            await writer.drain()
        finally:
            writer.close()
