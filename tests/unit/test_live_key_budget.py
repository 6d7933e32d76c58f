"""Live rails: the key (env, .env, absent) and the session budget, charged per connection."""
import json
import os
import subprocess
import sys

import pytest

from lab.errors import BudgetError, LabError
from lab.live.budget import Budget, ConnectionCharger
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
    with pytest.raises(BudgetError) as e:
        b.charge(purpose="resume")
    assert str(e.value) == "session budget for run b1-01 is spent (3 of 3 opened); the resume connection was not opened"
    led = json.loads((tmp_path / "batch" / "budget.json").read_text())
    assert led["runs"] == {"b1-01": 3} and led["total"] == 3       # the refused session was not counted
    b.start_run("b1-02")
    assert b.charge()["run"] == 1


def test_budget_refuses_past_the_batch_and_day_caps(tmp_path):
    day = tmp_path / "day.json"
    b = Budget(cap_run=10, cap_batch=4, path=tmp_path / "a" / "budget.json", day_path=day, cap_day=6)
    for i in range(4):
        b.start_run(f"r{i}")
        b.charge()
    with pytest.raises(BudgetError, match="this batch.*run r9 was not started"):
        b.start_run("r9")                                   # nothing left: the run does not start
    other = Budget(cap_run=10, cap_batch=100, path=tmp_path / "b" / "budget.json", day_path=day, cap_day=6)
    other.start_run("x")
    other.charge(2)
    with pytest.raises(BudgetError, match="today"):
        other.charge()
    assert json.loads(day.read_text())["total"] == 6


CHARGE = ("import sys; from lab.errors import BudgetError; from lab.live.budget import ConnectionCharger\n"
          "charge = ConnectionCharger.from_ledger(sys.argv[1], sys.argv[2])\n"
          "try:\n    charge(sys.argv[3])\nexcept BudgetError as e:\n    print(e, file=sys.stderr); sys.exit(e.code)\n")


def test_a_cap_of_two_opens_two_connections_and_refuses_the_third_across_processes(tmp_path):
    b = Budget(cap_run=2, cap_batch=50, path=tmp_path / "batch" / "budget.json", day_path=tmp_path / "day.json",
               cap_day=50)
    ledger = b.start_run("r1-idle-abort-immediate-probe-01")
    # three client connections, each from its own process (the agent is one), all at once
    procs = [subprocess.Popen([sys.executable, "-c", CHARGE, str(ledger), "r1-idle-abort-immediate-probe-01", purpose],
                              stderr=subprocess.PIPE, text=True) for purpose in ("initial", "resume", "resume")]
    results = [(p.wait(timeout=30), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 0, BudgetError.code]
    refusal = next(err for rc, err in results if rc)
    assert refusal.count("\n") == 1 and "run r1-idle-abort-immediate-probe-01 is spent (2 of 2 opened)" in refusal
    assert "connection was not opened" in refusal
    led = json.loads(ledger.read_text())
    assert led["runs"] == {"r1-idle-abort-immediate-probe-01": 2} and led["total"] == 2
    assert json.loads((tmp_path / "day.json").read_text())["total"] == 2


def test_the_agent_charger_needs_the_orchestrator_ledger(tmp_path):
    (tmp_path / "budget.json").write_text("{}")
    with pytest.raises(LabError, match="has no caps"):
        ConnectionCharger.from_ledger(tmp_path / "budget.json", "r")


def test_budget_from_env_attach_and_settle_cross_check(tmp_path):
    env = {"LAB_BUDGET": "100", "LAB_BUDGET_RUN": "95", "LAB_BUDGET_DAY": "500",
           "LAB_BUDGET_DAY_FILE": str(tmp_path / "day.json")}
    b = Budget.for_batch(None, env=env)
    assert (b.cap_batch, b.cap_run, b.cap_day, b.path) == (100, 95, 500, None)
    with pytest.raises(LabError, match="no ledger file"):
        b.start_run("too-early")
    batch = tmp_path / "batch"
    b.attach(batch)
    run = batch / "b1-silent-loss-probe-01"
    run.mkdir(parents=True)
    ConnectionCharger.from_ledger(b.start_run(run.name), run.name)("initial")
    lines = [{"t": 1, "ms": i, "src": "client", "kind": "conn.open", "conn": i} for i in range(1, 4)]
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    settled = b.settle(run)
    assert (settled.charged, settled.opened) == (1, 3) and "2 connection(s) opened without a charge" in settled.note
    led = json.loads((batch / "budget.json").read_text())
    assert led["total"] == 3 and led["runs"][run.name] == 3 and json.loads((tmp_path / "day.json").read_text())["total"] == 3
    assert b.settle(run).note == ""                        # settled once: nothing left to count
    with pytest.raises(LabError):
        Budget.from_env(tmp_path, env={"LAB_BUDGET": "lots"})


def test_a_soak_ledger_stays_where_it_is(tmp_path):
    b = Budget.from_env(tmp_path / "soak", env={"LAB_BUDGET_DAY_FILE": str(tmp_path / "day.json")})
    b.attach(tmp_path / "soak" / "round-001")
    assert b.path == tmp_path / "soak" / "budget.json"      # one cap for every round of the soak
