"""The backend's cancel (the guard's side) and its dedup switch (the stop study's fake service)."""
from __future__ import annotations

import asyncio

from lab.backend import Backend
from lab.events import EventLog


def test_cancel_stops_a_pending_commit_and_is_refused_after_it():
    async def go():
        log = EventLog()
        b = Backend(log, commit_after_s=0.1)
        j = await b.request("tomorrow 3pm", "c1")
        assert b.cancel(j.id, why="test") and not b.cancel(j.id)
        await j.settled()
        await asyncio.sleep(0.15)
        k = await b.request("friday 9am", "c2")
        await k.wait()
        return b, j, log
    b, j, log = asyncio.run(go())
    assert j.state == "cancelled" and j.result()["status"] == "cancelled" and b.bookings() == 1
    assert not b.cancel("J2")                     # committed: nothing to cancel
    assert [e.kind for e in log.events if e.kind.startswith("backend.")] == [
        "backend.request", "backend.cancel", "backend.request", "backend.commit"]
    assert "cancelled" in b.status_note()


def test_without_dedup_every_request_books():
    async def go():
        b = Backend(None, commit_after_s=0.01, dedup=False)
        j1 = await b.request("tomorrow 3pm", "c1")
        j2 = await b.request("tomorrow at 3 pm", "c2")
        await asyncio.gather(j1.wait(), j2.wait())
        return b
    assert asyncio.run(go()).bookings() == 2
