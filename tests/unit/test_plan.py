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
from lab.plan import RunPlan

REPO = Path(__file__).resolve().parents[2]


def test_a_plan_round_trips_through_its_file(tmp_path):
    plan = RunPlan(scenario="s.yaml", client="probe", run_dir=str(tmp_path), script=("Hi.", "Book it."), t0=12.5,
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
    for f in dataclasses.fields(RunPlan):
        assert re.search(rf"\b{f.name}=", write), f"lab/run.py's _write_plan does not set {f.name}"
        assert re.search(rf"\bplan\.{f.name}\b", agent_src), f"lab/agent.py never reads plan.{f.name}"


def test_the_key_is_never_in_the_plan(tmp_path):
    path = RunPlan(scenario="s", client="probe", run_dir=str(tmp_path)).write(tmp_path)
    assert not any("key" in k and k != "keylog" for k in json.loads(path.read_text()))


def test_the_orchestrators_plan_has_the_paths_the_client_node_sees(tmp_path):
    # a container mounts the run folder at /captures and the secrets at /secrets (lab/topology/compose.py)
    from types import SimpleNamespace

    from lab import run as run_mod
    from lab.scenario import load
    secrets = tmp_path / "secrets"
    client = SimpleNamespace(own_files=True, path=lambda p: str(p).replace(str(tmp_path), "/captures"))
    topo = SimpleNamespace(client=client, endpoint=SimpleNamespace(ip="10.203.0.1"))
    scn = load("control")
    spec = run_mod.RunSpec(scn, "probe", "compose", "twin", tmp_path / "r1", None, None, "m")
    run = SimpleNamespace(spec=spec, scn=scn, topo=topo, run_dir=spec.run_dir, go_file=spec.run_dir / ".agent-go", duration=9.0,
                          keylog=secrets / "keys.log", app_cmd=None, app_cwd="/app")
    spec.run_dir.mkdir()
    reach = run_mod._Reach(base_url="https://10.203.0.1:8443", ca=secrets / "ca.pem", key="k", twin_control="http://c")
    plan = plan_mod.read(run_mod._write_plan(run, 1.0, reach))
    assert (plan.scenario, plan.run_dir, plan.go_file) == ("/captures/r1/scenario.yaml", "/captures/r1",
                                                            "/captures/r1/.agent-go")
    assert (plan.ca, plan.keylog) == ("/captures/secrets/ca.pem", "/captures/secrets/keys.log")
    assert plan.script == tuple(scn.script) and plan.endpoint_ip == "10.203.0.1" and plan.client_cmd is None
