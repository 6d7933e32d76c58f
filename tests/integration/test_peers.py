"""Peer clients against the twin (issue 2): LiveKit's Google realtime plugin and pipecat's
GeminiLiveLLMService each complete one turn headless, over real loopback TLS. Issue 9: pipecat's
turns carry usage metrics and no warnings; LiveKit gives each generate_reply() its own generation
while the model speaks and after a voice barge-in, and continues the session across a goAway
(tests/peers/livekit_checks.py).

Each peer lives in a venv of its own (pipecat pins google-genai<3; the project needs >=3.3), made by
scripts/peers-setup.sh, which this module runs first (instant once the venvs are stamped). The peers
are driven by standalone scripts under tests/peers/ that print one JSON line; the test checks that
line and the twin's own record (twin.jsonl) of what the peer sent.

Skipped, with pip's reason, only when the package index cannot be reached (the script's exit 75);
any other install failure fails the test.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lab.events import read_events
from lab.twin.server import TwinServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "peers-setup.sh"
PEERS = ROOT / "tests" / "peers"
BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
FAST = {"reply_delay_s": 0.1, "tool_call_delay_s": 0.1, "speech_ms_per_char": 10}
INSTALL_TIMEOUT_S = 1200     # a cold install of both peers takes about 70 s here
TURN_TIMEOUT_S = 30


def peer_python(peer: str) -> Path:
    """The peer venv's interpreter, installed (or found ready) by scripts/peers-setup.sh."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(["bash", str(SETUP), peer], cwd=ROOT, capture_output=True, text=True,
                           timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/peers-setup.sh {peer} did not finish in {INSTALL_TIMEOUT_S} s")
    said = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["(no output)"])[-1]
    if p.returncode == 75:
        pytest.skip(f"cannot install the {peer} peer: {said}")
    assert p.returncode == 0, f"scripts/peers-setup.sh {peer} exited {p.returncode}: {said}"
    print(f"{peer} venv: {p.stdout.strip()} ({time.monotonic() - t0:.1f} s)")
    py = ROOT / f".venv-{peer}" / "bin" / "python"
    assert py.exists(), f"{py} missing after scripts/peers-setup.sh {peer}"
    return py


async def run_peer(python: Path, script: str, log_path: Path, extra: list[str],
                   overrides: dict | None = None) -> tuple[dict, str, float]:
    """Start a twin on loopback, run one peer script against it, stop the twin (whatever happens).

    `overrides`: the twin's profile parameters (FAST if None). Returns the peer's JSON line, its
    stderr tail, and the run's wall time.
    """
    twin = TwinServer(host="127.0.0.1", port=0, cert_dir=log_path.parent / "certs",
                      overrides=FAST if overrides is None else overrides,
                      log_path=log_path, seed=11)
    await twin.start()
    proc = None
    try:
        t0 = time.monotonic()
        # the peer's venv only: keep the project venv's packages off its path
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        proc = await asyncio.create_subprocess_exec(
            str(python), str(PEERS / script), "--base-url", twin.base_url, "--ca", str(twin.ca_path),
            "--timeout", str(TURN_TIMEOUT_S), *extra, cwd=str(log_path.parent), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), TURN_TIMEOUT_S + 30)
        wall = time.monotonic() - t0
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await twin.stop()
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
    tail = "\n".join(err.decode(errors="replace").splitlines()[-15:])
    assert lines, f"{script} printed no JSON line (exit {proc.returncode}); stderr:\n{tail}"
    result = json.loads(lines[-1])
    result["_exit"] = proc.returncode
    return result, tail, wall


def check_turn(res: dict, tail: str) -> None:
    assert res["_exit"] == 0 and res["ok"], f"peer turn failed: {json.dumps(res)}\nstderr:\n{tail}"
    assert res["connected"] and res["handle_seen"], res
    assert res["turn_complete"], res
    assert res["tool_call"] == "book_slot" or res["speech_bytes"] > 0, res
    assert not [e for e in res["errors"] if not e.get("recoverable", True) or e.get("fatal")], res


# pipecat 1.14's one warning that no server can avoid: GeminiLiveLLMService.service_metadata_frame()
# always says it emits no turn frames (emits_turn_frames=False, hard-coded), when the pipeline starts
NO_TURN_FRAMES_NOTICE = "is not emitting turn frames"


def check_pipecat_usage(res: dict) -> None:
    """Every turn pipecat completed carried the twin's usageMetadata: pipecat turned each into an
    LLMUsageMetricsData (a MetricsFrame), and logged no warning about what the server sent (e.g.
    "Received turn_complete without usage_metadata")."""
    warnings = [w for w in res["warnings"] if NO_TURN_FRAMES_NOTICE not in w]
    assert not warnings, f"pipecat logged warnings: {warnings}"
    assert res["turns"] and len(res["usage"]) >= len(res["turns"]), \
        f"{len(res['turns'])} turns but {len(res['usage'])} usage metrics: {res['usage']}"
    empty = [u for u in res["usage"] if not (u["prompt_tokens"] > 0 and u["total_tokens"] > 0)]
    assert not empty, f"usage metrics without tokens: {empty}"


def twin_saw(log_path: Path) -> dict[str, list]:
    by_kind: dict[str, list] = {}
    for ev in read_events(log_path):
        by_kind.setdefault(ev.kind, []).append(ev)
    return by_kind


def check_booked_turn(res: dict, ev: dict[str, list]) -> None:
    """BOOK: toolCall book_slot, the peer's toolResponse, the spoken confirmation and turnComplete."""
    assert res["tool_call"] == "book_slot" and res["tool_response_sent"], res
    assert res["tool_args"] == {"slot": "tomorrow 3pm"}, res
    assert res["speech_bytes"] > 0 and res.get("sample_rate") == 24000, res
    # the peer's transcript is the twin's spoken sentence, every piece read (after a booked response
    # that is F1's in-progress sentence, so no fixed wording here)
    said = [e["text"] for e in ev.get("twin.say", [])]
    assert res["transcript"].strip() and res["transcript"].strip() in said, (res["transcript"], said)
    assert [e["intent"] for e in ev["twin.user"]] == ["BOOK"], ev.get("twin.user")
    assert [e["name"] for e in ev["twin.tool_call"]] == ["book_slot"], ev.get("twin.tool_call")
    resp = ev.get("twin.tool_response", [])
    assert len(resp) == 1 and resp[0]["known"] and resp[0]["status"] == "booked", resp
    assert ev.get("twin.say"), "the twin never spoke the confirmation"


def check_setup(ev: dict[str, list], route: str) -> None:
    """One connection, one fresh setup on the expected API path, accepted, with a handle issued.

    The twin issues a handle right after setupComplete only when the setup carried
    sessionResumption, so twin.handle is the twin's record that the peer sent it.
    """
    setups = ev.get("twin.setup", [])
    assert len(setups) == 1, f"expected one setup, twin saw {len(setups)}"
    s = setups[0]
    assert s["route"] == route and not s["resume"], s.data
    assert "gemini" in str(s["model"]), s.data
    assert len(ev.get("twin.accept", [])) == 1, ev.get("twin.accept")
    handles = [h for h in ev.get("twin.handle", []) if h["conn"] == s["conn"]]
    assert handles, "no sessionResumption in the peer's setup: the twin issued no handle"
    assert not ev.get("twin.refuse") and not ev.get("twin.bad_input") and not ev.get("twin.error"), ev


@pytest.fixture(scope="module")
def livekit_python() -> Path:
    return peer_python("livekit")


@pytest.fixture(scope="module")
def pipecat_python() -> Path:
    return peer_python("pipecat")


def test_livekit_books_through_tool_call(livekit_python, tmp_path):
    """generate_reply(instructions=BOOK) on gemini-3.8-live: google-genai 3.x (v1 path), the plugin's
    function tool is called, its result goes back as a toolResponse, the twin speaks and completes."""
    log = tmp_path / "twin.jsonl"
    res, tail, wall = asyncio.run(run_peer(livekit_python, "livekit_turn.py", log, ["--text", BOOK]))
    print(f"livekit tool turn: {wall:.1f} s wall, {res.get('elapsed_s')} s in the peer; {json.dumps(res)}")
    check_turn(res, tail)
    ev = twin_saw(log)
    check_setup(ev, route="v1")
    check_booked_turn(res, ev)


def test_livekit_agent_session_path_speaks(livekit_python, tmp_path):
    """AgentSession's path for a typed message (update_chat_ctx + generate_reply()) on a 2.5 model:
    the history goes in without turnComplete, then the plugin's "." placeholder completes the turn,
    which the twin answers with speech and outputTranscription."""
    log = tmp_path / "twin.jsonl"
    res, tail, wall = asyncio.run(run_peer(
        livekit_python, "livekit_turn.py", log,
        ["--text", BOOK, "--mode", "chat", "--model", "gemini-2.5-flash-native-audio-preview-12-2025"]))
    print(f"livekit chat turn: {wall:.1f} s wall, {res.get('elapsed_s')} s in the peer; {json.dumps(res)}")
    check_turn(res, tail)
    assert res["speech_bytes"] > 0 and res["transcript"], res
    ev = twin_saw(log)
    check_setup(ev, route="v1")
    assert [e["source"] for e in ev["twin.user"]] == ["client_content"], ev.get("twin.user")
    assert ev.get("twin.say"), "the twin never spoke"


def test_pipecat_books_through_tool_call(pipecat_python, tmp_path):
    """The first LLMContextFrame carries BOOK: google-genai 2.x (v1beta path), the function registered
    with register_function runs, pipecat sends its result, the twin speaks and completes."""
    log = tmp_path / "twin.jsonl"
    res, tail, wall = asyncio.run(run_peer(pipecat_python, "pipecat_turn.py", log, ["--text", BOOK]))
    print(f"pipecat tool turn: {wall:.1f} s wall, {res.get('elapsed_s')} s in the peer; {json.dumps(res)}")
    check_turn(res, tail)
    ev = twin_saw(log)
    check_setup(ev, route="v1beta")
    check_booked_turn(res, ev)
    check_pipecat_usage(res)


def test_pipecat_realtime_text_speaks(pipecat_python, tmp_path):
    """InputTextRawFrame goes out as realtimeInput.text; a STATUS question gets a spoken answer."""
    log = tmp_path / "twin.jsonl"
    res, tail, wall = asyncio.run(run_peer(pipecat_python, "pipecat_turn.py", log,
                                           ["--text", STATUS, "--mode", "realtime"]))
    print(f"pipecat realtime turn: {wall:.1f} s wall, {res.get('elapsed_s')} s in the peer; {json.dumps(res)}")
    check_turn(res, tail)
    assert res["speech_bytes"] > 0 and res["transcript"] and res["tool_call"] is None, res
    ev = twin_saw(log)
    check_setup(ev, route="v1beta")
    users = ev.get("twin.user", [])
    assert [(e["source"], e["intent"]) for e in users] == [("realtime_text", "STATUS")], users
    assert ev.get("twin.say"), "the twin never spoke"
    check_pipecat_usage(res)


# ---- issue 9: the peers follow the twin's turns -----------------------------------------------------
# the model's reply (STATUS, ~43 characters) lasts ~3.4 s at 80 ms a character: long enough for a
# second generate_reply(), or the user's voice, to land while the model is still speaking
SPEAKING = {**FAST, "speech_ms_per_char": 80}
# goAway 3 s before an 8 s connection cap: the plugin reconnects about 5 s in
CAPPED = {**FAST, "connection_max_s": 8, "goaway_lead_s": 3}


def run_livekit_check(python: Path, tmp_path: Path, check: str, overrides: dict) -> tuple[dict, dict]:
    log = tmp_path / "twin.jsonl"
    res, tail, wall = asyncio.run(run_peer(python, "livekit_checks.py", log, ["--check", check],
                                           overrides=overrides))
    print(f"livekit {check}: {wall:.1f} s wall; {json.dumps(res)}")
    assert res["_exit"] == 0 and res["completed"], f"livekit_checks.py --check {check} failed: " \
                                                    f"{json.dumps(res)}\nstderr:\n{tail}"
    assert wall < 40, f"the {check} check took {wall:.1f} s (bound: 40 s)"
    assert not res["errors"], f"the plugin reported errors: {res['errors']}"
    timed_out = [w for w in res["warnings"] if "timed out" in w]
    assert not timed_out, f"generate_reply timed out: {timed_out}"
    return res, twin_saw(log)


def reply_generation(res: dict, label: str) -> dict:
    """The generation the generate_reply() labelled `label` got; it must be user-initiated and speak."""
    asked = [r for r in res["replies"] if r["label"] == label]
    assert asked and asked[0]["generation"] is not None, \
        f"generate_reply() {label!r} got no generation of its own: {res['replies']}"
    gen = res["generations"][asked[0]["generation"] - 1]
    assert gen["user_initiated"], f"generate_reply() {label!r} got a generation it did not start: {gen}"
    assert gen["speech_bytes"] > 0 and gen["done_s"] is not None, f"{label!r}: the generation never spoke: {gen}"
    return gen


def test_livekit_generate_reply_while_speaking_gets_its_own_generation(livekit_python, tmp_path):
    """A second generate_reply() while the first reply is still speaking: the twin interrupts the
    first turn (interrupted, then turnComplete) and answers the new one; the plugin gives the second
    call a new generation and appends nothing more to the first."""
    res, ev = run_livekit_check(livekit_python, tmp_path, "overlap", SPEAKING)
    first, second = reply_generation(res, "first"), reply_generation(res, "while speaking")
    assert second["n"] != first["n"], f"both replies in one generation: {res['generations']}"
    assert first["late_bytes"] == 0, f"audio appended to the interrupted generation: {first}"
    cut = [e for e in ev.get("twin.interrupted", []) if e["speaking"]]
    assert len(cut) == 1, f"the twin should have cut the first turn while it spoke: {ev.get('twin.interrupted')}"
    assert len(ev.get("twin.user", [])) == 2, ev.get("twin.user")


def test_livekit_voice_barge_in_then_new_generation(livekit_python, tmp_path):
    """The user's voice (a loud tone over the twin's energy VAD) while the model speaks: the twin cuts
    the turn, the plugin emits input_speech_started, and the next generate_reply() is a new generation."""
    res, ev = run_livekit_check(livekit_python, tmp_path, "barge", SPEAKING)
    first = reply_generation(res, "first")
    after = reply_generation(res, "after barge-in")
    assert after["n"] != first["n"], f"the reply after the barge-in reused a generation: {res['generations']}"
    assert [e["event"] for e in ev.get("twin.vad", [])][:1] == ["onset"], \
        f"the twin's VAD never heard the voice: {ev.get('twin.vad')}"
    cut = [e for e in ev.get("twin.interrupted", []) if e["speaking"]]
    assert cut, f"the voice did not interrupt the speaking turn: {ev.get('twin.interrupted')}"
    assert any(t >= res["barge_s"] for t in res["speech_started_s"]), \
        f"the plugin never emitted input_speech_started after the voice began: {res}"
    assert first["late_bytes"] == 0, f"audio appended to the interrupted generation: {first}"


def test_livekit_goaway_reconnect_continues_the_session(livekit_python, tmp_path):
    """The twin's goAway before its connection cap: the plugin closes, resumes with its handle (the
    twin accepts it at once), and a reply asked for afterwards is spoken on the new connection."""
    res, ev = run_livekit_check(livekit_python, tmp_path, "goaway", CAPPED)
    assert ev.get("twin.goaway"), "the twin sent no goAway"
    setups = ev.get("twin.setup", [])
    # a loaded machine may run on past the second connection's own goAway (~10.5 s): more resumes
    assert len(setups) >= 2 and [s["resume"] for s in setups[:2]] == [False, True], \
        f"expected a fresh setup, then a resume: {[s.data for s in setups]}"
    accepted = {a["conn"]: a for a in ev.get("twin.accept", [])}
    resumed = accepted.get(setups[1]["conn"])
    assert resumed is not None and resumed["resume"], \
        f"the twin did not accept the resume: {ev.get('twin.accept')}, refused: {ev.get('twin.refuse')}"
    assert resumed["session"] == accepted[setups[0]["conn"]]["session"], "the resume opened a new session"
    assert res["handle_before_reply"], "the plugin held no resumption handle after the reconnect"
    gen = reply_generation(res, "after goAway")
    said = [s for s in ev.get("twin.say", []) if s["conn"] != setups[0]["conn"]]
    assert said, f"the reply was not spoken on a resumed connection: {ev.get('twin.say')}"
    assert gen["created_s"] > res["goaway_wait_s"], gen
