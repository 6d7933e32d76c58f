"""The recovery client when the server still holds the lost session and refuses the new one too
(lab.clients.held): the backoff and the user's status line are pure; one fake-SDK run shows the
client telling the user at once, retrying spaced out, and restoring once a session is given."""
from __future__ import annotations

import asyncio
import contextlib

import pytest
from google.genai import errors as genai_errors

from lab.backend import Backend
from lab.clients import get
from lab.clients.base import ClientContext, Endpoint
from lab.clients.held import Backoff, held_status
from lab.clients.ledger import ToolCall
from lab.errors import LabError
from lab.events import Event, EventLog
from lab.report.metrics import held_metrics

from tests.unit.test_clients_logic import _FakeLiveSession


# ---- the backoff -------------------------------------------------------------------------------
def test_backoff_grows_to_its_cap_and_stops_at_its_span():
    b = Backoff(first_s=1.0, factor=2.0, max_s=10.0, for_s=600.0)
    assert [b.delay(k) for k in range(7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert b.next_delay(5, 589.0) == 10.0 and b.next_delay(5, 591.0) is None
    # a hold as long as 000's (~480 s) costs 4 rounds to reach the cap, then one per 10 s: no storm
    assert b.rounds_within(480.0) == 4 + (480 - 15) // 10
    assert Backoff(for_s=0.0).next_delay(0, 0.0) is None          # retry_for_s 0: give up at once


@pytest.mark.parametrize("args", [dict(first_s=0.0), dict(factor=0.5), dict(first_s=5.0, max_s=1.0),
                                  dict(for_s=-1.0)])
def test_backoff_refuses_a_shape_that_could_storm_or_never_start(args):
    with pytest.raises(LabError, match="recovery backoff"):
        Backoff(**args)


# ---- what the user is told -----------------------------------------------------------------------
def test_held_status_says_reconnecting_and_never_booked_before_the_backend():
    status, text = held_status([{"slot": "tomorrow 3pm", "state": "pending"}])
    assert status == "pending" and "reconnecting" in text and "still being processed" in text
    assert "is booked" not in text
    status, text = held_status([{"slot": "tomorrow 3pm", "state": "booked"}])
    assert status == "booked" and "is booked (confirmed by the booking system)" in text
    assert held_status([{"slot": "x", "state": "cancelled"}])[0] == "not_booked"
    status, text = held_status([], gave_up=True)
    assert status == "not_booked" and text.startswith("I could not reconnect") and "Nothing has been booked" in text


# ---- the metrics of a held run -----------------------------------------------------------------
def ev(kind, ms, **data):
    return Event(kind, 0.0, ms, "client", data)


def test_held_metrics_count_refusals_and_judge_the_status_lines_against_the_backend():
    events = [ev("backend.request", 900, job="J1"), ev("loss", 1000), ev("fallback.new_failed", 1300),
              ev("user.status", 1310, status="pending"), ev("fallback.new_failed", 2400),
              ev("backend.commit", 3000, job="J1"), ev("user.status", 3001, status="booked"),
              ev("user.status", 3500, status="pending")]          # stale: the backend had committed
    m = held_metrics(events, 1000)
    assert m == {"new_sessions_failed": 2, "loss_to_status_ms": 310, "false_status_lines": 1}
    assert held_metrics(events, None)["new_sessions_failed"] is None


# ---- the client, on a fake SDK ------------------------------------------------------------------
class _Session(_FakeLiveSession):
    """A healthy fake SDK session that also takes the restore."""

    async def send_client_content(self, turns, turn_complete=True):
        self.sent.append({"client_content": list(turns), "turn_complete": turn_complete})


class _HoldingLive:
    """genai aio.live: the first connect is healthy; the next `refuse` ones are closed 1011 during
    setup (the twin's held_sessions refusal); then every connect is accepted."""

    def __init__(self, refuse: int):
        self.refuse, self.connects, self.sessions = refuse, [], []
        self.aio = self.live = self

    def connect(self, model, config):
        n = len(self.connects) + 1
        handle = config.session_resumption.handle if config.session_resumption else None
        self.connects.append(("resume" if handle else "new", n))

        @contextlib.asynccontextmanager
        async def cm():
            if 1 < n <= 1 + self.refuse:
                raise genai_errors.APIError(1011, {"error": {"message": "Internal error encountered."}})
            s = _Session()
            self.sessions.append(s)
            yield s
        return cm()


def _held_client(refuse: int, **params):
    log = EventLog()
    be = Backend(log, commit_after_s=0.05)
    ep = Endpoint(base_url="https://127.0.0.1:9", api_key="test", ca_path=None)
    cl = get("recovery")(ClientContext(endpoint=ep, log=log, backend=be, params={
        "retry_first_s": 0.05, "retry_factor": 2.0, "retry_max_s": 0.2, **params}))
    cl.genai = _HoldingLive(refuse)
    return cl, log, be


def test_a_refused_fallback_tells_the_user_retries_spaced_out_and_restores_with_the_truth():
    async def main():
        cl, log, be = _held_client(refuse=5)
        try:
            await _refused_fallback(cl, log, be)
        finally:
            await cl.stop()
    asyncio.run(main())


async def _refused_fallback(cl, log, be):
    await cl.start()
    call = cl.ledger.add(ToolCall("fc-1", "book_slot", {"slot": "tomorrow 3pm"}, conn=1, session=1))
    cl.spawn(cl._run_tool(call), name="tool-fc-1")             # the booking the user asked for
    await asyncio.sleep(0.01)                                   # requested; it commits 50 ms later
    t_loss = log.now_ms()
    cl._on_lost(cl.current, 1000.0)                 # no handle: new sessions only
    await asyncio.wait_for(cl._recover_task, 5)
    failed = [e.ms for e in log.events if e.kind == "fallback.new_failed"]
    assert len(failed) == 5 and cl.ready.is_set() and log.find("session.restored")
    # spaced out on the backoff (0.05, 0.1, 0.2, 0.2 s between the rounds), not a storm
    gaps = [b - a for a, b in zip(failed, failed[1:])]
    assert all(g >= want * 1000 * 0.9 for g, want in zip(gaps, (0.05, 0.1, 0.2, 0.2))), gaps
    told = [e for e in log.events if e.kind == "user.status"]
    assert told[0].ms - t_loss < 100 and told[0]["status"] == "pending"     # at the first refusal
    assert [e["status"] for e in told] == ["pending", "booked"]             # and when it committed
    assert log.find("fallback.start")[0]["note"] is True and not log.find("fallback.failed")
    assert not [e for e in log.find("client.error") if e["task"].startswith("recovery-held")]
    restore = cl.genai.sessions[-1].sent[0]
    assert "booked (job J1)" in restore["client_content"][-1].parts[-1].text


def test_the_backoff_running_out_tells_the_user_and_gives_up():
    async def main():
        cl, log, be = _held_client(refuse=100, retry_for_s=0.3)
        try:
            await cl.start()
            cl._on_lost(cl.current, 1000.0)
            await asyncio.wait_for(cl._recover_task, 5)
            assert log.find("fallback.failed") and not cl.recovering and not cl.ready.is_set()
            assert 2 <= len(log.find("fallback.new_failed")) <= 5
            assert log.find("user.status")[-1]["text"].startswith("I could not reconnect")
        finally:
            await cl.stop()
    asyncio.run(main())
