import asyncio
import json

import pytest

from lab.events import EventLog, read_events, redact_handle


def test_events_are_flushed_line_by_line(tmp_path):
    p = tmp_path / "events.jsonl"
    log = EventLog(p)
    log.write("run.start", src="agent", scenario="b1")
    # readable before close: a killed run still leaves its record
    lines = p.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["kind"] == "run.start"
    log.write("tool.call", src="client", id="fc-1", name="book_slot")
    log.close()
    evs = read_events(p)
    assert [e.kind for e in evs] == ["run.start", "tool.call"]
    assert evs[1]["id"] == "fc-1" and evs[1].ms >= evs[0].ms


def test_truncated_last_line_is_skipped(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_text('{"t": 1, "ms": 0, "src": "a", "kind": "x"}\n{"t": 2, "ms": 1, "sr')
    assert [e.kind for e in read_events(p)] == ["x"]


def test_secrets_are_refused():
    log = EventLog()
    with pytest.raises(ValueError):
        log.write("handle.update", handle="abc")
    with pytest.raises(ValueError):
        log.write("x", api_key="AIza...")
    r = redact_handle("secret-handle")
    assert r["handle_len"] == 13 and len(r["handle_sha"]) == 8 and "secret" not in json.dumps(r)


def test_wait_for_sees_past_and_future_events():
    async def main():
        log = EventLog()
        log.write("a", n=1)
        assert (await log.wait_for("a", timeout=1))["n"] == 1
        fut = asyncio.ensure_future(log.wait_for("b", timeout=1, n=2))
        await asyncio.sleep(0)
        log.write("b", n=1)
        log.write("b", n=2)
        return await fut

    assert asyncio.run(main())["n"] == 2
