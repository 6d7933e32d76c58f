"""The `session-manager` lab client: a user's app built on lab.clients.session_manager (seed 004).

It does what an app does with the library and nothing more: the user's lines go in through the
manager's send calls, tool calls are answered from the backend, and the manager's own account of
its connections (connecting, connected, replayed, consumed, closed, goAway, refused reconnects, a
fresh session, the stop) becomes the lab's events. It never resumes or replays by itself: that is
the library under test. Connects in Vertex mode by default (`vertex`), where the SDK lets
`transparent` through; on the Developer API the manager falls back to plain resumption.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from google import genai
from google.genai import types

from lab import speech
from lab.clients.base import Client, ClientContext
from lab.clients.connection import SRC, ssl_context
from lab.clients.params import Params
from lab.clients.session_config import DEFAULT_SYSTEM_INSTRUCTION, live_config
from lab.clients.session_manager import Backoff, SessionManager, SessionStopped
from lab.errors import LabError
from lab.events import redact_handle


class SessionManagerClient(Client):
    name = "session-manager"
    DEFAULTS: dict[str, Any] = {
        "transparent": True,            # the guide's rule 1 (the transparent_requested metric reads it)
        "vertex": True,                 # the SDK's Vertex mode (transparent passes); false: Developer API
        "backoff_first_s": 0.5,
        "backoff_max_s": 8.0,
        "max_attempts": 30,
        "fresh_after": 5,               # refused reconnects with a handle before a fresh session
        "ping_interval_s": 5.0,         # websockets keepalive: how a silent loss becomes a 1006
        "ping_timeout_s": 5.0,
        "system_instruction": DEFAULT_SYSTEM_INSTRUCTION,
        "speech_tail_ms": 700,
    }

    def __init__(self, ctx: ClientContext):
        super().__init__(ctx)
        self.p = Params(self.name, self.declared_params(), ctx.params)
        self.log = ctx.log
        ep = ctx.endpoint
        ws_args = {"ssl": ssl_context(ep), "ping_interval": float(self.p["ping_interval_s"]),
                   "ping_timeout": float(self.p["ping_timeout_s"])}
        http: dict[str, Any] = {"async_client_args": ws_args}
        if ep.base_url:
            http["base_url"] = ep.base_url
        self.genai = genai.Client(api_key=ep.api_key, vertexai=bool(self.p["vertex"]) or None, http_options=http)
        cfg = live_config(None, blocking=False, system_instruction=self.p["system_instruction"], voice=None)
        backoff = Backoff(first_s=float(self.p["backoff_first_s"]), max_s=float(self.p["backoff_max_s"]),
                          max_attempts=int(self.p["max_attempts"]))
        self.sm = SessionManager(self.genai, ep.model, cfg, transparent=bool(self.p["transparent"]),
                                 backoff=backoff, fresh_after=int(self.p["fresh_after"]), on_event=self._on_event)
        self.conn = 0                   # connection attempts so far (the lab's conn numbers)
        self.attempt = 0
        self._t_open = 0.0
        self._purpose = "initial"
        self._turn_text: list[str] = []
        self._turn_audio = False
        self._tasks: set[asyncio.Task] = set()

    # ---- Client interface --------------------------------------------------------------------
    async def start(self) -> None:
        self.log.write("client.params", src=SRC, client=self.name,
                       params=self.p.recorded(omit=frozenset({"system_instruction"})))
        if self.ctx.before_connect is not None:
            self.ctx.before_connect("initial")
        await self.sm.start()
        self._spawn(self._receive())

    async def say(self, text: str, line: int) -> None:
        mode = "speech" if self.ctx.speech else "text"
        self.log.write("user.say", src=SRC, conn=self.conn, text=text, line=line, mode=mode)
        try:
            if not self.ctx.speech:
                await self.sm.send_realtime_input(text=text)
                return
            pcm = speech.synth(text) + speech.silence(int(self.p["speech_tail_ms"]))
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i, chunk in enumerate(speech.chunks(pcm, 100)):
                delay = t0 + i * 0.1 - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.sm.send_realtime_input(audio=types.Blob(data=chunk, mime_type="audio/pcm;rate=16000"))
        except SessionStopped as e:
            self.log.write("user.say.failed", src=SRC, conn=self.conn, line=line, at_ms=None)
            self.log.write("client.error", src=SRC, conn=self.conn, error=f"SessionStopped: {e}", task="say")

    async def action(self, what: str, **kw: Any) -> None:
        ws = self._ws()
        if what == "abort":
            if ws is not None:
                ws.transport.abort()
        elif what == "close":
            if ws is not None:
                await ws.close(1000)
        else:
            raise LabError(f"client {self.name!r} has no action {what!r} (known: abort, close)")

    def flow(self) -> tuple[str, int, str, int] | None:
        ws = self._ws()
        try:
            (lip, lport, *_), (rip, rport, *_) = ws.local_address, ws.remote_address
            return lip, int(lport), rip, int(rport)
        except Exception:
            return None

    async def stop(self) -> None:
        try:
            await self.sm.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        except BaseException:
            pass

    # ---- plumbing ----------------------------------------------------------------------------
    def _ws(self) -> Any:
        # the SDK session's websocket (a private attribute, as lab.clients.connection reads it): the
        # lab needs its addresses for a fault's target and its transport for the abort action
        return getattr(self.sm.session, "_ws", None)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _on_event(self, kind: str, **f: Any) -> None:
        """The manager's account of itself, as the lab's events."""
        log = self.log
        if kind == "connecting":
            self.conn += 1
            self._t_open = time.monotonic()
            self._purpose = "resume" if f["resume"] else f["purpose"]
            if self._purpose == "resume":
                self.attempt += 1
                log.write("resume.attempt", src=SRC, attempt=self.attempt, conn=self.conn, why="manager")
        elif kind == "connected":
            ms = round((time.monotonic() - self._t_open) * 1000, 1)
            fl = self.flow()
            log.write("conn.open", src=SRC, conn=self.conn, purpose=self._purpose,
                      local=f"{fl[0]}:{fl[1]}" if fl else None, remote=f"{fl[2]}:{fl[3]}" if fl else None, session=1)
            log.write("conn.setup_complete", src=SRC, conn=self.conn, setup_ms=ms, purpose=self._purpose)
            if self._purpose == "resume":
                log.write("resume.result", src=SRC, attempt=self.attempt, conn=self.conn, ok=True, code=None,
                          reason=None, latency_ms=ms)
        elif kind == "reconnect_failed" and self._purpose == "resume":
            log.write("resume.result", src=SRC, attempt=self.attempt, conn=self.conn, ok=False, code=f["code"],
                      reason=f["reason"], latency_ms=round((time.monotonic() - self._t_open) * 1000, 1))
        elif kind == "closed":
            log.write("conn.closed", src=SRC, conn=self.conn, code=f["code"], reason=f["reason"],
                      by="abnormal" if f["code"] == 1006 else "server", how=None, during="session")
        elif kind == "go_away":
            log.write("conn.go_away", src=SRC, conn=self.conn, time_left=f["time_left"])
        elif kind == "fresh_session":
            log.write("fallback.start", src=SRC, conn=self.conn + 1, note=None, turns=0, old_conn=self.conn)
        elif kind == "replayed":
            log.write("session.replay", src=SRC, conn=self.conn, messages=f["messages"])
        elif kind == "consumed":
            log.write("session.consumed", src=SRC, conn=self.conn, index=f["index"], kept=f["kept"])
        elif kind == "fallback":
            log.write("session.plain", src=SRC, reason=f["reason"])
        elif kind == "stopped":
            log.write("session.stopped", src=SRC, conn=self.conn, reason=f["reason"])

    async def _receive(self) -> None:
        try:
            async for msg in self.sm.receive():
                self._on_message(msg)
        except SessionStopped:
            pass

    def _on_message(self, msg: types.LiveServerMessage) -> None:
        u = msg.session_resumption_update
        if u is not None:
            self.log.write("handle.update", src=SRC, conn=self.conn, resumable=bool(u.resumable),
                           **redact_handle(u.new_handle))
        if msg.tool_call is not None:
            for fc in msg.tool_call.function_calls or []:
                self.log.write("tool.call", src=SRC, conn=self.conn, id=fc.id, name=fc.name, args=dict(fc.args or {}))
                self._spawn(self._book(fc))
        sc = msg.server_content
        if sc is None:
            return
        if sc.model_turn is not None:
            for part in sc.model_turn.parts or []:
                if part.inline_data is not None and part.inline_data.data:
                    self.log.write("model.audio", src=SRC, conn=self.conn, bytes=len(part.inline_data.data),
                                   **({"first": True} if not self._turn_audio else {}))
                    self._turn_audio = True
        if sc.output_transcription is not None and sc.output_transcription.text:
            self._turn_text.append(sc.output_transcription.text)
        if sc.interrupted:
            self.log.write("model.interrupted", src=SRC, conn=self.conn, text="".join(self._turn_text).strip())
            self._turn_text, self._turn_audio = [], False
        if sc.turn_complete:
            text = "".join(self._turn_text).strip()
            if text:
                self.log.write("model.text", src=SRC, conn=self.conn, text=text)
            self.log.write("model.turn_complete", src=SRC, conn=self.conn)
            self._turn_text, self._turn_audio = [], False

    async def _book(self, fc: types.FunctionCall) -> None:
        backend = self.ctx.backend
        if fc.name != "book_slot" or backend is None:
            result: dict[str, Any] = {"status": "error", "error": f"unknown tool {fc.name}"}
        else:
            job = await backend.request((fc.args or {}).get("slot"), fc.id, name=fc.name)
            await job.wait()
            result = job.result()
        fr = types.FunctionResponse(id=fc.id, name=fc.name, response=result)
        try:
            await self.sm.send_tool_response(function_responses=[fr])
            sent = True
        except SessionStopped:
            sent = False
        self.log.write("tool.response", src=SRC, conn=self.conn, id=fc.id, name=fc.name,
                       status=result.get("status"), job=result.get("job"), sent=sent, replay=None)
