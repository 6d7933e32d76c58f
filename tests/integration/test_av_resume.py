"""002 for real in network namespaces: an audio+video session resumed after goAway fails with 1007
on its second post-resume turn while the same session with audio only does not. Checked from the
record itself (the client's events, the twin's twin.jsonl, the frames on the wire), so a broken
report cannot hide a broken run; the scenarios' own expectations are held by test_scenarios.py."""
import pytest

from lab.events import read_events
from tests.integration.test_scenarios import _no_leftovers, _run

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def _record(run):
    evs, twin = read_events(run / "events.jsonl"), read_events(run / "twin.jsonl")
    resumed = [e.get("conn") for e in evs if e.kind == "resume.result" and e.get("ok")]
    assert len(resumed) == 1
    closes = [e for e in evs if e.kind == "conn.closed" and e.get("conn") == resumed[0]]
    ends = {e.get("conn"): e for e in twin if e.kind == "twin.conn.end"}
    return evs, twin, resumed[0], closes, ends


def test_audio_and_video_history_closes_1007_after_the_resume(tmp_path):
    run, verdict, lines = _run(tmp_path, "v1-av-goaway")
    assert verdict["met"], "\n".join(lines[-30:])
    evs, twin, conn, closes, ends = _record(run)
    assert closes and closes[0].get("code") == 1007 and closes[0].get("by") == "server"
    assert [e.get("why") for e in twin if e.kind == "twin.bad_input"] == ["audio_video_resume"]
    first = min(ends)
    assert ends[first].get("modalities") == ["audio", "video"]
    assert ends[max(ends)].get("modalities") == ["audio"]          # audio only after the resume
    assert ends[max(ends)].get("session_modalities") == ["audio", "video"]
    # the twin saw the frames (above) and answered the first post-resume turn before the close
    assert sum(1 for e in evs if e.kind == "model.text" and e.get("conn") == conn) == 1
    _no_leftovers(run)


def test_the_audio_only_control_resumes_and_answers_every_turn(tmp_path):
    run, verdict, lines = _run(tmp_path, "v0-audio-goaway")
    assert verdict["met"], "\n".join(lines[-30:])
    evs, twin, conn, closes, ends = _record(run)
    assert not any(e.get("by") == "server" and e.get("code") == 1007 for e in closes)
    assert not [e for e in twin if e.kind in ("twin.bad_input", "twin.av_resume")]
    assert all("video" not in (e.get("session_modalities") or []) for e in ends.values())
    assert sum(1 for e in evs if e.kind == "model.text" and e.get("conn") == conn) == 2
    _no_leftovers(run)
