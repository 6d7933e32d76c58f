"""SessionManager: one continuous Live API session across reconnects, as seed 004's guide says.

A library for users (it imports nothing from the lab):

    sm = SessionManager(genai.Client(vertexai=True, ...), "gemini-live-2.5-flash", config)
    await sm.start()
    await sm.send_realtime_input(text="Book me the 3pm slot tomorrow, please.")
    async for msg in sm.receive():          # every server message, across reconnects
        ...
    await sm.close()

Built on the real google-genai SDK, not raw websockets: on Vertex (`vertexai=True`) the SDK sends
`SessionResumptionConfig(transparent=True)` as `"sessionResumption": {"transparent": true}` and parses
`last_consumed_client_message_index` (protocol.md §2/§3), and each `send_*` call is exactly one client
message, so the guide's index is the count of calls. On the Developer API the SDK refuses
`transparent` before any socket opens (ValueError, protocol.md §4) and the server would close such a
setup 1007 (seed 000): the manager then falls back to plain resumption (a handle, no index; `mode`
says "plain", `fallback_reason` why), where only messages that never reached a socket are resent.

The guide's rules (seed 004), and where each is kept:

1. `transparent` set in every setup (`_config`); 2. a resumable update's new_handle is stored
(`_on_message`); 3. the buffer (`_Buffer`): a message's index counts from 1 on each connection, the
first message written on a new connection is index 1, and an update's
lastConsumedClientMessageIndex removes the messages up to it; 4. a goAway reconnects at once with the
latest handle; a close 1000 or 1006 seen by the receive or the send path reconnects; any other error
stops the manager, and every later send/receive raises `SessionStopped` with that reason; a failed
reconnect is retried with exponential backoff (`Backoff`), and after `max_attempts` the manager stops;
5. on the new connection the whole buffer is written first, before any other message (sends wait
behind it), and the buffer is changed only by the next update, so a reconnect that fails mid-replay
replays all of it again. Gotcha "handle expiry": the service's refusal does not say why (the twin and
seed 000 answer a locked and an unknown handle alike, 1011), so after `fresh_after` refused attempts
with a handle the manager starts a fresh session (context lost; the unacknowledged messages are still
sent first on it).
"""
from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from google.genai import errors as genai_errors
from google.genai import types
from websockets.exceptions import ConnectionClosed

RECONNECT_CODES = (1000, 1006)      # seed 004 §4: the closes the manager reconnects on


class SessionStopped(Exception):
    """The manager stopped (the reason is the message); raised by every send/receive after it."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff between reconnect attempts: first_s, doubling, at most max_s, +-jitter."""
    first_s: float = 0.5
    max_s: float = 8.0
    jitter: float = 0.2
    max_attempts: int = 30

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.max_s, self.first_s * 2 ** max(0, attempt - 1))
        return max(0.0, base * (1 + rng.uniform(-self.jitter, self.jitter)))


class _Buffer:
    """The sent messages the server has not reported consumed, numbered on the current connection.

    items[j] is index `pruned + j + 1` of the connection; indices up to `sent` went out on it."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict]] = []
        self.pruned = 0         # indices of this connection already removed by updates
        self.sent = 0           # the last index written on this connection

    def new_connection(self) -> None:
        """seed 004 §3/§5: the first message on a new connection is index 1 (the items stay)."""
        self.pruned = self.sent = 0

    def unwritten(self) -> list[tuple[str, dict]]:
        return self.items[self.sent - self.pruned:]

    def consumed(self, index: int) -> int:
        """The server consumed up to `index` on this connection: drop those; how many were dropped."""
        upto = min(index, self.sent) - self.pruned
        if upto <= 0:
            return 0
        del self.items[:upto]
        self.pruned += upto
        return upto


class SessionManager:
    def __init__(self, client: Any, model: str, config: types.LiveConnectConfig | None = None, *,
                 transparent: bool = True, backoff: Backoff = Backoff(), fresh_after: int = 5,
                 on_event: Callable[..., None] | None = None, seed: int | None = None):
        self.client, self.model = client, model
        self.base_config = config or types.LiveConnectConfig()
        self.mode = "transparent" if transparent else "plain"
        self.fallback_reason: str | None = None
        self.backoff, self.fresh_after = backoff, int(fresh_after)
        self.handle: str | None = None
        self.stop_reason: str | None = None
        self.connections = 0            # connections opened (setup completed)
        self.session: Any = None        # the SDK AsyncSession in use
        self._cm: Any = None
        self._buffer = _Buffer()
        self._messages: asyncio.Queue = asyncio.Queue()
        self._write = asyncio.Lock()    # one writer: the replay, then the user's messages
        self._ready = asyncio.Event()   # a connection is up and its replay written
        self._reconnecting: asyncio.Task | None = None
        self._reader: asyncio.Task | None = None
        self._closed = False
        self._rng = random.Random(seed)
        self._emit = on_event or (lambda kind, **kw: None)

    # ---- the user's side -------------------------------------------------------------------
    async def start(self) -> None:
        """Open the first session; raises what the first connect raises (nothing to resume yet)."""
        await self._open(None, "initial")

    async def send_realtime_input(self, **kw: Any) -> None:
        await self._send("send_realtime_input", kw)

    async def send_client_content(self, **kw: Any) -> None:
        await self._send("send_client_content", kw)

    async def send_tool_response(self, **kw: Any) -> None:
        await self._send("send_tool_response", kw)

    async def receive(self) -> AsyncIterator[types.LiveServerMessage]:
        """Every server message of the session, across reconnects; SessionStopped when it stops."""
        while True:
            msg = await self._messages.get()
            if isinstance(msg, SessionStopped):
                self._messages.put_nowait(msg)      # every later receive raises it too
                raise msg
            yield msg

    async def close(self) -> None:
        """Leave: close the connection (1000) and stop; never raises."""
        self._closed = True
        self._stop("closed by the user")
        for t in (self._reconnecting, self._reader):
            if t is not None and t is not asyncio.current_task():
                t.cancel()
        await self._leave()

    @property
    def buffered(self) -> int:
        """Messages kept for a replay (sent, not yet reported consumed)."""
        return len(self._buffer.items)

    # ---- connections -------------------------------------------------------------------------
    def _config(self, handle: str | None) -> types.LiveConnectConfig:
        sr = types.SessionResumptionConfig(handle=handle, transparent=True if self.mode == "transparent" else None)
        return self.base_config.model_copy(update={"session_resumption": sr})

    async def _open(self, handle: str | None, purpose: str) -> None:
        """Connect (with `handle` to resume), replay the buffer, then start reading."""
        self._ready.clear()
        self._emit("connecting", purpose=purpose, resume=handle is not None)
        try:
            cm = self.client.aio.live.connect(model=self.model, config=self._config(handle))
            session = await cm.__aenter__()
        except ValueError as e:
            if self.mode != "transparent" or "transparent" not in str(e):
                raise
            await self._fall_back(f"the SDK refused transparent: {e}")
            return await self._open(handle, purpose)
        except genai_errors.APIError as e:
            if self.mode == "transparent" and e.code == 1007 and "transparent" in str(e.details or ""):
                await self._fall_back(f"the server refused transparent: {e.code} {e.details}")
                return await self._open(handle, purpose)
            raise
        self._cm, self.session = cm, session
        self.connections += 1
        self._emit("connected", purpose=purpose, conn=self.connections, session=session)
        async with self._write:
            self._buffer.new_connection()
            replay = len(self._buffer.items)
            if not await self._flush():
                raise ConnectionError("the connection closed during the replay")   # retried whole
            self._emit("replayed", conn=self.connections, messages=replay)
            self._ready.set()
        self._reader = asyncio.get_running_loop().create_task(self._read(session), name="sm-read")

    async def _fall_back(self, reason: str) -> None:
        self.mode, self.fallback_reason = "plain", reason
        self._emit("fallback", reason=reason)

    async def _leave(self) -> None:
        cm, self._cm, self.session = self._cm, None, None
        if cm is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(cm.__aexit__(None, None, None), 2.0)

    async def _read(self, session: Any) -> None:
        try:
            while True:
                async for msg in session.receive():     # ends at each turnComplete
                    self._on_message(msg)
                    if msg.go_away is not None:
                        self._emit("go_away", time_left=msg.go_away.time_left)
                        self._lost(session, "go_away")
                        return
        except genai_errors.APIError as e:
            self._closed_with(session, e.code, str(e.details or ""))
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else 1006
            self._closed_with(session, code, e.rcvd.reason if e.rcvd is not None else str(e))
        except asyncio.CancelledError:
            raise
        except Exception as e:      # a frame the SDK could not parse, ...: not a disconnection
            if session is self.session:
                self._stop(f"receive failed: {type(e).__name__}: {e}")

    def _on_message(self, msg: types.LiveServerMessage) -> None:
        u = msg.session_resumption_update
        if u is not None:
            if u.resumable and u.new_handle:
                self.handle = u.new_handle
            idx = u.last_consumed_client_message_index
            if self.mode == "transparent" and idx is not None:
                dropped = self._buffer.consumed(int(idx))
                self._emit("consumed", index=int(idx), dropped=dropped, kept=len(self._buffer.items))
        self._messages.put_nowait(msg)

    def _closed_with(self, session: Any, code: int | None, reason: str) -> None:
        if session is not self.session:
            return          # a connection the manager itself left (after a goAway, on close)
        self._emit("closed", code=code, reason=reason)
        if code in RECONNECT_CODES:
            self._lost(session, f"closed {code}")
        else:
            self._stop(f"the connection closed {code}: {reason}".strip())

    def _lost(self, session: Any, why: str) -> None:
        """The connection `session` is gone or going: reconnect (once, whoever saw it first)."""
        if session is not self.session or self.stop_reason is not None:
            return
        self._ready.clear()
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect(why), name="sm-reconnect")

    async def _reconnect(self, why: str) -> None:
        await self._leave()
        refused = 0
        for attempt in range(1, self.backoff.max_attempts + 1):
            fresh = self.handle is None or refused >= self.fresh_after
            if fresh and self.handle is not None:
                self._emit("fresh_session", after_refusals=refused)
                self.handle = None
            try:
                await self._open(self.handle, "new" if fresh else "resume")
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                code = e.code if isinstance(e, genai_errors.APIError) else None
                refused += 1 if code is not None else 0
                self._emit("reconnect_failed", attempt=attempt, why=why, code=code,
                           reason=f"{type(e).__name__}: {e}"[:200])
                await self._leave()
            await asyncio.sleep(self.backoff.delay(attempt, self._rng))
        self._stop(f"reconnect failed {self.backoff.max_attempts} times after {why}")

    def _stop(self, reason: str) -> None:
        if self.stop_reason is not None:
            return
        self.stop_reason = reason
        self._ready.set()       # wake senders: they raise
        self._emit("stopped", reason=reason)
        self._messages.put_nowait(SessionStopped(reason))

    # ---- sending -----------------------------------------------------------------------------
    async def _send(self, method: str, kw: dict) -> None:
        if self.stop_reason is not None:
            raise SessionStopped(self.stop_reason)
        self._buffer.items.append((method, kw))
        await self._ready.wait()
        if self.stop_reason is not None:
            raise SessionStopped(self.stop_reason)
        async with self._write:
            if self._ready.is_set():
                await self._flush()

    async def _flush(self) -> bool:
        """Write every buffered message not yet written on this connection, in order (holding _write);
        False when the connection closed under it (the rest stays buffered)."""
        session = self.session
        for method, kw in self._buffer.unwritten():
            try:
                await getattr(session, method)(**kw)
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd is not None else 1006
                self._closed_with(session, code, e.rcvd.reason if e.rcvd is not None else str(e))
                return False
            self._buffer.sent += 1
            if self.mode == "plain":        # no index will come: the socket took it, forget it
                self._buffer.items.pop(0)
                self._buffer.sent -= 1
        return True
