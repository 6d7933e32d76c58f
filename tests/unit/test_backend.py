import asyncio

from lab.backend import Backend, business_key
from lab.events import EventLog


def test_business_key_folds_wording():
    assert business_key("Tomorrow 3pm") == business_key("tomorrow at 3 p.m.") == business_key("the 3:00 PM slot tomorrow")
    assert business_key("tomorrow 3pm") != business_key("tomorrow 4pm")


def test_request_commits_after_delay_and_dedups_by_key():
    async def main():
        log = EventLog()
        b = Backend(log, commit_after_s=0.05)
        j1 = await b.request("tomorrow 3pm", "fc-1")
        assert b.status("tomorrow 3pm") == "pending" and j1.state == "pending"
        assert "still being processed (job J1)" in b.status_note()
        j2 = await b.request("tomorrow at 3pm", "fc-2")       # the model re-issues with a new id
        assert j2 is j1 and j1.call_ids == ["fc-1", "fc-2"]
        await j1.wait(1.0)
        assert b.status(business_key("tomorrow 3pm")) == "booked" and b.bookings() == 1
        j3 = await b.request("tomorrow 3pm", "fc-3")          # after the commit: still the same job
        assert j3 is j1 and j3.booked
        kinds = [e.kind for e in log.events]
        assert kinds.count("backend.request") == 1 and kinds.count("backend.commit") == 1
        assert kinds.count("tool.dedup") == 2
        c = log.find("backend.commit")[0]
        assert c["job"] == "J1" and c["call_id"] == "fc-1" and c["business_key"] == "3pm tomorrow"
        assert b.status_note() == "System note: book_slot(slot='tomorrow 3pm') -> booked (job J1)"
        assert b.status("never asked") is None
        assert [r["state"] for r in b.ledger()] == ["booked"]
    asyncio.run(main())


def test_one_line_per_side_effect_and_no_dedup_mode():
    async def main():
        b = Backend(None, commit_after_s=10, dedup=False)
        await b.request("tomorrow 3pm", "a")
        await b.request("tomorrow 3pm", "b")
        await b.request("friday 9am", "c")
        lines = b.status_note().splitlines()
        assert len(lines) == 3 and all(l.startswith("System note: book_slot(") for l in lines)
        assert b.bookings() == 0
        await b.aclose()
        assert Backend().status_note() == ""
    asyncio.run(main())
