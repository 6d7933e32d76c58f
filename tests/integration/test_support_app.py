"""A team's own support agent (examples/support/app.py) under the catalogue, run unmodified.

It is a plain google-genai app with two tools of its own (check_order, refund_order), run with
`--client-cmd` and only the user's lines (`--conversation examples/support/lines.txt`): the twin
builds the conversation from the tools the app declares at setup. In control, B1 (shortened to 25 s,
as tests/integration/test_client_cmd.py does) and B2 the twin must call refund_order with the order
number from the first line, and the verdict must judge the refund, as the twin observed it (the app
has no lab backend), not a booking.
"""
import json
import sys
from pathlib import Path

import pytest

from lab.events import read_events
from tests.integration.test_client_cmd import _no_leftovers

pytestmark = pytest.mark.netns

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support"


def _engine():
    try:
        import lab.conversation.engine  # noqa: F401  (the conversation engine: lines-only conversations)
    except ImportError as e:
        pytest.skip(f"needs the conversation engine (lab.conversation.engine) to build a conversation from "
                    f"the app's tools: {e}")


@pytest.mark.parametrize("scenario, duration", [("control", None), ("b1-silent-loss", 25), ("b2-path-return", None)])
def test_the_support_app_gets_its_refund_called_and_judged(tmp_path, scenario, duration):
    _engine()
    from lab.run import run_batch

    lines = []
    batch = run_batch([scenario], n=1, topology="netns", out_dir=tmp_path / "batch", duration=duration,
                      out=lines.append, client_cmd=f"{sys.executable} {EXAMPLE / 'app.py'}",
                      conversation=str(EXAMPLE / "lines.txt"))
    run = batch / f"{scenario}-cmd-01"
    log = "\n".join(lines[-30:])
    twin = [json.loads(x) for x in (run / "twin.jsonl").read_text().splitlines() if x.strip()]
    calls = [r for r in twin if r.get("kind") == "twin.tool_call"]
    refunds = [r for r in calls if r.get("name") == "refund_order"]
    assert refunds, f"no refund_order call: {[(r.get('name'), r.get('args')) for r in calls]}\n{log}"
    assert str(refunds[0]["args"].get("order_id")) == "4417", refunds[0]
    assert not any(r.get("name") == "book_slot" for r in calls)

    verdict = json.loads((run / "verdict.json").read_text())
    m = verdict["metrics"]
    # the truth is the refund's, from what the twin saw (the app keeps its own order table)
    assert (m["action"], m["effects_from"]) == ("refund_order", "twin"), (m["action"], m["effects_from"], m["tools_from"])
    assert m["booking_requests"] >= 1
    assert not any(e.kind.startswith("backend.") for e in read_events(run / "events.jsonl"))
    rows = {r["name"]: r for r in verdict["expectations"]}
    about = [rows[n] for n in ("bookings", "told_truth") if n in rows]
    assert about, rows
    for r in about:
        assert "refund_order" in r["note"] and "twin observation" in r["note"], r
        assert "book" not in r["note"], r
    if scenario == "control":
        assert rows["bookings"]["held"], (rows["bookings"], log)       # refunded once, answered done
    _no_leftovers(run)
