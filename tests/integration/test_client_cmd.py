"""An unmodified app as the client (`--client-cmd`), run for real in network namespaces.

tests/fixtures/plain_app.py is a plain google-genai app: no lab import, no base URL. It reaches
the twin by `generativelanguage.googleapis.com`, books through the local backend API and resumes
on every close, as the probe does. In B1 (shortened to 25 s) it must be refused, locked out and
judged exactly as the probe is, from the twin's side alone. An app that exits at once must stop
the run with one line and leave no namespace behind. Each run is bounded by its own duration
(the orchestrator kills an agent that outlives it by 120 s).
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.errors import LabError
from lab import scenario as scenario_mod
from lab.events import read_events

pytestmark = pytest.mark.netns

APP = Path(__file__).resolve().parent.parent / "fixtures" / "plain_app.py"


def _batch(tmp_path, scenario, cmd, duration=None):
    from lab.run import run_batch

    lines = []
    batch = run_batch([scenario], n=1, topology="netns", out_dir=tmp_path / "batch", duration=duration,
                      out=lines.append, client_cmd=cmd)
    return batch, lines


def _no_leftovers(run):
    # only this run's namespaces (its topology id has its folder's hash): another test's run of the same
    # scenario, with the same run name, may hold its own right now
    from lab.run import topology_id

    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns, f"namespaces left behind: {ns}"


def test_plain_app_is_locked_out_in_b1_like_the_probe(tmp_path):
    hosts_before = Path("/etc/hosts").read_text()
    batch, lines = _batch(tmp_path, "b1-silent-loss", f"{sys.executable} {APP}", duration=25)
    # the names were the app's alone: the host's own /etc/hosts is untouched (it may be a container)
    assert Path("/etc/hosts").read_text() == hosts_before
    run = batch / "b1-silent-loss-cmd-01"
    verdict = json.loads((run / "verdict.json").read_text())
    held = {c["name"]: c["held"] for c in verdict["expectations"]}
    # the probe's own expectations for B1, every one checked
    assert set(held) >= {"bookings", "all_resumes_refused", "refusal_code", "told_truth", "resumed"}, held
    # it reproduces the study's lock-out, and its user got what the probe's did: no reply after the loss
    assert verdict["reproduces"] and not verdict["pass"], "\n".join(lines[-30:])
    assert "conversation_back" in verdict["failed"] and verdict["held_to"] == "user"
    events = read_events(run / "events.jsonl")
    observed = [e for e in events if e.src == "twin-observed"]
    # the anchors fired from the twin's side: the fault went onto the app's own flow
    call = next(e for e in observed if e.kind == "tool.call")
    fault = next(e for e in events if e.kind == "fault.apply")
    first = next(e for e in observed if e.kind == "conn.open")
    assert fault.ms > call.ms and fault["spec"]["target"]["sport"] == int(first["local"].rsplit(":", 1)[1])
    refused = [e for e in observed if e.kind == "resume.result" and not e.get("ok")]
    assert len(refused) >= 2 and {e.get("code") for e in refused} == {1011}
    # the app booked through the backend API with the twin's call id
    assert [e.get("call_id") for e in events if e.kind == "backend.request"] == [call.get("id")]
    assert (run / "client.log").read_text().count("connected new") == 1
    assert json.loads((run / "run.json").read_text())["judged_as"] == "probe"
    _no_leftovers(run)


@pytest.mark.parametrize("code, said", [
    # exits at once
    ("print('missing config'); raise SystemExit(3)", "exited at once (exit 3): missing config"),
    # a framework that fails to import after a slow start: still before any connection
    ("import time; time.sleep(3); import no_such_framework",
     "exited before it ever connected (exit 1): ModuleNotFoundError: No module named 'no_such_framework'"),
])
def test_an_app_that_never_connects_stops_the_run_with_one_line(tmp_path, code, said):
    with pytest.raises(LabError) as err:
        _batch(tmp_path, "control", f'{sys.executable} -c "{code}"')
    assert said in str(err.value) and "\n" not in str(err.value)
    end = next(e for e in read_events(tmp_path / "batch" / "control-cmd-01" / "events.jsonl") if e.kind == "run.end")
    # stopped when the app exited, not at the scenario's end (20 s): told apart by the run's end, which
    # a machine loaded by other runs delays by seconds (13.7 s seen at a load of 11)
    assert end.ms < 17_000, end.ms
    _no_leftovers(tmp_path / "batch" / "control-cmd-01")


MIC_APP = Path(__file__).resolve().parent.parent / "fixtures" / "mic_app.py"


def test_an_app_that_listens_to_the_microphone_is_heard_and_judged(tmp_path):
    # control-speech: the lines are spoken into $LAB_AUDIO_SOCKET; the app streams its mic, silence
    # and all, and the twin hears two utterances in it (energy VAD), books and answers the truth
    batch, lines = _batch(tmp_path, "control-speech", f"{sys.executable} {MIC_APP}")
    run = batch / "control-speech-cmd-01"
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["met"], "\n".join(lines[-30:])
    events = read_events(run / "events.jsonl")
    says = [e for e in events if e.kind == "user.say"]
    assert [e.get("mode") for e in says] == ["speech", "speech"] and all(e.get("mic_readers") == 1 for e in says)
    twin = [json.loads(x) for x in (run / "twin.jsonl").read_text().splitlines()]
    ends = [r.get("line") for r in twin if r.get("kind") == "twin.vad" and r.get("event") == "end"]
    assert ends == [0, 1], ends          # two utterances heard in the stream, as lines 0 and 1
    _no_leftovers(run)


LATE_S = 4.0    # the app's start-up before it dials: longer than the old start grace and the step's plus
PLUS_S = 2.0


def test_the_scenario_clock_starts_at_the_apps_first_connection(tmp_path):
    # a fault at start + 2 s, for an app that sleeps 4 s before it connects: the fault lands 2 s
    # after the first connection, not 2 s into the app's start-up (when it had no connection to fault)
    scn = tmp_path / "late-app.yaml"
    scn.write_text(
        "name: late-app\ntitle: an app that connects late\nclient: probe\nduration: 6\nend: duration\n"
        "script:\n  - \"Book me the 3pm slot tomorrow, please.\"\n"
        "timeline:\n"
        f"  - {{at: start, plus: {PLUS_S}, fault: {{kind: delay, target: flow, direction: out, delay_ms: 20}}}}\n"
        "  - {at: setup_complete, plus: 0.5, say: 0}\n")
    cmd = f"sh -c 'sleep {LATE_S}; exec {sys.executable} {APP}'"
    batch, lines = _batch(tmp_path, str(scn), cmd)
    run = batch / "late-app-cmd-01"
    events = read_events(run / "events.jsonl")
    ready = next(e for e in events if e.kind == "client.connected")
    first = next(e for e in events if e.kind == "conn.open" and e.src == "twin-observed")
    fault = next(e for e in events if e.kind == "fault.apply")
    assert not [e for e in events if e.kind == "step.error"], "\n".join(lines[-20:])
    assert ready.get("waited_ms") >= LATE_S * 1000, ready.get("waited_ms")
    # on the old clock the fault would have come at ~2 s after launch, before any connection
    assert fault.ms >= ready.ms + PLUS_S * 1000 - 1, (fault.ms, ready.ms)
    assert fault.ms >= first.ms + PLUS_S * 1000 - 200, (fault.ms, first.ms)
    # the duration, too, counts from the connection: the run lasted the app's start-up plus 6 s
    end = next(e for e in events if e.kind == "run.end")
    assert end.ms >= ready.ms + 6000 - 1 and end.get("status") == "ok", end.data
    _no_leftovers(run)


PROMPT_APP = Path(__file__).resolve().parent.parent / "fixtures" / "prompt_app.py"
GREETING = "Hi, can you hear me?"
BOOK = "Book me the 3pm slot tomorrow, please."
STOP = "Actually, stop. Don't book it."


def heard_turns(run: Path) -> list[dict]:
    """The twin's decisions on the spoken turns: what it heard, the line it matched, the tool it called."""
    twin = read_events(run / "twin.jsonl")
    return [{"match": e["heard"].get("match"), "by": e["heard"]["by"], "tool": e.get("tool")}
            for e in twin if e.kind == "twin.model" and e.get("source") == "speech"]


def test_an_app_that_plays_its_own_prompts_is_answered_by_what_it_said(tmp_path):
    # the app's own audio (its voice, its order), not the lab's lines: "Hi, can you hear me?" first is a
    # greeting with no call, though by position it would be line 0, the booking; the booking line
    # said second is the booking; then the stop is a stop and the status question a status question
    prompts = f'"{GREETING}" "{BOOK}" "{STOP}" "Did you book it?"'
    # the control story, run to its duration: the app, not the lab's lines, decides what is said when
    scn = tmp_path / "prompts.yaml"
    scn.write_text(scenario_mod.resolve("control").read_text().replace("end: answered", "end: duration"))
    batch, lines = _batch(tmp_path, str(scn), f"{sys.executable} {PROMPT_APP} {prompts}", duration=40)
    run = batch / "control-cmd-01"
    assert heard_turns(run) == [{"match": GREETING, "by": "recognizer", "tool": None},
                                {"match": BOOK, "by": "recognizer", "tool": "book_slot"},
                                {"match": STOP, "by": "recognizer", "tool": None},
                                {"match": "Did you book it?", "by": "recognizer", "tool": None}], \
        (run / "client.log").read_text()[-2000:]
    model = [e for e in read_events(run / "twin.jsonl") if e.kind == "twin.model"]
    assert [e["match"].get("intent") for e in model[-2:]] == ["STOP", "STATUS"]
    calls = [e for e in read_events(run / "twin.jsonl") if e.kind == "twin.tool_call"]
    assert [c["args"] for c in calls] == [{"slot": "tomorrow 3pm"}]
    _no_leftovers(run)


OPENAI_APP = Path(__file__).resolve().parent.parent / "fixtures" / "openai_app.py"


def test_a_plain_openai_app_reaches_the_openai_twin_by_its_real_hostname(tmp_path):
    """`--protocol openai --client-cmd`: tests/fixtures/openai_app.py is the openai SDK with no base URL,
    so it dials api.openai.com on 443 with the key from $OPENAI_API_KEY. In its own mount namespace
    that name is the twin, whose certificate names it and whose CA $SSL_CERT_FILE trusts. Judged
    from the twin's record: the call with the line's slot, the output under that call's id, a reply."""
    from lab.run import run_batch

    hosts_before = Path("/etc/hosts").read_text()
    lines: list[str] = []
    batch = run_batch(["control"], topology="netns", out_dir=tmp_path / "batch", duration=30, out=lines.append,
                      client_cmd=f"{sys.executable} {OPENAI_APP}", protocol="openai")
    assert Path("/etc/hosts").read_text() == hosts_before
    run = batch / "control-cmd-01"
    verdict = json.loads((run / "verdict.json").read_text())
    got = {name: o["status"] for name, o in verdict["outcomes"].items()}
    assert verdict["protocol"] == "openai" and verdict["pass"], (got, "\n".join(lines[-30:]))
    assert got["effects_once"] == got["truthful_claims"] == got["last_line_answered"] == "pass", got
    assert got["owed_results_delivered"] == got["no_invented_turn"] == "pass", got
    # held to its user outcomes alone: the scenario's rows are the study's Gemini client's
    assert verdict["held_to"] == "user" and not verdict["expectations"]
    twin = read_events(run / "twin.jsonl")
    start = next(e for e in twin if e.kind == "twin.start")
    assert start["profile"] == "openai-realtime" and start["port"] == 443
    # the SDK's own default route, dialled by the real name (no base URL), with the lab's key
    opened = [e for e in twin if e.kind == "twin.conn.open"]
    assert [e["route"] for e in opened] == ["v1/realtime?model=gpt-realtime"]
    assert any(e.kind == "twin.accept" and str(e["session"]).startswith("sess_") for e in twin)
    assert not [e for e in twin if e.kind == "twin.error_event"]     # a wrong key would be one, then a close
    # the call with the slot the line asked for, its output matched to its call_id, then the reply
    calls = [e for e in twin if e.kind == "twin.tool_call"]
    assert [(e["name"], e["args"]) for e in calls] == [("book_slot", {"slot": "tomorrow 3pm"})], lines[-30:]
    outputs = [e for e in twin if e.kind == "twin.client_event" and e.get("item") == "function_call_output"]
    assert [e["call_id"] for e in outputs] == [calls[0]["id"]]
    answered = next(e for e in twin if e.kind == "twin.tool_response")
    assert answered["id"] == calls[0]["id"] and answered["known"] and answered["status"] == "booked"
    said = [e["text"] for e in twin if e.kind == "twin.say" and e.ms > answered.ms]
    assert said and "booked" in said[-1], said
    events = read_events(run / "events.jsonl")
    assert [e.get("call_id") for e in events if e.kind == "backend.request"] == [calls[0]["id"]]
    log = (run / "client.log").read_text()
    assert "openai_app: connected sess_" in log and "openai_app: booked " + calls[0]["id"] in log
    _no_leftovers(run)
