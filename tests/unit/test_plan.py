"""The run plan: the agent's settings, written once by the orchestrator and read by the agent.

Pure units: a plan round-trips through its file, a bad file is one clear line, and every setting
is one field that the orchestrator sets and the agent reads (no flag list beside it).
"""
import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

import lab.agent
from lab import plan as plan_mod
from lab.errors import LabError
from lab.plan import Plan

REPO = Path(__file__).resolve().parents[2]


def test_a_plan_round_trips_through_its_file(tmp_path):
    plan = Plan(scenario="s.yaml", client="probe", run_dir=str(tmp_path), script=("Hi.", "Book it."), t0=12.5,
                duration=30, router={"links": ["wifi"]}, client_owns_files=True)
    path = plan.write(tmp_path)
    assert path == tmp_path / "plan.json" and plan_mod.read(path) == plan


@pytest.mark.parametrize("body, words", [
    ("{not json", "not a run plan"),
    ("[1, 2]", "a JSON object"),
    ('{"scenario": "s", "client": "probe", "run_dir": "d", "duraton": 3}', "unknown setting 'duraton'"),
    ('{"scenario": "s", "client": "probe", "run_dir": "d", "duration": "long"}', "'duration' is 'long', which is not a float or null"),
    ('{"scenario": "s", "client": "probe", "run_dir": "d", "client_owns_files": 1}', "not a bool"),
    ('{"scenario": "s", "client": "probe", "run_dir": "d", "script": "Hi."}', "list of strings or null"),
    ('{"scenario": "s", "run_dir": "d"}', "lacks client"),
])
def test_a_bad_plan_is_one_line_naming_its_file(tmp_path, body, words):
    path = tmp_path / "plan.json"
    path.write_text(body)
    with pytest.raises(LabError) as e:
        plan_mod.read(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and words in msg and "\n" not in msg, msg


def test_a_missing_plan_is_one_line(tmp_path):
    with pytest.raises(LabError, match="not a run plan"):
        plan_mod.read(tmp_path / "nowhere.json")


def test_the_agent_takes_only_the_plan():
    parser = argparse.ArgumentParser()
    lab.agent.add_parser(parser.add_subparsers())
    args = parser.parse_args(["agent", "/runs/r1/plan.json"])
    assert vars(args).keys() == {"plan", "func"}


def test_every_setting_is_set_by_the_orchestrator_and_read_by_the_agent():
    # one field per setting: the orchestrator's _write_plan names each, the agent reads each as plan.<field>
    run_src = (REPO / "lab" / "run.py").read_text()
    write = run_src[run_src.index("def _write_plan("):run_src.index("def _start_agent(")]
    agent_src = (REPO / "lab" / "agent.py").read_text()
    for f in dataclasses.fields(Plan):
        assert re.search(rf"\b{f.name}=", write), f"lab/run.py's _write_plan does not set {f.name}"
        assert re.search(rf"\bplan\.{f.name}\b", agent_src), f"lab/agent.py never reads plan.{f.name}"


def test_the_key_is_never_in_the_plan(tmp_path):
    path = Plan(scenario="s", client="probe", run_dir=str(tmp_path)).write(tmp_path)
    assert not any("key" in k and k != "keylog" for k in json.loads(path.read_text()))
