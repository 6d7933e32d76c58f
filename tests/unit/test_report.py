"""The report room on synthetic run folders written with the real EventLog.

The EventLog's clock is replaced by a settable one so each event lands at a chosen millisecond:
the timings are inputs, and each verdict is checked both ways (an expectation that must hold, and
the same run against an expectation it must fail).
"""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

import lab.events
from lab.errors import LabError
from lab.events import EventLog, redact_handle
from lab.report import metrics as metrics_mod
from lab.report.summary import find_runs, summarize
from lab.report.verdict import VERDICT_FORMAT, build_run

T0 = 1_780_000_000.0
BOOK = "Book me the 3pm slot tomorrow, please."
ASK = "Did you book it?"
HANDLE = "h4ndle-that-must-never-appear-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(lab.events, "time", types.SimpleNamespace(time=c.time))
    return c


class Run:
    """Writes one run folder: events at chosen ms, run.json with the scenario's expectations."""

    def __init__(self, root: Path, run_id: str, clock: Clock, scenario: str, expect: dict, client: str = "probe"):
        self.dir = root / run_id
        self.dir.mkdir(parents=True)
        self.clock = clock
        clock.now = T0
        self.log = EventLog(self.dir / "events.jsonl", t0=T0)
        (self.dir / "run.json").write_text(json.dumps({
            "scenario": scenario, "client": client, "topology": "netns", "endpoint": "twin",
            "params": {}, "expect": expect, "held_to": "reproduction"}))   # each run is its scenario's own client
        self.at(0, "run.start", src="agent", scenario=scenario, client=client, endpoint="twin", topology="netns")

    def at(self, ms: float, kind: str, src: str = "client", **data):
        self.clock.now = T0 + ms / 1000.0
        self.log.write(kind, src=src, **data)
        return self

    def fault(self, ms: float, kind: str = "blackhole", cuts_path: bool = True, **spec):
        """A fault as the agent records it: fault.apply, and the run's one loss event."""
        self.at(ms, "fault.apply", src="agent", name=kind, spec={"kind": kind, **spec})
        return self.at(ms, "loss", src="agent", how=f"fault:{kind}", cuts_path=cuts_path)

    def attempt(self, ms: float, n: int, conn: int, ok: bool, latency: float, code: int | None = 1011):
        self.at(ms, "resume.attempt", attempt=n, conn=conn)
        self.at(ms, "conn.open", conn=conn, purpose="resume", local="10.203.0.2:40000", remote="10.203.0.1:443")
        if ok:
            self.at(ms + latency, "conn.setup_complete", conn=conn, setup_ms=latency)
            self.at(ms + latency, "resume.result", attempt=n, conn=conn, ok=True, code=None, reason=None, latency_ms=latency)
            self.at(ms + latency + 5, "handle.update", conn=conn, resumable=True, **redact_handle(HANDLE + "2"))
        else:
            self.at(ms + latency, "resume.result", attempt=n, conn=conn, ok=False, code=code,
                    reason="Internal error encountered.", latency_ms=latency)
            self.at(ms + latency, "conn.closed", conn=conn, code=code, reason="Internal error encountered.", by="server")
        return self

    def end(self, ms: float, status: str = "ok"):
        self.at(ms, "run.end", src="agent", status=status, error=None)
        self.log.close()
        return self.dir


def start_booking(r: Run) -> Run:
    """The common opening: a session, the booking request, the tool call, the backend."""
    r.at(100, "conn.open", conn=1, purpose="initial", local="10.203.0.2:39999", remote="10.203.0.1:443")
    r.at(400, "conn.setup_complete", conn=1, setup_ms=300)
    r.at(410, "handle.update", conn=1, resumable=True, **redact_handle(HANDLE))
    r.at(1000, "user.say", conn=1, text=BOOK, line=0, mode="text")
    r.at(2500, "tool.call", conn=1, id="fc-1", name="book_slot", args={"slot": "tomorrow 15:00"})
    r.at(2510, "backend.request", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    return r


def b1_run(root: Path, clock: Clock, run_id: str = "b1-0001", expect: dict | None = None, attempts: int = 5) -> Path:
    expect = expect if expect is not None else {
        "bookings": 1, "told_truth": "never", "all_resumes_refused": True, "refusal_code": 1011,
        "resumed": False, "fallback": False}
    r = start_booking(Run(root, run_id, clock, "b1-silent-loss", expect))
    r.fault(3500, direction="both")
    r.at(5300, "loss.detected", conn=1, silent_ms=2000)
    r.at(6510, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    for i in range(attempts):
        r.attempt(5310 + i * 10_000, i + 1, i + 2, ok=False, latency=480 + 40 * i)
    r.at(20_000, "user.say", conn=1, text=ASK, line=1, mode="text")  # asked on the dead path: never answered
    return r.end(5310 + attempts * 10_000)


def b2_run(root: Path, clock: Clock, run_id: str = "b2-0001", close_to_setup: float = 600.0,
           expect: dict | None = None, echo_after: float = 0.0) -> Path:
    expect = expect if expect is not None else {
        "resumed": True, "resumed_after_close_ms": [500, 700], "bookings": 1, "told_truth": True,
        "refusal_code": 1011}
    r = start_booking(Run(root, run_id, clock, "b2-path-return", expect))
    r.fault(3500)
    r.at(5300, "loss.detected", conn=1, silent_ms=2000)
    r.at(6510, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    r.attempt(5310, 1, 2, ok=False, latency=520)
    r.attempt(15_310, 2, 3, ok=False, latency=610)
    r.at(20_000, "fault.clear", src="agent", name="blackhole")
    r.at(20_100, "action", src="agent", what="close")
    echo = 20_100 + echo_after          # the server's echo of the close (behind TCP's backoff)
    r.at(echo, "conn.closed", conn=1, code=1000, reason="", by="client")
    r.attempt(echo + close_to_setup - 560, 3, 4, ok=True, latency=560)
    r.at(echo + close_to_setup + 10, "tool.response", conn=4, id="fc-1", name="book_slot", status="ok")
    r.at(echo + 1400, "user.say", conn=4, text=ASK, line=1, mode="text")
    r.at(echo + 2200, "model.audio", conn=4, first=True, bytes=9600)
    r.at(echo + 2900, "model.text", conn=4, text="Yes, your 3 pm slot tomorrow is booked.")
    r.at(echo + 2910, "model.turn_complete", conn=4)
    return r.end(25_000)


def recovery_run(root: Path, clock: Clock, run_id: str = "s2-0001", reissue: bool = False,
                 expect: dict | None = None) -> Path:
    expect = expect if expect is not None else {
        "fallback": True, "told_truth": True, "bookings": 1, "max_loss_to_first_audio_ms": 7100,
        "reissued_call": False, "duplicate_bookings": 0}
    r = start_booking(Run(root, run_id, clock, "s2-recovery", expect, client="recovery"))
    r.fault(3500)
    r.at(5300, "loss.detected", conn=1, silent_ms=2000)
    r.at(6000, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    for i in range(4):
        r.attempt(5300 + i * 1000, i + 1, i + 2, ok=False, latency=500 + 30 * i)
    r.at(8850, "fallback.start", conn=1, note=True, turns=2)
    r.at(8860, "conn.open", conn=6, purpose="new", local="10.203.0.2:40010", remote="10.203.0.1:443")
    r.at(9150, "conn.setup_complete", conn=6, setup_ms=290)
    r.at(9160, "session.restored", conn=6, note=True, turns=2)
    if reissue:
        r.at(9800, "tool.call", conn=6, id="fc-9", name="book_slot", args={"slot": "tomorrow 15:00"})
        r.at(9805, "tool.dedup", id="fc-9", business_key="slot:tomorrow-15", job="job-1")
        r.at(9810, "tool.response", conn=6, id="fc-9", name="book_slot", status="ok")
    r.at(10_100, "model.audio", conn=6, first=True, bytes=9600)
    r.at(11_000, "model.text", conn=6, text="Of course, your 3:00 p.m. slot for tomorrow has been successfully booked.")
    r.at(11_500, "user.say", conn=6, text=ASK, line=1, mode="text")
    r.at(12_300, "model.audio", conn=6, first=True, bytes=9600)
    r.at(12_500, "model.text", conn=6, text="Yes, your 3 pm slot tomorrow is booked.")
    return r.end(14_000)


def held(v: dict) -> dict:
    return {r["name"]: r["held"] for r in v["expectations"]}


def test_b1_all_refused_booked_never_told(tmp_path, clock):
    d = b1_run(tmp_path, clock)
    v = build_run(d)
    m = v["metrics"]
    assert v["met"], v
    assert all(held(v).values())
    assert m["loss_ms"] == 3500 and m["detection_ms"] == 1800
    assert (m["attempts"], m["refused"], m["accepted"]) == (5, 5, 0)
    assert m["refusal_codes"] == {"1011": 5}
    assert m["refusal_latency_ms"]["min"] == 480 and m["refusal_latency_ms"]["max"] == 640
    assert m["bookings"] == 1 and m["duplicate_bookings"] == 0
    assert m["told"] == "never" and m["told_truth"] is None and m["truth_final"] == "booked"
    assert m["loss_to_setup_ms"] is None and m["loss_to_first_audio_ms"] is None
    assert m["commit_after_loss_ms"] == [3010]
    assert (d / "verdict.json").is_file() and (d / "timeline.png").stat().st_size > 10_000
    written = json.loads((d / "verdict.json").read_text())
    # the probe reproduces the study, and its user was never told: it fails them
    assert written["met"] is True and written["reproduces"] is True and written["pass"] is False


def test_b1_fails_expectations_it_does_not_meet(tmp_path, clock):
    d = b1_run(tmp_path, clock, expect={"told_truth": True, "refusal_code": 1007, "resumed": True,
                                        "bookings": 0, "all_resumes_refused": True})
    v = build_run(d)
    assert not v["met"]
    assert held(v) == {"told_truth": False, "refusal_code": False, "resumed": False, "bookings": False,
                       "all_resumes_refused": True}
    assert sorted(v["not_reproduced"]) == ["bookings", "refusal_code", "resumed", "told_truth"]


def test_b2_resumed_600ms_after_close(tmp_path, clock):
    v = build_run(b2_run(tmp_path, clock))
    m = v["metrics"]
    assert v["met"], v["expectations"]
    assert m["refused"] == 2 and m["accepted"] == 1 and m["refused_before_accept"] == 2
    assert m["resumed_after_close_ms"] == pytest.approx(600, abs=1)
    assert m["close_ms"] == 20_100
    assert m["loss_to_setup_ms"] == pytest.approx(20_700 - 3500, abs=1)
    assert m["loss_to_first_audio_ms"] == pytest.approx(22_300 - 3500, abs=1)
    assert m["told"] == "booked" and m["truth_at_answer"] == "booked" and m["told_truth"] is True
    assert m["pending_call_answered_after_resume"] is True
    assert m["handle_updates"] == {"1": 1, "2": 0, "3": 0, "4": 1}


def test_b2_resume_too_late_after_close_fails(tmp_path, clock):
    v = build_run(b2_run(tmp_path, clock, close_to_setup=900))
    assert not v["met"] and v["not_reproduced"] == ["resumed_after_close_ms"]
    row = next(r for r in v["expectations"] if r["name"] == "resumed_after_close_ms")
    assert row["observed"] == pytest.approx(900, abs=1)


def test_recovery_fallback_tells_truth(tmp_path, clock):
    v = build_run(recovery_run(tmp_path, clock))
    m = v["metrics"]
    assert v["met"], v["expectations"]
    assert m["fallback"] and m["recovered_via"] == "new" and not m["resumed"]
    assert m["loss_to_first_audio_ms"] == 6600
    rec = m["recovery"]
    assert (rec["detection_ms"], rec["resume_window_ms"], rec["new_setup_ms"], rec["restore_to_first_audio_ms"]) == \
        (1800, 3550, 290, 940)
    assert m["first_claim_after_recovery"] == "booked"
    assert m["tool_calls_reissued"] == 0


def test_recovery_reissued_call_is_caught(tmp_path, clock):
    v = build_run(recovery_run(tmp_path, clock, reissue=True))
    assert not v["met"] and v["not_reproduced"] == ["reissued_call"]
    assert v["metrics"]["tool_calls_reissued"] == 1 and v["metrics"]["tool_dedups"] == 1
    assert v["metrics"]["duplicate_bookings"] == 0


def test_in_progress_answer_after_commit_is_not_the_truth(tmp_path, clock):
    r = start_booking(Run(tmp_path, "r1-0001", clock, "r1-idle-abort-immediate", {"told_truth": True}))
    r.at(3000, "action", src="agent", what="abort")
    r.at(3000, "loss", src="agent", how="action:abort", cuts_path=True)
    r.at(3010, "conn.closed", conn=1, code=1006, reason="", by="abnormal")
    r.attempt(3020, 1, 2, ok=False, latency=600)
    r.attempt(4620, 2, 3, ok=True, latency=500)
    r.at(6510, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    r.at(9000, "user.say", conn=3, text=ASK, line=1, mode="text")
    r.at(9900, "model.text", conn=3, text="I'm booking the 3 pm slot tomorrow for you now.")
    v = build_run(r.end(12_000))
    m = v["metrics"]
    assert m["loss_kind"] == "action:abort" and m["loss_to_setup_ms"] == pytest.approx(4620 + 500 - 3000, abs=1)
    assert m["told"] == "in_progress" and m["truth_at_answer"] == "booked" and m["told_truth"] is False
    assert not v["met"] and v["not_reproduced"] == ["told_truth"]


def test_truncated_record_gives_a_verdict_and_a_timeline(tmp_path, clock):
    d = b1_run(tmp_path, clock)
    p = d / "events.jsonl"
    lines = p.read_text().splitlines(keepends=True)
    p.write_text("".join(lines[:20]) + lines[20][:17])  # killed half-way: no run.end, half a line
    v = build_run(d)
    assert not v["met"] and "record truncated: no run.end" in v["notes"]
    assert (d / "timeline.png").stat().st_size > 5000
    assert v["metrics"]["complete"] is False and v["metrics"]["loss_ms"] == 3500


def test_empty_and_missing_records(tmp_path, clock):
    d = tmp_path / "r-empty"
    d.mkdir()
    (d / "events.jsonl").write_text("")
    v = build_run(d)
    assert not v["met"] and "empty record" in v["notes"] and (d / "timeline.png").is_file()
    with pytest.raises(LabError):
        build_run(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(LabError):
        build_run(tmp_path / "plain")


def test_unknown_expectation_is_listed_not_decisive(tmp_path, clock):
    d = b1_run(tmp_path, clock, expect={"bookings": 1, "some_future_check": 3, "max_detection_ms": 2500,
                                        "detection_ms": [1500, 2000]})
    v = build_run(d)
    assert v["met"]
    assert held(v) == {"bookings": True, "some_future_check": None, "max_detection_ms": True, "detection_ms": True}


def test_summary_rows_and_no_secrets(tmp_path, clock):
    batch = tmp_path / "batch"
    b1_run(batch, clock, "b1-0001")
    b1_run(batch, clock, "b1-0002", attempts=3)
    b2_run(batch, clock, "b2-0001")
    recovery_run(batch, clock, "s2-0001")
    recovery_run(batch, clock, "s2-0002", reissue=True)
    assert len(find_runs(batch)) == 5
    out = summarize(batch)
    text = out.read_text()
    assert "| b1-silent-loss | probe | 2 | 0 of 2 (reproduce 2) | 8 of 8 refused (1011 \u00d78) |" in text
    assert "never told \u00d72" in text
    assert "| b2-path-return | probe | 1 | 1 of 1 (reproduce 1) | 2 of 3 refused (1011 \u00d72), 1 accepted |" in text
    # the re-issued call booked once: fine for the user, but not what the study's client did
    assert "| s2-recovery | recovery | 2 | 2 of 2 (reproduce 1) |" in text
    assert "6600 (all 2)" in text                      # loss -> first audio of the two recoveries
    assert "## Recovery figures" in text and "3550 (all 2)" in text  # the resume window
    assert "1 of 2 | 0 |" in text                      # one run re-issued the call, no duplicate booking
    assert "s2-0002 (s2-recovery) [held to: reproduction]: reproduction reissued_call" in text
    assert "has been successfully booked" in text
    sha = redact_handle(HANDLE)["handle_sha"]
    assert sha not in text and HANDLE not in text and "handle_sha" not in text


def test_lab_report_cli(tmp_path, clock, capsys):
    from lab.cli import main
    batch = tmp_path / "batch"
    b1_run(batch, clock, "b1-0001")
    recovery_run(batch, clock, "s2-0001")
    assert main(["report", str(batch)]) == 0
    out = capsys.readouterr().out
    assert "b1-silent-loss" in out and "s2-recovery" in out and "summary:" in out
    assert (batch / "summary.md").is_file() and (batch / "s2-0001" / "timeline.png").is_file()
    assert main(["report", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lab: ") for line in err)


def test_metrics_tolerate_missing_fields():
    from lab.events import Event
    evs = [Event("loss", T0, 10, "agent", {}),
           Event("resume.result", T0, 900, "client", {"ok": False}),
           Event("conn.closed", T0, 950, "client", {"conn": 2}),
           Event("model.text", T0, 990, "client", {})]
    m = metrics_mod.compute(evs)
    assert m["loss_ms"] == 10 and m["refused"] == 1 and m["told"] == "never"


def test_a_reply_that_began_before_the_question_is_not_its_answer(tmp_path, clock):
    """model.text is written at turn end: the restore reply can be logged after the question."""
    r = start_booking(Run(tmp_path, "s2-0009", clock, "s2-recovery", {"told_truth": True}, client="recovery"))
    r.fault(3500)
    r.at(5300, "loss.detected", conn=1, silent_ms=2000)
    r.at(6000, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    r.at(5400, "fallback.start", conn=1, note=False, turns=2)
    r.at(5410, "conn.open", conn=3, purpose="new")
    r.at(5700, "conn.setup_complete", conn=3, setup_ms=290)
    r.at(6500, "model.audio", conn=3, first=True, bytes=9600)        # the restore reply starts
    r.at(7000, "user.say", conn=3, text=ASK, line=1, mode="text")    # the question, mid-reply
    r.at(7100, "model.text", conn=3, text="I'm booking the 3:00 p.m. slot tomorrow for you.")
    r.at(7110, "model.turn_complete", conn=3)
    r.at(7900, "model.audio", conn=3, first=True, bytes=9600)        # the answer starts after the question
    r.at(8400, "model.text", conn=3, text="Yes, your 3 pm slot tomorrow has been booked.")
    v = build_run(r.end(9000))
    m = v["metrics"]
    assert m["first_claim_after_recovery"] == "in_progress"
    assert m["told"] == "booked" and m["answer_ms"] == 8400 and v["met"]


def test_a_reply_reaching_the_client_while_a_question_is_spoken_is_not_its_answer(tmp_path, clock):
    """Under load the reply to the booked response (F1's in-progress sentence) can reach the client
    after a spoken question began; the service hears the question only once its speech ended."""
    r = start_booking(Run(tmp_path, "cs-0001", clock, "control-speech", {"told_truth": True}))
    r.at(6000, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    r.at(7000, "user.say", conn=1, text=ASK, line=1, mode="speech", voiced_ms=800.0)
    r.at(7300, "model.audio", conn=1, first=True, bytes=9600)        # the reply to the response
    r.at(8200, "model.text", conn=1, text="I'm booking the 3:00 p.m. slot tomorrow for you.")
    r.at(8210, "model.turn_complete", conn=1)
    r.at(9500, "model.audio", conn=1, first=True, bytes=9600)        # the answer, after ACTIVITY_END
    r.at(10400, "model.text", conn=1, text="Yes, your 3 pm slot tomorrow has been booked.")
    m = build_run(r.end(11000))["metrics"]
    assert m["told"] == "booked" and m["answer_ms"] == 10400 and m["told_truth"] is True


def test_a_spoken_question_restored_as_text_is_answered_from_its_restore(tmp_path, clock):
    """g1: the line cut by the loss is restored as text before its speech would have ended."""
    r = start_booking(Run(tmp_path, "g1-0001", clock, "g1-speech-in-gap", {"told_truth": True}, client="recovery"))
    r.at(6000, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    r.fault(9000)
    r.at(9200, "user.say", conn=1, text=ASK, line=1, mode="speech", voiced_ms=5600.0)
    r.at(9700, "conn.setup_complete", conn=2, setup_ms=250)
    r.at(9900, "user.replay", conn=2, line=1, how="restore")
    r.at(10900, "model.audio", conn=2, first=True, bytes=9600)
    r.at(13700, "model.text", conn=2, text="Yes, your 3 pm slot tomorrow has been booked.")
    m = build_run(r.end(15000))["metrics"]
    assert m["told"] == "booked" and m["answer_ms"] == 13700


def test_b2_after_close_is_measured_from_the_echo(tmp_path, clock):
    # after a long outage the close frame waits behind TCP's backoff: 6 s from the client's close to
    # the server's echo; the study's 0.5-0.6 s is from the echo to the resumed setupComplete
    run = b2_run(tmp_path, clock, echo_after=6000.0)
    v = build_run(run)
    assert v["metrics"]["resumed_after_close_ms"] == pytest.approx(600, abs=1)
    assert v["met"], v["expectations"]


def test_no_checks_is_not_a_pass(tmp_path, clock):
    # nothing said, nothing asked, no loss: not one user outcome can be judged
    r = Run(tmp_path, "quiet", clock, "control", {})
    r.at(100, "conn.open", conn=1, purpose="initial", local="10.203.0.2:39999", remote="10.203.0.1:443")
    r.at(400, "conn.setup_complete", conn=1, setup_ms=300)
    v = build_run(r.end(2000), timeline=False)
    assert v["pass"] is False and v["met"] is False and "no checks" in v["notes"] and "passed" not in v
    assert {o["status"] for o in v["outcomes"].values()} == {"n/a"}
    # an old record's retired row is listed, not judged: the study's client with nothing to reproduce is
    # held to its user's outcomes
    v = build_run(b1_run(tmp_path, clock, "b1-gone", expect={"retired_check": 1}), timeline=False)
    assert v["reproduces"] is None and v["held_to"] == "user" and v["met"] is False and v["failed"]
    assert [(r["name"], r["held"]) for r in v["expectations"]] == [("retired_check", None)]


def test_verdict_rows_carry_their_origin(tmp_path, clock):
    v = build_run(b2_run(tmp_path, clock), timeline=False)
    origin = {r["name"]: r["origin"] for r in v["expectations"]}
    assert origin["refusal_code"] == origin["resumed_after_close_ms"] == "twin-input"
    assert origin["bookings"] == origin["told_truth"] == "emerged"


def test_a_degraded_path_still_gives_loss_relative_figures(tmp_path, clock):
    r = start_booking(Run(tmp_path, "loss-0001", clock, "lossy", {"bookings": 1}))
    r.fault(3000, kind="loss", cuts_path=False, p=0.3)
    r.at(5000, "loss.detected", conn=1, silent_ms=2000)
    r.at(6510, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    m = build_run(r.end(8000), timeline=False)["metrics"]
    assert (m["loss_ms"], m["loss_kind"], m["loss_cuts_path"], m["detection_ms"]) == (3000, "fault:loss", False, 2000)


def test_a_folder_written_before_issue_8_is_rebuilt(tmp_path, clock):
    """Old run.json keys, the old agent's loss event (how: a bare action), a stale verdict with `passed`."""
    r = start_booking(Run(tmp_path, "r2-old", clock, "r2-freeze", {}))
    r.at(3500, "action", src="agent", what="freeze")
    r.at(3500, "loss", src="agent", how="freeze")
    r.at(5300, "loss.detected", conn=1, silent_ms=2000)
    r.at(6510, "backend.commit", src="backend", business_key="slot:tomorrow-15", job="job-1", call_id="fc-1")
    d = r.end(9000)
    (d / "run.json").write_text(json.dumps({
        "run_id": "r2-old", "scenario": {"name": "r2-freeze", "title": "Round 2", "client": "probe"},
        "client": "probe", "topology": "netns", "endpoint": "twin", "duration": 80, "params": {},
        "expect": {"bookings": 1, "all_resumes_refused": False}, "started": "2026-11-29T15:00:00+00:00"}))
    (d / "verdict.json").write_text(json.dumps({"run_id": "r2-old", "scenario": "r2-freeze", "pass": False,
                                                "passed": False, "expectations": [], "notes": [], "metrics": {}}))
    out = summarize(tmp_path)        # the stale verdict is newer than the record, but of the old format
    v = json.loads((d / "verdict.json").read_text())
    assert v["format"] == VERDICT_FORMAT and v["met"] is True and "passed" not in v and v["scenario"] == "r2-freeze"
    assert v["metrics"]["loss_kind"] == "action:freeze" and v["metrics"]["loss_cuts_path"] is None
    assert v["metrics"]["detection_ms"] == 1800
    assert "| r2-old | r2-freeze | probe | pass |" in out.read_text()


def test_readers_accept_an_old_verdict():
    from lab.report.verdict import verdict_passed
    assert verdict_passed({"passed": True}) and not verdict_passed({"passed": False})
    assert verdict_passed({"pass": True}) and not verdict_passed({})


def test_summary_marks_twin_inputs(tmp_path, clock):
    b2_run(tmp_path / "batch", clock, "b2-0001")
    text = summarize(tmp_path / "batch").read_text()
    assert "\u2020 a twin input echoed back" in text and "resume_setup_s" in text
    assert "| resume after the close\u2020 |" in text and "| accepted attempt latency\u2020 |" in text
    assert "| detection |" in text and "detection\u2020" not in text
    assert "resume attempts (codes)\u2020" in text


def test_a_fail_outside_the_expectations_says_its_reason(tmp_path, clock):
    """Every expectation held, the record lost its run.end: the FAIL says why, in the terminal's
    headline and in summary.md, not only in verdict.json's notes."""
    from lab.report.verdict import headline

    run = b2_run(tmp_path, clock)
    p = run / "events.jsonl"
    p.write_text("".join(l for l in p.read_text().splitlines(keepends=True) if '"run.end"' not in l))
    v = build_run(run, timeline=False)
    assert not v["met"] and not v["not_reproduced"] and not v["interrupted"]
    assert v["reasons"] == ["record truncated: no run.end"]
    assert headline(v) == ("FAIL (record truncated: no run.end) for the user; does not reproduce the study "
                           "(what this run is held to: the study's own client)")
    text = summarize(tmp_path).read_text()
    assert "- b2-0001 (b2-path-return) [held to: reproduction]: record truncated: no run.end" in text


def test_a_run_killed_before_its_client_started_is_interrupted_not_judged(tmp_path, clock):
    from lab.report.verdict import headline

    run = b1_run(tmp_path, clock)
    p = run / "events.jsonl"
    agent_only = [l for l in p.read_text().splitlines(keepends=True)
                  if json.loads(l)["kind"] in ("run.start", "step") and '"run.end"' not in l]
    p.write_text("".join(agent_only))              # the orchestrator killed before the client's first line
    v = build_run(run, timeline=False)
    assert v["interrupted"] and not v["met"]
    assert v["expectations"] == [] and v["not_reproduced"] == []    # no "truth: not_booked" for a run never tried
    assert headline(v) == "INTERRUPTED (record truncated: no run.end)"
    text = summarize(tmp_path).read_text()
    assert "| interrupted |" in text and "interrupted before the client started" in text
    # the same record with the client's first line is a run that was tried: judged, and it fails
    with p.open("a") as fh:
        fh.write(json.dumps({"t": 1.0, "ms": 10.0, "src": "client", "kind": "conn.open", "conn": 1}) + "\n")
    v = build_run(run, timeline=False)
    assert not v["interrupted"] and v["expectations"] and headline(v).startswith("FAIL")
