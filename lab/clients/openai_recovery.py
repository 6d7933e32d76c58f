"""The recovery reference client for OpenAI Realtime: what a client must do where there is no resume.

The OpenAI Realtime API keeps nothing across sockets: a new socket is a new, empty session, and a
tool result sent into it for a call of the old one is an orphan (an `error`, docs/protocol-openai.md).
So the only way on after a loss is a new session the client restores itself. This client does what
`lab.clients.recovery` does for Gemini, minus the resume:

* Its own loss detection: a WebSocket ping every `ping_interval_s` on the SDK's connection, and the
  kernel's TCP as a witness (lab.clients.liveness: silent and nothing acknowledged for max(0.8 s,
  4 RTO) is a loss; silent `stall_after_s` whatever TCP says). The server's own close (the session
  cap's 1001, any close or reset) is a loss too, as is the app's own close or abort.
* On a loss: the old socket is closed in the background (a close frame, `close_wait_s`, then the
  transport dropped), and a new session is opened at once, retried every `retry_every_s` for
  `retry_for_s`.
* The new session is restored from the client's own transcript (its last `restore_turns` turns, as
  conversation items, with no response asked for: no filler turn) and a status note read from the
  backend, one "System note: ..." line per side effect, as a system message (`status_note`).
* The old call ids are never answered in the new session: a result of the lost session that comes
  later is told as a status note before the user's next line (`status_updates`). A call the new
  session's model issues again is deduplicated by business key in the backend and answered from
  the existing job.
* The user's lines said while recovering wait for the restored session (up to `hold_input_max_s`).
* A line the user said that got nothing back before the loss (no word, no call: its reply, if the
  server made one, went down with the old socket) is asked again in the new session: restored as
  the last user item with a `response.create` (`reask_unanswered`; `user.replay` how `restore`, as
  the Gemini recovery client records a line its restore carries). A line already answered, or
  whose answer was a call, is not: its outcome is in the status note.

It writes the events the Gemini recovery client writes for the same steps (loss.detected,
fallback.start, session.restored, session.note), so the report reads both alike.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from lab.backend import status_line
from lab.clients.connection import SRC
from lab.clients.liveness import LOST, Detector, read_tcp
from lab.clients.openai_realtime import OpenAIRealtimeClient, _abort
from lab.errors import LabError


# the server events that answer the user's line: the model's words (heard or read) or a call
_ANSWERING = frozenset({"response.output_audio_transcript.delta", "response.output_audio.delta",
                        "response.output_text.delta", "response.function_call_arguments.done"})


class OpenAIRecoveryClient(OpenAIRealtimeClient):
    name = "openai-recovery"
    DEFAULTS: dict[str, Any] = {
        **OpenAIRealtimeClient.DEFAULTS,
        "ping_interval_s": 0.25,
        "lost_after_s": 0.8,
        "lost_rtos": 4.0,
        "stall_after_s": 4.0,
        "tcp_witness": True,            # ask TCP before calling a silent connection lost
        "close_wait_s": 2.0,            # the old socket's close handshake, then its transport is dropped
        "retry_every_s": 1.0,           # a new session that failed to open is tried again this often
        "retry_for_s": 600.0,
        "restore_turns": 6,
        "status_note": True,            # the restore carries the backend's status of each side effect
        "status_updates": True,         # a result of the lost session that comes later: a note before the next line
        "hold_input_max_s": 30.0,
        "reask_unanswered": True,       # the user's last line, unanswered at the loss, asked again
    }

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self.transcript: list[tuple[str, str]] = []     # (user | assistant, text), as the user saw it
        self.call_conn: dict[str, int] = {}             # call id -> the connection (session) that issued it
        self.ready = asyncio.Event()                    # a usable session (cleared while recovering)
        self.recovering = False
        self._notes: list[str] = []                     # status lines owed to the current session
        self._closing: set[int] = set()                 # connections this client is ending itself
        self._stopping = False
        self._heard = time.monotonic()
        self._unanswered: tuple[str, int] | None = None     # the user's last line while nothing came back

    # ---- Client interface --------------------------------------------------------------------
    async def start(self) -> None:
        await super().start()
        self.ready.set()
        self._watch(self.conn)

    async def say(self, text: str, line: int) -> None:
        if not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), float(self.p["hold_input_max_s"]))
            except asyncio.TimeoutError:
                pass        # said into whatever there is: a lost line is what the user would find
        self.transcript.append(("user", text))
        self._unanswered = (text, line)
        await self._send_notes()
        await super().say(text, line)

    async def action(self, what: str, **kw: Any) -> None:
        # the app's own close or abort: the receive loop's end starts the recovery, as any loss does
        await super().action(what, **kw)

    async def stop(self) -> None:
        self._stopping = True
        await super().stop()

    # ---- detection ---------------------------------------------------------------------------
    def _on_event(self, ev: Any) -> None:
        self._heard = time.monotonic()
        if ev.type in _ANSWERING:
            self._unanswered = None
        super()._on_event(ev)

    def _watch(self, conn: Any) -> None:
        self._heard = time.monotonic()
        self._spawn(self._liveness(conn, self.n), f"openai-liveness-{self.n}")

    async def _liveness(self, conn: Any, n: int) -> None:
        """Ping every ping_interval_s; a pong or any event is hearing from the server. LOST by the
        detector's rule (lab.clients.liveness) is a loss of this connection."""
        ws = getattr(conn, "_connection", None)
        det = Detector(lost_after_s=float(self.p["lost_after_s"]), lost_rtos=float(self.p["lost_rtos"]),
                       stall_after_s=float(self.p["stall_after_s"]))
        every = float(self.p["ping_interval_s"])
        sock = ws.transport.get_extra_info("socket") if ws is not None and ws.transport is not None else None
        while self.conn is conn and not self._stopping:
            try:
                waiter = await ws.ping()
                waiter.add_done_callback(lambda _f: setattr(self, "_heard", time.monotonic())
                                         if self.conn is conn else None)
            except Exception:
                return          # the socket is closing: the receive loop's end says so
            await asyncio.sleep(every)
            silent = time.monotonic() - self._heard
            tcp = read_tcp(sock) if self.p["tcp_witness"] else None
            if self.conn is conn and det.judge(silent, tcp, ping_interval_s=every) == LOST:
                witness = ({"ack_silent_ms": round(tcp.ack_silent_s * 1000, 1), "rto_ms": round(tcp.rto_s * 1000, 1),
                            "rtt_ms": round(tcp.rtt_s * 1000, 1), "unacked": tcp.unacked} if tcp else {})
                self.log.write("loss.detected", src=SRC, conn=n, silent_ms=round(silent * 1000, 1), **witness)
                self._lost(conn, "silence")
                return

    def _ended(self, conn: Any, code: int | None) -> None:
        if self.conn is conn and not self._stopping:
            self.log.write("loss.detected", src=SRC, conn=self.n, silent_ms=None)
            self._lost(conn, f"closed {code}")

    def _lost(self, conn: Any, cause: str) -> None:
        if self.recovering:
            return
        self.recovering = True
        self.ready.clear()
        self._spawn(self._recover(conn, cause), "openai-recover")

    # ---- the new session ---------------------------------------------------------------------
    async def _recover(self, lost: Any, cause: str) -> None:
        old_n = self.n
        self.conn = None            # nothing is sent on the lost session from here on
        self._spawn(self._close_old(lost), "openai-close-old")
        t0 = time.monotonic()
        new = None
        while new is None and not self._stopping:
            try:
                new = await self._open("new")
            except LabError:        # refused by before_connect (the live budget; _open recorded it): asking
                self.recovering = False     # again is refused again, and the agent stops the run on the record
                return
            except Exception as e:
                self.log.write("fallback.new_failed", src=SRC, error=f"{type(e).__name__}: {e}"[:200])
                if time.monotonic() - t0 >= float(self.p["retry_for_s"]):
                    self.log.write("fallback.failed", src=SRC, conn=old_n)
                    self.recovering = False
                    return
                await asyncio.sleep(float(self.p["retry_every_s"]))
        if new is None:
            return
        note = self.backend.status_note() if (self.p["status_note"] and self.backend is not None) else ""
        reask = self._unanswered if self.p["reask_unanswered"] else None
        turns = self._restore_turns(drop_last=reask is not None)
        self.log.write("fallback.start", src=SRC, conn=self.n, note=bool(note), turns=len(turns), old_conn=old_n)
        self._notes = []        # the note below says everything the backend knows now
        for role, text in turns:
            await new.conversation.item.create(item={"type": "message", "role": role, "content": [
                {"type": "input_text" if role == "user" else "output_text", "text": text}]})
        if note:
            await new.conversation.item.create(item={"type": "message", "role": "system",
                                                     "content": [{"type": "input_text", "text": note}]})
        if reask is not None:
            # after the note, so the answer knows the side effects' state
            text, line = reask
            await new.conversation.item.create(item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": text}]})
            await new.response.create()
            self.log.write("user.replay", src=SRC, conn=self.n, line=line, how="restore")
        superseded = [cid for cid, n in self.call_conn.items() if n != self.n]
        self.log.write("session.restored", src=SRC, conn=self.n, note=bool(note), turns=len(turns),
                       superseded=superseded)
        self._recv = self._spawn(self._receive(new), "openai-recv")
        self._watch(new)
        self.recovering = False
        self.ready.set()

    def _restore_turns(self, drop_last: bool = False) -> list[tuple[str, str]]:
        """The last restore_turns turns of the transcript, consecutive turns of one role joined
        (`drop_last`: without its last line, which is asked again on its own)."""
        out: list[tuple[str, str]] = []
        for role, text in (self.transcript[:-1] if drop_last else self.transcript):
            if out and out[-1][0] == role:
                out[-1] = (role, f"{out[-1][1]} {text}")
            elif text.strip():
                out.append((role, text.strip()))
        k = int(self.p["restore_turns"])
        return out[-k:] if k > 0 else []

    async def _close_old(self, conn: Any) -> None:
        """A close frame on the old socket (if the path is back it reaches the server), then the
        transport dropped: the server never keeps a connection this client has left."""
        try:
            await asyncio.wait_for(conn.close(), float(self.p["close_wait_s"]))
        except BaseException:
            pass
        _abort(conn)

    # ---- what the user was told, and the tools -------------------------------------------------
    def _response_done(self, response: Any) -> None:
        text = "".join(self._text).strip()
        if text and getattr(response, "status", None) != "cancelled":
            self.transcript.append(("assistant", text))
        super()._response_done(response)

    def _on_call(self, call_id: str, name: str, arguments: str) -> None:
        self.call_conn[call_id] = self.n
        super()._on_call(call_id, name, arguments)

    async def _run_tool(self, call_id: str, name: str, args: dict) -> None:
        """The backend's job (deduplicated by business key: a call issued again is answered from the
        existing job); its result goes only to the session that issued the call. A result of a
        replaced session becomes a status note for the current one, before the user's next line."""
        result = await self._result(call_id, name, args)
        n, conn = self.call_conn.get(call_id), self.conn
        if n == self.n and conn is not None:
            await self._deliver(conn, n, call_id, name, result)
            return
        self.log.write("tool.response", src=SRC, conn=n, id=call_id, name=name, status=result.get("status"),
                       job=result.get("job"), sent=False)
        job = self.backend.job(result["job"]) if self.backend is not None and result.get("job") else None
        if self.p["status_updates"] and job is not None:
            line = status_line(job)
            if line not in self._notes:
                self._notes.append(line)

    async def _send_notes(self) -> None:
        """Status lines owed to the current session, as one system message before the user's line."""
        conn = self.conn
        if not self._notes or conn is None:
            return
        text = "\n".join(self._notes)
        self._notes = []
        ok = True
        try:
            await conn.conversation.item.create(item={"type": "message", "role": "system",
                                                      "content": [{"type": "input_text", "text": text}]})
        except Exception:
            ok = False
        self.log.write("session.note", src=SRC, conn=self.n, text=text, sent=ok)
