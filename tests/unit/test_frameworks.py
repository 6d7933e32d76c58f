"""Framework client names with a release and a build, the app's parameters, and tool results by
call id (seed 003): the parsing and the pure parts, no venv and no network."""
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lab import scenario
from lab.clients.frameworks import FRAMEWORKS, resolve
from lab.errors import LabError, ScenarioError
from lab.events import Event
from lab.report.tool_results import tool_result_metrics

REPO = Path(__file__).resolve().parents[2]


def test_plain_name_is_the_pinned_venv():
    b = resolve("livekit")
    assert (b.name, b.version, b.build, b.venv, b.label) == ("livekit", "1.8.9", None, ".venv-livekit", "livekit")
    assert b.setup == "scripts/peers-setup.sh livekit"


def test_release_and_build_pick_their_own_venv():
    b = resolve("livekit@1.8.0")
    assert (b.version, b.build, b.venv, b.label) == ("1.8.0", None, ".venv-livekit-1.8.0", "livekit-1.8.0")
    p = resolve("livekit@1.8.0+pr003")
    assert (p.build, p.venv, p.spec) == ("pr003", ".venv-livekit-1.8.0-pr003", "livekit@1.8.0+pr003")
    assert p.describe()["patch"] == "tests/fixtures/livekit-pr003.patch"
    assert (REPO / p.describe()["patch"]).is_file()
    assert resolve("pipecat@1.13.2").venv == ".venv-pipecat-1.13.2"


@pytest.mark.parametrize("bad, says", [("livekit@", "NAME@RELEASE"), ("livekit@latest", "NAME@RELEASE"),
                                       ("livekit@1.8.0+nope", "no build 'nope'"), ("pipecat@1.0+pr003", "no build")])
def test_bad_release_or_build_is_one_line(bad, says):
    with pytest.raises(LabError) as e:
        resolve(bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_other_names_are_no_framework():
    assert resolve("probe") is None and resolve("pkg.mod:Class") is None and resolve(None) is None


def test_missing_venv_names_the_setup_command(tmp_path):
    with pytest.raises(LabError, match=r"\.venv-livekit-1\.2\.3.*scripts/peers-setup\.sh livekit@1\.2\.3"):
        resolve("livekit@1.2.3").check(tmp_path)


def test_command_tells_the_app_only_its_declared_params(tmp_path):
    argv = shlex.split(resolve("livekit").command(tmp_path, {"update_tools_in_tool": True, "resume_for_s": 10}))
    told = json.loads(argv[argv.index("--params") + 1])
    assert told == {**FRAMEWORKS["livekit"].declared_params(), "update_tools_in_tool": True}
    assert "--params" not in resolve("pipecat").command(tmp_path, {"resume_for_s": 10})


def test_app_reads_its_params_from_argv():
    code = ("import sys; sys.path.insert(0, 'lab/peers'); import app_io; "
            "print(app_io.app_params(sys.argv))")
    out = subprocess.run([sys.executable, "-c", code, "--params", '{"a": 1}'], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "{'a': 1}"
    bad = subprocess.run([sys.executable, "-c", code, "--params", "[1]"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode != 0 and "JSON object" in bad.stderr


def _scn(tmp_path, body):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nduration: 10\nscript: [\"Book me the 3pm slot tomorrow, please.\"]\n"
                 "timeline:\n  - {at: setup_complete, say: 0}\n" + body)
    return scenario.load(str(p))


def test_scenario_may_give_a_framework_its_declared_params(tmp_path):
    s = _scn(tmp_path, "client: livekit\nclient_params:\n  livekit: {update_tools_in_tool: true}\n"
                       "expect:\n  livekit: {tool_results_missing: 0}\n")
    assert s.params_for("livekit") == {"update_tools_in_tool": True}
    with pytest.raises(ScenarioError, match="unknown client parameter 'update_tool_in_tool'"):
        _scn(tmp_path, "client_params:\n  livekit: {update_tool_in_tool: true}\n")


def _e(kind, ms, **data):
    return Event(kind, 0.0, ms, "twin" if kind.startswith("twin.") else "agent", data)


def test_tool_results_by_call_id():
    said = [_e("user.say", 100)]
    twin = [_e("twin.user", 110), _e("twin.tool_call", 200, id="c1"),
            _e("twin.tool_response", 900, id="c1", known=True), _e("twin.say", 950),
            _e("twin.tool_response", 960, id="c1", known=True), _e("twin.user", 970), _e("twin.say", 1200)]
    m = tool_result_metrics(said, twin)
    assert m == {"tool_results_missing": 0, "tool_results_repeated": 1, "tool_results_unknown": 0,
                 "replies_per_tool_result": 2, "unscripted_user_turns": 1}


def test_a_result_never_sent_is_missing_and_one_to_a_stranger_is_unknown():
    twin = [_e("twin.tool_call", 200, id="c1"), _e("twin.tool_call", 300, id="c2"),
            _e("twin.tool_response", 900, id="c2", known=False)]
    m = tool_result_metrics([], twin)
    assert (m["tool_results_missing"], m["tool_results_unknown"], m["replies_per_tool_result"]) == (1, 1, 0)
    assert tool_result_metrics([], []) ["replies_per_tool_result"] is None
    assert set(tool_result_metrics([], None).values()) == {None}


def _twin_line(sim, conn, text, complete):
    sim.send(conn, {"client_content": {"turns": [{"role": "user", "parts": [{"text": text}]}],
                                       "turnComplete": complete}})


def test_twin_reads_a_dot_turn_as_closing_the_pending_line():
    # LiveKit's plugin before 1.8.3 sends a typed line turnComplete false, then generate_reply()'s "."
    from tests.unit.test_twin_core import Sim, new_session

    sim = Sim()
    new_session(sim)
    _twin_line(sim, 1, "Book me the 3pm slot tomorrow, please.", False)
    _twin_line(sim, 1, ".", True)
    sim.after(3)
    assert [u["intent"] for u in sim.logs_of("twin.user")] == ["BOOK"]
    assert sim.logs_of("twin.tool_call")
    # nothing pending: a "." is a turn of its own (the PR's nudge after a replayed result)
    _twin_line(sim, 1, ".", True)
    assert [u["intent"] for u in sim.logs_of("twin.user")] == ["BOOK", "OTHER"]


# ---- the user's own agent: NAME[@RELEASE]:MODULE[:ATTR] ------------------------------------------

def test_a_users_agent_is_named_where_its_framework_keeps_it():
    adk = resolve("adk:table_reservation")
    assert (adk.name, adk.entry.module, adk.entry.attr) == ("adk", "table_reservation", "root_agent")
    assert adk.label == "adk-table-reservation" and adk.venv == ".venv-adk"
    lk = resolve("livekit@1.8.0+pr003:agent:OrderSupport")
    assert (lk.version, lk.build, lk.entry.spec) == ("1.8.0", "pr003", "agent:OrderSupport")
    assert lk.label == "livekit-1.8.0-pr003-agent-ordersupport" and lk.venv == ".venv-livekit-1.8.0-pr003"
    assert lk.client_spec == "livekit@1.8.0+pr003:agent:OrderSupport" and lk.spec == "livekit@1.8.0+pr003"
    pc = resolve("pipecat:examples/ticket_triage/bot.py")
    assert (pc.entry.attr, pc.label) == ("run_bot", "pipecat-bot")
    assert resolve("adk:pkg.mod:my_agent").describe()["agent"] == "pkg.mod:my_agent"


@pytest.mark.parametrize("bad, says", [("livekit:agent", "livekit:MODULE:ATTR"), ("livekit:", "MODULE"),
                                       ("adk:a:b:c", "MODULE:ATTR"), ("pipecat:bot:run-bot", "not a Python name"),
                                       ("livekit@x:agent:A", "NAME@RELEASE")])
def test_a_users_agent_written_wrong_is_one_line(bad, says):
    with pytest.raises(LabError) as e:
        resolve(bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_users_agent_runs_in_the_frameworks_host(tmp_path):
    argv = shlex.split(resolve("livekit:agent:OrderSupport").command(tmp_path, {"update_tools_in_tool": True}))
    assert argv[1].endswith("lab/peers/livekit_host.py") and argv[2:] == ["--entry", "agent", "OrderSupport"]
    assert "--params" not in argv       # the lab's own app's cue, not the user's agent's
    assert all((REPO / f.host).is_file() for f in FRAMEWORKS.values())


def test_requirements_run_in_a_copy_keyed_by_their_hash(tmp_path):
    from lab.clients.frameworks import venvs
    req = tmp_path / "requirements.txt"
    req.write_text("httpx\n")
    b = resolve("adk:table_reservation")
    d = venvs.digest(req, b)
    assert b.with_requirements(d).venv == f".venv-adk-req-{d}"
    assert venvs.digest(req, resolve("livekit")) != d       # another framework, another copy
    req.write_text("httpx==0.27\n")
    assert venvs.digest(req, b) != d
    with pytest.raises(LabError, match="no such file"):
        venvs.ensure(b, tmp_path / "missing.txt", tmp_path)
    with pytest.raises(LabError, match=r"needs its venv \.venv-adk"):   # no base venv: nothing copied
        venvs.ensure(b, req, tmp_path)
    assert not list(tmp_path.glob(".venv-*"))


def _entry_check(tmp_path, kind, module, attr):
    p = subprocess.run([sys.executable, str(REPO / "lab/peers/entry.py"), "check", kind, module, attr],
                       cwd=tmp_path, capture_output=True, text=True)
    return p.returncode, p.stdout.strip()


def test_the_entry_check_says_what_is_wrong_in_one_line(tmp_path):
    (tmp_path / "good.py").write_text("async def run_bot(transport, runner_args):\n    pass\nX = 1\n"
                                      "async def one(transport):\n    pass\nasync def three(a, b, c):\n    pass\n")
    (tmp_path / "broken.py").write_text("import os\nraise RuntimeError('no config file')\n")
    (tmp_path / "needs.py").write_text("import not_installed_anywhere\n")
    assert _entry_check(tmp_path, "pipecat", "good", "run_bot") == (0, "")
    assert _entry_check(tmp_path, "pipecat", "good", "one") == (0, "")
    assert _entry_check(tmp_path, "pipecat", str(tmp_path / "good.py"), "run_bot") == (0, "")
    for module, attr, says in [("good", "nope", "has no attribute 'nope'"), ("good", "X", "not an async function"),
                               ("good", "three", "takes neither"), ("missing", "run_bot", "no module 'missing'"),
                               ("broken", "run_bot", "RuntimeError: no config file (broken.py:2)"),
                               ("needs", "run_bot", "No module named 'not_installed_anywhere'"),
                               ("nowhere/bot.py", "run_bot", "does not exist")]:
        rc, said = _entry_check(tmp_path, "pipecat", module, attr)
        assert rc == 3 and says in said and "\n" not in said, (module, attr, said)


# ---- in Compose: the framework's venv in the client image -----------------------------------------

@pytest.mark.parametrize("client, says", [("livekit@1.8.0:agent:A", "pinned release only"),
                                          ("adk@2.12.0", "pinned release only")])
def test_compose_runs_the_pinned_framework_the_image_holds(client, says):
    from lab.run import preflight
    with pytest.raises(LabError, match=says):
        preflight(["control"], client, "compose", "twin")


def test_compose_takes_no_requirements_file(tmp_path):
    from lab.run import preflight
    (tmp_path / "r.txt").write_text("httpx\n")
    with pytest.raises(LabError, match="--topology netns"):
        preflight(["control"], "adk:table_reservation", "compose", "twin", requirements=str(tmp_path / "r.txt"))


def test_the_image_wheelhouse_reads_the_pins_from_peers_setup():
    from lab.topology import framework_image
    assert framework_image.pins("adk") == ["google-adk==2.13.0"]
    assert framework_image.pins("livekit") == ["livekit-agents==1.8.9", "livekit-plugins-google==1.8.9",
                                             "livekit-plugins-openai==1.8.9"]
    assert framework_image.environment("pipecat") == {"LAB_FRAMEWORK": "pipecat"}


def test_a_framework_command_in_compose_is_the_images_own(tmp_path):
    from lab.topology.framework_image import IMAGE_REPO
    argv = shlex.split(resolve("adk:table_reservation").command(IMAGE_REPO))
    assert argv[:2] == ["/opt/lab/.venv-adk/bin/python", "/opt/lab/lab/peers/adk_host.py"]
    text = (REPO / "Dockerfile.client").read_text()
    assert "ARG LAB_FRAMEWORK=none" in text and "scripts/peers-setup.sh \"$LAB_FRAMEWORK\"" in text
    assert "!scripts/peers-setup.sh" in (REPO / ".dockerignore").read_text()


def test_with_a_conversation_the_user_says_its_lines(tmp_path):
    lines = REPO / "examples" / "order_support" / "lines.txt"
    said = scenario.played(scenario.load("l1-goaway"), str(lines))
    assert said.script[0].startswith("The frother on order A1002") and len(said.script) == 3
    short = tmp_path / "one.txt"
    short.write_text("Hello?\n")
    with pytest.raises(LabError, match=r"says line 1 .* has 1$"):
        scenario.played(scenario.load("l1-goaway"), str(short))
