"""report.html of a run and of a batch, and matrix.html, built from runs recorded in network namespaces
(tests/fixtures/report-matrix): what each page holds, that it needs nothing from the network, and
that every link of the grids opens a run's page. The browser's view is tests/integration/test_browser.py."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.events import read_events
from lab.report import plotly_js, rules, run_page, timeline
from lab.report.conformance import write as write_matrix
from lab.report.summary import summarize
from lab.report.verdict import build_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "report-matrix"


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pages") / "batch"
    shutil.copytree(FIXTURES, out)
    for run in sorted(p for p in out.iterdir() if p.is_dir()):
        build_run(run, batch=out)
    summarize(out)
    write_matrix([out], out)
    return out


def test_a_runs_page_holds_the_verdict_every_expectation_and_rule_and_the_advice(batch):
    run = batch / "b1-silent-loss-naive-01"
    text = (run / "report.html").read_text()
    v = json.loads((run / "verdict.json").read_text())
    assert v["report"] == "report.html"
    # the naive client lost the user's conversation: FAIL for the user, the rows behind it shown
    assert 'id="verdict" class="verdict fail">FAIL' in text and "conversation_back" in v["failed"]
    for name in v["outcomes"]:
        assert f"<code>{name}</code>" in text
    for r in v["expectations"]:
        assert f"<code>{r['name']}</code>" in text
    for name in rules.RULES:
        assert f"<code>{name}</code>" in text
    assert "What to change: put a short cut-off on resuming" in text
    assert "no new session in the 39 s after the loss" in text


def _scripts(text: str) -> list[str]:
    return re.findall(r"<script[^>]*>", text)


def test_a_runs_page_in_a_batch_loads_the_batchs_one_copy_of_plotly(batch):
    text = (batch / "control-naive-01" / "report.html").read_text()
    assert '<script src="../plotly.min.js" charset="utf-8">' in _scripts(text)
    assert not re.search(r"<script[^>]+src=\"?(https?:)?//", text) and not re.search(r"<link[^>]+href=\"?https?:", text)
    assert "Plotly.newPlot(" in text and len(text) < 200_000      # the script itself is not in the page
    shared = batch / plotly_js.SCRIPT
    assert shared.read_bytes() == plotly_js._source().read_bytes()
    assert sorted(p.name for p in batch.rglob(plotly_js.SCRIPT)) == [plotly_js.SCRIPT]   # once per batch


def test_a_run_folder_alone_carries_plotly_inline(tmp_path):
    run = tmp_path / "control-naive-01"
    shutil.copytree(FIXTURES / run.name, run)
    build_run(run)
    text = (run / "report.html").read_text()
    assert not any("src=" in t for t in _scripts(text))
    assert "Plotly.newPlot(" in text and len(text) > 1_000_000 and not (tmp_path / plotly_js.SCRIPT).exists()


def test_the_shared_script_is_rewritten_only_when_it_is_another_version(tmp_path):
    dest = plotly_js.share(tmp_path)
    before = dest.stat().st_mtime_ns
    assert plotly_js.share(tmp_path) == dest and dest.stat().st_mtime_ns == before
    dest.write_text("/** plotly.js v0.0.1 */")
    plotly_js.share(tmp_path)
    assert dest.read_bytes() == plotly_js._source().read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == [plotly_js.SCRIPT]       # no temporary left behind


def test_the_conversation_is_as_the_user_and_the_model_had_it(batch):
    run = batch / "b1-silent-loss-recovery-01"
    twin = read_events(run / "twin.jsonl")
    rows, _ = run_page.conversation(read_events(run / "events.jsonl"), twin)
    text = " ".join(" ".join(r) for r in rows)
    assert "Book me the 3pm slot tomorrow, please." in text and "Did you book it?" in text
    for e in twin:
        if e.kind == "twin.say":
            assert e.get("text").replace("'", "&#x27;") in text
        if e.kind in ("twin.tool_call", "twin.tool_response"):
            assert f"id {e.get('id')}" in text
    whos = [re.sub("<[^>]+>", "", r[1]) for r in rows]
    assert whos.index("user said") < whos.index("tool call") < whos.index("model said")


def test_every_event_of_both_records_can_be_hovered_in_its_lane(batch):
    run = batch / "b1-silent-loss-recovery-01"
    events, twin = read_events(run / "events.jsonl"), read_events(run / "twin.jsonl")
    fig = run_page.timeline_figure(events, twin)
    hovers = " ".join(str(h) for tr in fig["data"] for h in (tr.get("hovertext") or ()) if h)
    for x, e in run_page._placed(events, twin):
        assert f"<b>{e.kind}</b> at {x:.3f} s" in hovers, e.kind
    assert list(fig["layout"]["yaxis"]["ticktext"]) == timeline.LANES
    names = {tr["name"] for tr in fig["data"] if tr.get("name")}
    assert {"loss: the path cut (the agent's record)", "connection: new session", "backend commit"} <= names


def test_the_story_filter_names_the_clients_connections_and_tshark_accepts_it(batch, tmp_path):
    events = read_events(batch / "b1-silent-loss-recovery-01" / "events.jsonl")
    f = run_page.story_filter(events)
    ports = {e.get("local").rsplit(":", 1)[1] for e in events if e.kind == "conn.open"}
    assert all(p in f for p in ports) and f.startswith("frame.comment || nflog")
    if not shutil.which("tshark"):
        pytest.skip("no tshark to compile the filter")
    from scapy.all import IP, TCP, Ether, wrpcap
    pcap = tmp_path / "one.pcap"
    wrpcap(str(pcap), [Ether() / IP() / TCP()])
    p = subprocess.run(["tshark", "-r", str(pcap), "-Y", f], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_the_timeline_figure_is_valid_plotly(batch):
    """The page builds the figure as plain dicts (plotly.js reads them); plotly's own Python objects
    validate every property and value here instead, so a typo fails a test, not a user's page."""
    go = pytest.importorskip("plotly.graph_objects")
    for run in ("b1-silent-loss-naive-01", "b1-silent-loss-recovery-01", "control-naive-01"):
        events, twin = read_events(batch / run / "events.jsonl"), read_events(batch / run / "twin.jsonl")
        fig = run_page.timeline_figure(events, twin)
        go.Figure(fig)      # raises ValueError on an unknown property or a bad value
        assert json.loads(json.dumps(fig)) == fig     # plain JSON: what the page encodes once


def _links(page: Path) -> list[str]:
    return re.findall(r'class="run-link" href="([^"#]+)', page.read_text())


def test_the_batch_page_and_matrix_html_link_every_cell_to_a_run_page(batch):
    for page in (batch / "report.html", batch / "matrix.html"):
        links = _links(page)
        assert len(links) == 4 * (1 + len(rules.RULES)), page.name
        assert all((batch / link).is_file() and link.endswith("/report.html") for link in links)
    text = (batch / "matrix.html").read_text()
    # the naive B1 cell: failed for the user, and the rule behind it
    assert text.count('class="fail"') == 2 and "What to change: put a short cut-off" in text
    assert "user outcome <code>conversation_back</code>" in text
    assert "resume attempts (codes)\u2020" in text and "a twin input echoed back" in text


def test_lab_report_on_one_run_folder_keeps_that_runs_page(tmp_path):
    run = tmp_path / "control-naive-01"
    shutil.copytree(FIXTURES / run.name, run)
    from lab import cli
    assert cli.main(["report", str(run)]) == 0
    assert 'id="verdict"' in (run / "report.html").read_text() and (run / "summary.md").is_file()
    assert not (tmp_path / plotly_js.SCRIPT).exists()       # alone: the script is in its page


def test_lab_report_on_a_batch_writes_plotly_once_beside_summary_md(tmp_path):
    batch = tmp_path / "batch"
    for name in ("control-naive-01", "control-recovery-01"):
        shutil.copytree(FIXTURES / name, batch / name)
    from lab import cli
    assert cli.main(["report", str(batch)]) == 0
    assert (batch / "summary.md").is_file() and (batch / plotly_js.SCRIPT).is_file()
    for name in ("control-naive-01", "control-recovery-01"):
        assert '<script src="../plotly.min.js"' in (batch / name / "report.html").read_text()


def test_a_live_run_without_a_twin_record_shows_the_clients_side_of_the_conversation(tmp_path):
    run = tmp_path / "b1-silent-loss-recovery-01"
    shutil.copytree(FIXTURES / run.name, run)
    (run / "twin.jsonl").unlink()
    v = build_run(run)
    text = (run / "report.html").read_text()
    assert v["rules"]["own_loss_detection"]["status"] == rules.NA
    assert "Yes, your 3 pm slot tomorrow has been booked." in text and "not observable: no twin record" in text


def test_a_run_that_recorded_nothing_still_gets_a_page_that_says_what_to_change(tmp_path):
    run = tmp_path / "crashed-01"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"scenario": {"name": "control"}, "client": "probe",
                                              "expect": {"bookings": 1}}))
    v = build_run(run)
    text = (run / "report.html").read_text()
    assert not v["pass"] and 'class="verdict fail">FAIL' in text and "What to change" in text
    assert v["advice"].startswith("no events.jsonl; empty record; record truncated: no run.end")
    assert "read run.end" in v["advice"]
    assert "nothing recorded" in text
