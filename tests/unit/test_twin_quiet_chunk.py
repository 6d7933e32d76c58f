"""The microphone's short way on its lane's records (lab.twin.core.MicLane: Sessions.mic_input,
Turns.quiet_chunk) does what the general parse and dispatch do: the same actions at the same times,
and the same state left in every record a chunk touches (the connection's and session's counts and
modalities, the session's Playback and detector). Scripts that cross the lane's edges: silence
between questions, speech, an audioStreamEnd between chunks, chunks of part of a VAD frame, a rate
change, a resume on a new connection (a new lane for the same session), and a resume doomed by 002.
Each runs twice on the simulated clock of test_twin_core, once with the short way turned off."""
from __future__ import annotations

import base64
import json

import pytest

from lab.twin import compiled
from lab.twin import turns as twin_turns
from lab.twin import wire as W
from lab.twin.model import tone
from tests.unit.test_twin_core import Sim, new_session

SILENCE = bytes(3200)
VOICE = tone(0.1, 16000, 300, 8000)


def mic(pcm: bytes, rate: int = 16000) -> str:
    return json.dumps({"realtime_input": {"audio": {"data": base64.b64encode(pcm).decode(),
                                                    "mime_type": f"audio/pcm;rate={rate}"}}})


def text(line: str) -> str:
    return json.dumps({"realtime_input": {"text": line}})


STREAM_END = json.dumps({"realtime_input": {"audioStreamEnd": True}})
VIDEO = json.dumps({"realtime_input": {"video": {"data": base64.b64encode(b"\xff\xd8jpeg").decode(),
                                                 "mime_type": "image/jpeg"}}})


def questions() -> list:
    out: list = []
    for k in range(4):
        out += [mic(SILENCE)] * 6 + [text("Did you book it?")] + [mic(SILENCE)] * 4
    return out


def speech_between_silence() -> list:
    return [mic(SILENCE)] * 5 + [mic(VOICE)] * 8 + [mic(SILENCE)] * 20 + [text("Book tomorrow 3pm")] \
        + [mic(SILENCE)] * 10 + [mic(VOICE)] * 3 + [mic(SILENCE)] * 15


def edges() -> list:
    """A stream end between chunks, part of a frame held over, a rate change and back."""
    return ([mic(SILENCE)] * 3 + [STREAM_END] + [mic(SILENCE)] * 2 + [mic(bytes(3000))] + [mic(SILENCE)] * 3
            + [mic(bytes(4800), 24000)] * 3 + [mic(SILENCE)] * 3 + [mic(b"")] + [mic(bytes(3201))] + [mic(SILENCE)] * 2)


def stream(sim: Sim, conn: int, frames: list, gap: float = 0.1) -> None:
    for f in frames:
        if conn in sim.ended:
            break
        sim.send(conn, f)
        sim.after(gap)


def state(sim: Sim, conn: int) -> tuple:
    """What a chunk may have changed, in every record it touches."""
    core = sim.core
    c = core.sessions.conns.get(conn)
    counts = (c.msg_index, c.inputs, sorted(c.media.kinds), c.media.stream_ended, c.last_data_at,
              c.last_activity_at) if c is not None else None
    out = [counts]
    for sid, s in sorted(core.sessions.sessions.items()):
        p = core.turns.plays[sid]
        d = p.detector
        out.append((sid, sorted(s.media.kinds), s.media.stream_ended, s.media.last_video_at, p.last_audio_at,
                    round(p.audio_in_s, 9), p.utt, p.turns_begun, p.flush_armed, p.heard_ms, p.voiced_ms,
                    d.in_voice, d.candidate, d.voiced_ms, d.silent_ms, d._rest, d._rate))
    return tuple(out)


def plain(sim: Sim, conn: int, frames: list, **setup) -> list:
    new_session(sim, conn, **({"extra": setup} if setup else {}))
    stream(sim, conn, frames)
    return [state(sim, conn)]


def resumed(sim: Sim, conn: int, frames: list) -> list:
    """The session streams on one connection, which drops; it is resumed on the next and streams on."""
    h = new_session(sim, conn)
    stream(sim, conn, frames)
    seen = [state(sim, conn)]
    sim.end(conn, "close_frame")
    sim.after(2.0)                # past idle_release_s: the resume is accepted
    sim.setup(conn + 1, handle=h)
    sim.after(0.5)
    stream(sim, conn + 1, frames)
    return seen + [state(sim, conn + 1)]


def doomed(sim: Sim, conn: int, frames: list) -> list:
    """002: a session that carried audio and video, resumed: its chunks go the reference way too."""
    h = new_session(sim, conn)
    stream(sim, conn, [mic(SILENCE), VIDEO, mic(VOICE)] + frames[:5])
    sim.end(conn, "close_frame")
    sim.after(2.0)                # past idle_release_s: the resume is accepted
    sim.setup(conn + 1, handle=h)
    sim.after(0.5)
    stream(sim, conn + 1, frames)
    return [state(sim, conn + 1)]


SCRIPTS = {
    "questions in silence": (plain, questions, {}),
    "speech between silence": (plain, speech_between_silence, {}),
    "edges": (plain, edges, {}),
    "resumed": (resumed, speech_between_silence, {}),
    "resumed, doomed by 002": (doomed, speech_between_silence, {"av_resume_ok_utterances": 0}),
}


def play(name: str) -> list:
    """One script on the core as it is: the records' state, what it sent, closed and logged. (Also
    what test_twin_compiled.py compares between the compiled build and the .py files.)"""
    how, frames, overrides = SCRIPTS[name]
    sim = Sim(**overrides)
    seen = how(sim, 1, frames())
    assert 2 not in sim.closed or how is doomed, sim.closed   # a resume was accepted, not refused
    sim.after(5)
    got = {conn: [(at, f) for at, f, _ in sent] for conn, sent in sim.sent.items()}
    logs = [(a.kind, a.fields) for a in sim.logs]
    return [seen, got, sim.closed, logs]


def run(name: str, short_way: bool, monkeypatch) -> tuple[list, int]:
    quiet = []
    with monkeypatch.context() as m:
        if short_way:
            real = twin_turns.Turns.quiet_chunk
            m.setattr(twin_turns.Turns, "quiet_chunk",
                      lambda self, *a: (quiet.append(1) or True) if real(self, *a) else False)
        else:
            m.setattr(W, "mic_chunk", lambda obj: None)
        return play(name), len(quiet)


# the two ways are chosen by patching the rooms, which a compiled build's calls do not see
@pytest.mark.skipif(compiled.which() == "compiled", reason="the compiled core's calls cannot be patched to take "
                    "one way or the other; test_twin_compiled.py compares these scripts between the build and the .py files")
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_lane_leaves_what_the_general_path_leaves(name, monkeypatch):
    general, _ = run(name, False, monkeypatch)
    short, quiet = run(name, True, monkeypatch)
    assert quiet > 0              # chunks were taken as quiet, so the comparison says something
    assert short == general


def test_a_resume_doomed_by_002_is_still_refused_on_the_short_way(monkeypatch):
    short, _ = run("resumed, doomed by 002", True, monkeypatch)
    closed = short[2]
    assert closed.get(2) is not None and closed[2][1] == 1007, closed


def test_skips_is_what_feed_does_with_silence():
    """The detector's answer for the short way: True only where feed() takes the chunk whole and
    changes nothing."""
    from lab.twin.model import AudioTurnDetector

    def fresh():
        return AudioTurnDetector(500, 140, 500)

    for pcm, rate, want in ((SILENCE, 16000, True), (b"", 16000, True), (VOICE, 16000, False),
                            (bytes(3000), 16000, False), (bytes(3201), 16000, False), (bytes(4800), 24000, False)):
        d = fresh()
        assert d.skips(pcm, rate) is want, (len(pcm), rate)
        if want:
            before = (d.in_voice, d.candidate, d.voiced_ms, d.silent_ms, d._rest, d._rate)
            assert d.feed(pcm, rate) == []
            assert (d.in_voice, d.candidate, d.voiced_ms, d.silent_ms, d._rest, d._rate) == before
    d = fresh()
    d.feed(bytes(3000))           # part of a frame held over: the next chunk is not whole frames
    assert not d.skips(SILENCE)
    d = fresh()
    d.feed(VOICE)                 # an utterance under way
    assert not d.skips(SILENCE)
