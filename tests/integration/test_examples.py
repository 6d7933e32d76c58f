"""The example agents (examples/), each unmodified in its framework's own layout, under the lab in
network namespaces: loaded by `--client NAME:MODULE[:ATTR]` from the example's folder, reaching the
twin by the API's real hostname, heard as speech in a spoken scenario, sent through the proxy on
m3; and a user's agent that cannot load is one line before anything starts.

The framework venvs come from scripts/peers-setup.sh (instant once stamped); a test skips only when
the package index cannot be reached. Each run is bounded by its scenario's own duration.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

from lab.errors import LabError
from lab.events import read_events
from tests.integration.test_frameworks import _venv    # builds a framework venv, skips with no network

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _examples() -> dict[str, str]:
    """clients.txt's rows, keyed by folder (one framework may have several examples): folder -> client."""
    rows = [ln.split() for ln in (EXAMPLES / "clients.txt").read_text().splitlines() if ln.strip()
            and not ln.startswith("#")]
    return {folder: client for folder, client in rows}


def _framework(client: str) -> str:
    return client.split(":")[0].split("@")[0]          # livekit@1.8.0:agent:X -> livekit


def _example(framework: str | None = None, folder: str | None = None) -> tuple[str, str]:
    """(folder, client) of the example in that folder, or else of the framework's first example in clients.txt."""
    examples = _examples()
    if folder is not None:
        return folder, examples[folder]
    return next((f, c) for f, c in examples.items() if _framework(c) == framework)


def _run(monkeypatch, tmp_path, framework: str | None, scenario: str, conversation: str | None = None,
         folder: str | None = None):
    from lab.run import run_batch
    folder, client = _example(framework, folder)
    _venv(_framework(client))
    monkeypatch.chdir(EXAMPLES / folder)        # where the user runs `lab run` from
    lines: list[str] = []
    batch = run_batch([scenario], client=client, topology="netns", out_dir=tmp_path / "b", out=lines.append,
                      conversation=conversation)
    runs = sorted(p for p in batch.iterdir() if (p / "run.json").is_file())
    assert len(runs) == 1, "\n".join(lines[-20:])
    return runs[0], client, lines


def _twin(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "twin.jsonl").read_text().splitlines() if ln.strip()]


def test_the_adk_example_runs_unmodified_through_a_goaway(monkeypatch, tmp_path):
    run, client, lines = _run(monkeypatch, tmp_path, "adk", "l1-goaway", conversation="lines.txt")
    meta = json.loads((run / "run.json").read_text())
    assert meta["framework"]["agent"] == "table_reservation:root_agent" and meta["client"] == "adk"
    ended = [e for e in read_events(run / "events.jsonl") if e.kind == "run.end"]
    assert ended and ended[0].get("status") == "ok", "\n".join(lines[-20:])
    assert (run / "verdict.json").is_file()
    assert "table_reservation:root_agent (table_reservation)" in (run / "client.log").read_text()
    twin = _twin(run)
    # the twin's goAway came, and the agent's framework opened a second connection after it
    assert any(r["kind"] == "twin.goaway" for r in twin), sorted({r["kind"] for r in twin})
    assert sum(r["kind"] == "twin.conn.open" for r in twin) >= 2
    # the twin's model played the example's lines against the tools the agent declared, and called one
    declared = next(r["tools"] for r in twin if r["kind"] == "twin.conversation")
    assert {t["name"] for t in declared} == {"check_slot", "reserve_table"}
    assert {r["name"] for r in twin if r["kind"] == "twin.tool_call"} <= {"check_slot", "reserve_table"}
    # the model's tool call was answered by the agent's framework under the twin's call id
    calls = [e for e in read_events(run / "events.jsonl") if e.kind == "tool.call" and e.src == "twin-observed"]
    answered = [e for e in read_events(run / "events.jsonl") if e.kind == "tool.response" and e.src == "twin-observed"]
    assert calls and {e.get("id") for e in answered} <= {e.get("id") for e in calls} and answered
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns


def test_a_read_only_agent_passes_control_and_its_tool_gets_the_city(monkeypatch, tmp_path):
    run, client, lines = _run(monkeypatch, tmp_path, None, "control", conversation="lines.txt", folder="weather")
    assert client == "adk:weather_agent"
    ended = [e for e in read_events(run / "events.jsonl") if e.kind == "run.end"]
    assert ended and ended[0].get("status") == "ok", "\n".join(lines[-20:])
    twin = _twin(run)
    said = [(r["kind"], r.get("name"), r.get("args"), r.get("text")) for r in twin
            if r["kind"] in ("twin.model", "twin.tool_call")]
    # the twin's model asked the agent's one tool for the city the first line names ("in Paris")
    calls = [r for r in twin if r["kind"] == "twin.tool_call"]
    assert calls and {r["name"] for r in calls} == {"get_weather"}, said
    assert str(calls[0].get("args", {}).get("location", "")).strip().lower() == "paris", said
    # and the follow-up line ("And what about London?") asked it again for London
    assert [str(c.get("args", {}).get("location")) for c in calls][:2] == ["Paris", "London"], said
    # and the agent's framework answered it under the twin's call id
    events = read_events(run / "events.jsonl")
    issued = {e.get("id") for e in events if e.kind == "tool.call" and e.src == "twin-observed"}
    answered = [e for e in events if e.kind == "tool.response" and e.src == "twin-observed"]
    assert answered and {e.get("id") for e in answered} <= issued, said
    # a read-only agent is judged by its answers, not by bookings: control passes
    verdict = json.loads((run / "verdict.json").read_text())
    failed = {n: o.get("observed") for n, o in verdict["outcomes"].items() if o.get("status") == "fail"}
    assert verdict["pass"] is True and not verdict["defaulted_args"], failed or verdict
    assert verdict["outcomes"]["effects_once"]["status"] == "n/a" and verdict["reproduces"] is None


def test_a_framework_client_in_a_spoken_scenario_is_heard_as_speech(monkeypatch, tmp_path):
    run, _, lines = _run(monkeypatch, tmp_path, "livekit", "control-speech")
    said = [e for e in read_events(run / "events.jsonl") if e.kind == "user.say"]
    assert said and all(e.get("mode") == "speech" and e.get("mic_readers") == 1 for e in said)
    twin = _twin(run)
    heard = [r for r in twin if r["kind"] == "twin.vad" and r.get("event") == "end"]
    assert heard and heard[0]["line"] == 0 and heard[0]["heard_ms"] > 500, "\n".join(lines[-20:])
    assert [r.get("source") for r in twin if r["kind"] == "twin.user"][:1] == ["speech"]


def test_a_framework_on_m3_goes_through_the_proxy(monkeypatch, tmp_path):
    run, _, lines = _run(monkeypatch, tmp_path, "pipecat", "m3-proxy-idle-timeout")
    params = next(e for e in read_events(run / "events.jsonl") if e.kind == "client.params")
    proxy_host = params.get("params", {}).get("proxy", "").split("//")[-1].split(":")[0]
    opens = [r for r in _twin(run) if r["kind"] == "twin.conn.open"]
    # every connection the twin saw came from the proxy (the endpoint node's own address), none direct
    assert proxy_host and opens and all(r["peer"].rsplit(":", 1)[0] == proxy_host for r in opens), \
        (proxy_host, [r["peer"] for r in opens], lines[-10:])


@pytest.mark.parametrize("client, says", [
    ("adk:table_reservation:nope", "has no attribute 'nope'"),
    ("adk:table_reservation.agent:check_slot", "not an ADK agent"),
    ("adk:no_such_module", "no module 'no_such_module'"),
])
def test_an_agent_that_cannot_load_is_one_line_before_anything_starts(monkeypatch, tmp_path, client, says):
    from lab.run import run_batch
    _venv("adk")
    monkeypatch.chdir(EXAMPLES / "table_reservation")
    with pytest.raises(LabError) as e:
        run_batch(["control"], client=client, topology="netns", out_dir=tmp_path / "b", out=lambda s: None)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "b").exists()       # nothing recorded, nothing started


def test_the_cli_says_a_broken_module_in_one_line(tmp_path):
    _venv("pipecat")
    (tmp_path / "bot.py").write_text("import pipecat\nraise RuntimeError('missing DAILY_API_KEY')\n")
    p = subprocess.run([sys.executable, "-m", "lab", "run", "control", "--client", "pipecat:bot",
                        "--out", str(tmp_path / "b")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert "RuntimeError: missing DAILY_API_KEY (bot.py:2)" in p.stderr and not (tmp_path / "b").exists()
