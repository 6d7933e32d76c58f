"""No FAIL without its "what to change": every rule and every expectation has advice (lab/report/advice.py),
and the verdict, summary.md and matrix.md carry it, read from runs recorded in network namespaces."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from lab import expectations, metric_names
from lab.report import advice, rules
from lab.report.conformance import write as write_matrix
from lab.report.summary import summarize
from lab.report.verdict import build_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "report-matrix"
SCENARIOS = Path(__file__).resolve().parents[2] / "lab" / "scenarios"
CITES = ("seed 00", "fidelity.md", "scenario ", "docs/DESIGN.md")


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "batch"
    shutil.copytree(FIXTURES, out)
    return out


def test_every_rule_has_advice_and_no_advice_names_a_rule_that_is_gone():
    assert set(advice.RULE_ADVICE) == set(rules.RULES)


def test_every_named_expectation_and_every_generic_form_has_advice():
    assert set(advice.EXPECTATION_ADVICE) == set(expectations.NAMED)
    missing = [n for m in metric_names.scalar_names() for n in (m, f"max_{m}", f"min_{m}")
               if expectations.resolve(n) is not None and advice.entry_for_expectation(n) is None]
    assert not missing, missing


def test_each_scalar_metric_belongs_to_exactly_one_topic():
    seen = [m for metrics, _ in advice.TOPICS.values() for m in metrics]
    assert len(seen) == len(set(seen))
    assert set(seen) == set(metric_names.scalar_names())


def _scenario_expect_names():
    for f in sorted(SCENARIOS.glob("*.yaml")):
        expect = (yaml.safe_load(f.read_text()) or {}).get("expect") or {}
        for k, v in expect.items():
            if isinstance(v, dict) and k not in expectations.NAMED and expectations.resolve(k) is None:
                yield from ((f.name, n) for n in v if n not in expectations.SETTINGS)
            elif k not in expectations.SETTINGS:
                yield f.name, k


def test_every_expectation_a_scenario_uses_has_advice():
    names = list(_scenario_expect_names())
    assert len(names) > 50
    assert not [(f, n) for f, n in names if advice.entry_for_expectation(n) is None]


@pytest.mark.parametrize("name", sorted(rules.RULES))
def test_a_rule_fail_says_what_it_showed_why_and_what_to_change(name):
    o = rules.Outcome(rules.FAIL, "no new connection in the 47.7 s after the loss", 47700.0)
    a = advice.for_rule(name, o, {"detection_ms": 47700.0})
    text = a.text()
    assert text.startswith("no new connection in the 47.7 s after the loss.")
    assert "What to change: " in text and any(c in a.cite for c in CITES)
    assert len(a.why) > 40 and len(a.change) > 40
    assert advice.for_rule(name, rules.Outcome(rules.PASS, "fine")) is None
    assert advice.for_rule(name, {"status": rules.NA, "observed": "nothing to judge"}) is None
    assert advice.for_rule(name, o.to_json()).showed == o.observed


def test_detection_advice_names_the_clients_own_figure():
    a = advice.for_rule("own_loss_detection", rules.Outcome(rules.FAIL, "no new connection"), {"detection_ms": 47700})
    assert "47.7 s after the loss" in a.change and "TCP_INFO" in a.change


def test_an_expectation_fail_carries_the_observed_figure_and_a_pass_has_no_advice():
    row = expectations.resolve("max_detection_ms").check(2000, {"detection_ms": 47700.0})
    a = advice.for_expectation(row, {"detection_ms": 47700.0})
    assert "expected 2000, observed 47700.0" in a.text() and "What to change" in a.text()
    ok = expectations.resolve("bookings").check(1, {"bookings": 1})
    assert advice.for_expectation(ok) is None
    double = expectations.resolve("bookings").check(1, {"bookings": 2})
    assert "business key" in advice.for_expectation(double, {"bookings": 2}).change


def test_the_verdict_of_a_recorded_naive_b1_carries_the_rules_advice(tmp_path):
    batch = _copy(tmp_path)
    v = build_run(batch / "b1-silent-loss-naive-01", timeline=False)
    r5 = v["rules"]["resume_cutoff_fallback"]
    assert r5["status"] == rules.FAIL and "What to change" in r5["advice"] and "seed 000" in r5["advice"]
    assert all("advice" not in r for r in v["rules"].values() if r["status"] != rules.FAIL)
    assert json.loads((batch / "b1-silent-loss-naive-01" / "verdict.json").read_text())["rules"] == v["rules"]


def test_a_failed_reproduction_row_reaches_summary_md_with_its_advice(tmp_path):
    batch = _copy(tmp_path)
    run = batch / "control-naive-01"
    meta = json.loads((run / "run.json").read_text())
    meta["expect"] = {"bookings": 2}
    (run / "run.json").write_text(json.dumps(meta))
    v = build_run(run, timeline=False)
    (row,) = v["expectations"]
    assert row["held"] is False and "bookings: expected 2, observed 1" in row["advice"]
    assert row["kind"] == "reproduction" and v["pass"] and v["reproduces"] is False
    md = summarize(batch).read_text()
    assert "reproduction bookings: expected 2, observed 1" in md and "What to change" in md
    assert "## Conformance rules failed" in md and "`resume_cutoff_fallback`" in md


def test_a_failed_user_outcome_reaches_summary_md_with_its_advice_and_the_rules_behind_it(tmp_path):
    batch = _copy(tmp_path)
    v = build_run(batch / "b1-silent-loss-naive-01", timeline=False)
    assert not v["pass"] and v["failed"] == ["conversation_back", "last_line_answered"]
    back = v["outcomes"]["conversation_back"]
    assert back["kind"] == "user" and back["rules_failed"] == ["resume_cutoff_fallback"]
    assert "What to change" in back["advice"] and "resume_cutoff_fallback" in back["advice"]
    md = summarize(batch).read_text()
    assert "user outcome conversation_back: no model reply" in md


def test_matrix_md_shows_the_advice_under_a_failed_rule(tmp_path):
    batch = _copy(tmp_path)
    md, js = write_matrix([batch], batch)
    cell = next(c for c in json.loads(js.read_text())["cells"] if (c["scenario"], c["client"]) == ("b1-silent-loss", "naive"))
    assert "What to change" in cell["per_run"][0]["rules"]["resume_cutoff_fallback"]["advice"]
    assert "  - no new session in the" in md.read_text()


def test_a_run_that_failed_with_no_row_failing_still_says_what_to_change():
    v = {"pass": False, "expectations": [], "notes": ["record truncated: no run.end"], "metrics": {"complete": False}}
    assert "What to change" in advice.for_run(v).text()
    assert advice.for_run({"pass": True, "expectations": []}) is None


def test_lab_report_prints_each_fail_with_what_to_change(tmp_path, capsys):
    from lab import cli
    batch = _copy(tmp_path)
    assert cli.main(["report", str(batch), "--no-timeline"]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(out) if line.startswith("b1-silent-loss-naive-01"))
    assert out[i + 1].startswith("    user outcome conversation_back: no model reply in the") and "What to change" in out[i + 1]
    assert "resume_cutoff_fallback" in out[i + 1]
    assert advice.failures({"expectations": [], "rules": {"x": {"status": "pass"}}}) == []
