"""The JUnit XML of a batch, a matrix and a soak's nested rounds, validated against the format's schema
(tests/fixtures/junit.xsd, with xmlschema), from runs recorded in network namespaces."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from lab import cli
from lab.report import junit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEMA = xmlschema.XMLSchema(FIXTURES / "junit.xsd")


@pytest.fixture
def batch(tmp_path) -> Path:
    out = tmp_path / "batch"
    shutil.copytree(FIXTURES / "report-matrix", out)
    return out


def _case(root: ET.Element, suite: str, name: str) -> ET.Element:
    s = next(x for x in root if x.get("name") == suite)
    return next(c for c in s.findall("testcase") if c.get("name") == name)


def test_a_failed_user_outcome_is_a_failure_with_its_advice_and_n_a_is_skipped_with_the_reason(batch, tmp_path):
    out = tmp_path / "junit.xml"
    assert cli.main(["report", str(batch), "--no-timeline", "--junit-xml", str(out)]) == 0
    SCHEMA.validate(str(out))
    root = ET.parse(out).getroot()
    assert [s.get("name") for s in root] == ["b1-silent-loss-naive-01", "b1-silent-loss-recovery-01",
                                             "control-naive-01", "control-recovery-01"]
    f = _case(root, "b1-silent-loss-naive-01", "user.conversation_back").find("failure")
    assert f.get("type") == "user outcome" and f.get("message").startswith("no model reply in the")
    # the rules behind it are named in its advice: the how-to
    assert "What to change" in f.text and "resume_cutoff_fallback" in f.text and "seed 000" in f.text
    verdict = _case(root, "b1-silent-loss-naive-01", "verdict").find("failure")
    assert verdict.get("message").startswith("failed for the user: conversation_back")
    # a failed rule is shown in its case, not counted as a failure of its own
    rule = _case(root, "b1-silent-loss-naive-01", "rule.resume_cutoff_fallback")
    assert rule.find("failure") is None and rule.find("system-out").text.startswith("FAIL: no new session in the")
    skipped = _case(root, "b1-silent-loss-naive-01", "rule.close_reaches_server").find("skipped")
    assert skipped.get("message") == "n/a: the path did not come back during the run"
    assert _case(root, "control-naive-01", "verdict").find("failure") is None
    assert _case(root, "control-naive-01", "reproduction.bookings").get("classname") == "livelab.control.naive"
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert int(root.get("failures")) == len(failed)
    assert {c.get("name") for c in failed} == {"verdict", "user.conversation_back", "user.last_line_answered"}
    assert int(root.get("tests")) == sum(1 for _ in root.iter("testcase"))


def test_a_failed_reproduction_row_fails_the_verdict_case_of_the_studys_client(batch, tmp_path):
    run = batch / "control-recovery-01"
    meta = run / "run.json"
    # the run as the scenario's own client's: held to reproducing the study
    meta.write_text(meta.read_text().replace('"bookings": 1', '"bookings": 3').replace(
        '"client": "recovery"', '"client": "recovery", "held_to": "reproduction"', 1))
    out = junit.write(batch, tmp_path / "j.xml")
    SCHEMA.validate(str(out))
    root = ET.parse(out).getroot()
    f = _case(root, "control-recovery-01", "reproduction.bookings").find("failure")
    assert "expected 3, observed 1" in f.get("message") and "What to change" in f.text
    assert _case(root, "control-recovery-01", "verdict").find("failure").get("message") == "not reproduced: bookings"


def test_a_matrix_and_a_soaks_rounds_validate(batch, tmp_path):
    out = tmp_path / "matrix.xml"
    assert cli.main(["matrix", "--report", str(batch), "--junit-xml", str(out)]) == 0
    SCHEMA.validate(str(out))
    soak = tmp_path / "soak"
    for i, run in enumerate(sorted(p for p in batch.iterdir() if p.is_dir())[:2], 1):
        shutil.copytree(run, soak / f"round-{i:03d}" / run.name)
    junit.publish(soak, tmp_path / "soak.xml", out=lambda _: None)
    SCHEMA.validate(str(tmp_path / "soak.xml"))
    names = [s.get("name") for s in ET.parse(tmp_path / "soak.xml").getroot()]
    assert names == ["round-001/b1-silent-loss-naive-01", "round-002/b1-silent-loss-recovery-01"]


def test_the_schema_refuses_a_case_with_two_results(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite name="s" tests="1" failures="1" errors="0"><testcase classname="c" '
                   'name="n"><failure message="a"/><skipped/></testcase></testsuite></testsuites>')
    assert not SCHEMA.is_valid(str(bad))


def test_on_github_actions_the_summary_goes_to_the_job_summary(batch, tmp_path, monkeypatch):
    cli.main(["report", str(batch), "--no-timeline"])
    target = tmp_path / "step-summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    lines: list[str] = []
    junit.publish(batch, None, out=lines.append)
    text = target.read_text()
    assert text.startswith("earlier step\n") and "# livelab conformance matrix" in text
    assert lines == ["== job summary: matrix.md added to $GITHUB_STEP_SUMMARY"]
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert junit.step_summary("x") is None


def test_a_run_that_did_not_finish_is_an_error_with_what_to_change(batch, tmp_path):
    crashed = batch / "crashed-01"
    crashed.mkdir()
    (crashed / "run.json").write_text('{"scenario": {"name": "control"}, "client": "probe", "expect": {"bookings": 1}}')
    out = junit.write(batch, tmp_path / "j.xml")
    SCHEMA.validate(str(out))
    root = ET.parse(out).getroot()
    err = _case(root, "crashed-01", "verdict").find("error")
    assert err.get("message").startswith("no events.jsonl") and "What to change" in err.text
    assert root.get("errors") == "1"


def test_the_junit_and_the_summary_name_each_runs_protocol(batch, tmp_path):
    # the fixtures are Gemini runs from before the option: named gemini; an OpenAI run says openai
    run = batch / "control-recovery-01" / "run.json"
    run.write_text(json.dumps({**json.loads(run.read_text()), "protocol": "openai"}))
    out = tmp_path / "junit.xml"
    assert cli.main(["report", str(batch), "--no-timeline", "--junit-xml", str(out)]) == 0
    SCHEMA.validate(str(out))
    protocols = {s.get("name"): next(p.get("value") for p in s.find("properties") if p.get("name") == "protocol")
                 for s in ET.parse(out).getroot()}
    assert protocols["control-recovery-01"] == "openai" and protocols["control-naive-01"] == "gemini"
    assert "Protocol: gemini, openai" in (batch / "summary.md").read_text()
