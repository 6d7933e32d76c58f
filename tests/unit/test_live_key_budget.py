"""Live rails: the key (env, .env, absent) and the session budget."""
import json
import os
import subprocess
import sys
import types

import pytest

from lab.errors import LabError
from lab.live.budget import Budget, BudgetExceeded, estimate_sessions
from lab.live.key import MISSING, load_key, mask

KEY = "AIzaSyTEST-not-a-real-key-0123456789abc"


def test_key_from_env_wins(tmp_path):
    (tmp_path / ".env").write_text("GEMINI_API_KEY=from-dotenv-file-value\n")
    assert load_key(env={"GEMINI_API_KEY": KEY}, dotenv_path=tmp_path / ".env") == KEY


def test_key_from_dotenv_is_not_exported(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    (tmp_path / ".env").write_text(f"# live key\nGEMINI_API_KEY={KEY}\n")
    monkeypatch.chdir(tmp_path)
    assert load_key() == KEY
    assert "GEMINI_API_KEY" not in os.environ   # child processes do not inherit it


def test_missing_key_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LabError) as e:
        load_key(dotenv_path=tmp_path / ".env")
    assert str(e.value) == MISSING and "\n" not in str(e.value)
    assert load_key(env={}, dotenv_path=tmp_path / ".env", required=False) is None


def test_mask_never_shows_the_key():
    assert KEY not in mask(KEY) and str(len(KEY)) in mask(KEY)


def test_lab_soak_live_without_key_fails_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GEMINI_API_KEY"}
    code = ("import sys, types; m = types.ModuleType('lab.run'); m.run_batch = lambda *a, **k: None; m.add_parser = lambda sub: None; "
            "sys.modules['lab.run'] = m; from lab.cli import main; "
            f"sys.exit(main(['soak', '--endpoint', 'live', '--duration', '1', '--out', {str(tmp_path / 's')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 2 and out.stderr.strip() == f"lab: {MISSING}"


def test_budget_refuses_past_the_run_cap(tmp_path):
    b = Budget(cap_run=3, cap_batch=10, path=tmp_path / "batch" / "budget.json", day_path=tmp_path / "day.json")
    b.start_run("b1-01")
    assert b.charge() == {"run": 1, "batch": 1, "day": 1}
    b.charge(2)
    with pytest.raises(BudgetExceeded) as e:
        b.charge()
    assert "run b1-01" in str(e.value) and "\n" not in str(e.value)
    led = json.loads((tmp_path / "batch" / "budget.json").read_text())
    assert led["runs"] == {"b1-01": 3} and led["total"] == 3       # the refused session was not counted
    b.start_run("b1-02")
    assert b.charge()["run"] == 1


def test_budget_refuses_past_the_batch_and_day_caps(tmp_path):
    day = tmp_path / "day.json"
    b = Budget(cap_run=10, cap_batch=4, path=tmp_path / "a" / "budget.json", day_path=day, cap_day=6)
    for i in range(4):
        b.start_run(f"r{i}").charge()
    with pytest.raises(BudgetExceeded, match="this batch"):
        b.start_run("r9").charge()
    other = Budget(cap_run=10, cap_batch=100, path=tmp_path / "b" / "budget.json", day_path=day, cap_day=6)
    other.charge(2)
    with pytest.raises(BudgetExceeded, match="today"):
        other.charge()
    assert json.loads(day.read_text())["total"] == 6
    # a second process sees the same ledger
    again = Budget(cap_run=10, cap_batch=4, path=tmp_path / "a" / "budget.json", day_path=day, cap_day=100)
    with pytest.raises(BudgetExceeded):
        again.charge()


def test_budget_from_env_and_orchestrator_calls(tmp_path):
    env = {"LAB_BUDGET": "100", "LAB_BUDGET_RUN": "95", "LAB_BUDGET_DAY": "500",
           "LAB_BUDGET_DAY_FILE": str(tmp_path / "day.json")}
    b = Budget.for_batch(None, env=env)
    assert (b.cap_batch, b.cap_run, b.cap_day, b.path) == (100, 95, 500, None)
    b1 = types.SimpleNamespace(name="b1-silent-loss", duration=900.0,
                               params_for=lambda c: {"resume_at_detection": True, "resume_every_s": 10})
    assert estimate_sessions(b1, "probe") == 93
    b.charge_run(b1, "probe")
    with pytest.raises(BudgetExceeded):
        b.charge_run(b1, "probe")                          # a second B1 would pass the batch cap of 100
    batch = tmp_path / "batch"
    b.attach(batch)
    run = batch / "run1"
    run.mkdir(parents=True)
    lines = [{"t": 1, "ms": i, "src": "client", "kind": "conn.open", "conn": i} for i in range(1, 41)]
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    b.run_id = "b1-silent-loss-probe-01"
    assert b.settle(run) == 40
    led = json.loads((batch / "budget.json").read_text())
    assert led["total"] == 40 and json.loads((tmp_path / "day.json").read_text())["total"] == 40
    with pytest.raises(LabError):
        Budget.from_env(tmp_path, env={"LAB_BUDGET": "lots"})
