"""lab twin calibrate, pure: the statistics, the samples a live record gives, and the overlay as a profile."""
import json
import random

import pytest
import yaml

from lab.cli import main
from lab.live import fit as F
from lab.live import samples as S
from lab.live.calibrate import calibrate_dirs
from lab.twin.profile import load_profile
from lab.stats.quantiles import Quantiles

TABLE = Quantiles.parse({"min": 0.427, "p10": 0.472, "p25": 0.4985, "p50": 0.526, "p75": 0.552, "p90": 0.572,
                         "p95": 0.6085, "p98.5": 0.755, "max": 1.818})


def test_cdf_inverts_the_table_and_ranges_and_numbers():
    for u in (0.0, 0.1, 0.33, 0.5, 0.9, 0.99):
        assert F.cdf(TABLE, TABLE.at(u)) == pytest.approx(u, abs=1e-9)
    assert F.cdf([1.0, 3.0], 2.0) == pytest.approx(0.5)
    assert F.cdf(0.2, 0.1) == 0.0 and F.cdf(0.2, 0.2) == 1.0


def test_a_sample_of_the_profile_is_consistent_and_a_shifted_one_is_not():
    rng = random.Random(7)
    same = [TABLE.sample(rng) for _ in range(60)]
    shifted = [x + 0.150 for x in (TABLE.sample(rng) for _ in range(60))]
    a, b = F.fit(same, TABLE), F.fit(shifted, TABLE)
    assert not a.changed and a.ks < a.ks_crit
    assert b.changed and b.ks > 0.8
    assert b.fitted[3] - TABLE.at(0.5) == pytest.approx(0.150, abs=3 * b.stderr[3] + 0.005)
    assert a.probabilities == tuple(p for p, _ in TABLE.points)     # fitted where the profile's table is


def test_ks_critical_values_fall_with_n():
    assert F.ks_critical(3, 0.05) == pytest.approx(0.708)
    assert F.ks_critical(20, 0.05) == pytest.approx(0.294, abs=0.003)      # the exact table: 0.294
    assert F.ks_critical(20) == pytest.approx(0.352, abs=0.004)            # 1 %: the exact table: 0.352
    assert F.ks_critical(100) == pytest.approx(0.163, abs=0.003)
    assert F.ks_critical(0) == float("inf")
    with pytest.raises(ValueError):
        F.ks_critical(5, 0.1)


def test_a_one_number_parameter_compares_the_median_not_the_step():
    f = F.fit([146.0, 147.0, 148.0], 140.0, resolution=10.0)
    assert f.ks == 1.0                           # a step: KS rejects any sample a few ms late
    assert f.point and not f.changed             # 7 ms off: within 3 errors + the timer lag
    assert F.fit([170.0, 172.0, 175.0], 140.0, resolution=10.0).changed
    assert not F.fit([0.5, 0.6], [0.4, 0.7]).point


# ---- the record ----------------------------------------------------------------------------------
def ev(ms, kind, **f):
    return {"t": 1000 + ms / 1000, "ms": ms, "src": "client", "kind": kind, **f}


def frame(ms, conn, kind, **msg):
    return {"conn": conn, "ms": ms, "dir": "in", "kind": kind, "msg": {kind: msg}}


def live_run(root, name, refusal_ms=560.0, setup_ms=260.0, sent=True):
    """A live run's folder: an initial session, a typed request and its call, refused resumes."""
    d = root / name
    d.mkdir(parents=True)
    evs = [ev(0, "run.start"), ev(100, "conn.open", conn=1, purpose="initial")]
    if sent:
        evs.append(ev(110, "conn.setup_sent", conn=1))
    base = 110 if sent else 100
    evs += [ev(base + setup_ms, "conn.setup_complete", conn=1, setup_ms=setup_ms + 10),
            ev(1000, "user.say", conn=1, text="Book me", line=0, mode="text"),
            ev(1530, "tool.call", conn=1, id="fc_1", name="book_slot"),
            ev(2600, "tool.response", conn=1, id="fc_1", name="book_slot", status="booked", sent=True),
            ev(3250, "model.audio", conn=1, bytes=100, first=True)]
    frames = [frame(base + setup_ms, 1, "setupComplete"), frame(base + setup_ms + 120, 1, "sessionResumptionUpdate")]
    for i in range(4):
        t = 5000 + 1000 * i
        c = 2 + i
        evs += [ev(t, "resume.attempt", attempt=i + 1, conn=c), ev(t + 40, "conn.open", conn=c, purpose="resume")]
        if sent:
            evs.append(ev(t + 45, "conn.setup_sent", conn=c))
        start = t + 45 if sent else t + 40
        evs += [ev(start + refusal_ms, "conn.closed", conn=c, code=1011, reason="Internal error encountered.",
                   by="server", during="setup"),
                ev(start + refusal_ms, "resume.result", attempt=i + 1, conn=c, ok=False, code=1011,
                   latency_ms=refusal_ms + 45)]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    (d / "frames.jsonl").write_text("".join(json.dumps(f) + "\n" for f in frames))
    (d / "run.json").write_text(json.dumps({"scenario": {"name": "b1-silent-loss"}, "endpoint": "live"}))
    return d


def test_each_sample_starts_at_the_setup_frame_not_at_connect_start(tmp_path):
    rec = S.read_record(live_run(tmp_path, "run-01"))
    assert [s.value for s in S.refusals(rec, "ms")] == pytest.approx([560.0] * 4)   # the 45 ms handshake is out
    assert {s.base for s in S.refusals(rec)} == {"setup sent"}
    assert [s.value for s in S.new_setups(rec, "ms")] == pytest.approx([260.0])
    assert [s.value for s in S.handle_updates_new(rec, "ms")] == pytest.approx([120.0])
    assert [s.value for s in S.tool_calls(rec, "ms")] == pytest.approx([530.0])
    assert [s.value for s in S.replies_to_responses(rec, "ms")] == pytest.approx([650.0])
    assert S.resumed_setups(rec) == []


def test_an_older_record_falls_back_to_the_socket_and_says_so(tmp_path):
    rec = S.read_record(live_run(tmp_path, "run-01", sent=False))
    assert {s.base for s in S.refusals(rec)} == {"socket up"}


def test_speech_onset_and_end_come_from_the_voice_activity_frames(tmp_path):
    d = tmp_path / "run-01"
    d.mkdir()
    evs = [ev(0, "run.start"), ev(1000, "user.say", conn=1, text="x", line=0, mode="speech", voiced_ms=1500.0)]
    frames = [frame(1150, 1, "voiceActivity", voiceActivityType="ACTIVITY_START"),
              frame(3400, 1, "voiceActivity", voiceActivityType="ACTIVITY_END")]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    (d / "frames.jsonl").write_text("".join(json.dumps(f) + "\n" for f in frames))
    rec = S.read_record(d)
    assert [s.value for s in S.vad_onsets(rec)] == pytest.approx([150.0])
    assert [s.value for s in S.vad_ends(rec)] == pytest.approx([0.9])


def test_the_overlay_is_a_profile_the_twin_loads(tmp_path):
    for i in range(2):
        live_run(tmp_path / "batch", f"run-0{i + 1}", refusal_ms=700.0 + 10 * i)
    out, cals, lines = calibrate_dirs([tmp_path / "batch"], min_records=5)
    doc = yaml.safe_load(out.read_text())
    assert doc["extends"] == "developer-api"
    refuse = doc["params"]["refuse_close_s"]
    assert refuse["records"] == 8 and refuse["distance"]["changed"] is True
    assert refuse["value"]["p50"] == pytest.approx(0.705, abs=0.006)
    assert "new_setup_s" in doc["not_fitted"]            # 2 records < 5: the base's value stays
    prof = load_profile(str(out))
    assert prof["refuse_close_s"].at(0.5) == pytest.approx(0.705, abs=0.006)
    assert prof["new_setup_s"] == load_profile("developer-api")["new_setup_s"]
    assert any("refuse_close_s" in ln and "CHANGED" in ln for ln in lines)


def test_calibrate_on_the_command_line(tmp_path, capsys):
    live_run(tmp_path / "batch", "run-01")
    assert main(["twin", "calibrate", str(tmp_path / "batch"), "--min-records", "1",
                 "--out", str(tmp_path / "o.yaml")]) == 0
    out = capsys.readouterr().out
    assert "overlay:" in out and "against the twin" not in out
    assert load_profile(str(tmp_path / "o.yaml"))["new_setup_s"].at(0.5) == pytest.approx(0.260)
    twin_run = live_run(tmp_path / "twin", "run-01")
    (twin_run / "run.json").write_text(json.dumps({"scenario": "b1-silent-loss", "endpoint": "twin"}))
    assert main(["twin", "calibrate", str(tmp_path / "twin"), "--out", str(tmp_path / "t.yaml")]) == 0
    assert "1 of the 1 runs ran against the twin" in capsys.readouterr().out
    assert main(["twin", "calibrate", str(tmp_path / "nothing")]) == 2
    assert "no such folder" in capsys.readouterr().err
