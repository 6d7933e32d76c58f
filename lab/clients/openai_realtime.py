"""A lab client on the unmodified `openai` SDK's Realtime API (`client.realtime.connect`).

What a plain OpenAI Realtime app does: one socket, `session.update` with the book_slot tool, each
user line as a user item plus `response.create` (text), or as 24 kHz PCM appended to the input
buffer for the server's VAD (speech); a function call goes to the lab's backend, and its result goes
back as a `function_call_output` followed by `response.create` (OpenAI never continues by itself).
It writes the same event kinds as the Gemini clients (user.say, tool.call, tool.response,
model.audio, model.text, model.turn_complete, conn.*), so the report's user outcomes judge it alike.

After a drop it does nothing of its own: with `sdk_reconnect` the SDK's transport-level reconnect
(openai-python >= 2.32, opt-in through `on_reconnecting`) opens a new socket on a recoverable close
(1001, 1011, ...), which is a new, empty session: the SDK sends no `session.update` into it, and a
pending call's result goes into it as an orphan (docs/protocol-openai.md, measured against the
twin). Scripted actions: 'close' and 'abort'.

In live mode every socket it opens is charged first (`ctx.before_connect`, lab.live.budget): its own
(`_open`) and each attempt of the SDK's reconnect (`_reconnecting`, which aborts the reconnect when
the budget refuses). A key the server refuses (an `error` invalid_api_key where session.created
should come) is `SessionRefused`, recorded where lab.live.errors reads it and stops the run.

Pointed at the twin by `websocket_base_url` (the endpoint's https base URL as wss, plus /v1, to
which the SDK appends /realtime?model=...) and the twin's CA in an ssl context handed to
websockets through `websocket_connection_options` (the SDK's typed options omit `ssl`, but it
passes every option through to websockets' connect).
"""
from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from typing import Any

from openai import AsyncOpenAI

from lab import speech
from lab.clients.base import Client, ClientContext, not_opened
from lab.clients.connection import SRC
from lab.clients.params import Params
from lab.clients.session_config import DEFAULT_SYSTEM_INSTRUCTION
from lab.errors import LabError
from lab.protocols import OPENAI, endpoint_url

OUT_RATE = 24000        # the GA protocol's only PCM rate, both ways (SDK RealtimeAudioFormats)

BOOK_SLOT = {"type": "function", "name": "book_slot",
             "description": "Book an appointment slot for the user. Takes a few seconds to commit.",
             "parameters": {"type": "object", "required": ["slot"], "properties": {
                 "slot": {"type": "string", "description": "The slot as the user said it, e.g. 'tomorrow 3pm'."}}}}


def websocket_base_url(base_url: str) -> str:
    """https://host:port (the lab's endpoint) or the plan's wss://host:port/v1 -> wss://host:port/v1
    (what the SDK appends /realtime to): lab.protocols' form for this protocol."""
    return endpoint_url(OPENAI, base_url)


class SessionRefused(Exception):
    """The server answered a new socket with an event other than session.created (an `error`: a refused
    key is invalid_api_key, docs/protocol-openai.md): the session never began. Its text names
    the error's type, code and message (lab.live.errors reads a refused key or spent quota in it)."""

    def __init__(self, first: Any):
        err = getattr(first, "error", None)
        what = (f"{getattr(err, 'type', None)}/{getattr(err, 'code', None)} ({getattr(err, 'message', '')})"
                if err is not None else "")
        super().__init__(f"openai client: the server answered {first.type} {what} instead of session.created"
                         .replace("  ", " ")[:200])


def _abort(conn: Any) -> None:
    """Drop an SDK connection's socket at once (no close handshake)."""
    ws = getattr(conn, "_connection", None)
    if ws is not None and ws.transport is not None:
        ws.transport.abort()


def to_24k(pcm16k: bytes) -> bytes:
    """The lab's 16 kHz speech as the 24 kHz PCM the protocol takes (the lab's one resampler)."""
    return speech.resample(pcm16k, speech.IN_RATE, OUT_RATE)


class OpenAIRealtimeClient(Client):
    name = "openai"
    protocol = OPENAI
    DEFAULTS: dict[str, Any] = {
        "model": "gpt-realtime",
        "system_instruction": DEFAULT_SYSTEM_INSTRUCTION,
        "text_output": False,               # output_modalities ["text"] instead of ["audio"]
        "sdk_reconnect": False,             # the SDK's own reconnect (on_reconnecting), off as the SDK's default
        "attempt_timeout_s": 10.0,          # the socket and session.created
        "speech_tail_ms": 700,
        # the transcription model asked for when the user speaks ("" asks for none); the SDK's
        # AudioTranscription.model literals include it
        "input_transcription": "gpt-4o-mini-transcribe",
    }

    def __init__(self, ctx: ClientContext):
        super().__init__(ctx)
        self.p = Params(self.name, self.declared_params(), ctx.params)
        self.log = ctx.log
        self.backend = ctx.backend
        self.conn: Any = None               # the SDK's AsyncRealtimeConnection
        self.n = 0                          # connection number, as the Gemini clients count
        self.session_id: str | None = None
        self._recv: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._text: list[str] = []
        self._audio = False
        self.playback = speech.PlaybackModel()
        self.answers: list[str] = []

    # ---- Client interface --------------------------------------------------------------------
    async def start(self) -> None:
        self.log.write("client.params", src=SRC, client=self.name,
                       params=self.p.recorded(omit=frozenset({"system_instruction"})))
        self.conn = await self._open("initial")
        self._recv = self._spawn(self._receive(self.conn), "openai-recv")

    async def _open(self, purpose: str) -> Any:
        """A new socket, which is a new session: session.created awaited, then session.update with the
        tool (the same for every session the client opens). Returns the SDK's connection.

        `ctx.before_connect(purpose)` is asked first: what it raises (the live budget's BudgetError) is
        recorded (the initial connection's as client.error, a new session's as fallback.new_failed) and
        raised, and nothing is opened. A server that answers the socket with an `error` instead of
        session.created (a refused key: invalid_api_key) raises SessionRefused naming its code."""
        if self.ctx.before_connect is not None:
            try:
                self.ctx.before_connect(purpose)
            except Exception as e:
                if purpose == "initial":
                    self.log.write("client.error", src=SRC, conn=None, task="connect", error=not_opened(e))
                else:
                    self.log.write("fallback.new_failed", src=SRC, error=not_opened(e))
                raise
        ep = self.ctx.endpoint
        client = AsyncOpenAI(api_key=ep.api_key, **({"websocket_base_url": websocket_base_url(ep.base_url)}
                                                    if ep.base_url else {}))
        options: dict[str, Any] = {}
        if ep.ca_path or ep.keylog_path:
            # the CA the plan names (None: the system's) and, where the plan gives one, the TLS key log
            # (a twin run's into its capture; a live run's only with --keylog-live, outside the results)
            ctx = ssl.create_default_context(cafile=ep.ca_path)
            if ep.keylog_path:
                ctx.keylog_filename = ep.keylog_path
            options["ssl"] = ctx
        t0 = time.monotonic()
        manager = client.realtime.connect(model=self.p["model"], websocket_connection_options=options,
                                          on_reconnecting=self._reconnecting if self.p["sdk_reconnect"] else None)
        conn = await asyncio.wait_for(manager.enter(), float(self.p["attempt_timeout_s"]))
        upgraded = time.monotonic()
        try:
            # the frame's arrival is timed before it is parsed (the SDK's recv_bytes + parse_event, as its
            # recv does): the first parse builds the SDK's event models, a hundred ms on this machine
            raw = await asyncio.wait_for(conn.recv_bytes(), float(self.p["attempt_timeout_s"]))
            created_ms = round((time.monotonic() - upgraded) * 1000, 1)
            first = conn.parse_event(raw)
            if first.type != "session.created":
                raise SessionRefused(first)
            self.conn = conn
            self._session(first.session.id, purpose, t0, created_ms=created_ms)
            session: dict[str, Any] = {
                "type": "realtime", "instructions": self.p["system_instruction"], "tools": [BOOK_SLOT],
                "output_modalities": ["text"] if self.p["text_output"] else ["audio"]}
            if self.ctx.speech and self.p["input_transcription"]:
                # what the service heard, as the Gemini clients ask for inputAudioTranscription
                session["audio"] = {"input": {"transcription": {"model": self.p["input_transcription"]}}}
            await conn.session.update(session=session)
        except BaseException:
            _abort(conn)
            raise
        return conn

    async def say(self, text: str, line: int) -> None:
        mode = "speech" if self.ctx.speech else "text"
        voice = speech.synth(text) if self.ctx.speech else None
        self.log.write("user.say", src=SRC, conn=self.n, text=text, line=line, mode=mode,
                       **({"voiced_ms": speech.voiced_ms(voice)} if voice else {}))
        if self.conn is None:
            return
        try:
            if voice is None:
                await self.conn.conversation.item.create(item={
                    "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
                await self.conn.response.create()
                return
            # the server's VAD ends the turn and starts the response (turn_detection's create_response)
            pcm = voice + speech.silence(int(self.p["speech_tail_ms"]))
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i, chunk in enumerate(speech.chunks(pcm, 100)):
                await asyncio.sleep(max(0.0, t0 + i * 0.1 - loop.time()))
                await self.conn.input_audio_buffer.append(audio=base64.b64encode(to_24k(chunk)).decode())
        except Exception as e:          # a closed socket: the line is lost, as the user would find
            self.log.write("user.say.failed", src=SRC, conn=self.n, line=line)
            self.log.write("client.error", src=SRC, conn=self.n, error=f"{type(e).__name__}: {e}"[:200], task="say")

    async def action(self, what: str, **kw: Any) -> None:
        ws = getattr(self.conn, "_connection", None) if self.conn is not None else None
        if what == "close" and self.conn is not None:
            await self.conn.close()
        elif what == "abort" and ws is not None and ws.transport is not None:
            ws.transport.abort()
        else:
            raise LabError(f"client {self.name!r} has no action {what!r} (known: close, abort)")

    def flow(self) -> tuple[str, int, str, int] | None:
        ws = getattr(self.conn, "_connection", None) if self.conn is not None else None
        local, remote = getattr(ws, "local_address", None), getattr(ws, "remote_address", None)
        if not local or not remote:
            return None
        return (str(local[0]), int(local[1]), str(remote[0]), int(remote[1]))

    async def stop(self) -> None:
        try:
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.conn is not None:
                await asyncio.wait_for(self.conn.close(), 2.0)
        except BaseException:
            pass

    # ---- receiving ---------------------------------------------------------------------------
    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def _reconnecting(self, event: Any) -> dict[str, Any] | None:
        """The SDK is about to reconnect (sdk_reconnect): no overrides, so it reconnects as it would. Its
        event carries the close code that made it (a code it counts recoverable: 1001, 1006, 1011, ...).
        Each attempt opens a socket, so each is asked of ctx.before_connect first; a refusal is recorded
        and aborts the SDK's reconnect (its ReconnectingOverrides `abort`)."""
        self.log.write("conn.closed", src=SRC, conn=self.n, code=getattr(event, "close_code", None),
                       reason=f"sdk reconnect, attempt {getattr(event, 'attempt', '?')}", by="server",
                       how="reconnect", during=None)
        if self.ctx.before_connect is not None:
            try:
                self.ctx.before_connect("new")
            except Exception as e:
                self.log.write("client.error", src=SRC, conn=self.n, task="reconnect", error=not_opened(e))
                return {"abort": True}
        return None

    def _session(self, sid: str, purpose: str, t0: float | None = None, created_ms: float | None = None) -> None:
        self.n += 1
        self.session_id = sid
        flow = self.flow()
        self.log.write("conn.open", src=SRC, conn=self.n, purpose=purpose, local=flow and f"{flow[0]}:{flow[1]}",
                       remote=flow and f"{flow[2]}:{flow[3]}", session=self.n)
        # setup_ms: from before the socket to session.created; created_ms: from the upgrade's answer to
        # session.created (what the twin's openai_session_created_s sets; lab drift compares them)
        self.log.write("conn.setup_complete", src=SRC, conn=self.n, purpose=purpose,
                       setup_ms=round((time.monotonic() - t0) * 1000, 1) if t0 is not None else None,
                       **({"created_ms": created_ms} if created_ms is not None else {}))

    async def _receive(self, conn: Any) -> None:
        n = self.n
        code = reason = None
        try:
            async for ev in conn:
                self._on_event(ev)
        except Exception as e:
            rcvd = getattr(e, "rcvd", None)
            code, reason = getattr(rcvd, "code", None), getattr(rcvd, "reason", None)
        ws = getattr(conn, "_connection", None)
        code = code if code is not None else getattr(ws, "close_code", None)
        reason = reason if reason is not None else getattr(ws, "close_reason", None)
        self.log.write("conn.closed", src=SRC, conn=n, code=code, reason=reason, by="server",
                       how="close", during=None)
        self._ended(conn, code)

    def _ended(self, conn: Any, code: int | None) -> None:
        """A connection's receive loop ended (closed by either side, or the transport died): this
        client does nothing about it (the recovery client opens a new session)."""

    def _on_event(self, ev: Any) -> None:
        kind = ev.type
        if kind == "session.created" and ev.session.id != self.session_id:
            # the SDK reconnected: a new socket is a new, empty session on the service
            self._session(ev.session.id, "new")
        elif kind == "response.output_audio.delta":
            data = base64.b64decode(ev.delta or "")
            first = not self._audio
            if first:
                self._audio = True
                self.playback.begin_turn()
            self.playback.add(self.log.now_ms(), len(data))
            self.log.write("model.audio", src=SRC, conn=self.n, bytes=len(data), **({"first": True} if first else {}))
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            self._text.append(ev.delta or "")
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.log.write("user.transcript", src=SRC, conn=self.n, text=(ev.transcript or "").strip())
        elif kind == "response.function_call_arguments.done":
            self._on_call(ev.call_id, ev.name, ev.arguments)
        elif kind == "response.done":
            self._response_done(ev.response)
        elif kind == "error":
            err = ev.error
            self.log.write("client.error", src=SRC, conn=self.n, task="server",
                           error=f"{err.type}/{err.code}: {err.message}"[:200])

    def _response_done(self, response: Any) -> None:
        text = "".join(self._text).strip()
        heard = self.playback.end_turn() if self._audio else None
        self._text, self._audio = [], False
        if getattr(response, "status", None) == "cancelled":
            self.log.write("model.interrupted", src=SRC, conn=self.n, text=text)
            return
        if text:
            self.log.write("model.text", src=SRC, conn=self.n, text=text)
            self.answers.append(text)
        if heard is not None:
            self.log.write("user.heard", src=SRC, conn=self.n, text=text, start_ms=round(heard.start_ms, 1),
                           end_ms=round(heard.end_ms, 1))
        self.log.write("model.turn_complete", src=SRC, conn=self.n)

    # ---- tools -------------------------------------------------------------------------------
    def _on_call(self, call_id: str, name: str, arguments: str) -> None:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = {"_raw": arguments}
        self.log.write("tool.call", src=SRC, conn=self.n, id=call_id, name=name, args=args)
        self._spawn(self._run_tool(call_id, name, args), f"tool-{call_id}")

    async def _run_tool(self, call_id: str, name: str, args: dict) -> None:
        result = await self._result(call_id, name, args)
        await self._deliver(self.conn, self.n, call_id, name, result)

    async def _result(self, call_id: str, name: str, args: dict) -> dict[str, Any]:
        """The tool's result from the lab's backend, once its job is done."""
        if name != "book_slot" or self.backend is None:
            return {"status": "error", "error": f"unknown tool {name}"}
        job = await self.backend.request(args.get("slot"), call_id, name=name)
        await job.wait()
        return job.result()

    async def _deliver(self, conn: Any, n: int | None, call_id: str, name: str, result: dict[str, Any]) -> None:
        """The result as a function_call_output on `conn` (connection number `n`), then response.create."""
        sent = True
        try:
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call_id,
                                                      "output": json.dumps(result)})
            await conn.response.create()      # OpenAI never continues after a tool result by itself
        except Exception:
            sent = False
        self.log.write("tool.response", src=SRC, conn=n, id=call_id, name=name, status=result.get("status"),
                       job=result.get("job"), sent=sent)
