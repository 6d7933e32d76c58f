"""Drift against a profile (changed on purpose), the replay record's round trip, and lab soak."""
import copy
import json
import sys
import types
from pathlib import Path

import pytest

from lab.live import drift
from lab.live.replay import PLACEHOLDER, FrameRecorder, materialize, read_frames, replay_script, sanitize

PROFILE = {
    "name": "test",
    "params": {
        "refuse_code": {"value": 1011, "source": "000 rounds 1-3"},
        "refuse_close_s": {"value": [0.472, 0.704], "source": "000 round 1"},
        "resume_setup_s": {"value": [0.5, 0.6], "source": "000 rounds 2/3"},
        "new_setup_s": {"value": [0.25, 0.32], "source": "000 stage 2"},
        "goaway_after_s": {"value": None, "source": "000: no goAway"},
        "transparent_supported": {"value": False, "source": "000 other findings"},
        "transparent_reject_code": {"value": 1007, "source": "000 other findings"},
        "handle_updates": {"value": "once", "source": "000 round 1"},
    },
}


def attempt(ms, outcome, code=1011, latency=560.0, loss=3500.0):
    return {"ms": ms, "after_loss_ms": ms - loss, "outcome": outcome, "code": code if outcome == "refused" else None,
            "latency_ms": latency}


def b1():
    return {"loss_kind": "fault:blackhole", "close_ms": None, "duration_ms": 900_000, "go_away": 0,
            "resume_attempts": [attempt(5300 + 10_000 * i, "refused", latency=500 + 20 * i) for i in range(5)],
            "refusal_codes": {"1011": 5}, "resumed_after_close_ms": None, "recovery": {"new_setup_ms": None},
            "transparent_requested": False, "transparent_refused": None,
            "pending_call_answered_after_resume": None, "handle_updates": {"1": 1, "2": 0}}


def b2():
    m = b1()
    m.update({"close_ms": 20_100, "resume_attempts": [attempt(5300, "refused"), attempt(20_140, "accepted")],
              "refusal_codes": {"1011": 1}, "resumed_after_close_ms": 590.0,
              "pending_call_answered_after_resume": True, "handle_updates": {"1": 1, "2": 0, "3": 1}})
    return m


def s2():
    m = b1()
    m.update({"resume_attempts": [attempt(5300, "refused")], "refusal_codes": {"1011": 1},
              "recovery": {"new_setup_ms": 290.0}, "duration_ms": 14_000})
    return m


def transparent():
    return {"loss_kind": None, "resume_attempts": [], "refusal_codes": {}, "duration_ms": 3000, "go_away": 0,
            "transparent_requested": True, "transparent_refused": True, "handle_updates": {}}


def status(behaviours):
    return {b.name: b.status for b in behaviours}


def test_profile_as_measured_shows_no_drift():
    got = status(drift.compare([b1(), b2(), s2(), transparent()], PROFILE))
    assert got == {
        "lockout after a silent loss": "unchanged", "refusal code": "unchanged", "refusal delay": "unchanged",
        "resume after the close": "unchanged", "new session setup": "unchanged", "goAway": "unchanged",
        "transparent mode": "unchanged", "pending call after resume": "unchanged",
        "handle updates per connection": "unchanged"}


@pytest.mark.parametrize("param,value,behaviour", [
    ("refuse_code", 1007, "refusal code"),
    ("refuse_close_s", [0.1, 0.2], "refusal delay"),
    ("resume_setup_s", [1.5, 2.0], "resume after the close"),
    ("new_setup_s", [0.9, 1.2], "new session setup"),
    ("transparent_supported", True, "transparent mode"),
    ("goaway_after_s", 600, "goAway"),
])
def test_a_parameter_changed_on_purpose_is_drift(param, value, behaviour):
    prof = copy.deepcopy(PROFILE)
    prof["params"][param]["value"] = value
    got = status(drift.compare([b1(), b2(), s2(), transparent()], prof))
    assert got[behaviour] == "changed"
    assert [k for k, v in got.items() if v == "changed"] == [behaviour]


def test_endpoint_changes_are_drift():
    unlocked = b1()
    unlocked["resume_attempts"][2]["outcome"] = "accepted"     # a resume worked while the old path was dead
    goaway = b2()
    goaway["go_away"] = 1
    lost_call = b2()
    lost_call["pending_call_answered_after_resume"] = False
    got = status(drift.compare([unlocked, goaway, lost_call], PROFILE))
    assert got["lockout after a silent loss"] == "changed"
    assert got["goAway"] == "changed"
    assert got["pending call after resume"] == "changed"


def test_not_observed_and_tolerant_layouts():
    flat = {"refuse_code": 1011, "groups": {"refuse_close_s": {"value": [0.472, 0.704]}}}
    got = status(drift.compare([], flat))
    assert got["refusal code"] == "not observed" and got["refusal delay"] == "not observed"
    assert drift.normalize_profile(flat)["refuse_close_s"]["value"] == [0.472, 0.704]


def test_shipped_profile_reads():
    p = Path(drift.__file__).resolve().parents[1] / "twin" / "profiles" / "developer-api.yaml"
    if not p.is_file():
        pytest.skip("twin profile not built yet")
    prof = drift.load_profile("developer-api")
    assert prof["refuse_code"]["value"] == 1011 and prof["refuse_code"]["source"]
    assert status(drift.compare([b1(), b2()], prof))["refusal code"] == "unchanged"


def _run_dir(root: Path, name: str, rows: list[dict], scenario: str = "b1-silent-loss") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "events.jsonl").write_text("".join(json.dumps({"t": 1.0, "src": "client", **r}) + "\n" for r in rows))
    (d / "run.json").write_text(json.dumps({"scenario": {"name": scenario}, "client": "probe", "expect": {}}))
    return d


def test_lab_drift_exit_code(tmp_path):
    from lab.cli import main
    rows = [{"ms": 0, "kind": "run.start"}, {"ms": 100, "kind": "conn.open", "conn": 1, "purpose": "initial"},
            {"ms": 3500, "kind": "fault.apply", "name": "blackhole", "spec": {"kind": "blackhole"}},
            {"ms": 5300, "kind": "resume.attempt", "attempt": 1, "conn": 2},
            {"ms": 5860, "kind": "resume.result", "attempt": 1, "conn": 2, "ok": False, "code": 1011,
             "reason": "Internal error encountered.", "latency_ms": 560},
            {"ms": 9000, "kind": "run.end", "status": "ok"}]
    _run_dir(tmp_path / "batch", "b1-probe-01", rows)
    prof = tmp_path / "p.yaml"
    prof.write_text(json.dumps(PROFILE))             # JSON is YAML
    assert main(["drift", str(tmp_path / "batch"), "--profile", str(prof)]) == 0
    assert "| refusal code | refuse_code = 1011 | 1011 \u00d71 | unchanged |" in (tmp_path / "batch" / "drift.md").read_text()
    bad = copy.deepcopy(PROFILE)
    bad["params"]["refuse_code"]["value"] = 1008
    prof.write_text(json.dumps(bad))
    assert main(["drift", str(tmp_path / "batch"), "--profile", str(prof)]) == 1
    assert "**changed**" in (tmp_path / "batch" / "drift.md").read_text()


SERVER = [
    (1, 410.0, {"setupComplete": {}}),
    (1, 412.0, {"sessionResumptionUpdate": {"newHandle": "CiQ-real-handle-" + "z" * 80, "resumable": True}}),
    (1, 2500.0, {"toolCall": {"functionCalls": [{"id": "fc-1", "name": "book_slot", "args": {"slot": "tomorrow 3pm"}}]}}),
    (2, 6100.0, {"setupComplete": {}}),
    (2, 6101.0, {"sessionResumptionUpdate": {"newHandle": "CiQ-other-" + "y" * 80, "resumable": True}}),
    (2, 7000.0, {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                                                          "data": "AAAA" * 100}}]}}}),
    (2, 7300.0, {"serverContent": {"turnComplete": True}}),
]


def test_replay_round_trip(tmp_path):
    rec = FrameRecorder(tmp_path / "frames.jsonl")
    for conn, ms, msg in SERVER:
        rec.frame(conn, ms, json.dumps(msg))
    rec.close_frame(2, 9000.0, 1011, "Internal error encountered.")
    rec.close()
    text = (tmp_path / "frames.jsonl").read_text()
    assert "real-handle" not in text and "other-" not in text and "AAAA" not in text
    frames = read_frames(tmp_path / "frames.jsonl")
    assert [f["kind"] for f in frames][:3] == ["setupComplete", "sessionResumptionUpdate", "toolCall"]
    script = replay_script(frames)
    assert sorted(script) == [1, 2]
    assert [s["after_ms"] for s in script[1]] == [0.0, 2.0, 2090.0]
    assert script[2][-1] == {"conn": 2, "after_ms": 2900.0, "close": 1011, "reason": "Internal error encountered."}
    sent = materialize(script[1][1], "twin-handle-1")["send"]
    assert sent == {"sessionResumptionUpdate": {"newHandle": "twin-handle-1", "resumable": True}}
    assert script[1][2]["send"] == SERVER[2][2]                      # everything else comes back unchanged
    assert script[2][2]["send"]["serverContent"]["modelTurn"]["parts"][0]["inlineData"]["data"] == "<audio 400 bytes>"
    assert sanitize(SERVER[5][2], keep_audio=True) == SERVER[5][2]
    assert sanitize({"newHandle": ""}) == {"newHandle": ""} and PLACEHOLDER == "<handle>"


def test_lab_soak_repeats_until_the_duration_ends(tmp_path, monkeypatch):
    calls = []
    clock = {"t": 0.0}

    def fake_run_batch(scenarios, n, client, topology, endpoint, out_dir, duration, base_url, budget):
        calls.append((scenarios[0], Path(out_dir).name, endpoint, budget))
        clock["t"] += 25.0
        d = Path(out_dir) / f"{scenarios[0]}-probe-01"
        _run_dir(d.parent, d.name, [{"ms": 0, "kind": "run.start"}, {"ms": 50, "kind": "run.end", "status": "ok"}],
                 scenarios[0])
        return Path(out_dir)

    fake = types.ModuleType("lab.run")
    fake.run_batch = fake_run_batch
    monkeypatch.setitem(sys.modules, "lab.run", fake)
    monkeypatch.setattr("lab.live.cli.time.monotonic", lambda: clock["t"])
    from lab.live import cli
    import argparse
    args = argparse.Namespace(endpoint="twin", duration=100.0, scenarios=["b1-silent-loss", "r2-freeze", "s2-recovery"],
                              run_duration=None, client=None, topology="netns", base_url=None, out=tmp_path / "soak")
    assert cli.cmd_soak(args) == 0
    assert [c[0] for c in calls] == ["b1-silent-loss", "r2-freeze", "s2-recovery", "b1-silent-loss"]
    assert [c[1] for c in calls] == ["round-001"] * 3 + ["round-002"]
    assert all(c[2] == "twin" and c[3] is None for c in calls)
    assert "| b1-silent-loss | probe | 2 |" in (tmp_path / "soak" / "summary.md").read_text()
