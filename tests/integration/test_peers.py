"""Peer clients against the twin (issue 2): LiveKit's Google realtime plugin and pipecat's
GeminiLiveLLMService each complete one turn headless, over real loopback TLS.

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


async def run_peer(python: Path, script: str, log_path: Path, extra: list[str]) -> tuple[dict, str, float]:
    """Start a twin on loopback, run one peer script against it, stop the twin (whatever happens).

    Returns the peer's JSON line, its stderr tail, and the run's wall time.
    """
    twin = TwinServer(host="127.0.0.1", port=0, cert_dir=log_path.parent / "certs", overrides=FAST,
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
    assert "booked" in res["transcript"], res
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
