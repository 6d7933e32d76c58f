import subprocess
import sys

import pytest

from lab import expectations, scenario
from lab.errors import LabError, ScenarioError

GOOD = """\
name: t
script:
  - "Book me the 3pm slot tomorrow, please."
  - "Did you book it?"
timeline:
  - {at: setup_complete, plus: 0.5, say: 0}
  - {id: drop, at: tool_call, plus: 1.0, fault: {kind: blackhole, target: flow, mode: silent}}
  - {at: step:drop, plus: 30, heal: true}
expect:
  all: {bookings: 1}
  probe: {told_truth: never}
"""


def write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


def test_catalogue_is_valid_and_covers_the_study():
    names = scenario.names()
    for required in ("control", "control-speech", "b1-silent-loss", "b2-path-return", "b2-speaking", "r1-idle-abort-immediate",
                     "r1-idle-abort-delayed", "r1-clean-close", "r1-abort-speaking", "r2-freeze",
                     "s2-recovery", "s2-recovery-no-note", "s2-control", "v1-av-goaway", "v2-av-drop",
                     "v0-audio-goaway", "t1-goaway", "t2-abort-speaking", "t3-silent-loss", "t4-handle-expiry"):
        assert required in names
    for n in names:
        s = scenario.load(n)
        # a seed study's finding (000 resume, 001 stop), a seed report (002 audio+video resume, 003 the
        # LiveKit restart PR), the guide a client implements (004 SessionManager), the fidelity notes'
        # third-party figure (the twin's own faults), a user's public report on a middlebox (owner/repo#n),
        # or the OpenAI Realtime research notes (docs/protocol-openai.md)
        assert s.source.startswith(("000", "001", "002", "003", "004", "fidelity §", "user report ",
                                    "openai-realtime.md")), \
            f"{n} cites no finding"
        assert s.expect, f"{n} states no expectation"


def test_good_file_parses(tmp_path):
    s = scenario.load(write(tmp_path, GOOD))
    assert [st.at for st in s.timeline] == ["setup_complete", "tool_call", "step:drop"]
    assert s.expect_for("probe") == {"bookings": 1, "told_truth": "never"}
    # another client is held to its user's outcomes, not to the study's rows
    assert s.expect_for("recovery") == {} and s.expect_for("naive") == {} and s.expect_for(None) == {}


@pytest.mark.parametrize("old,new,line,words", [
    ("plus: 1.0, fault", "plus: -1, fault", 7, "non-negative"),
    ("at: tool_call", "at: tool_cal", 7, "unknown anchor 'tool_cal'"),
    ("at: step:drop", "at: step:nope", 8, "earlier step"),
    ("say: 0}", "say: 5}", 6, "line index 0..1"),
    ("kind: blackhole", "kind: meteor", 7, "fault needs a kind"),
    ("mode: silent", "mode: loud", 7, "got 'loud'"),
    ("heal: true", "action: explode", 8, "unknown action 'explode'"),
    ("name: t", "name: t\nnmae: x", 2, "unknown key 'nmae'"),
])
def test_errors_name_the_line(tmp_path, old, new, line, words):
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ScenarioError) as e:
        scenario.load(path)
    assert f"{path}:{line}:" in str(e.value) and words in str(e.value)


def test_yaml_syntax_error_has_a_line(tmp_path):
    path = write(tmp_path, GOOD.replace("  - {at: setup_complete", "  - {at: [setup_complete", 1))
    with pytest.raises(ScenarioError, match=r"s\.yaml:\d+: not valid YAML"):
        scenario.load(path)


def test_unknown_scenario_lists_known():
    with pytest.raises(ScenarioError, match="known: .*b1-silent-loss"):
        scenario.load("b9-nope")


def test_cli_bad_scenario_is_one_line_and_nonzero(tmp_path):
    out = subprocess.run([sys.executable, "-m", "lab", "run", "b9-nope"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("lab: unknown scenario")
    assert not (tmp_path / "captures").exists()


def test_cli_list_shows_catalogue():
    out = subprocess.run([sys.executable, "-m", "lab", "list"], capture_output=True, text=True)
    assert out.returncode == 0 and "b1-silent-loss" in out.stdout and "s2-recovery" in out.stdout


def test_a_step_may_wait_for_several_anchors(tmp_path):
    s = scenario.load(write(tmp_path, GOOD.replace("{at: step:drop, plus: 30, heal: true}",
                                                   "{at: [step:drop, commit], plus: 30, heal: true}")))
    assert s.timeline[2].ats == ["step:drop", "commit"]
    with pytest.raises(ScenarioError, match=r":8: unknown anchor 'comit'"):
        scenario.load(write(tmp_path, GOOD.replace("{at: step:drop, plus: 30, heal: true}",
                                                   "{at: [step:drop, comit], plus: 30, heal: true}")))


# ---- every key is checked against its definition, before anything runs ------------------------------
CONTROL = (scenario.catalogue_dir() / "control.yaml").read_text()


def _refused(tmp_path, text, *words):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as e:
        scenario.load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:") and all(w in msg for w in words), msg
    return msg


def _line_of(text, needle):
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_misspelt_expectation_is_refused(tmp_path):
    bad = CONTROL.replace("bookings: 1", "bookingz: 1")
    msg = _refused(tmp_path, bad, "unknown expectation 'bookingz' (did you mean bookings?)", "known: ", "told_truth")
    assert f":{_line_of(bad, 'bookingz')}:" in msg


def test_a_misspelt_client_parameter_is_refused(tmp_path):
    bad = CONTROL.replace("client: probe\n", "client: probe\nclient_params: {all: {resume_evry_s: 1}}\n")
    _refused(tmp_path, bad, "unknown client parameter 'resume_evry_s' for any built-in client",
             "(did you mean resume_every_s?)")


def test_a_parameter_is_checked_against_the_client_it_is_given_to(tmp_path):
    ok = CONTROL.replace("client: probe\n", "client: probe\nclient_params: {recovery: {hedge: false}, all: {hedge: true}}\n")
    assert scenario.load(write(tmp_path, ok)).params_for("recovery") == {"hedge": False}
    bad = CONTROL.replace("client: probe\n", "client: probe\nclient_params: {probe: {hedge: false}}\n")
    _refused(tmp_path, bad, "unknown client parameter 'hedge' for client 'probe'")


def test_a_misspelt_step_key_is_refused(tmp_path):
    bad = CONTROL.replace("{at: commit, plus: 1.5, say: 1}", "{at: commit, plsu: 1.5, say: 1}")
    msg = _refused(tmp_path, bad, "unknown step key 'plsu'", "plus")
    assert f":{_line_of(bad, 'plsu')}:" in msg


@pytest.mark.parametrize("old,new,words", [
    ("  all: {bookings: 1", "  prbe: {bookings: 1", ["unknown client 'prbe' in expect", "recovery"]),
    ("resumed: false", "resumed: nope", ["expectation resumed takes true or false", "'nope'"]),
    ("{at: commit, plus: 1.5, say: 1}", "{at: commit, plus: 1.5, say: 1, only_client: prbe}",
     ["unknown client 'prbe' in only_client"]),
    ("client: probe\n", "client: probe\nclient_params: {mymod: {x: 1}}\n", ["unknown client 'mymod' in client_params"]),
    ("client: probe\n", "client: probe\nbackend: {commit_after: 4}\n", ["unknown backend key 'commit_after'"]),
    ("client: probe\n", "client: prob\n", ["client must be a client name", "'prob'"]),
    ("{at: commit, plus: 1.5, say: 1}", "{at: commit, plus: 1.5, fault: {kind: blackhole, mdoe: silent}}",
     ["fault blackhole", "mdoe"]),
    ("{at: commit, plus: 1.5, say: 1}", "{at: commit, plus: 1.5, fault: {kind: loss}}", ["fault loss", "p "]),
    ("{at: commit, plus: 1.5, say: 1}", "{at: commit, plus: 1.5, fault: {kind: reject, target: everything}}",
     ["target must be flow", "'everything'"]),
    ("{at: commit, plus: 1.5, say: 1}", "{at: commit, plus: 1.5, action: freez}", ["unknown action 'freez'", "freeze"]),
])
def test_unknown_names_anywhere_are_refused(tmp_path, old, new, words):
    assert old in CONTROL
    _refused(tmp_path, CONTROL.replace(old, new, 1), *words)


def test_faults_that_validate_in_netem_are_accepted(tmp_path):
    text = CONTROL.replace("{at: commit, plus: 1.5, say: 1}",
                           "{at: commit, plus: 1.5, fault: {kind: loss, p: 0.3, target: endpoint}}\n"
                           "  - {at: commit, plus: 2, fault: {kind: netem, dev: eth0, delay_ms: 50}}")
    s = scenario.load(write(tmp_path, text))
    assert [st.fault.kind for st in s.timeline if st.fault] == ["loss", "netem"]


def test_a_module_client_is_asked_for_its_parameters(tmp_path):
    text = CONTROL.replace("client: probe\n", "client: lab.clients.probe:ProbeClient\n"
                           "client_params: {'lab.clients.probe:ProbeClient': {resume_every_s: 3}}\n")
    assert scenario.load(write(tmp_path, text)).params_for("lab.clients.probe:ProbeClient") == {"resume_every_s": 3}
    bad = text.replace("resume_every_s: 3", "resume_evry_s: 3")
    _refused(tmp_path, bad, "unknown client parameter 'resume_evry_s'")


def test_every_catalogue_scenario_checks_something_for_each_client_it_names():
    for n in scenario.names():
        s = scenario.load(n)
        for client in {s.client} | (set(s.expect) - {"all"}):
            real = [k for k in s.expect_for(client) if expectations.resolve(k) is not None]
            assert real, f"{n} checks nothing for {client}"


def test_cli_refuses_a_misspelt_expectation_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONTROL.replace("bookings: 1", "bookingz: 1"))
    out = subprocess.run([sys.executable, "-m", "lab", "run", str(bad), "--out", str(tmp_path / "batch")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("lab: ") and "bookingz" in out.stderr
    assert not (tmp_path / "batch").exists() and not (tmp_path / "captures").exists()


def test_a_scenario_names_the_twin_it_needs_and_a_bad_one_is_one_line(tmp_path):
    base = {"name": "x", "script": ["hi"], "timeline": [{"at": "start", "say": 0}]}
    s = scenario.parse({**base, "twin": {"profile": "vertex", "set": {"handle_expiry_s": 5}}})
    assert s.twin == {"profile": "vertex", "set": {"handle_expiry_s": 5}}
    assert scenario.parse(base).twin == {"set": {}}
    assert scenario.parse(base).twin_for("gemini") == {"profile": "developer-api", "set": {}}
    for bad, words in (({"profile": "nope"}, "nope"), ({"set": {"handle_expiry_s": "soon"}}, "handle_expiry_s"),
                       ({"set": {"no_such": 1}}, "no_such"), ({"profil": "vertex"}, "profil")):
        with pytest.raises(ScenarioError) as ei:
            scenario.parse({**base, "twin": bad})
        assert words in str(ei.value) and "\n" not in str(ei.value)


def test_a_faults_envelope_is_parsed_once_into_where_it_runs_and_what_it_targets(tmp_path):
    s = scenario.load(write(tmp_path, CONTROL.replace(
        "{at: commit, plus: 1.5, say: 1}",
        "{at: commit, plus: 1.5, fault: {kind: reject, target: endpoint}}\n"
        "  - {at: commit, plus: 2, fault: {kind: blackhole, mode: silent}}")))
    endpoint, flow = [st.fault for st in s.timeline if st.fault]
    assert (endpoint.kind, endpoint.node, endpoint.target) == ("reject", "client", "endpoint")
    assert (flow.target, "target" in flow.spec, "node" in flow.spec) == ("flow", False, False)
    conn = ("10.203.0.2", 40000, "10.203.0.1", 443)
    assert flow.netem_spec(conn)["target"] == {"src": "10.203.0.2", "sport": 40000, "dst": "10.203.0.1", "dport": 443}
    assert endpoint.netem_spec(conn)["target"] == {"dst": "10.203.0.1", "dport": 443}
    assert endpoint.netem_spec(None, "10.203.0.1")["target"] == {"dst": "10.203.0.1"}   # no connection yet
    with pytest.raises(LabError, match="has none"):
        flow.netem_spec(None)


def test_a_run_plays_the_users_lines_from_one_place(tmp_path):
    own = scenario.load("control")
    assert scenario.played(own) is own          # a conversation of its own with a script: the script stays
    (tmp_path / "lines.txt").write_text("Hello there.\nBook the 3pm slot.\nDid it go through?\n")
    given = scenario.played(own, str(tmp_path / "lines.txt"))    # lab run --conversation lines.txt
    assert given.script == ["Hello there.", "Book the 3pm slot.", "Did it go through?"]
    assert given.lines_from == str(tmp_path / "lines.txt") and given.conversation == own.conversation
    assert scenario.played(given) is given      # played once: its lines stay the conversation's
    assert scenario.played(own, "support").script == scenario.played(own, "support").script != own.script
    # the scenario's own conversation is only the user's lines: the same definition applies
    mine = tmp_path / "mine.yaml"
    mine.write_text(CONTROL + "\nconversation: lines.txt\n")
    assert scenario.played(scenario.load(str(mine))).script[0] == "Hello there."
    (tmp_path / "lines.txt").write_text("Hello there.\n")
    with pytest.raises(ScenarioError, match=r"says line 1 of the user.s lines, and the conversation \S*lines.txt has 1$"):
        scenario.played(scenario.load(str(mine)))
