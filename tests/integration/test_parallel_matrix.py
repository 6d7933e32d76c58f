"""`lab matrix -j 3` judges each cell as the serial matrix does: a mixed set run both ways.

A few short scenarios (a healthy turn, an abort while idle, a stop while a tool is pending) x the
lab's own clients (probe, recovery, naive), once one cell after another and once three side by side,
each cell in its own namespaces. Compared cell by cell: the scenario's verdict, the checks that
failed, and every conformance rule's outcome. Figures (latencies) are not compared: they are the
runs' own draws; what each rule concluded from them is.
"""
import json
import subprocess

import pytest

from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

from lab.matrix import TIMING_FILE, run_matrix

pytestmark = [pytest.mark.netns, pytest.mark.slow]

SCENARIOS = ["control", "r1-idle-abort-immediate", "stop-a-pending"]
CLIENTS = ["probe", "recovery", "naive"]


def _cells(batch):
    m = json.loads((batch / "matrix.json").read_text())
    return {(c["scenario"], c["client"]): {
        "verdict": c["verdict"], "failed": sorted({f for r in c["per_run"] for f in r["failed"]}),
        "rules": {name: agg["status"] for name, agg in c["rules"].items()}} for c in m["cells"]}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("parallel")
    lines: dict[str, list[str]] = {"serial": [], "parallel": []}
    serial = run_matrix(SCENARIOS, CLIENTS, out_dir=root / "serial", out=lines["serial"].append, jobs=1)
    par = run_matrix(SCENARIOS, CLIENTS, out_dir=root / "parallel", out=lines["parallel"].append, jobs=3)
    return serial, par, lines


def test_every_cell_has_the_same_verdict_and_rule_outcomes_either_way(both):
    serial, par, lines = both
    s, p = _cells(serial), _cells(par)
    assert set(s) == set(p) == {(a, b) for a in SCENARIOS for b in CLIENTS}, lines["parallel"][-20:]
    differ = {k: (s[k], p[k]) for k in s if s[k] != p[k]}
    assert not differ, differ


def test_side_by_side_cells_kept_their_lines_apart_and_timed_the_matrix(both):
    _, par, lines = both
    for run in (d for d in par.iterdir() if d.is_dir()):
        log = (run / "lab.log").read_text()
        assert log.startswith(f"== ") and str(run) in log.splitlines()[0]
        assert "verdict:" in log
    t = json.loads((par / TIMING_FILE).read_text())
    assert t["jobs"] == 3 and len(t["cells"]) == len(SCENARIOS) * len(CLIENTS)
    assert t["cells_s"] == pytest.approx(sum(t["cells"].values()), abs=0.01)
    assert any(l.startswith("== matrix time: wall ") for l in lines["parallel"])


def test_no_namespace_is_left_behind(both):
    serial, par, _ = both
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for batch in (serial, par):
        assert not any(f"ll-{topology_id(r)}-" in ns for r in batch.iterdir() if r.is_dir())
