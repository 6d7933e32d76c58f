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
    assert set(names()) == {"probe", "recovery", "naive", "recovery-sequential", "guard", "session-manager", "openai",
                           "openai-recovery"}
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


# ---- parameters: every read is a declared name --------------------------------------------------
def test_params_refuse_an_undeclared_name_and_record_what_was_given():
    from lab.clients.params import Params, UndeclaredParam

    p = Params("probe", {"resume_every_s": 10.0, "voice": None}, {"resume_every_s": 5, "only_for_naive": 1})
    assert p["resume_every_s"] == 5 and p["voice"] is None and "voice" in p
    with pytest.raises(UndeclaredParam, match="'resume_evry_s'.*declared: resume_every_s, voice"):
        p["resume_evry_s"]
    # a key given for another client (under `all:`) is recorded, but this client cannot read it
    assert "only_for_naive" not in p
    with pytest.raises(UndeclaredParam):
        p["only_for_naive"]
    assert p.recorded(omit=frozenset({"voice"})) == {"resume_every_s": 5, "only_for_naive": 1}


def _param_reads(cls_node):
    """Names read as self.p["x"] (or p["x"] after p = self.p) inside one class's source."""
    import ast
    def is_params(v):
        return (isinstance(v, ast.Attribute) and v.attr == "p" and isinstance(v.value, ast.Name)
                and v.value.id == "self") or (isinstance(v, ast.Name) and v.id == "p")
    return {n.slice.value for n in ast.walk(cls_node)
            if isinstance(n, ast.Subscript) and is_params(n.value) and isinstance(n.slice, ast.Constant)}


def test_every_parameter_a_client_reads_is_in_its_defaults():
    import ast
    import importlib
    import inspect

    from lab.clients.base import Client
    from lab.clients.sdk import SdkClient

    reads_seen = 0
    for mod_name in ("lab.clients.sdk", "lab.clients.probe", "lab.clients.naive", "lab.clients.recovery",
                     "lab.clients.sequential", "lab.clients.managed", "lab.clients.openai_realtime"):
        mod = importlib.import_module(mod_name)
        for node in ast.parse(inspect.getsource(mod)).body:
            cls = getattr(mod, node.name, None) if isinstance(node, ast.ClassDef) else None
            if not (isinstance(cls, type) and issubclass(cls, Client)):
                continue
            reads = _param_reads(node)
            reads_seen += len(reads)
            assert reads <= set(cls.DEFAULTS), f"{cls.__name__} reads undeclared {sorted(reads - set(cls.DEFAULTS))}"
    assert reads_seen > 20                       # the scan did find the reads
    for name in names():                         # a subclass keeps every parameter its base reads
        if issubclass(get(name), SdkClient):
            assert set(SdkClient.DEFAULTS) <= set(get(name).DEFAULTS), name


# ---- a connection speaks to its owner only through ConnectionEvents ------------------------------
class _FakeWs:
    local_address = ("10.9.0.2", 40001)
    remote_address = ("10.9.0.1", 443)
    transport = None
    protocol = None

    def __init__(self, answer_pings=True):
        self.answer_pings = answer_pings

    async def ping(self):
        fut = asyncio.get_running_loop().create_future()
        if self.answer_pings:
            fut.set_result(0.0)
        return fut

    async def close(self, code=1000):
        pass


class _FakeLiveSession:
    """An SDK AsyncSession: yields `messages`, then ends with `end` (or waits forever if None)."""

    def __init__(self, messages=(), end=None, answer_pings=True):
        self._ws = _FakeWs(answer_pings)
        self.setup_complete = None
        self.messages, self.end = list(messages), end
        self.sent = []

    async def receive(self):
        for m in self.messages:
            yield m
        self.messages = []
        if self.end is None:
            await asyncio.Event().wait()
        raise self.end

    async def send_realtime_input(self, **kw):
        self.sent.append(kw)

    async def send_tool_response(self, function_responses):
        self.sent.append({"tool_response": list(function_responses)})


def _connect_to(session):
    import contextlib

    @contextlib.asynccontextmanager
    async def cm():
        yield session
    return cm


class _Recorder:
    def __init__(self):
        self.calls = []

    def events(self):
        from lab.clients.connection import ConnectionEvents
        return ConnectionEvents(message=lambda c, m: self.calls.append(("message", c.n, m)),
                                pong=lambda c, t: self.calls.append(("pong", c.n)),
                                lost=lambda c, ms: self.calls.append(("lost", c.n, ms)),
                                closed=lambda c, code, reason, by: self.calls.append(("closed", c.n, code, reason)))


def test_connection_reports_messages_pongs_and_close_through_its_events():
    from google.genai import types as gt
    from websockets.exceptions import ConnectionClosed
    from websockets.frames import Close

    from lab.clients.connection import Connection, Timing

    async def main():
        log, rec = EventLog(), _Recorder()
        msg = gt.LiveServerMessage(go_away=gt.LiveServerGoAway(time_left="5s"))
        s = _FakeLiveSession([msg], end=ConnectionClosed(Close(1011, "Internal error encountered."), None))
        c = Connection(4, "resume", "h", 2, connect=_connect_to(s), log=log, events=rec.events(),
                       timing=Timing(ping_interval_s=0.02, lost_after_s=5.0, send_timeout_s=1.0))
        await c.open(timeout=2)
        await asyncio.wait_for(c.closed_event.wait(), 2)
        assert c.flow() == ("10.9.0.2", 40001, "10.9.0.1", 443)
        assert ("message", 4, msg) in rec.calls
        assert rec.calls[-1] == ("closed", 4, 1011, "Internal error encountered.")
        op, = log.find("conn.open")
        assert (op["conn"], op["purpose"], op["session"], op["local"]) == (4, "resume", 2, "10.9.0.2:40001")
        assert log.find("conn.closed", conn=4)[0]["code"] == 1011
        assert await c.send(lambda x: x.send_realtime_input(text="late")) is False   # gone: not sent
    asyncio.run(main())


def test_connection_reports_a_silent_loss_once():
    from lab.clients.connection import Connection, Timing

    async def main():
        log, rec = EventLog(), _Recorder()
        s = _FakeLiveSession(answer_pings=False)          # no frame, no pong: a dead path
        c = Connection(1, "initial", None, 1, connect=_connect_to(s), log=log, events=rec.events(),
                       timing=Timing(ping_interval_s=0.05, lost_after_s=0.2, send_timeout_s=1.0))
        await c.open(timeout=2)
        await log.wait_for("loss.detected", timeout=2)
        await asyncio.sleep(0.15)
        lost = [x for x in rec.calls if x[0] == "lost"]
        assert len(lost) == 1 and lost[0][2] >= 200 and not c.usable
        assert not [x for x in rec.calls if x[0] == "pong"]
        await c.cancel()
    asyncio.run(main())


# ---- before_connect: a refused open is not opened, recorded, and the scenario goes on -------------
class _Refused(LabError):
    """Stands in for lab.errors.BudgetError (the live budget's refusal)."""


class _FakeLive:
    """genai.Client().aio.live: every connect gives a healthy fake session."""

    def __init__(self):
        self.sessions = []
        self.aio = self
        self.live = self

    def connect(self, model, config):
        s = _FakeLiveSession()
        self.sessions.append((config.session_resumption.handle, s))
        return _connect_to(s)()


def _gated_client(name, refuse):
    """A client whose opens go to _FakeLive, behind a before_connect that refuses when refuse(n, purpose)."""
    asked = []

    def before_connect(purpose):
        asked.append(purpose)
        if refuse(len(asked), purpose):
            raise _Refused(f"live budget: open {len(asked)} ({purpose}) would exceed the cap")

    log = EventLog()
    ep = Endpoint(base_url="https://127.0.0.1:9", api_key="test", ca_path=None)
    cl = get(name)(ClientContext(endpoint=ep, log=log, backend=Backend(log, commit_after_s=0.05),
                                 before_connect=before_connect))
    cl.genai = _FakeLive()
    return cl, log, asked


def test_before_connect_refusing_the_third_open_records_it_and_the_client_goes_on():
    async def main():
        cl, log, asked = _gated_client("probe", refuse=lambda n, purpose: n == 3)
        await cl.start()
        cl.handles[1] = "handle-1"
        first = await cl.attempt_resume("test")
        assert first is not None and first.n == 2
        await cl.accept_resume(first)
        assert await cl.attempt_resume("test") is None          # the third open: refused
        assert asked == ["initial", "resume", "resume"]
        assert len(cl.conns) == 2 and len(cl.genai.sessions) == 2   # nothing opened for the third
        att, res = log.find("resume.attempt")[-1], log.find("resume.result")[-1]
        assert (att["attempt"], att["conn"]) == (2, None)
        assert (res["attempt"], res["ok"], res["code"], res["conn"]) == (2, False, None, None)
        assert "live budget: open 3 (resume)" in res["reason"] and "_Refused" in res["reason"]
        assert len(log.find("conn.open")) == 2
        # the scenario goes on, on the connection it has
        await cl.say("Did you book it?", 1)
        assert cl.genai.sessions[1][1].sent == [{"text": "Did you book it?"}]
        assert cl.ready.is_set() and cl.current is first
        await cl.stop()
    asyncio.run(main())


def test_before_connect_refusing_the_initial_open_ends_start_with_its_error():
    async def main():
        cl, log, asked = _gated_client("naive", refuse=lambda n, purpose: True)
        with pytest.raises(_Refused, match="open 1 \\(initial\\)"):
            await cl.start()
        assert cl.conns == [] and cl.genai.sessions == [] and "not opened" in log.find("client.error")[0]["error"]
        await cl.stop()
    asyncio.run(main())


def test_recovery_fallback_stops_at_a_refused_new_session():
    async def main():
        cl, log, asked = _gated_client("recovery", refuse=lambda n, purpose: purpose == "new")
        await cl.start()
        lost = cl.current
        cl._on_lost(lost, 1000.0)                    # detected silent; no handle yet: nothing to resume
        await asyncio.wait_for(cl._recover_task, 5)
        assert asked == ["initial", "new"]            # the hedge was refused; no retry asked again
        assert len(log.find("fallback.new_failed")) == 1 and log.find("fallback.failed")
        assert len(cl.conns) == 1 and not log.find("fallback.start") and not cl.recovering
        await cl.stop()
    asyncio.run(main())
