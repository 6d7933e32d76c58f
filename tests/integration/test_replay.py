"""A recorded run replayed offline: record against the twin, then serve the record back.

The agent plays r1-idle-abort-immediate on loopback (its faults are client actions, so no
namespace is needed) against the twin; the client writes frames.jsonl. A replay server then serves
that record to a second run of the same scenario: the second client must meet the same server,
connection by connection: the tool call, the refused resume with its 1011, the accepted one.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lab import scenario
from lab.events import read_events
from lab.plan import KEY_ENV, RunPlan

SCENARIO = "r1-idle-abort-immediate"


def _serve(argv, cwd):
    p = subprocess.Popen([sys.executable, "-m", "lab", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, cwd=cwd)
    url = ca = None
    deadline = time.time() + 20
    while time.time() < deadline and not (url and ca):
        line = p.stdout.readline()
        if not line:
            break
        for word in line.split():
            if word.startswith("https://"):
                url = word
        if line.startswith("ca_path"):
            ca = line.split()[1]
    assert url and ca, "server did not start"
    return p, url, ca


def _agent(run_dir: Path, url: str, ca: str):
    env = {**os.environ, KEY_ENV: "k"}
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = RunPlan(scenario=SCENARIO, client=scenario.load(SCENARIO).client, run_dir=str(run_dir), base_url=url, ca=ca)
    out = subprocess.run([sys.executable, "-m", "lab", "agent", str(plan.write(run_dir))],
                         capture_output=True, text=True, env=env, timeout=90)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return read_events(run_dir / "events.jsonl")


def _shape(evs):
    return {
        "resumes": [(e["ok"], e.get("code")) for e in evs if e.kind == "resume.result"],
        "calls": [e["id"] for e in evs if e.kind == "tool.call"],
        "conns": [e["purpose"] for e in evs if e.kind == "conn.open"],
    }


def test_a_recorded_run_replays_offline(tmp_path):
    twin, url, ca = _serve(["twin", "serve", "--port", "0", "--cert-dir", str(tmp_path / "c1")], tmp_path)
    try:
        first = _agent(tmp_path / "recorded", url, ca)
    finally:
        twin.terminate()
        twin.wait(10)
    frames = tmp_path / "recorded" / "frames.jsonl"
    recs = [json.loads(l) for l in frames.read_text().splitlines()]
    assert any(r["kind"] == "toolCall" for r in recs)
    assert "newHandle" in frames.read_text() and "<handle>" in frames.read_text()
    handles = [e for e in first if e.kind == "handle.update"]
    assert handles and all(h["handle_sha"] not in frames.read_text() for h in handles)

    replay, url2, ca2 = _serve(["twin", "replay", str(frames), "--port", "0", "--cert-dir", str(tmp_path / "c2")],
                               tmp_path)
    try:
        second = _agent(tmp_path / "replayed", url2, ca2)
    finally:
        replay.terminate()
        replay.wait(10)
    a, b = _shape(first), _shape(second)
    assert a["resumes"][0] == (False, 1011) and a["resumes"][-1][0] is True, a   # refused, then resumed
    assert b == a, (a, b)
