"""002 in the twin: a resumed session that ever carried audio and video fails with 1007 once its
user begins more turns than av_resume_ok_utterances; none of the report's mitigations helps unless
the profile says one does; the modalities are recorded per connection and session."""
from __future__ import annotations

import pytest

from lab.twin.modalities import AUDIO, TEXT, VIDEO, Carried, media_of
from lab.twin.params import BadParameter
from lab.twin.profile import load_profile
from tests.unit.test_twin_core import Sim, _blob, new_session

PCM = "audio/pcm;rate=16000"


def _audio(sim, conn):
    sim.send(conn, _blob("audio", bytes(640), PCM))


def _frame(sim, conn):
    sim.send(conn, _blob("video", b"\xff\xd8\xff\xe0jpeg", "image/jpeg"))


def _resume_after_av(sim, video=True, stream_end=False, video_stop_s=0.0, wait_s=2.0, handle_of=None):
    """An audio (+video) session closed by the client, then resumed with its handle."""
    first = new_session(sim)
    _audio(sim, 1)
    if video:
        _frame(sim, 1)
    sim.after(0.5)
    h = handle_of(sim) if handle_of else sim.handle(1)
    sim.after(video_stop_s)
    if stream_end:
        sim.send(1, {"realtime_input": {"audio_stream_end": True}})
    sim.end(1, "close_frame")
    sim.after(wait_s)
    sim.setup(2, handle=h or first)
    sim.after(1)
    assert 2 not in sim.closed          # the resume itself works (002 'reconnect succeeds')
    return sim


def test_media_of_reads_each_modality_from_the_message_shape():
    assert media_of("realtimeInput", {"audio": {"data": "", "mimeType": PCM}}).kinds == {AUDIO}
    assert media_of("realtimeInput", {"video": {"data": "", "mimeType": "image/jpeg"}}).kinds == {VIDEO}
    assert media_of("realtimeInput", {"video": {"data": "", "mimeType": "audio/pcm"}}).kinds == {AUDIO}
    assert media_of("realtimeInput", {"mediaChunks": [{"mimeType": "image/png"}, {"mimeType": PCM}]}).kinds \
        == {AUDIO, VIDEO}
    assert media_of("realtimeInput", {"text": "hi"}).kinds == {TEXT}
    assert media_of("realtimeInput", {"audioStreamEnd": True}).stream_end
    assert media_of("clientContent", {"turns": [{"parts": [{"text": "x"}, {"inlineData": {"mimeType": "image/jpeg"}}]}]}
                    ).kinds == {TEXT, VIDEO}
    for junk in (None, 3, {"mediaChunks": 5}, {"turns": "x"}, {"turns": [{"parts": 3}]}):
        assert media_of("realtimeInput", junk).kinds == frozenset() or media_of("clientContent", junk)


def test_carried_knows_whether_the_stream_ended_after_the_last_audio():
    c = Carried()
    c.note(media_of("realtimeInput", {"audioStreamEnd": True}), 1.0)
    c.note(media_of("realtimeInput", {"audio": {}}), 2.0)
    assert not c.stream_ended and not c.audio_and_video
    c.note(media_of("realtimeInput", {"video": {}}), 3.0)
    assert c.audio_and_video and c.last_video_at == 3.0 and c.names() == ["audio", "video"]


def test_first_post_resume_utterance_works_the_second_closes_1007():
    sim = _resume_after_av(Sim(reply_delay_s=0.1))
    sim.text(2, "Did you book it?")
    sim.after(3)
    assert 2 not in sim.closed and sim.said(2)          # the first post-resume turn is answered
    sim.text(2, "Did you book it?")                     # the second turn begins...
    assert 2 not in sim.closed
    _audio(sim, 2)                                      # ...and the next message closes the session
    assert sim.closed[2][1:] == (1007, "Request contains an invalid argument.")
    assert sim.logs_of("twin.bad_input")[-1]["why"] == "audio_video_resume"


@pytest.mark.parametrize("ok", [0, 2])
def test_the_number_of_turns_that_work_is_the_profile_parameter(ok):
    sim = _resume_after_av(Sim(reply_delay_s=0.1, av_resume_ok_utterances=ok))
    for _ in range(ok):
        sim.text(2, "Did you book it?")
        sim.after(3)
    _audio(sim, 2)
    assert 2 not in sim.closed
    sim.text(2, "Did you book it?")
    _audio(sim, 2)
    assert sim.closed[2][1] == 1007


def _fails(sim) -> bool:
    for _ in range(2):
        sim.text(2, "Did you book it?")
        sim.after(3)
    _audio(sim, 2)
    return 2 in sim.closed and sim.closed[2][1] == 1007


@pytest.mark.parametrize("mitigation,kw", [
    ("video_stopped", {"video_stop_s": 3.0}),
    ("audio_stream_end", {"stream_end": True}),
    ("delayed", {"wait_s": 5.5}),
    ("latest_handle", {}),
])
def test_each_mitigation_is_seen_and_does_not_help_unless_the_profile_says(mitigation, kw):
    sim = _resume_after_av(Sim(reply_delay_s=0.1), **kw)
    seen = sim.logs_of("twin.av_resume")[-1]
    assert mitigation in seen["mitigations"] and seen["helped_by"] == [] and seen["fails_after"] == 1
    assert _fails(sim)
    sim = _resume_after_av(Sim(reply_delay_s=0.1, av_resume_helped_by=[mitigation]), **kw)
    assert sim.logs_of("twin.av_resume")[-1]["helped_by"] == [mitigation]
    assert not _fails(sim)


def test_an_older_handle_is_not_the_latest_and_video_sent_late_is_not_stopped():
    def first_handle(sim):
        sim.text(1, "hello")        # per_turn: a second handle comes with the turnComplete
        sim.after(3)
        _frame(sim, 1)
        ups = sim.frames(1, "sessionResumptionUpdate")
        assert len(ups) > 1
        return ups[0]["sessionResumptionUpdate"]["newHandle"]
    sim = _resume_after_av(Sim(reply_delay_s=0.1, handle_updates="per_turn"), handle_of=first_handle)
    seen = sim.logs_of("twin.av_resume")[-1]["mitigations"]
    assert seen == []
    assert _fails(sim)


def test_audio_only_and_rule_off_resume_without_a_1007():
    assert not _fails(_resume_after_av(Sim(reply_delay_s=0.1), video=False))
    assert not _fails(_resume_after_av(Sim(reply_delay_s=0.1, av_resume_ok_utterances=None)))


def test_twin_record_names_the_modalities_of_each_connection_and_session():
    sim = _resume_after_av(Sim(reply_delay_s=0.1))
    sim.text(2, "Did you book it?")
    sim.after(3)
    sim.end(2, "close_frame")
    ends = {e["conn"]: e for e in sim.logs_of("twin.conn.end")}
    assert ends[1]["modalities"] == ["audio", "video"] and ends[1]["session_modalities"] == ["audio", "video"]
    assert ends[2]["modalities"] == ["text"] and ends[2]["session_modalities"] == ["audio", "text", "video"]


def test_a_mitigation_name_the_twin_cannot_see_is_refused():
    with pytest.raises(BadParameter, match="av_resume_helped_by"):
        load_profile("developer-api", {"av_resume_helped_by": ["prayer"]})
