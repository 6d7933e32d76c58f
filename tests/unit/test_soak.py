"""lab soak: rounds of one run per scenario until the duration is spent, then one summary."""
import argparse
import json
from pathlib import Path

from lab import soak
from lab.errors import BudgetError


def _run_dir(root: Path, name: str, scenario: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    rows = [{"ms": 0, "kind": "run.start"}, {"ms": 50, "kind": "run.end", "status": "ok"}]
    (d / "events.jsonl").write_text("".join(json.dumps({"t": 1.0, "src": "client", **r}) + "\n" for r in rows))
    (d / "run.json").write_text(json.dumps({"scenario": {"name": scenario}, "client": "probe", "expect": {}}))
    return d


def test_lab_soak_repeats_until_the_duration_ends(tmp_path, monkeypatch):
    calls = []
    clock = {"t": 0.0}

    def fake_run_batch(scenarios, n, client, topology, endpoint, out_dir, duration, base_url, budget, protocol):
        calls.append((scenarios[0], Path(out_dir).name, endpoint, budget))
        clock["t"] += 25.0
        _run_dir(Path(out_dir), f"{scenarios[0]}-probe-01", scenarios[0])
        return Path(out_dir)

    monkeypatch.setattr(soak, "run_batch", fake_run_batch)
    monkeypatch.setattr(soak.time, "monotonic", lambda: clock["t"])
    args = argparse.Namespace(endpoint="twin", duration=100.0, scenarios=["b1-silent-loss", "r2-freeze", "s2-recovery"],
                              run_duration=None, client=None, topology="netns", base_url=None, out=tmp_path / "soak")
    assert soak.cmd_soak(args) == 0
    assert [c[0] for c in calls] == ["b1-silent-loss", "r2-freeze", "s2-recovery", "b1-silent-loss"]
    assert [c[1] for c in calls] == ["round-001"] * 3 + ["round-002"]
    assert all(c[2] == "twin" and c[3] is None for c in calls)
    assert "| b1-silent-loss | probe | 2 |" in (tmp_path / "soak" / "summary.md").read_text()


def test_a_spent_budget_ends_the_soak_early_with_its_summary(tmp_path, monkeypatch, capsys):
    def fake_run_batch(scenarios, n, client, topology, endpoint, out_dir, duration, base_url, budget, protocol):
        if any(Path(tmp_path / "soak").rglob("events.jsonl")):
            raise BudgetError("session budget for this batch is spent (3 of 3 opened); run x was not started")
        _run_dir(Path(out_dir), f"{scenarios[0]}-probe-01", scenarios[0])

    monkeypatch.setattr(soak, "run_batch", fake_run_batch)
    args = argparse.Namespace(endpoint="twin", duration=3600.0, scenarios=["control", "r2-freeze"],
                              run_duration=None, client=None, topology="netns", base_url=None, out=tmp_path / "soak")
    assert soak.cmd_soak(args) == 0
    assert "stopped early: session budget for this batch is spent" in capsys.readouterr().out
    assert (tmp_path / "soak" / "summary.md").is_file()


def test_an_openai_soak_runs_its_protocols_scenarios_with_its_recovery_client(tmp_path, monkeypatch):
    calls = []

    def fake_run_batch(scenarios, n, client, topology, endpoint, out_dir, duration, base_url, budget, protocol):
        calls.append((scenarios[0], client, protocol))
        _run_dir(Path(out_dir), f"{scenarios[0]}-{client}-01", scenarios[0])
        if len(calls) == len(soak.DEFAULT_SOAK_SCENARIOS["openai"]):
            raise BudgetError("session budget for this batch is spent (9 of 9 opened); run x was not started")

    monkeypatch.setattr(soak, "run_batch", fake_run_batch)
    args = argparse.Namespace(endpoint="twin", protocol="openai", duration=3600.0, scenarios=None, run_duration=None,
                              client=None, topology="netns", base_url=None, out=tmp_path / "soak")
    assert soak.cmd_soak(args) == 0
    from lab.scenario import names_for
    assert [c[0] for c in calls] == soak.DEFAULT_SOAK_SCENARIOS["openai"]
    assert set(soak.DEFAULT_SOAK_SCENARIOS["openai"]) <= set(names_for("openai"))
    assert {(c[1], c[2]) for c in calls} == {("openai-recovery", "openai")}


def test_a_live_openai_soak_without_its_key_fails_with_one_line(tmp_path, monkeypatch):
    import pytest
    from lab.errors import LabError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSy-the-other-protocols-key-0123456789")
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(endpoint="live", protocol="openai", duration=10.0, scenarios=None, run_duration=None,
                              client=None, topology="netns", base_url=None, out=tmp_path / "soak")
    with pytest.raises(LabError, match="^no OPENAI_API_KEY in the environment or .env; live mode needs a key$"):
        soak.cmd_soak(args)
