"""The `livelab` pytest plugin's own logic: it is registered by the package's entry point, skips (not
errors) naming what is missing where no lab can run, refuses an unknown option, and reads a run
folder's verdict into passed / rules / explain() (a run recorded in network namespaces)."""
from __future__ import annotations

import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from lab import pytest_plugin
from lab.report.verdict import build_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "report-matrix"


def test_the_package_registers_the_plugin_under_the_name_livelab():
    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "livelab"]
    assert ep.value == "lab.pytest_plugin"


def test_no_root_and_no_docker_is_a_skip_naming_both(monkeypatch, tmp_path):
    monkeypatch.setattr(pytest_plugin.os, "geteuid", lambda: 1000)
    import lab.topology.compose as compose
    monkeypatch.setattr(compose, "docker_missing", lambda: "no docker CLI on PATH")
    with pytest.raises(pytest.skip.Exception) as e:
        pytest_plugin.LiveLab(tmp_path).run("b1-silent-loss", client="naive")
    msg = str(e.value)
    assert "livelab cannot run here" in msg and "root (this is uid 1000)" in msg and "no docker CLI on PATH" in msg
    with pytest.raises(pytest.skip.Exception, match="the netns topology needs root"):
        pytest_plugin.LiveLab(tmp_path).run("b1-silent-loss", topology="netns")
    monkeypatch.setattr(compose, "docker_missing", lambda: None)
    assert pytest_plugin.cannot_run("auto") is None


def test_an_unknown_option_is_one_clear_error(tmp_path):
    with pytest.raises(TypeError, match=r"unknown option\(s\) durration \(known: duration"):
        pytest_plugin.LiveLab(tmp_path).run("b1-silent-loss", durration=5)


def test_a_failed_user_outcome_makes_the_run_fail_with_its_advice_and_the_rule_behind_it(tmp_path):
    run = tmp_path / "b1-silent-loss-naive-01"
    shutil.copytree(FIXTURES / run.name, run)
    r = pytest_plugin.LabRun(run, build_run(run, timeline=False))
    assert not r.passed and not r.verdict["pass"] and "conversation_back" in r.failed_outcomes
    assert r.failed_rules == ["resume_cutoff_fallback"] and r.rules["own_loss_detection"]["status"] == "pass"
    assert r.outcomes["effects_once"]["status"] == "pass"
    assert r.events[0].kind == "run.start"
    text = r.explain()
    assert "FAILED for the user" in text and "user outcome conversation_back: no model reply" in text
    assert "What to change" in text and "rule resume_cutoff_fallback (behind the outcomes): no new session" in text
    assert str(run) in text
