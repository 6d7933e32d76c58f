"""The nightly live workflow: valid against GitHub's workflow schema, and built from make targets that exist."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WF = ROOT / ".github" / "workflows" / "nightly.yml"
SCENARIOS = ["b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate", "r2-freeze", "s2-recovery"]


@pytest.fixture(scope="module")
def wf():
    return yaml.safe_load(WF.read_text())


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))


def test_schema_valid():
    exe = Path(sys.executable).parent / "check-jsonschema"
    out = subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows", str(WF)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_triggers_concurrency_and_budget(wf):
    on = wf.get("on", wf.get(True))            # PyYAML reads the bare key `on` as True
    assert "schedule" in on and "workflow_dispatch" in on
    assert wf["concurrency"]["group"] and wf["concurrency"]["cancel-in-progress"] is False
    assert "LAB_BUDGET" in wf["env"]


def test_steps_call_existing_make_targets_for_every_scenario(wf):
    job = wf["jobs"]["soak"]
    include = job["strategy"]["matrix"]["include"]
    assert [m["scenario"] for m in include] == SCENARIOS
    targets = make_targets()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    called = set()
    for r in runs:
        for t in re.findall(r"\bmake\s+(\$\{\{\s*matrix\.target\s*\}\}|[A-Za-z0-9_-]+)", r):
            called |= {m["target"] for m in include} if "matrix.target" in t else {t}
    assert called, "no step calls make"
    assert called <= targets, f"make targets missing from the Makefile: {sorted(called - targets)}"
    live = [r for r in runs if "matrix.target" in r]
    assert live and all("ENDPOINT=live" in r and "BUDGET=" in r for r in live)


def test_secret_scan_gates_the_upload_and_keylogs_stay_out(wf):
    steps = wf["jobs"]["soak"]["steps"]
    names = [s.get("id") or s.get("uses") or s.get("name") for s in steps]
    scan = next(i for i, s in enumerate(steps) if "lab scan captures" in s.get("run", ""))
    upload = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert scan < upload, names
    assert "steps.scan.outcome == 'success'" in steps[upload]["if"] and steps[scan]["id"] == "scan"
    paths = steps[upload]["with"]["path"]
    assert "!captures/**/*.keylog" in paths and "!captures/**/*keys*.log" in paths
    key_steps = [s for s in steps if "GEMINI_API_KEY" in (s.get("env") or {})]
    assert key_steps and all(s["env"]["GEMINI_API_KEY"] == "${{ secrets.GEMINI_API_KEY }}" for s in key_steps)


def test_the_day_ledger_is_carried_between_jobs(wf):
    # every job is a fresh runner: without the cache LAB_BUDGET_DAY would cap one job, not the day
    steps = wf["jobs"]["soak"]["steps"]
    uses = [str(s.get("uses", "")) for s in steps]
    restore, save = uses.index("actions/cache/restore@v4"), uses.index("actions/cache/save@v4")
    live = next(i for i, s in enumerate(steps) if "matrix.target" in s.get("run", ""))
    assert restore < live < save and steps[save]["if"] == "always()"
    ledger = wf["env"]["LAB_BUDGET_DAY_FILE"].replace("${{ github.workspace }}/", "")
    assert steps[restore]["with"]["path"] == steps[save]["with"]["path"] == ledger
    key = steps[save]["with"]["key"]
    assert key == steps[restore]["with"]["key"] and key.startswith(steps[restore]["with"]["restore-keys"])
    assert "steps.day.outputs.date" in steps[restore]["with"]["restore-keys"]
