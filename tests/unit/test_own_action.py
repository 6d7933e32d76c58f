"""The report over a conversation's own side-effecting tool: an app's refund, not the booking.

Records shaped like a `--client-cmd` support app's run (no lab backend; the twin's record of
check_order and refund_order calls and the responses the app sent), built small by hand. The truth
comes from the tools the run declares (a twin.conversation event, else conversation.json) and, with
no backend in the record, from what the twin observed; every row and rule built on that says so.
A run folder with neither reads as the booking, from the backend, exactly as before.
"""
import json

import pytest

from lab import expectations
from lab.conversation.semantics import BOOKING, EVENT_KIND, ActionWords, ToolSemantics
from lab.events import Event
from lab.report import effects, metrics, rules, run_tools
from lab.report.claims import BOOKED, IN_PROGRESS, NOT_BOOKED
from lab.report.rules import FAIL, NA, PASS, Record
from lab.report.verdict import build_run

REFUND = ToolSemantics("refund_order", side_effect=True, business_key=("order_id",),
                       words=ActionWords(verb=("refund",), doing=("refunding",), done=("refunded",), noun=("refund",)))
CHECK = ToolSemantics("check_order", side_effect=False, business_key=(),
                      words=ActionWords(verb=("check",), doing=("checking",), done=("checked",), noun=("order",)))
TOOLS = [CHECK.to_json(), REFUND.to_json()]
ASK, STATUS = "Hi, my order 4417 arrived broken, please refund it.", "Did the refund go through?"


def ev(kind, ms, **data):
    return Event(kind=kind, t=1000.0 + ms / 1000, ms=float(ms), src="twin" if kind.startswith("twin.") else "agent",
                 data=data)


def conversation_event(ms=60):
    return ev(EVENT_KIND, ms, session="s1", source="lines", name="lines.txt", tools=TOOLS)


def twin_calls(status="refunded", response_ms=4000, refund_ms=1500, session="s1", cid="r-1", order="4417"):
    out = [ev("twin.tool_call", 1000, conn=1, session="s1", id="c-1", name="check_order", args={"order_id": "4417"}),
           ev("twin.tool_response", 1100, conn=1, session="s1", id="c-1", name="check_order", status="booked"),
           ev("twin.tool_call", refund_ms, conn=1, session=session, id=cid, name="refund_order",
              args={"order_id": order})]
    if response_ms is not None:
        out.append(ev("twin.tool_response", response_ms, conn=1, session=session, id=cid, name="refund_order",
                      status=status))
    return out


def app_run(answer, status="refunded", response_ms=4000, asked_ms=6000):
    """The lab's record of the app's run (what twin_observed writes) and the twin's."""
    events = [ev("run.start", 0), ev("user.say", 500, text=ASK, line=0),
              ev("tool.call", 1000, id="c-1", name="check_order"), ev("tool.call", 1500, id="r-1", name="refund_order"),
              ev("user.say", asked_ms, text=STATUS, line=1),
              ev("model.text", asked_ms + 800, conn="t1", text=answer), ev("run.end", asked_ms + 5000, status="ok")]
    twin = [ev("twin.setup", 50, conn=1, resume=False), ev("twin.accept", 100, conn=1, session="s1"),
            conversation_event(), *twin_calls(status, response_ms)]
    return events, twin


def test_the_tools_come_from_the_twin_then_the_folder_then_the_booking():
    assert run_tools.of_run([conversation_event()]).source == run_tools.FROM_EVENT
    from_file = run_tools.of_run([], {"tools": TOOLS})
    assert from_file.source == run_tools.FROM_FILE and from_file.names == "refund_order"
    assert from_file.effect("check_order") is None and from_file.effect("refund_order") == REFUND
    old = run_tools.of_run(None, None)
    assert old.default and old.names == "book_slot" and old.words == BOOKING.words


@pytest.mark.parametrize("answer, status, response_ms, told, truth", [
    ("Yes, I've refunded order 4417.", "refunded", 4000, BOOKED, BOOKED),
    ("I'm processing the refund now.", "refunded", None, IN_PROGRESS, IN_PROGRESS),
    ("Yes, the refund went through.", "failed", 4000, BOOKED, NOT_BOOKED),
    ("Sorry, the refund did not go through.", "failed", 4000, NOT_BOOKED, NOT_BOOKED),
])
def test_the_status_answer_is_judged_against_what_the_twin_observed(answer, status, response_ms, told, truth):
    events, twin = app_run(answer, status, response_ms)
    m = metrics.compute(events, {}, twin)
    assert (m["action"], m["tools_from"], m["effects_from"]) == ("refund_order", EVENT_KIND, effects.TWIN)
    assert m["asked_ms"] == 6000.0                         # "Did the refund go through?" is the status question
    assert (m["told"], m["truth_at_answer"], m["told_truth"]) == (told, truth, told == truth)
    # check_order has no side effect: only the refund counts, answered done or not
    assert m["booking_requests"] == 1 and m["bookings"] == (1 if truth == BOOKED else 0)


def test_the_rows_name_the_refund_and_say_it_is_a_twin_observation():
    events, twin = app_run("Yes, I've refunded order 4417.")
    m = metrics.compute(events, {}, twin)
    rows = {r["name"]: r for r in expectations.evaluate({"bookings": 1, "told_truth": True}, m)}
    assert rows["bookings"]["held"] and rows["told_truth"]["held"]
    for r in rows.values():
        assert "refund_order" in r["note"] and "twin observation" in r["note"] and "not the app's own" in r["note"]
    assert rows["told_truth"]["note"].startswith("told refunded, truth refunded")


def test_a_refund_whose_response_never_came_is_not_counted_and_the_row_says_why():
    events, twin = app_run("I'm processing the refund now.", response_ms=None)
    m = metrics.compute(events, {}, twin)
    row = expectations.evaluate({"bookings": 1}, m)[0]
    assert row["held"] is False and row["observed"] == 0
    assert row["note"].startswith("0 done of 1 asked: refund_order") and "may still have happened" in row["note"]


def test_an_old_record_reads_as_the_booking_from_the_backend_with_the_same_rows():
    events = [ev("run.start", 0), ev("user.say", 500, text="Book me the 3pm slot tomorrow, please."),
              ev("tool.call", 1000, id="c-1", name="book_slot"), ev("backend.request", 1001, job="J1"),
              ev("backend.commit", 5000, business_key="3pm tomorrow", job="J1"),
              ev("user.say", 6000, text="Did you book it?"),
              ev("model.text", 6800, text="Yes, your 3 pm slot tomorrow is booked."), ev("run.end", 9000, status="ok")]
    m = metrics.compute(events, {}, None)
    assert (m["action"], m["tools_from"], m["effects_from"]) == ("book_slot", run_tools.FROM_DEFAULT, effects.BACKEND)
    rows = expectations.evaluate({"bookings": 1, "told_truth": True}, m)
    assert [r.get("note") for r in rows] == [None, "told booked, truth booked"]


def twin_record(twin, events=(), meta=None, loss_ms=2000.0):
    evs = [ev("user.say", 500, text=ASK, line=0), *events, ev("run.end", 30000, status="ok")]
    tw = [conversation_event(), ev("twin.user", 520, conn=1, session="s1", source="client_content"), *twin]
    m = {"loss_ms": loss_ms, "loss_cuts_path": True, "loss_kind": "fault:blackhole", "transparent_requested": False}
    return Record(evs, tw, meta or {}, m)


def conn(c, setup, accept, session, resume=False):
    return [ev("twin.setup", setup, conn=c, resume=resume), ev("twin.accept", accept, conn=c, session=session)]


@pytest.mark.parametrize("same_order, status, want", [(True, "refunded", FAIL), (True, "failed", PASS),
                                                       (False, "refunded", NA)])
def test_a_refund_asked_twice_is_deduplicated_by_its_order_id(same_order, status, want):
    twin = [*conn(1, 50, 100, "s1"), *twin_calls(),
            ev("twin.tool_call", 9000, conn=1, session="s1", id="r-2", name="refund_order",
               args={"order_id": "4417" if same_order else "5520"}),
            ev("twin.tool_response", 12000, conn=1, session="s1", id="r-2", name="refund_order", status=status)]
    out = rules.RULES["dedupe_by_business_key"].judge(twin_record(twin))
    assert out.status == want, out.observed
    if want != NA:
        assert "'4417'" in out.observed and "twin observation" in out.observed
    else:
        assert "refund_order" in out.observed


def test_check_order_asked_twice_is_no_duplicate_effect():
    twin = [*conn(1, 50, 100, "s1"), *twin_calls(),
            ev("twin.tool_call", 9000, conn=1, session="s1", id="c-2", name="check_order", args={"order_id": "4417"})]
    assert rules.RULES["dedupe_by_business_key"].judge(twin_record(twin)).status == NA


@pytest.mark.parametrize("note, want", [("refunded", PASS), (None, FAIL)])
def test_a_new_session_after_a_refund_is_owed_its_status(note, want):
    # the refund was asked (the twin issued the call) and its session was lost: the new one needs its status
    twin = [*conn(1, 50, 100, "s1"), *twin_calls(response_ms=None), *conn(3, 6000, 6300, "s2"),
            ev("twin.restore", 6400, conn=3, session="s2", turns=3, note=note)]
    out = rules.RULES["status_from_backend"].judge(twin_record(twin))
    assert out.status == want and "refund_order" in out.observed and "twin observation" in out.observed


def test_only_a_check_before_the_new_session_owes_no_status():
    twin = [*conn(1, 50, 100, "s1"), *twin_calls()[:2], *conn(3, 6000, 6300, "s2")]
    out = rules.RULES["status_from_backend"].judge(twin_record(twin))
    assert out.status == NA and "no side effect" in out.observed


def test_owed_results_name_the_side_effecting_tool():
    twin = [*conn(1, 50, 100, "s1"), *twin_calls()]
    out = rules.RULES["owed_results_delivered"].judge(twin_record(twin, loss_ms=None))
    assert out.status == PASS and "1 of 1 of a side-effecting tool (refund_order)" in out.observed, out.observed


def test_a_run_folder_with_conversation_json_is_judged_on_its_tools(tmp_path):
    events, twin = app_run("Yes, I've refunded order 4417.")
    twin = [e for e in twin if e.kind != EVENT_KIND]           # the tools from the folder's file this time
    for name, evs in (("events.jsonl", events), ("twin.jsonl", twin)):
        (tmp_path / name).write_text("".join(json.dumps({"kind": e.kind, "t": e.t, "ms": e.ms, "src": e.src, **e.data})
                                             + "\n" for e in evs))
    (tmp_path / "run.json").write_text(json.dumps({"expect": {"bookings": 1, "told_truth": True}}))
    (tmp_path / "conversation.json").write_text(json.dumps({"name": "support", "tools": TOOLS}))
    v = build_run(tmp_path, timeline=False, write=False)
    assert v["metrics"]["tools_from"] == "conversation.json" and v["metrics"]["action"] == "refund_order"
    assert v["pass"], v["expectations"]
    # the verdict's rule cells read the same tools: the refund is the side effect its results are owed for
    assert "refund_order" in v["rules"]["owed_results_delivered"]["observed"], v["rules"]["owed_results_delivered"]


def test_a_lab_client_that_withheld_its_call_is_judged_by_the_backend_not_the_twins_calls():
    # the guard withholds a held booking on the user's stop: the twin issued the call, the backend was
    # never asked, and the call was answered cancelled; nothing was requested from the truth's owner
    events = [ev("run.start", 0, client="guard"), ev("user.say", 500, text="Book me the 3pm slot tomorrow, please."),
              ev("tool.call", 1000, id="c-1", name="book_slot"), ev("run.end", 9000, status="ok")]
    booking = ev(EVENT_KIND, 60, session="s1", source="lines", name="booking", tools=[BOOKING.to_json()])
    twin = [booking, ev("twin.tool_call", 1000, conn=1, session="s1", id="c-1", name="book_slot",
                                     args={"slot": "tomorrow 3pm"}),
            ev("twin.tool_response", 2800, conn=1, session="s1", id="c-1", name="book_slot", status="cancelled")]
    m = metrics.compute(events, {}, twin)
    assert (m["effects_from"], m["bookings"], m["booking_requests"]) == (effects.BACKEND, 0, 0)
    # the same record from a command app is still the twin's observation
    events[0] = ev("run.start", 0, client="cmd", client_cmd="./app")
    m = metrics.compute(events, {}, twin)
    assert (m["effects_from"], m["booking_requests"]) == (effects.TWIN, 1)
