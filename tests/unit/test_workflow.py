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


def test_the_board_job_sweeps_the_latest_releases_and_fails_only_on_a_regression(wf):
    steps = wf["jobs"]["board"]["steps"]
    runs = [s.get("run", "") for s in steps]
    sweep = next(i for i, r in enumerate(runs) if "make lab-board" in r)
    assert "lab-board" in make_targets()
    make = (ROOT / "Makefile").read_text()
    assert "BOARD_SCENARIOS ?= resume router lifecycle" in make
    assert "BOARD_CLIENTS ?= livekit@latest,pipecat@latest,adk@latest" in make
    # against the twin: no key anywhere in the job
    assert not any("GEMINI_API_KEY" in str(s) for s in steps)
    uses = [str(s.get("uses", "")) for s in steps]
    restore, save = uses.index("actions/cache/restore@v4"), uses.index("actions/cache/save@v4")
    compare = next(i for i, r in enumerate(runs) if "lab board compare previous-board/board.json" in r)
    assert restore < sweep < compare < save
    # tonight's board is kept whatever the comparison said: tomorrow compares against tonight
    assert "always()" in steps[save]["if"] and steps[restore]["with"]["path"] == steps[save]["with"]["path"]
    assert steps[save]["with"]["key"].startswith(steps[restore]["with"]["restore-keys"])
    # the only step that can fail on a finding is the comparison: the sweep exits 0 when it wrote the matrix
    upload = next(i for i, s in enumerate(steps) if uses[i].startswith("actions/upload-artifact"))
    assert "captures/board/board.md" in steps[upload]["with"]["path"]
    assert "steps.scan.outcome == 'success'" in steps[upload]["if"]


def test_the_openai_live_jobs_run_only_with_their_secret_and_keep_the_same_rails(wf):
    from lab.scenario import names_for

    gate = wf["jobs"]["openai-key"]
    assert any("secrets.OPENAI_API_KEY" in str(s.get("env")) for s in gate["steps"])
    job = wf["jobs"]["soak-openai"]
    assert job["needs"] == "openai-key" and job["if"] == "needs.openai-key.outputs.present == 'true'"
    scenarios = [m["scenario"] for m in job["strategy"]["matrix"]["include"]]
    assert scenarios and set(scenarios) <= set(names_for("openai"))
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    live = next(i for i, r in enumerate(runs) if "make lab-run" in r)
    assert "lab-run" in make_targets()
    assert all(w in runs[live] for w in ("PROTOCOL=openai", "CLIENT=openai-recovery", "ENDPOINT=live", "BUDGET="))
    # its own day ledger, carried between its jobs
    uses = [str(s.get("uses", "")) for s in steps]
    restore, save = uses.index("actions/cache/restore@v4"), uses.index("actions/cache/save@v4")
    ledger = job["env"]["LAB_BUDGET_DAY_FILE"].replace("${{ github.workspace }}/", "")
    assert ledger != wf["env"]["LAB_BUDGET_DAY_FILE"].replace("${{ github.workspace }}/", "")
    assert restore < live < save and steps[restore]["with"]["path"] == steps[save]["with"]["path"] == ledger
    assert steps[save]["with"]["key"].startswith(steps[restore]["with"]["restore-keys"])
    # drift against the OpenAI profile; the scan looks for the OpenAI key and gates the upload
    assert any("lab drift captures --profile openai-realtime" in r for r in runs)
    scan = next(i for i, s in enumerate(steps) if "lab scan captures" in s.get("run", ""))
    upload = next(i for i, u in enumerate(uses) if u.startswith("actions/upload-artifact"))
    assert scan < upload and "steps.scan.outcome == 'success'" in steps[upload]["if"]
    assert steps[scan]["env"]["OPENAI_API_KEY"] == "${{ secrets.OPENAI_API_KEY }}"
    assert not any("GEMINI_API_KEY" in str(s) for s in steps)
