"""A scenario's scripted client action asked of an app the lab cannot drive: the figures that only
that action makes are left unjudged (with the reason), never failed; what the app did is judged."""
from __future__ import annotations

import pytest

from lab import expectations, metric_names
from lab.events import Event
from lab.report.verdict import unasked

T0 = 1_700_000_000.0


def _rows(m: dict) -> list[dict]:
    return expectations.evaluate({"refusal_code": 1011, "resumed_after_close_ms": [400, 800], "bookings": 1}, m)


M_NOTHING = {"refusal_codes": [], "resumed_after_close_ms": None, "bookings": 0}


def _err(action: str | None) -> Event:
    return Event("step.error", T0, 100, "agent", {"id": "close", "error": "NotAskable: ...",
                                                   **({"unaskable": action} if action else {})})


def test_an_absent_figure_whose_action_could_not_be_asked_is_not_judged():
    rows = {r["name"]: r for r in unasked(_rows(M_NOTHING), [_err("close"), _err("resume")])}
    assert rows["resumed_after_close_ms"]["held"] is None and "close" in rows["resumed_after_close_ms"]["note"]
    assert rows["refusal_code"]["held"] is None and "resume" in rows["refusal_code"]["note"]
    # the app's own outcome is still judged: no booking is a failure whatever was asked
    assert rows["bookings"]["held"] is False


def test_a_figure_the_app_made_on_its_own_is_judged_as_usual():
    m = {**M_NOTHING, "refusal_codes": ["1008"], "resumed_after_close_ms": 2400.0}
    rows = {r["name"]: r for r in unasked(_rows(m), [_err("close"), _err("resume")])}
    assert rows["refusal_code"]["held"] is False and rows["resumed_after_close_ms"]["held"] is False


@pytest.mark.parametrize("errors", [[], [_err(None)], [_err("abort")]])
def test_without_an_unaskable_step_for_its_action_a_row_stays_failed(errors):
    rows = {r["name"]: r for r in unasked(_rows(M_NOTHING), errors)}
    assert rows["resumed_after_close_ms"]["held"] is False and rows["refusal_code"]["held"] is False


def test_each_action_a_metric_needs_is_a_client_action():
    from lab import actions
    needs = {m.needs_action for m in metric_names.METRICS.values() if m.needs_action}
    assert needs == {"resume", "close"} and needs <= set(actions.ACTIONS)
