"""The commit guard's decisions against the real backend, with the SDK's sending replaced by a list."""
from __future__ import annotations

import asyncio

import pytest

from lab.backend import Backend
from lab.clients.base import ClientContext, Endpoint
from lab.clients.guard import GuardClient
from lab.clients.ledger import ToolCall
from lab.events import EventLog


class Recorded(GuardClient):
    """Delivered results go to a list; the user's lines are only logged (no connection)."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.delivered: list[tuple[str, dict]] = []

    async def _deliver(self, call, result):
        self.ledger.set_result(call.id, result)
        self.delivered.append((call.id, dict(result)))


def guard(commit_after_s=0.4, **params):
    log = EventLog()
    backend = Backend(log, commit_after_s=commit_after_s, dedup=False)
    ctx = ClientContext(endpoint=Endpoint(base_url="https://127.0.0.1:9", api_key="k"), log=log, backend=backend,
                        params={"grace_s": 0.2, "record_frames": False, **params})
    return Recorded(ctx), backend, log


def call(g, cid, slot="tomorrow 3pm"):
    c = g.ledger.add(ToolCall(id=cid, name="book_slot", args={"slot": slot}, conn=1, session=1))
    return g.spawn(g._run_tool(c))


def kinds(log, kind):
    return [e for e in log.events if e.kind == kind]


STOP = "Actually, stop. Don't book it."


def test_a_stop_inside_the_window_withholds_the_side_effect():
    async def go():
        g, backend, log = guard()
        t = call(g, "c1")
        await asyncio.sleep(0.05)
        await g.say(STOP, 1)
        await t
        return g, backend, log
    g, backend, log = asyncio.run(go())
    assert g.delivered == [("c1", {"status": "cancelled", "slot": "tomorrow 3pm", "reason": "the user said stop"})]
    assert backend.ledger() == [] and backend.bookings() == 0
    assert kinds(log, "user.status")[-1]["status"] == "not_booked"


def test_without_a_stop_the_job_is_requested_after_the_window_and_commits():
    async def go():
        g, backend, log = guard()
        await call(g, "c1")
        return g, backend, log
    g, backend, log = asyncio.run(go())
    assert backend.bookings() == 1 and g.delivered[0][1]["status"] == "booked"
    req = kinds(log, "backend.request")[0]
    assert req.ms >= kinds(log, "guard.hold")[0].ms + 190     # held for the grace window first


def test_a_stop_after_the_window_cancels_the_pending_job_in_the_backend():
    async def go():
        g, backend, log = guard()
        t = call(g, "c1")
        await asyncio.sleep(0.3)                 # past the 0.2 s window, before the 0.4 s commit
        await g.say(STOP, 1)
        await t
        await asyncio.sleep(0.3)
        return g, backend, log
    g, backend, log = asyncio.run(go())
    assert backend.bookings() == 0 and kinds(log, "backend.cancel")
    assert g.delivered[0][1]["status"] == "cancelled"


def test_a_repeated_call_is_answered_from_the_first_and_books_once():
    async def go():
        g, backend, log = guard()
        t1 = call(g, "c1", "tomorrow 3pm")
        await asyncio.sleep(0.05)
        t2 = call(g, "c2", "the slot tomorrow at 3 pm")
        await asyncio.gather(t1, t2)
        return g, backend, log
    g, backend, log = asyncio.run(go())
    assert backend.bookings() == 1 and len(backend.ledger()) == 1
    assert sorted(cid for cid, r in g.delivered if r["status"] == "booked") == ["c1", "c2"]
    assert kinds(log, "guard.dedup")[0]["first_id"] == "c1"


def test_a_call_after_the_stop_is_refused_until_the_user_asks_again():
    async def go():
        g, backend, log = guard()
        await g.say(STOP, 0)
        await call(g, "late")
        await g.say("Book me the 3pm slot tomorrow, please.", 1)
        await call(g, "again")
        return g, backend, log
    g, backend, log = asyncio.run(go())
    assert g.delivered[0] == ("late", {"status": "cancelled", "slot": "tomorrow 3pm", "reason": "the user said stop"})
    assert g.delivered[1][0] == "again" and g.delivered[1][1]["status"] == "booked"
    assert kinds(log, "user.status")[0]["text"] == "Stopped: nothing was booked."


def test_a_stop_after_the_commit_tells_the_user_it_was_made():
    async def go():
        g, backend, log = guard(commit_after_s=0.05)
        await call(g, "c1")
        await g.say(STOP, 1)
        return backend, log
    backend, log = asyncio.run(go())
    assert backend.bookings() == 1 and kinds(log, "user.status")[-1]["status"] == "booked"


@pytest.mark.parametrize("name", ["grace_s", "cancel_pending", "status_turn", "answer_wait_s"])
def test_parameters_are_declared(name):
    assert name in GuardClient.declared_params()
