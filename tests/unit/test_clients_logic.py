"""The clients' logic without sockets: ledger, replay of every owed result, restore text, schedule,
registry. A fake connection stands in for the SDK session where a client method is exercised."""
import asyncio
import sys
import types as pytypes

import pytest

from lab.backend import Backend
from lab.clients import get, names
from lab.clients.base import ClientContext, Endpoint
from lab.clients.ledger import ToolCall, ToolLedger
from lab.clients.restore import merge_turns, restore_contents
from lab.clients.schedule import ResumeSchedule
from lab.errors import LabError
from lab.events import EventLog


# ---- ledger ------------------------------------------------------------------------------------
def test_ledger_owes_every_result_until_a_pong_confirms_it():
    led = ToolLedger()
    led.add(ToolCall("fc-1", "book_slot", {"slot": "tomorrow 3pm"}, conn=1, session=1))
    led.add(ToolCall("fc-2", "book_slot", {"slot": "friday 9am"}, conn=1, session=1))
    led.add(ToolCall("fc-3", "book_slot", {"slot": "monday 1pm"}, conn=5, session=2))
    assert [c.id for c in led.unanswered(1)] == ["fc-1", "fc-2"]
    led.set_result("fc-1", {"status": "booked", "job": "J1"})
    led.set_result("fc-2", {"status": "booked", "job": "J2"})
    # both were produced while no connection was usable: both are owed, in call order
    assert [c.id for c in led.owed(1)] == ["fc-1", "fc-2"]
    # sent on conn 2 at t=10; a pong for a ping sent at t=9 proves nothing, one sent at t=11 does
    led.mark_sent("fc-1", 2, 10.0)
    assert led.confirm(2, 9.0) == [] and [c.id for c in led.owed(1)] == ["fc-1", "fc-2"]
    assert led.confirm(3, 11.0) == []                      # another connection's pong
    assert led.confirm(2, 11.0) == ["fc-1"]
    assert [c.id for c in led.owed(1)] == ["fc-2"]
    assert led.owed(2) == []


def test_superseded_calls_are_never_owed():
    led = ToolLedger()
    led.add(ToolCall("fc-1", "book_slot", {}, conn=1, session=1))
    led.set_result("fc-1", {"status": "booked"})
    assert [c.id for c in led.supersede(1)] == ["fc-1"]
    assert led.owed(1) == [] and led.unanswered(1) == []


# ---- restore -----------------------------------------------------------------------------------
def test_restore_is_transcript_plus_note_with_no_filler_turn():
    tr = [("user", "Book me the 3pm slot tomorrow, please."), ("model", ""), ("model", "Sure."),
          ("user", "Thanks"), ("user", "Is it done?")]
    assert merge_turns(tr) == [("user", "Book me the 3pm slot tomorrow, please."), ("model", "Sure."),
                               ("user", "Thanks Is it done?")]
    note = "System note: book_slot(slot='tomorrow 3pm') -> booked (job J1)"
    cs = restore_contents(tr, note, max_turns=6)
    assert [c.role for c in cs] == ["user", "model", "user"]
    assert cs[-1].parts[-1].text == note                    # the note rides on the last user turn
    texts = [p.text for c in cs for p in c.parts]
    assert "." not in [t.strip() for t in texts]
    # the last turn is the model's: the note is its own user turn
    cs2 = restore_contents([("user", "hi"), ("model", "hello")], note, max_turns=6)
    assert [c.role for c in cs2] == ["user", "model", "user"] and cs2[-1].parts[0].text == note
    # max_turns keeps the last turns only; nothing to restore -> nothing sent
    assert len(restore_contents(tr, None, max_turns=1)) == 1
    assert restore_contents([], None) == []
    # without the note: only the transcript
    assert all("System note" not in p.text for c in restore_contents(tr, None) for p in c.parts)


# ---- the probe's schedule ----------------------------------------------------------------------
def _drive(s: ResumeSchedule, refuse_latency=0.6, until=100.0):
    times, now = [], 0.0
    while True:
        at = s.next_at(now)
        if at is None or at > until:
            return times
        times.append(round(at, 3))
        s.attempted(at)
        now = at + refuse_latency
        s.refused(now)


def test_schedule_at_detection_then_every_10s_for_25s():
    assert _drive(ResumeSchedule(True, 10.0, 25.0)) == [0.0, 10.0, 20.0]


def test_schedule_quick_retry_after_first_refusal_only():
    assert _drive(ResumeSchedule(True, 10.0, 25.0, retry_after_refusal_s=1.0)) == [0.0, 1.6, 10.0, 20.0]


def test_schedule_without_detection_attempt_and_explicit_offsets():
    assert _drive(ResumeSchedule(False, 10.0, 10.0)) == []
    assert _drive(ResumeSchedule(True, 0, None, offsets_s=[0, 1.8, 3.4, 5.9])) == [0.0, 1.8, 3.4, 5.9]


# ---- registry ----------------------------------------------------------------------------------
def test_registry_names_and_unknown():
    assert set(names()) == {"probe", "recovery", "naive", "recovery-sequential"}
    assert get("recovery").name == "recovery"
    # the study's sequential pattern is the reference client with the study's timing, nothing else
    seq = get("recovery-sequential")
    assert issubclass(seq, get("recovery")) and seq.name == "recovery-sequential"
    assert (seq.DEFAULTS["hedge"], seq.DEFAULTS["lost_after_s"], seq.DEFAULTS["resume_window_s"]) == (False, 2.0, 4.0)
    with pytest.raises(LabError) as e:
        get("nope")
    assert "probe" in str(e.value) and "pkg.mod:Class" in str(e.value)


def test_registry_loads_a_users_client_by_module_path(monkeypatch):
    from lab.clients.base import Client

    mod = pytypes.ModuleType("my_lab_ext")

    class Mine(Client):
        name = "mine"
        async def start(self): ...
        async def say(self, text, line): ...
        async def action(self, what, **kw): ...
        def flow(self): return None
        async def stop(self): ...

    class Half:
        async def start(self): ...

    mod.Mine, mod.Half = Mine, Half
    monkeypatch.setitem(sys.modules, "my_lab_ext", mod)
    assert get("my_lab_ext:Mine") is Mine
    with pytest.raises(LabError, match="missing"):
        get("my_lab_ext:Half")
    with pytest.raises(LabError, match="no class"):
        get("my_lab_ext:Nope")
    with pytest.raises(LabError, match="cannot import"):
        get("no_such_module_xyz:Foo")


# ---- a client's buffering and replay, with a fake connection -------------------------------------
class FakeSession:
    def __init__(self):
        self.tool_responses = []
        self.client_content = []

    async def send_tool_response(self, function_responses):
        self.tool_responses.append(list(function_responses))

    async def send_client_content(self, turns, turn_complete=True):
        self.client_content.append((turns, turn_complete))


class FakeConn:
    def __init__(self, n, session_no, usable=True):
        self.n, self.session_no, self.usable, self.closed = n, session_no, usable, False
        self.s = FakeSession()

    async def send(self, fn):
        await fn(self.s)
        return True


def _client(name, **params):
    log = EventLog()
    be = Backend(log, commit_after_s=0.05)
    ep = Endpoint(base_url="https://127.0.0.1:9", api_key="test", ca_path=None)
    return get(name)(ClientContext(endpoint=ep, log=log, backend=be, params=params)), log, be


def test_all_results_produced_while_down_are_replayed_in_one_message():
    async def main():
        cl, log, be = _client("recovery")
        old = FakeConn(1, 1, usable=False)       # the lost connection
        cl.current, cl.session_no = old, 1
        for i, slot in enumerate(["tomorrow 3pm", "friday 9am"], 1):
            call = cl.ledger.add(ToolCall(f"fc-{i}", "book_slot", {"slot": slot}, conn=1, session=1))
            await cl._run_tool(call)              # commits, finds no usable connection: owed
        assert [c.id for c in cl.ledger.owed(1)] == ["fc-1", "fc-2"] and old.s.tool_responses == []
        new = FakeConn(2, 1)                      # the resumed connection
        await cl.accept_resume(new)
        assert len(new.s.tool_responses) == 1
        assert [fr.id for fr in new.s.tool_responses[0]] == ["fc-1", "fc-2"]
        assert all(fr.response["status"] == "booked" for fr in new.s.tool_responses[0])
        resp = log.find("tool.response")
        assert [e["id"] for e in resp] == ["fc-1", "fc-2"] and all(e["replay"] for e in resp)
        assert cl.ready.is_set()
    asyncio.run(main())


def test_reissued_call_in_new_session_is_answered_from_the_existing_job():
    async def main():
        cl, log, be = _client("recovery")
        cl.current, cl.session_no = FakeConn(1, 1, usable=False), 1
        c1 = cl.ledger.add(ToolCall("fc-1", "book_slot", {"slot": "tomorrow 3pm"}, conn=1, session=1))
        await cl._run_tool(c1)
        cl.ledger.supersede(1)                    # fallback: the old id is never answered
        new = FakeConn(3, 2)
        cl._adopt(new)
        c2 = cl.ledger.add(ToolCall("fc-9", "book_slot", {"slot": "tomorrow at 3pm"}, conn=3, session=2))
        await cl._run_tool(c2)
        sent = [fr for msg in new.s.tool_responses for fr in msg]
        assert [fr.id for fr in sent] == ["fc-9"] and sent[0].response["job"] == "J1"
        assert be.bookings() == 1 and log.find("tool.dedup")[0]["id"] == "fc-9"
        assert all(e["id"] != "fc-1" for e in log.find("tool.response"))
    asyncio.run(main())


def test_status_update_for_a_job_of_the_replaced_session_goes_before_the_next_line():
    async def main():
        cl, log, be = _client("recovery")
        cl.current, cl.session_no = FakeConn(1, 1, usable=False), 1
        c1 = cl.ledger.add(ToolCall("fc-1", "book_slot", {"slot": "tomorrow 3pm"}, conn=1, session=1))
        c1.superseded = True
        new = FakeConn(3, 2)
        cl._adopt(new)
        await cl._run_tool(c1)                    # commits after the fallback
        assert new.s.tool_responses == []
        await cl._before_say()
        (turns, complete), = new.s.client_content
        assert complete is False and "booked (job J1)" in turns[0].parts[0].text
    asyncio.run(main())


def test_probe_can_withhold_the_pre_drop_call():
    async def main():
        cl, log, be = _client("probe", answer_pending_after_resume=False)
        cl.current, cl.session_no = FakeConn(1, 1, usable=False), 1
        c1 = cl.ledger.add(ToolCall("fc-1", "book_slot", {"slot": "tomorrow 3pm"}, conn=1, session=1))
        await cl._run_tool(c1)
        new = FakeConn(2, 1)
        await cl.accept_resume(new)
        assert new.s.tool_responses == [] and log.find("tool.withheld")[0]["id"] == "fc-1"
    asyncio.run(main())
