"""The commit guard: the stop study's follow-up (001, "What it means for an app"), as a client.

The Live API never cancels a pending tool call (no toolCallCancellation in 84 sessions), and the
model's sentence about the booking is not the booking. So the guard handles "stop" itself:

* **Grace window.** A book_slot call's side effect is held for `grace_s` before the backend is even
  asked (`guard.hold`). A stop inside the window withholds it: nothing is requested, the call is
  answered `cancelled` (`guard.cancel`).
* **Cancel while pending.** A stop after the window, before the job commits, cancels the job in the
  backend (`cancel_pending`; the fake service's cancel is the asyncio task's). After the commit
  there is nothing to cancel and the user is told so.
* **Dedupe by business key.** A repeated call for the same slot (the BLOCKING re-issue, a new id)
  starts nothing: it is answered from the first call's outcome (`guard.dedup`). A booking call
  that arrives after a stop (the early stop's late call) is refused, until the user asks again.
* **Every call id answered**, the held and the refused ones too, before the user's stop line is
  sent, so the model hears the outcome first.
* **Status from the backend.** After a stop the guard tells the user the backend's state itself
  (`user.status`, a client-side status line in the app) at once and again after every model turn
  that follows, so the model's sentence is never the last word on the booking.

The user's line is read by the app's own words (`lab.anchors.is_stop`): in speech mode the line's
text stands in for the app's speech recognition.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from lab.anchors import is_stop
from lab.backend import Job, business_key
from lab.clients.connection import SRC
from lab.clients.ledger import ToolCall
from lab.clients.sdk import SdkClient

_BOOK_RE = re.compile(r"\bbook", re.I)


def cancelled_result(slot: Any, why: str) -> dict[str, Any]:
    """The FunctionResponse for a side effect the guard withheld or cancelled."""
    return {"status": "cancelled", "slot": str(slot), "reason": why}


def status_text(state: str, slot: str) -> str:
    """What the app tells the user for one booking, from the backend's state."""
    if state == "booked":
        return f"Your booking for {slot} is made (the backend committed it before the stop)."
    if state == "pending":
        return f"Your booking for {slot} is still being processed."
    return f"Stopped: {slot} was not booked."


@dataclass
class _Booking:
    """One business key: the first call that asked for it and what became of it."""
    key: str
    slot: str
    first_id: str
    job: Job | None = None
    withheld: bool = False                   # stopped inside the grace window: never requested
    settled: asyncio.Event = field(default_factory=asyncio.Event)   # booked, cancelled or withheld

    @property
    def state(self) -> str:
        if self.withheld:
            return "cancelled"
        return self.job.state if self.job is not None else "pending"

    def result(self) -> dict[str, Any]:
        if self.job is not None:
            return self.job.result()
        return cancelled_result(self.slot, "the user said stop")


class GuardClient(SdkClient):
    name = "guard"
    DEFAULTS = {
        **SdkClient.DEFAULTS,
        "grace_s": 1.5,             # the side effect waits this long after the call
        "cancel_pending": True,     # a stop after the window cancels a job that has not committed
        "status_turn": True,        # tell the user the backend's status after a stop (user.status)
        "answer_wait_s": 1.0,       # how long the stop line waits for the cancelled answers to go out
    }

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._bookings: dict[str, _Booking] = {}
        self._stop: asyncio.Event | None = None     # set by the user's stop; made on the run's loop
        self._answered: dict[str, asyncio.Event] = {}

    def _stop_event(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    # ---- the user's lines ----------------------------------------------------------------------
    async def say(self, text: str, line: int) -> None:
        if is_stop(text):
            await self._on_stop()
            await super().say(text, line)
            if self.p["status_turn"]:
                self._tell_status()
            return
        if _BOOK_RE.search(text) and self._stop is not None and self._stop.is_set():
            self._stop = asyncio.Event()             # the user asks again: a new request may book
        await super().say(text, line)

    async def _on_stop(self) -> None:
        """Withhold what is held, cancel what is pending, and wait (briefly) until those calls are answered."""
        self._stop_event().set()
        if self.p["cancel_pending"] and self.backend is not None:
            for b in self._bookings.values():
                if b.job is not None and b.job.state == "pending":
                    if self.backend.cancel(b.job.id, why="the user said stop"):
                        self.log.write("guard.cancel", src=SRC, id=b.first_id, business_key=b.key, job=b.job.id,
                                       why="stop before the commit")
        waits = [e.wait() for e in self._answered.values() if not e.is_set()]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), float(self.p["answer_wait_s"]))
            except asyncio.TimeoutError:
                pass

    def _tell_status(self) -> None:
        c = self.current
        if not self._bookings:
            state, text = "not_booked", "Stopped: nothing was booked."
        else:
            parts = [(b.state, status_text(b.state, b.slot)) for b in self._bookings.values()]
            state = "booked" if any(s == "booked" for s, _ in parts) else (
                "pending" if any(s == "pending" for s, _ in parts) else "not_booked")
            text = " ".join(t for _, t in parts)
        self.log.write("user.status", src=SRC, conn=c.n if c else None, status=state, text=text)

    def _turn_done(self, c) -> None:
        super()._turn_done(c)
        if self.p["status_turn"] and self._stop is not None and self._stop.is_set():
            self._tell_status()

    # ---- tool calls ----------------------------------------------------------------------------
    async def _run_tool(self, call: ToolCall) -> None:
        if call.name != "book_slot" or self.backend is None:
            await super()._run_tool(call)
            return
        answered = self._answered.setdefault(call.id, asyncio.Event())
        try:
            await self._guard(call)
        finally:
            answered.set()

    async def _guard(self, call: ToolCall) -> None:
        slot = call.args.get("slot")
        key = business_key(slot)
        stop = self._stop_event()
        if stop.is_set():
            self.log.write("guard.cancel", src=SRC, id=call.id, business_key=key, job=None, why="call after the stop")
            await self._deliver(call, cancelled_result(slot, "the user said stop"))
            return
        b = self._bookings.get(key)
        if b is not None:
            self.log.write("guard.dedup", src=SRC, id=call.id, business_key=key, first_id=b.first_id)
            await b.settled.wait()
            call.job = b.job.id if b.job is not None else None
            await self._deliver(call, b.result())
            return
        b = self._bookings[key] = _Booking(key, str(slot), call.id)
        grace = float(self.p["grace_s"])
        self.log.write("guard.hold", src=SRC, id=call.id, business_key=key, grace_s=grace)
        try:
            await asyncio.wait_for(stop.wait(), grace)
            b.withheld = True
            b.settled.set()
            self.log.write("guard.cancel", src=SRC, id=call.id, business_key=key, job=None,
                           why="stop inside the grace window")
            await self._deliver(call, b.result())
            return
        except asyncio.TimeoutError:
            pass
        b.job = await self.backend.request(slot, call.id, name=call.name)
        call.job = b.job.id
        await b.job.settled()
        b.settled.set()
        await self._deliver(call, b.result())
