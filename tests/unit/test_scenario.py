import subprocess
import sys

import pytest

from lab import scenario
from lab.errors import ScenarioError

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
                     "s2-recovery", "s2-recovery-no-note", "s2-control"):
        assert required in names
    for n in names:
        s = scenario.load(n)
        assert s.source.startswith("000"), f"{n} cites no finding"
        assert s.expect, f"{n} states no expectation"


def test_good_file_parses(tmp_path):
    s = scenario.load(write(tmp_path, GOOD))
    assert [st.at for st in s.timeline] == ["setup_complete", "tool_call", "step:drop"]
    assert s.expect_for("probe") == {"bookings": 1, "told_truth": "never"}
    assert s.expect_for("recovery") == {"bookings": 1}


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
