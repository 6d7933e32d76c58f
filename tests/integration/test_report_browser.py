"""The report's pages in a real browser (Debian's headless Chromium, driven by Selenium through Debian's
chromium-driver), and the CI files of real runs.

- a real `lab run b1-silent-loss` (naive client, in network namespaces, against the twin) with
  --junit-xml: its report.html opens from disk with no console error and nothing fetched from the
  network, with the timeline drawn (hover shows an event's fields), the conversation and every
  expectation; its JUnit file validates and carries the failed rule with its advice; the page's
  Wireshark filter selects frames of the run's own capture;
- a real `lab soak` round with --junit-xml validates too;
- matrix.html, built from a matrix recorded in network namespaces (tests/fixtures/report-matrix),
  opens a run's page when its FAIL cell is clicked;
- plotly's script both ways: a run page of a batch loads the batch's one plotly.min.js by its
  relative path (the real B1 and the recorded matrix), a run folder reported alone carries it
  inline; each draws its timeline with no console error. A batch's page copied out without the
  script says what is missing instead of an empty box.

Screenshots go to the test's tmp folder; LAB_SCREENSHOTS=DIR also writes them there (docs/ keeps
the README's).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lab import cli
from lab.report import plotly_js, run_page
from lab.report.conformance import write as write_matrix
from lab.report.summary import summarize
from lab.report.verdict import build_run

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[test]')")
    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup.sh installs them)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1800",
              "--allow-file-access-from-files"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_page_load_timeout(120)
    try:
        yield d
    finally:
        d.quit()


def _open(d, page: Path) -> None:
    d.get(page.resolve().as_uri())
    d.get_log("browser")    # drop what came before this page


def _errors(d) -> list:
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def _fetched(d) -> list[str]:
    """Every resource the page loaded that did not come from the disk or the page itself."""
    names = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [n for n in names if not n.startswith(("file:", "data:", "blob:"))]


def _scripts_loaded(d) -> list[str]:
    """The script files the page loaded, once plotly is there (from its batch's shared copy, when
    the page has one; the page holds no other script with a src)."""
    return d.execute_script("return window.Plotly ? [...document.scripts].filter(s => s.src).map(s => s.src) : null")


def _traces(d) -> int:
    return d.execute_script("return document.querySelectorAll('#timeline .scatterlayer .trace').length")


def _shoot(d, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    d.save_screenshot(str(out))
    if os.environ.get("LAB_SCREENSHOTS"):
        dest = Path(os.environ["LAB_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, dest / name)
    return out


@pytest.fixture(scope="module")
def b1(tmp_path_factory):
    """One real B1 of the naive client, with its JUnit file (25 s: the fallback rule's 15 s cut-off has passed)."""
    out = tmp_path_factory.mktemp("b1") / "batch"
    junit = out.parent / "junit.xml"
    rc = cli.main(["run", "b1-silent-loss", "--client", "naive", "--duration", "25", "--topology", "netns",
                   "--out", str(out), "--junit-xml", str(junit)])
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return rc, run, junit


@pytest.mark.netns
def test_a_real_b1_writes_a_page_that_opens_in_chromium_with_no_console_error(b1, browser, tmp_path):
    rc, run, _ = b1
    v = json.loads((run / "verdict.json").read_text())
    # the naive client's user never hears back: FAIL for the user, lab run's exit says so
    assert rc == 1 and not v["met"] and "conversation_back" in v["failed"], v["notes"]
    _open(browser, run / "report.html")
    assert browser.find_element("id", "verdict").text == "FAIL"
    assert _traces(browser) >= 5
    # `lab run` wrote the batch's one copy of plotly beside summary.md, and the page loaded that
    assert (run.parent / plotly_js.SCRIPT).is_file() and (run.parent / "summary.md").is_file()
    assert _scripts_loaded(browser) == [(run.parent / plotly_js.SCRIPT).resolve().as_uri()]
    text = browser.find_element("tag name", "body").text
    # the naive client's model never speaks in B1: the call is pending at the loss, no session comes back
    assert "Book me the 3pm slot tomorrow, please." in text and "user said" in text and "tool call" in text
    for r in v["expectations"]:
        assert r["name"] in text
    assert "What to change" in text
    # hover the loss marker: plotly's own hover label shows the event's fields
    browser.execute_script("""
        const gd = document.getElementById('timeline');
        const i = gd.data.findIndex(t => t.name && t.name.startsWith('loss:'));
        Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}]);""")
    label = browser.execute_script("const h = document.querySelector('.hoverlayer .hovertext'); return h && h.textContent")
    assert label and "loss at" in label and "cuts_path" in label
    assert not _errors(browser)
    assert not _fetched(browser)
    assert browser.find_element("id", "rules-verdict").text == "1 rule(s) FAIL"
    _shoot(browser, tmp_path, "report-run.png")
    browser.execute_script("document.getElementById('timeline-h').scrollIntoView()")
    _shoot(browser, tmp_path, "report-timeline.png")


@pytest.mark.netns
def test_the_real_runs_junit_validates_and_its_failed_rule_carries_the_advice(b1):
    xmlschema = pytest.importorskip("xmlschema")
    _, run, junit = b1
    xmlschema.XMLSchema(FIXTURES / "junit.xsd").validate(str(junit))
    root = ET.parse(junit).getroot()
    fails = {c.get("name"): c.find("failure") for c in root.iter("testcase") if c.find("failure") is not None}
    # the user outcome is the failure; the rule behind it carries its how-to beside it, not as a failure
    assert "user.conversation_back" in fails and "rule.resume_cutoff_fallback" not in fails, list(fails)
    assert "What to change" in fails["user.conversation_back"].text
    rule = next(c for c in root.iter("testcase") if c.get("name") == "rule.resume_cutoff_fallback")
    assert "What to change" in rule.find("system-out").text


@pytest.mark.netns
def test_the_pages_wireshark_filter_selects_the_runs_story_in_its_capture(b1):
    _, run, _ = b1
    if not shutil.which("tshark"):
        pytest.skip("no tshark")
    from lab.events import read_events
    f = run_page.story_filter(read_events(run / "events.jsonl"))
    p = subprocess.run(["tshark", "-r", str(run / "capture.pcapng"), "-Y", f, "-T", "fields", "-e", "frame.number"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    p_all = subprocess.run(["tshark", "-r", str(run / "capture.pcapng"), "-T", "fields", "-e", "frame.number"],
                           capture_output=True, text=True, timeout=120)
    story, every = len(p.stdout.split()), len(p_all.stdout.split())
    assert 0 < story <= every


@pytest.mark.netns
def test_a_real_soak_round_writes_a_valid_junit_file(tmp_path):
    xmlschema = pytest.importorskip("xmlschema")
    junit = tmp_path / "soak.xml"
    assert cli.main(["soak", "--duration", "1", "--scenarios", "control", "--run-duration", "10",
                     "--topology", "netns", "--out", str(tmp_path / "soak"), "--junit-xml", str(junit)]) == 0
    xmlschema.XMLSchema(FIXTURES / "junit.xsd").validate(str(junit))
    (suite,) = ET.parse(junit).getroot()
    assert suite.get("name") == "round-001/control-probe-01" and int(suite.get("tests")) > 10


@pytest.fixture(scope="module")
def recorded_matrix(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("matrix") / "batch"
    shutil.copytree(FIXTURES / "report-matrix", out)
    for run in sorted(p for p in out.iterdir() if p.is_dir()):
        build_run(run, batch=out)
    summarize(out)
    write_matrix([out], out)
    return out


def test_clicking_a_fail_cell_of_matrix_html_opens_that_runs_page(recorded_matrix, browser, tmp_path):
    _open(browser, recorded_matrix / "matrix.html")
    assert not _errors(browser) and not _fetched(browser)
    _shoot(browser, tmp_path, "report-matrix.png")
    cells = browser.find_elements("css selector", "td.fail a.run-link")
    # the naive B1 cell: failed for its user (0 of 1 runs), and the rule behind it
    assert [c.text for c in cells] == ["0/1", "FAIL"]
    cell = cells[1]
    cell.click()
    assert browser.current_url.endswith("/b1-silent-loss-naive-01/report.html#rules")
    assert browser.title.startswith("b1-silent-loss-naive-01: b1-silent-loss x naive")
    body = browser.find_element("tag name", "body").text
    assert "resume_cutoff_fallback" in body and "What to change: put a short cut-off" in body
    assert not _errors(browser) and not _fetched(browser)


def test_the_batch_page_opens_every_run(recorded_matrix, browser):
    _open(browser, recorded_matrix / "report.html")
    hrefs = [a.get_attribute("href") for a in browser.find_elements("css selector", "td a.run-link")]
    runs = sorted({h.split("#")[0] for h in hrefs})
    assert len(runs) == 4
    shared = (recorded_matrix / plotly_js.SCRIPT).resolve().as_uri()
    for href in runs:
        browser.get(href)
        assert browser.find_element("id", "verdict").text in ("PASS", "FAIL")
        assert _traces(browser) > 0
        assert _scripts_loaded(browser) == [shared]
        assert not _errors(browser) and not _fetched(browser)


def test_a_run_folder_reported_alone_draws_its_timeline_from_the_inline_script(browser, tmp_path):
    run = tmp_path / "b1-silent-loss-naive-01"
    shutil.copytree(FIXTURES / "report-matrix" / run.name, run)
    assert cli.main(["report", str(run)]) == 0
    assert not (tmp_path / plotly_js.SCRIPT).exists()
    _open(browser, run / "report.html")
    assert browser.find_element("id", "verdict").text == "FAIL"
    assert _traces(browser) >= 5 and _scripts_loaded(browser) == []
    assert not _errors(browser) and not _fetched(browser)


def test_a_batch_run_page_copied_out_without_the_script_says_what_is_missing(recorded_matrix, browser, tmp_path):
    run = tmp_path / "alone" / "control-naive-01"
    shutil.copytree(recorded_matrix / run.name, run)
    _open(browser, run / "report.html")
    assert "needs plotly's script (plotly.min.js" in browser.find_element("id", "timeline").text
    # the one console error is the missing file itself, not the page's own script
    assert all(plotly_js.SCRIPT in e["message"] for e in _errors(browser))
