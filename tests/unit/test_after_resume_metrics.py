"""The 002 metrics: what became of the first accepted resumed connection, the camera's frames, and
the mitigations the twin saw; and the v-scenarios' expectations judged on them."""
from lab import expectations
from lab.events import Event
from lab.report.metrics import after_resume_metrics, compute


def _ev(kind, ms, src="client", **data):
    return Event(kind, 1000.0 + ms / 1000, ms, src, data)


def _run(code_after_resume, answers):
    evs = [_ev("run.start", 0, "agent"), _ev("conn.setup_complete", 10, conn=1),
           _ev("video.start", 20, conn=1, fps=1.0), _ev("model.text", 900, conn=1, text="Booked."),
           _ev("action", 1000, "agent", what="close"), _ev("loss", 1000, "agent", how="action:close", cuts_path=True),
           _ev("conn.closed", 1010, conn=1, code=1000, by="client"), _ev("video.stop", 1020, conn=1, frames=9),
           _ev("resume.attempt", 1300, attempt=1, conn=2, why="action"),
           _ev("conn.setup_complete", 1800, conn=2),
           _ev("resume.result", 1800, attempt=1, conn=2, ok=True, latency_ms=500.0)]
    evs += [_ev("model.text", 3000 + i * 1000, conn=2, text="Yes, booked.") for i in range(answers)]
    if code_after_resume is not None:
        evs.append(_ev("conn.closed", 9000, conn=2, code=code_after_resume, by="server"))
    evs.append(_ev("run.end", 20000, "agent", status="ok"))
    return evs


def test_a_1007_after_one_answer_on_the_resumed_connection():
    m = after_resume_metrics(_run(1007, 1), resumed_conn=2)
    assert m == {"video_frames": 9, "answers_after_resume": 1, "resumed_failed": True, "resumed_close_code": 1007}


def test_no_resume_no_figures_and_a_clean_server_close_is_not_a_failure():
    assert after_resume_metrics(_run(None, 0), resumed_conn=None)["resumed_failed"] is None
    m = after_resume_metrics(_run(1000, 2), resumed_conn=2)
    assert m["resumed_failed"] is False and m["answers_after_resume"] == 2


def test_compute_reads_the_twins_mitigations_and_the_expectations_judge_them():
    twin = [_ev("twin.av_resume", 1500, "twin", conn=2, session="s1", mitigations=["video_stopped", "latest_handle"],
                helped_by=[], fails_after=1)]
    m = compute(_run(1007, 1), twin=twin)
    assert m["resumed"] and m["resumed_close_code"] == 1007 and m["resume_mitigations"] == "latest_handle,video_stopped"
    assert m["twin"]["av_resumes"] == [{"conn": 2, "mitigations": ["video_stopped", "latest_handle"], "helped_by": []}]
    rows = {r["name"]: r for r in expectations.evaluate(
        {"resumed_failed": True, "resumed_close_code": 1007, "answers_after_resume": 1, "min_video_frames": 5,
         "resume_mitigations": "latest_handle,video_stopped"}, m)}
    assert all(r["held"] for r in rows.values()), rows
    assert rows["resumed_close_code"]["origin"] == "twin-input" and rows["min_video_frames"]["origin"] == "emerged"
    assert compute(_run(1007, 1), twin=None)["resume_mitigations"] is None
    control = expectations.evaluate({"resumed_failed": False}, compute(_run(1007, 1)))
    assert control[0]["held"] is False
