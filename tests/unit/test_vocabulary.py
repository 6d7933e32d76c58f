"""Anchors, actions, expectations and metric names: each defined once, and what asks them."""
from __future__ import annotations

import pytest

from lab import actions, anchors, expectations, metric_names
from lab.events import Event, EventLog
from lab.report import metrics as metrics_mod
from lab.twin.core import FAULTS
from lab.twin.openai_core import KNOWN_FAULTS as OPENAI_FAULTS


def ev(kind: str, ms: float, **data) -> Event:
    return Event(kind, 0.0, ms, "client", data)


# ---- anchors ---------------------------------------------------------------------------------------
def test_each_anchor_fires_on_its_event_only():
    log = EventLog()
    cases = {"start": "run.start", "setup_complete": "conn.setup_complete", "tool_call": "tool.call",
             "commit": "backend.commit", "loss": "loss", "detected": "loss.detected"}
    for name, kind in cases.items():
        fires = anchors.predicate(name)
        assert fires(ev(kind, 10), log, None)
        assert not fires(ev("model.text", 10), log, None)
    first_audio = anchors.predicate("first_audio")
    assert first_audio(ev("model.audio", 5, first=True), log, None)
    assert not first_audio(ev("model.audio", 5), log, None)
    assert set(cases) | {"first_audio", "recovered", "answered", "stop"} == set(anchors.ANCHORS)


def test_stop_fires_on_the_users_stop_line_only():
    stop = anchors.predicate("stop")
    assert stop(ev("user.say", 10, text="Actually, stop. Don\u2019t book it."), EventLog(), None)
    assert stop(ev("user.say", 10, text="Please cancel that."), EventLog(), None)
    assert not stop(ev("user.say", 10, text="Book me the 3pm slot tomorrow, please."), EventLog(), None)
    assert not stop(ev("model.text", 10, text="stop"), EventLog(), None)


def test_recovered_needs_the_loss_first():
    rec = anchors.predicate("recovered")
    ok = ev("resume.result", 500, ok=True)
    assert not rec(ok, EventLog(), None)                 # no loss yet
    assert not rec(ok, EventLog(), 600.0)                # accepted before the loss
    assert rec(ok, EventLog(), 400.0)
    assert not rec(ev("resume.result", 500, ok=False), EventLog(), 400.0)
    assert rec(ev("session.restored", 500), EventLog(), 400.0)


def test_answered_is_a_text_after_the_last_line_said():
    log = EventLog()
    log.events.append(ev("user.say", 100, text="Did you book it?"))
    ans = anchors.predicate("answered")
    assert ans(ev("model.text", 150), log, None) and not ans(ev("model.text", 50), log, None)
    assert not ans(ev("model.text", 150), EventLog(), None)


def test_step_anchors_need_an_earlier_step():
    assert anchors.is_known("step:drop", {"drop"}) and not anchors.is_known("step:drop", set())
    assert not anchors.is_known("tool_cal") and not anchors.is_known(3)
    fires = anchors.predicate("step:drop")
    assert fires(Event("step", 0, 1, "agent", {"id": "drop"}), EventLog(), None)
    assert not fires(Event("step", 0, 1, "agent", {"id": "other"}), EventLog(), None)
    assert "step:drop" in anchors.known_names({"drop"})


# ---- actions ---------------------------------------------------------------------------------------
def test_actions_say_who_and_whether_they_cut_the_path():
    assert set(actions.cutting_names()) == {"abort", "close", "freeze", "switch_to_cell", "switch_to_cell_overlap",
                                            "server_error"}
    assert {a.by for a in actions.ACTIONS.values()} == {actions.CLIENT, actions.PROXY, actions.TWIN, actions.NETWORK}
    assert all(set(a.request_body()) == {"to", "overlap_s"} for a in actions.ACTIONS.values() if a.by == actions.NETWORK)
    assert all(a.verb for a in actions.ACTIONS.values() if a.by in (actions.PROXY, actions.TWIN))
    # a twin action's fault is one the twin of each of its protocols has (its control channel answers 404 otherwise)
    known = {"gemini": set(FAULTS), "openai": set(OPENAI_FAULTS)}
    assert all(a.request_body()["name"] in known[p] for a in actions.ACTIONS.values() if a.verb == "fault"
               for p in a.protocols)
    assert actions.ACTIONS["proxy_close"].verb == "close"
    assert metrics_mod.LOSS_ACTIONS == actions.cutting_names()


# ---- metric names ----------------------------------------------------------------------------------
def test_compute_returns_exactly_the_named_metrics():
    m = metrics_mod.compute([ev("run.start", 0), ev("run.end", 10)], twin=[ev("twin.refuse", 5, code=1011)])
    assert set(m) == set(metrics_mod.NAMES) == set(metric_names.TOP_LEVEL)
    assert {f"recovery.{k}" for k in m["recovery"]} == {n for n in metric_names.METRICS if n.startswith("recovery.")}
    for n in metric_names.TOP_LEVEL:
        if metric_names.METRICS[n].scalar:
            assert not isinstance(m[n], (dict, list)), n


def test_twin_inputs_name_their_parameter():
    twin = [n for n, x in metric_names.METRICS.items() if x.origin == metric_names.TWIN_INPUT]
    assert {"refusal_codes", "refusal_latency_ms", "first_accept_latency_ms", "resumed_after_close_ms"} <= set(twin)
    assert metric_names.origin("detection_ms") == metric_names.EMERGED
    assert metric_names.origin("no_such_metric") is None
    assert all(metric_names.METRICS[n].param for n in twin if n != "twin")


# ---- expectations ----------------------------------------------------------------------------------
def _metrics(**over):
    m = metrics_mod.compute([ev("run.start", 0), ev("run.end", 10)])
    m.update(over)
    return m


@pytest.mark.parametrize("name,expected,over,held", [
    ("bookings", 1, {"bookings": 1}, True),
    ("bookings", [1, 2], {"bookings": 3}, False),
    ("told_truth", "never", {"told_truth": None}, True),
    ("told_truth", True, {"told_truth": False, "told": "in_progress", "truth_at_answer": "booked"}, False),
    ("refusal_code", 1011, {"refusal_codes": {"1011": 3}}, True),
    ("refusal_code", 1011, {"refusal_codes": {}}, False),
    ("all_resumes_refused", True, {"accepted": 0, "refused": 2, "attempts": 2}, True),
    ("resumed_after_close_ms", [400, 800], {"resumed_after_close_ms": 900}, False),
    ("max_loss_to_first_audio_ms", 3500, {"loss_to_first_audio_ms": None}, False),
    ("reissued_call", False, {"tool_calls_reissued": 0}, True),
    ("duplicate_bookings", 0, {"duplicate_bookings": 0}, True),      # generic <metric>
    ("detection_ms", [0, 2500], {"detection_ms": 2600}, False),
    ("max_refused", 1, {"refused": 1}, True),                        # generic max_/min_
    ("min_attempts", 2, {"attempts": 1}, False),
])
def test_checkers_hold_and_fail(name, expected, over, held):
    row = expectations.resolve(name).check(expected, _metrics(**over))
    assert row["name"] == name and row["held"] is held
    assert row["origin"] in (metric_names.TWIN_INPUT, metric_names.EMERGED)


def test_rows_carry_the_origin_of_what_they_read():
    m = _metrics(refusal_codes={"1011": 1}, bookings=1)
    assert expectations.resolve("refusal_code").check(1011, m)["origin"] == metric_names.TWIN_INPUT
    assert expectations.resolve("bookings").check(1, m)["origin"] == metric_names.EMERGED


@pytest.mark.parametrize("name", ["bookingz", "max_bookingz", "min_", "resume_attempts", "max_connections",
                                  "status_question"])
def test_unknown_or_non_scalar_names_do_not_resolve(name):
    assert expectations.resolve(name) is None


def test_values_of_the_wrong_shape_are_refused():
    assert not expectations.resolve("resumed").valid("yes")
    assert not expectations.resolve("refusal_code").valid(True)
    assert not expectations.resolve("resumed_after_close_ms").valid(600)
    assert not expectations.resolve("max_refused").valid([0, 1])
    assert expectations.resolve("bookings").valid([1, None]) and expectations.resolve("told_truth").valid("never")


def test_evaluate_skips_settings_and_marks_unknown_names_unchecked():
    rows = expectations.evaluate({"status_question": "Did you book it?", "bookings": 0, "gone": 1}, _metrics())
    assert [(r["name"], r["held"]) for r in rows] == [("bookings", True), ("gone", None)]
