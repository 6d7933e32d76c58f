"""`lab matrix --protocol gemini,openai` for real: both protocols' cells in one matrix, side by side.

control and r1-clean-close x one client per protocol (probe speaks Gemini, the naive `openai` client
OpenAI Realtime), through the CLI, 2 cells at a time, in network namespaces: each run is served the
twin of its own protocol, and matrix.json, matrix.md and the board name each cell's protocol.
"""
import json
import subprocess

import pytest

from lab import cli
from lab.report import rules
from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

pytestmark = pytest.mark.netns

SCENARIOS = ("control", "r1-clean-close")
CLIENTS = {"gemini": "probe", "openai": "openai"}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix") / "batch"
    rc = cli.main(["matrix", "--protocol", "gemini,openai", "--scenarios", *SCENARIOS,
                   "--clients", ",".join(CLIENTS.values()), "--topology", "netns", "-j", "2", "--out", str(out)])
    assert rc == 0
    return out


def test_matrix_json_has_each_protocols_cells_each_run_on_its_own_twin(batch):
    m = json.loads((batch / "matrix.json").read_text())
    assert m["protocols"] == ["gemini", "openai"]
    assert {(c["protocol"], c["scenario"], c["client"]) for c in m["cells"]} == {
        (p, s, c) for p, c in CLIENTS.items() for s in SCENARIOS}
    for c in m["cells"]:
        (run,) = c["per_run"]
        # the twin spoke the cell's protocol: the run's own record says so
        assert json.loads((batch / run["dir"] / "run.json").read_text())["protocol"] == c["protocol"]
        resume = c["rules"]["ledger_old_id_after_resume"]
        assert resume["applies"] is (c["protocol"] == "gemini")
        if c["protocol"] == "openai":
            assert resume["status"] == rules.NA and "this run spoke openai" in resume["observed"][0]
    control = {c["protocol"]: c for c in m["cells"] if c["scenario"] == "control"}
    for p in CLIENTS:
        # the booking's result reached the session that asked, whichever protocol carried it
        assert control[p]["rules"]["owed_results_delivered"]["status"] == rules.PASS, control[p]["rules"]
    assert m["versions"]["openai"]["openai"] and m["versions"]["probe"]["google-genai"]


def test_matrix_md_and_the_board_name_both_protocols(batch):
    md = (batch / "matrix.md").read_text()
    for p, c in CLIENTS.items():
        for s in SCENARIOS:
            assert f"| {p} | {s} | {c} |" in md
    assert "n/a (gemini only)" in md
    board = (batch / "board.md").read_text()
    assert "## openai" in board and "its clients here (openai)" in board


def test_no_namespace_is_left_behind(batch):
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(f"ll-{topology_id(r)}-" in ns for r in batch.iterdir() if r.is_dir())
