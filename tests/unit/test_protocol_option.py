"""The run's protocol (lab.protocols), pure: the endpoint each protocol's client is told, which
protocol a client speaks, the scenario's `protocols:` key and its steps per protocol, the refusal of a
client or scenario that does not speak the run's protocol (one line, exit 2, nothing started), and the
twin's command line and the plan carrying it."""
import subprocess
import sys

import pytest

from lab import plan as plan_mod
from lab import protocols
from lab import run as run_mod
from lab import scenario
from lab.clients import protocols_of
from lab.errors import LabError, ScenarioError
from lab.topology.netns import NetnsTopology
from lab.topology.services import Twin

BASE = """name: x
client: probe
{protocols}script: ["Book me the 3pm slot tomorrow, please.", "Did you book it?"]
timeline:
  - {{at: setup_complete, plus: 0.5, say: 0}}
  - {{id: drop, at: tool_call, plus: 1.0, action: close}}
  - {{id: again, at: step:drop, action: resume}}
  - {{at: step:{after}, plus: 1.0, say: 1}}
"""


def write(tmp_path, protocols_line="", after="drop", extra=""):
    p = tmp_path / "s.yaml"
    p.write_text(BASE.format(protocols=protocols_line, after=after) + extra)
    return str(p)


def test_each_protocol_tells_its_client_the_endpoint_in_its_form():
    assert protocols.endpoint_url("gemini", "https://10.0.0.2:8443") == "https://10.0.0.2:8443"
    assert protocols.endpoint_url("openai", "https://10.0.0.2:8443") == "wss://10.0.0.2:8443/v1"
    # already in the form: kept (the openai client converts whatever it is given)
    assert protocols.endpoint_url("openai", "wss://10.0.0.2:8443/v1") == "wss://10.0.0.2:8443/v1"
    with pytest.raises(ValueError):
        protocols.endpoint_url("grpc", "https://x")


def test_which_protocols_each_client_speaks():
    assert protocols_of("probe") == protocols_of("recovery") == protocols_of("naive") == ("gemini",)
    assert protocols_of("openai") == protocols_of("openai-recovery") == ("openai",)
    assert protocols_of("lab.clients.probe:ProbeClient") == ("gemini",)
    # a framework's app and host pick its realtime integration by the key they are given: both
    for name in ("livekit", "livekit@1.8.0+pr003", "livekit:agent:OrderSupport", "pipecat", "pipecat:bot"):
        assert protocols_of(name) == ("gemini", "openai"), name
    assert protocols_of("adk") == protocols_of("adk:my_agent") == ("gemini",)


def test_a_scenario_applies_to_gemini_unless_it_says_otherwise(tmp_path):
    assert scenario.load(write(tmp_path)).protocols == ("gemini",)
    assert scenario.load(write(tmp_path, "protocols: [gemini, openai]\n")).protocols == ("gemini", "openai")
    assert scenario.load(write(tmp_path, "protocols: openai\n")).protocols == ("openai",)
    for line, words in (("protocols: [gemini, opena]\n", "unknown protocol 'opena' (did you mean openai?)"),
                        ("protocols: []\n", "protocols takes a list"), ("protocols: {a: 1}\n", "protocols takes a list")):
        with pytest.raises(ScenarioError) as ei:
            scenario.load(write(tmp_path, line))
        msg = str(ei.value)
        assert words in msg and msg.startswith(f"{tmp_path / 's.yaml'}:3:") and "\n" not in msg


def test_the_catalogue_marks_the_scenarios_both_protocols_run():
    for name in ("control", "b1-silent-loss", "b2-path-return", "r1-clean-close", "n1-network-switch"):
        assert scenario.load(name).protocols == ("gemini", "openai"), name
    for name in ("l1-goaway", "t4-handle-expiry", "b3-after-server-close", "s2-recovery"):
        assert scenario.load(name).protocols == ("gemini",), name     # goAway, handles, the held session's model
    cap = scenario.load("l1-session-cap")
    assert cap.protocols == ("openai",) and cap.twin_for("openai")["set"]["openai_session_max_s"] < 60


def test_a_step_of_an_action_the_protocol_lacks_is_not_played_and_nothing_may_wait_for_it(tmp_path):
    s = scenario.load(write(tmp_path, "protocols: [gemini, openai]\n"))
    resume = next(st for st in s.timeline if st.action == "resume")
    close = next(st for st in s.timeline if st.action == "close")
    assert resume.plays_in("gemini") and not resume.plays_in("openai") and close.plays_in("openai")
    # gemini alone: a step may wait for the resume
    assert scenario.load(write(tmp_path, "", after="again")).protocols == ("gemini",)
    with pytest.raises(ScenarioError) as ei:
        scenario.load(write(tmp_path, "protocols: [gemini, openai]\n", after="again"))
    assert ":9:" in str(ei.value) and "step:again" in str(ei.value) and "openai" in str(ei.value)


def test_the_twin_a_scenario_sets_is_checked_for_each_of_its_protocols(tmp_path):
    gemini_only = "twin: {set: {freeze_close_s: 20}}\n"
    assert scenario.load(write(tmp_path, "", extra=gemini_only)).twin_for("gemini")["profile"] == "developer-api"
    with pytest.raises(ScenarioError) as ei:
        scenario.load(write(tmp_path, "protocols: [gemini, openai]\n", extra=gemini_only))
    assert "freeze_close_s" in str(ei.value) and "openai" in str(ei.value)
    shared = scenario.load(write(tmp_path, "protocols: [gemini, openai]\n", extra="twin: {set: {vad_silence_ms: 300}}\n"))
    assert shared.twin_for("openai") == {"profile": "openai-realtime", "set": {"vad_silence_ms": 300}}
    assert shared.twin_for("gemini") == {"profile": "developer-api", "set": {"vad_silence_ms": 300}}


def test_a_client_or_scenario_that_does_not_speak_the_protocol_is_refused():
    control = [scenario.load("control")]
    run_mod.check_protocol("openai", control, "openai")
    run_mod.check_protocol("gemini", control, "probe")
    for proto, scns, client, words in (
            ("openai", control, "probe", "client probe speaks gemini, not openai"),
            ("openai", control, None, "client probe speaks gemini"),          # the scenario's own client
            ("gemini", control, "openai", "client openai speaks openai, not gemini"),
            ("openai", [scenario.load("t4-handle-expiry")], "openai", "scenario t4-handle-expiry applies to gemini"),
            ("gemini", [scenario.load("l1-session-cap")], "probe", "scenario l1-session-cap applies to openai"),
            ("grpc", control, "probe", "unknown protocol 'grpc'")):
        with pytest.raises(LabError) as ei:
            run_mod.check_protocol(proto, scns, client)
        assert words in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
    with pytest.raises(LabError, match="--client openai or --client openai-recovery or --client livekit or "
                                       "--client pipecat$"):
        run_mod.check_protocol("openai", control, "recovery")
    # the frameworks with an OpenAI integration, the lab's app or a user's agent; ADK's is Gemini's only
    for client in ("livekit", "livekit:agent:OrderSupport", "pipecat", "pipecat:bot:run_bot"):
        run_mod.check_protocol("openai", control, client)
    for client in ("adk", "adk:table_reservation"):
        with pytest.raises(LabError) as ei:
            run_mod.check_protocol("openai", control, client)
        assert f"client {client} speaks gemini, not openai (ADK's live agents (run_live) run on Gemini Live models)" \
            in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
    # live mode speaks either protocol (docs/live.md)
    run_mod.check_protocol("openai", control, "openai-recovery", endpoint="live")
    # an app is whatever it is: with --client-cmd the protocol is the run's, not a client class's;
    # judged as a client (--client), that client must speak it
    run_mod.check_protocol("openai", control, None, client_cmd="python app.py")
    run_mod.check_protocol("openai", control, "openai-recovery", client_cmd="python app.py")
    with pytest.raises(LabError, match="client probe speaks gemini, not openai"):
        run_mod.check_protocol("openai", control, "probe", client_cmd="python app.py")


def test_an_openai_app_is_not_shown_the_study_gemini_clients_rows(tmp_path):
    """control's rows are the probe's (a Gemini client): a Gemini app is shown them, an OpenAI app is not."""
    scn = scenario.load("control")
    assert scn.client == "probe" and scn.expect_for("probe")
    gemini = run_mod.RunSpec(scn, "probe", "netns", "twin", tmp_path / "g", None, None, "m", client_cmd="python a.py")
    openai = run_mod.RunSpec(scn, "probe", "netns", "twin", tmp_path / "o", None, None, "m", client_cmd="python a.py",
                             protocol="openai")
    assert run_mod.expect_of(gemini) == scn.expect_for("probe") and run_mod.expect_of(openai) == {}
    assert run_mod.held_to(openai) == "user"
    assert "none for your openai app" in run_mod._no_rows(openai)


def test_lab_run_refuses_a_client_of_another_protocol_before_anything_starts(tmp_path):
    for argv, words in ((["control", "--protocol", "openai", "--client", "probe"], "client probe speaks gemini"),
                        (["t4-handle-expiry", "--protocol", "openai", "--client", "openai"], "applies to gemini")):
        out = subprocess.run([sys.executable, "-m", "lab", "run", *argv, "--topology", "netns",
                              "--out", str(tmp_path / "batch")], capture_output=True, text=True, cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("lab: ") and words in out.stderr, out.stderr
        assert not (tmp_path / "batch").exists() and not (tmp_path / "captures").exists()


def test_the_twin_is_served_with_the_runs_protocol_and_the_plan_carries_it(tmp_path):
    topo = NetnsTopology("proto1", secrets_dir="/tmp/s", subnet=9)
    kw = dict(cert_dir=topo.cert_dir, api_key="k", log_path="/r/twin.jsonl", t0=1.0, seed=1)
    argv = Twin(topo.endpoint, protocol="openai", **kw).argv()
    assert argv[argv.index("--protocol") + 1] == "openai"
    assert "--protocol" not in Twin(topo.endpoint, **kw).argv()      # gemini: the twin's default
    path = plan_mod.RunPlan(scenario="s.yaml", client="openai", run_dir=str(tmp_path), protocol="openai").write(tmp_path)
    assert plan_mod.read(path).protocol == "openai"
    assert plan_mod.read(plan_mod.RunPlan(scenario="s", client="probe", run_dir=str(tmp_path)).write(tmp_path)).protocol \
        == "gemini"


def test_a_set_and_all_keep_the_scenarios_of_the_protocol_and_the_matrix_its_clients():
    from lab import matrix
    resume = matrix.expand_scenarios(["resume"], "openai")
    assert resume == [s for s in matrix.SETS["resume"] if "openai" in scenario.load(s).protocols]
    assert "control" in resume and "r1-idle-abort-delayed" not in resume and "b2-path-return" in resume
    assert matrix.expand_scenarios(["resume"]) == list(matrix.SETS["resume"])       # gemini: the whole set
    assert "l1-session-cap" in scenario.names_for("openai") and "l1-session-cap" not in scenario.names_for("gemini")
    assert matrix.default_clients("openai") == ("openai", "openai-recovery", "livekit", "pipecat")
    assert matrix.default_clients("gemini") == matrix.DEFAULT_CLIENTS
