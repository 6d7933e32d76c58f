"""The part every lab client on the google-genai SDK shares (probe, naive, recovery).

`SdkClient` composes the pieces, each in its own module: the tool-call ledger (`ledger`), the
connections it opens (`connection`, which report back only through `ConnectionEvents`), the setup it
asks for (`session_config`) and its declared parameters (`params`). On top it does what is common:
start, say (text or synthetic speech), camera frames beside it (`video`, lab.clients.video), tool
calls against the backend, results delivered on whatever connection is live (or owed until one is),
resume attempts with their events, the transcript, `ready` and `last_answer`. Subclasses decide what happens after a loss (`on_loss`).

Before any connection is opened `ctx.before_connect(purpose)` is asked (docs/DESIGN.md); if it
raises, that connection is not opened: a resume is recorded as a failed attempt, a new session as
`fallback.new_failed`, and the initial connection's refusal ends `start()` with that error.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from google.genai import errors as genai_errors
from google.genai import types
from websockets.exceptions import ConnectionClosed

from lab import speech
from lab.clients.base import Client, ClientContext, not_opened
from lab.clients.connection import SRC, Connection, ConnectionEvents, Timing, make_genai_client
from lab.clients.ledger import ToolCall, ToolLedger
from lab.clients.params import Params
from lab.clients.session_config import DEFAULT_SYSTEM_INSTRUCTION, live_config
from lab.clients.video import MIME as VIDEO_MIME
from lab.clients.video import FrameSource
from lab.errors import LabError
from lab.events import redact_handle
from lab.record.frames import FrameRecorder


@dataclass
class _Turn:
    """The model turn being received on one connection."""
    audio: bool = False                  # its first audio chunk arrived
    text: list[str] = field(default_factory=list)       # output transcription so far
    heard_text: list[str] = field(default_factory=list)  # input transcription (what the model heard)


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
        "record_frames": True,              # frames.jsonl next to the events (a file-backed log only)
        "video": False,                     # send camera frames from the start (actions start/stop_video)
        "video_fps": 1.0,                   # frames per second while the camera is on
    }

    def __init__(self, ctx: ClientContext):
        super().__init__(ctx)
        self.p = Params(self.name, self.declared_params(), ctx.params)   # one list of names: the scenario validator asks the same
        self.log = ctx.log
        self.backend = ctx.backend
        self.genai = make_genai_client(ctx.endpoint, open_timeout=float(self.p["open_timeout"]),
                                       close_timeout=float(self.p["close_wait_s"]))
        self.ledger = ToolLedger()
        # every server frame, secrets removed, next to the events: a live run can be replayed offline
        self.frames = None
        if getattr(ctx.log, "path", None) is not None and self.p["record_frames"]:
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
        self.playback = speech.PlaybackModel()
        self._turns: dict[int, _Turn] = {}              # conn number -> the model turn being received
        self._timing = Timing(ping_interval_s=float(self.p["ping_interval_s"]),
                              lost_after_s=float(self.p["lost_after_s"]),
                              send_timeout_s=float(self.p["send_timeout_s"]))
        self._conn_events = ConnectionEvents(message=self._on_message, pong=self._on_pong,
                                             lost=self._on_lost, closed=self._on_closed)
        self._camera: asyncio.Task | None = None
        self._frames_made = FrameSource()
        if self.p["video"]:
            self._video_fps()           # a bad rate is refused before anything is opened

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
        """A connection about to be opened. `ctx.before_connect(purpose)` is asked first: what it
        raises is raised here, and then no connection exists (no number, nothing on the wire)."""
        if self.ctx.before_connect is not None:
            self.ctx.before_connect(purpose)
        model = self.ctx.endpoint.model
        c = Connection(len(self.conns) + 1, purpose, handle, session,
                       connect=lambda: self.genai.aio.live.connect(model=model, config=self.live_config(handle)),
                       log=self.log, events=self._conn_events, timing=self._timing, frames=self.frames)
        self.conns.append(c)
        return c

    # ---- Client interface --------------------------------------------------------------------
    async def start(self) -> None:
        self.log.write("client.params", src=SRC, client=self.name,
                       params=self.p.recorded(omit=frozenset({"system_instruction"})))
        try:
            c = self.new_conn("initial", None, self.session_no)
        except Exception as e:                    # before_connect refused it: there is no session to play
            self.log.write("client.error", src=SRC, error=not_opened(e))
            raise
        await c.open(timeout=float(self.p["attempt_timeout_s"]))
        self._adopt(c)
        if self.p["video"]:
            self.start_video()

    async def say(self, text: str, line: int) -> None:
        if self.p["hold_input_while_recovering"] and not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), float(self.p["hold_input_max_s"]))
            except asyncio.TimeoutError:
                pass
        await self._before_say()
        c = self.current
        mode = "speech" if self.ctx.speech else "text"
        voice = speech.synth(text) if self.ctx.speech and c is not None else None
        # voiced_ms: where the speech ends before its quiet tail (the server's ACTIVITY_END counts from it)
        self.log.write("user.say", src=SRC, conn=c.n if c else None, text=text, line=line, mode=mode,
                       **({"voiced_ms": speech.voiced_ms(voice)} if voice else {}))
        self.transcript.append(("user", text))
        if c is None:
            return
        if voice is None:
            ok = await c.send(lambda s: s.send_realtime_input(text=text))
            if not ok:
                self.log.write("user.say.failed", src=SRC, conn=c.n, line=line)
            return
        pcm = voice + speech.silence(int(self.p["speech_tail_ms"]))
        await self._speak(pcm, c, line)

    async def _speak(self, pcm: bytes, c: Connection, line: int, follow: bool = True) -> bool:
        """Stream `pcm` in 100 ms chunks at real-time pace. `follow`: each chunk goes to whatever
        connection is current then (the rest of the line after a recovery lands mid-utterance);
        else the line stays on `c` and stops where `c` is found lost or replaced. True when every
        chunk was handed to a connection that was still current and not known lost."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        failed: set[int] = set()
        whole = True
        for i, chunk in enumerate(speech.chunks(pcm, 100)):
            delay = t0 + i * 0.1 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not follow and (self.current is not c or c.lost or c.closed):
                return False
            cur = self.current or c      # a chunk goes to whatever connection is current now
            if cur.n in failed:
                continue                 # that socket is gone or blocked: the rest of the line is lost
            blob = types.Blob(data=chunk, mime_type="audio/pcm;rate=16000")
            if not await cur.send(lambda s: s.send_realtime_input(audio=blob)):
                failed.add(cur.n)
                whole = False
                self.log.write("user.say.failed", src=SRC, conn=cur.n, line=line, at_ms=i * 100)
        return whole

    # ---- the camera ----------------------------------------------------------------------------
    def start_video(self) -> None:
        """Frames every 1/video_fps s on whatever connection is current, until stop_video()."""
        fps = self._video_fps()
        if self._camera is not None and not self._camera.done():
            return
        c = self.current
        self.log.write("video.start", src=SRC, conn=c.n if c else None, fps=fps)
        self._camera = self.spawn(self._film(1.0 / fps), name="camera")

    def _video_fps(self) -> float:
        fps = float(self.p["video_fps"])
        if fps <= 0:
            raise LabError(f"client {self.name!r}: video_fps must be above 0, got {fps:g}")
        return fps

    async def stop_video(self) -> None:
        cam, self._camera = self._camera, None
        if cam is None or cam.done():
            return
        cam.cancel()
        await asyncio.gather(cam, return_exceptions=True)
        c = self.current
        self.log.write("video.stop", src=SRC, conn=c.n if c else None, frames=self._frames_made.made)

    async def _film(self, every_s: float) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        n = 0
        while True:
            cur = self.current
            if cur is not None and cur.usable:
                blob = types.Blob(data=self._frames_made.frame(n), mime_type=VIDEO_MIME)
                await cur.send(lambda s: s.send_realtime_input(video=blob))
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * every_s - loop.time()))

    async def audio_stream_end(self) -> None:
        """realtimeInput.audioStreamEnd on the current connection (002 sent it before closing)."""
        c = self.current
        ok = c is not None and await c.send(lambda s: s.send_realtime_input(audio_stream_end=True))
        self.log.write("user.audio_stream_end", src=SRC, conn=c.n if c else None, sent=bool(ok))

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
        elif what == "start_video":
            self.start_video()
        elif what == "stop_video":
            await self.stop_video()
        elif what == "audio_stream_end":
            await self.audio_stream_end()
        elif what == "reuse_old":
            target = c if c is not None and not c.closed else self._last_open_lost()
            if target is not None:
                target.revive()
                self.current = target
                await target.ping(float(self.p["ping_interval_s"]))
        else:
            raise LabError(f"client {self.name!r} has no action {what!r} (known: abort, close, resume, reuse_old, "
                           "start_video, stop_video, audio_stream_end)")

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
            if self._camera is not None and not self._camera.done():     # the run's frame count
                self.log.write("video.stop", src=SRC, conn=self.current.n if self.current else None,
                               frames=self._frames_made.made)
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
        turn = self._turns.setdefault(c.n, _Turn())
        if sc.model_turn is not None:
            for part in sc.model_turn.parts or []:
                data = part.inline_data.data if part.inline_data is not None else None
                if data:
                    now = self.log.now_ms()
                    first = not turn.audio
                    if first:
                        turn.audio = True
                        self.playback.begin_turn()
                    self.playback.add(now, len(data))
                    self.log.write("model.audio", src=SRC, conn=c.n, bytes=len(data), **({"first": True} if first else {}))
        if sc.output_transcription is not None and sc.output_transcription.text:
            turn.text.append(sc.output_transcription.text)
        if sc.input_transcription is not None and sc.input_transcription.text:
            turn.heard_text.append(sc.input_transcription.text)
        if sc.interrupted:
            self._turn_interrupted(c)
        if sc.turn_complete:
            self._turn_done(c)

    def _turn_interrupted(self, c: Connection) -> None:
        """The user barged in: the turn so far is cut (its text is a partial, not an answer)."""
        self.playback.interrupt(self.log.now_ms())
        turn = self._turns.setdefault(c.n, _Turn())
        text = "".join(turn.text).strip()
        heard = self.playback.end_turn() if turn.audio else None
        turn.text, turn.audio = [], False
        self.log.write("model.interrupted", src=SRC, conn=c.n, text=text)
        if text:
            self.transcript.append(("model", text))
        if heard is not None:
            self.log.write("user.heard", src=SRC, conn=c.n, text=text, start_ms=round(heard.start_ms, 1),
                           end_ms=round(heard.end_ms, 1), interrupted=True)

    def _turn_done(self, c: Connection) -> None:
        turn = self._turns.pop(c.n, None) or _Turn()
        text = "".join(turn.text).strip()
        heard = self.playback.end_turn() if turn.audio else None
        if turn.heard_text:
            self.log.write("user.transcript", src=SRC, conn=c.n, text="".join(turn.heard_text).strip())
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
        sched = self.p["scheduling"]
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
            try:
                c = self.new_conn("resume", self.handle, self.session_no)
            except Exception as e:                # before_connect refused it: nothing was opened
                self.log.write("resume.attempt", src=SRC, attempt=n, conn=None, why=why)
                self.log.write("resume.result", src=SRC, attempt=n, conn=None, ok=False, code=None,
                               reason=not_opened(e), latency_ms=0.0)
                return None
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
