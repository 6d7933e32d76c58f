"""A conversation that asks for tools the client does not declare stops the run with one line.

The twin meets the client's declarations only at the setup, so the check is made there: it refuses
the setup (1008, a reason starting "livelab: "), the agent ends the run with that line, the verdict
judges nothing, `lab run` exits 2 with the line, and nothing of the run is left on the machine.
"""
import json
import subprocess
import sys

import pytest

from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

pytestmark = pytest.mark.netns


def test_a_conversation_asking_for_tools_the_client_lacks_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "batch"
    p = subprocess.run([sys.executable, "-m", "lab", "run", "control", "--conversation", "support", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("lab: control-probe-01: the conversation calls check_order, refund_order, which the "
                           "client does not declare (it declares book_slot)"), p.stderr
    run = out / "control-probe-01"
    v = json.loads((run / "verdict.json").read_text())
    assert v["pass"] is False and v["expectations"] == [] and v["rules"] == {}
    assert any(r.startswith("not judged: the conversation calls") for r in v["reasons"])
    assert (run / "events.jsonl").is_file() and (run / "capture.pcapng").is_file()     # what was recorded stays
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns
