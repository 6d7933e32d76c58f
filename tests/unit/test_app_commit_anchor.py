"""`at: commit` for an app that executes its tools itself: the twin's answer seen, not a backend commit.

A `--client-cmd` app with its own order table never touches the lab's backend, so "the backend
commits" never happens; the twin's record says which tools have a side effect (twin.conversation)
and what the app answered (twin.tool_response), and the observer carries both onto the lab's events.
"""
from lab import anchors
from lab.clients.twin_observed import TwinObserver
from lab.conversation.semantics import EVENT_KIND, ToolSemantics
from lab.events import Event, EventLog

TOOLS = [ToolSemantics("check_order").to_json(),
         ToolSemantics("refund_order", side_effect=True, business_key=("order_id",)).to_json()]


def _events(recs):
    obs = TwinObserver()
    return [Event(k, 0.0, float(f.get("twin_ms") or 0), "twin-observed", f) for r in recs for k, f in obs.feed(r)]


def _record(tools, calls):
    """A twin record of the conversation's header and (ms, id, name, args, status) calls answered 100 ms later."""
    recs = [{"ms": 10, "kind": EVENT_KIND, "session": "s1", "source": "lines", "tools": tools}]
    for ms, cid, name, args, status in calls:
        recs += [{"ms": ms, "kind": "twin.tool_call", "conn": 1, "id": cid, "name": name, "args": args},
                 {"ms": ms + 100, "kind": "twin.tool_response", "conn": 1, "id": cid, "name": name,
                  "status": status}]
    return recs


def _app_record(refund_status="booked"):
    return _record(TOOLS, [(100, "c1", "check_order", {"order_id": "4417"}, "booked"),
                           (300, "r1", "refund_order", {"order_id": "4417"}, refund_status)])


def test_the_observer_marks_the_calls_of_a_side_effecting_tool():
    evs = _events(_app_record())
    assert [(e.kind, e.get("name"), e.get("side_effect")) for e in evs] == [
        ("tool.call", "check_order", False), ("tool.response", "check_order", False),
        ("tool.call", "refund_order", True), ("tool.response", "refund_order", True)]
    # a twin record without the conversation (an older twin): the events stay as they were
    assert "side_effect" not in _events(_app_record()[1:])[0].data


def test_commit_fires_on_the_refund_answered_done_not_on_the_check():
    fires, log = anchors.predicate("commit"), EventLog()
    fired = [e.get("name") for e in _events(_app_record()) if fires(e, log, None)]
    assert fired == ["refund_order"]
    assert not any(fires(e, log, None) for e in _events(_app_record("not_booked")))
    assert not any(fires(e, log, None) for e in _events(_app_record("pending")))


def test_with_the_labs_backend_in_the_record_only_its_commit_counts():
    fires, log = anchors.predicate("commit"), EventLog()
    log.events.append(Event("backend.request", 0.0, 250.0, "backend", {"job": "J1"}))
    assert not any(fires(e, log, None) for e in _events(_app_record()))
    assert fires(Event("backend.commit", 0.0, 4000.0, "backend", {}), log, None)


def _weather_record():
    return _record([ToolSemantics("get_weather").to_json()],
                   [(100, "w1", "get_weather", {"location": "Paris"}, "sunny"),
                    (300, "w2", "get_weather", {"location": "London"}, "rain")])


def test_tools_that_only_read_commit_on_the_first_answer_which_is_all_that_was_asked():
    fires, log = anchors.predicate("commit"), EventLog()
    fired = []
    for e in _events(_weather_record()):
        if fires(e, log, None):
            fired.append(e.get("id"))
        log.events.append(e)
    assert fired == ["w1"]
    # a read tool beside one that changes something: its answer is no commit (the check before a refund)
    log = EventLog()
    for e in _events(_app_record("pending")):
        assert not fires(e, log, None)
        log.events.append(e)
