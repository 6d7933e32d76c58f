"""A team's own app and only its user's lines: `--client-cmd` with `--conversation lines.txt`, run
for real in network namespaces. The app (tests/fixtures/plain_app.py with APP_STORY=support) is a
support agent with check_order and refund_order, no booking and no lab import; the twin knows
nothing of it but the lines. Through a control run, a silent loss and a path that returns, the twin
must build the tools from the app's declarations and call refund_order with the order number of
the line, and say so in twin.jsonl."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.events import read_events

pytestmark = pytest.mark.netns

APP = Path(__file__).resolve().parent.parent / "fixtures" / "plain_app.py"
LINES = "Please refund order 4417.\nDid the refund go through?\n"
SHORT = {"b1-silent-loss": 25}


@pytest.mark.parametrize("scenario", ["control", "b1-silent-loss", "b2-path-return"])
def test_a_support_app_gets_refund_order_with_the_order_number_of_its_line(tmp_path, scenario):
    from lab.run import run_batch

    lines = tmp_path / "lines.txt"
    lines.write_text(LINES)
    out = []
    batch = run_batch([scenario], n=1, topology="netns", out_dir=tmp_path / "batch", duration=SHORT.get(scenario),
                      out=out.append, client_cmd=f"env APP_STORY=support APP_REFUND_S=2 {sys.executable} {APP}",
                      conversation=str(lines))
    run = batch / f"{scenario}-cmd-01"
    twin = read_events(run / "twin.jsonl")
    conv = next(e for e in twin if e.kind == "twin.conversation")
    assert conv["source"] == "lines"
    tools = {t["name"]: t for t in conv["tools"]}
    assert tools["refund_order"]["side_effect"] and tools["refund_order"]["business_key"] == ["order_id"]
    assert not tools["check_order"]["side_effect"]
    calls = [e for e in twin if e.kind == "twin.tool_call"]
    assert calls and {(e["name"], json.dumps(e["args"])) for e in calls} == {("refund_order", '{"order_id": "4417"}')}, \
        "\n".join(out[-30:])
    model = next(e for e in twin if e.kind == "twin.model" and e.get("tool") == "refund_order")
    assert model["match"]["by"] == "lines" and "4417" in model["match"]["args_from"]["order_id"]
    # the run's own record says what was played and what the user said
    assert json.loads((run / "conversation.json").read_text())["source"] == "lines"
    said = [e["text"] for e in read_events(run / "events.jsonl") if e.kind == "user.say"]
    assert said and said[0] == "Please refund order 4417."
    # this run's namespaces only (their names carry a hash of the run folder): other runs of the
    # same scenario may be up on the machine right now
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{run.name}-{hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:4]}-" not in ns
