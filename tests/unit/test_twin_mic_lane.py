"""A microphone chunk read by wire.mic_chunk (the core's short way for most of a stream) does what
the general parse and dispatch do with it: the same actions at the same times, the same counts.
Each script runs twice on the simulated clock of test_twin_core, once with the short way turned off."""
from __future__ import annotations

import base64
import json

import pytest

from lab.twin import core as twin_core
from lab.twin import wire as W
from lab.twin.model import tone
from tests.unit.test_twin_core import Sim, new_session

RATE = "audio/pcm;rate=16000"
SILENCE = bytes(3200)
VOICE = tone(0.1, 16000, 300, 8000)


def mic(pcm: bytes, spelling: str = "realtime_input", mime_key: str | None = "mime_type", mime: str = RATE,
        b64=base64.b64encode) -> str:
    audio = {"data": b64(pcm).decode()}
    if mime_key:
        audio[mime_key] = mime
    return json.dumps({spelling: {"audio": audio}})


def stream(sim: Sim, frames: list, gap: float = 0.1) -> None:
    for f in frames:
        if 1 in sim.ended:      # closed by a refusal: what follows has nowhere to go
            break
        sim.send(1, f)
        sim.after(gap)


def utterances() -> list:
    """Silence, a spoken question and its reply, a barge-in: every VAD state a chunk meets."""
    return ([mic(SILENCE)] * 5 + [mic(VOICE, "realtimeInput", "mimeType")] * 8 + [mic(SILENCE)] * 25
            + [mic(VOICE, mime_key=None)] * 6 + [mic(SILENCE, mime="AUDIO/PCM;RATE=24000")] * 20)


def odd_chunks() -> list:
    """Chunks the short way must leave to the general path, or read as it does."""
    return [mic(SILENCE, b64=base64.urlsafe_b64encode),               # lenient base64 in the decoder
            mic(SILENCE, mime="image/jpeg"),                           # not audio: not a mic chunk
            json.dumps({"realtime_input": {"audio": {"data": "", "mime_type": RATE, "extra": 1}}}),
            json.dumps({"realtime_input": {"audio": {"data": "AA", "mimeType": RATE, "mime_type": RATE}}}),
            json.dumps({"realtime_input": {"audio": {"data": "", "mime_type": None}}}),
            json.dumps({"realtime_input": {"audio": {"data": ""}, "text": "hi"}}),
            mic(SILENCE),
            json.dumps({"realtime_input": {"audio": {"data": 3, "mime_type": RATE}}})]     # refused: 1007


def windowed(sim: Sim) -> list:
    return ([json.dumps({"realtime_input": {"activityStart": {}}})] + [mic(VOICE)] * 4 + [mic(SILENCE)] * 3
            + [json.dumps({"realtime_input": {"activityEnd": {}}})] + [mic(SILENCE)] * 12)


SCRIPTS = {
    "utterances": ({}, {}, utterances),
    "odd chunks": ({}, {}, odd_chunks),
    "bad base64 closes": ({}, {}, lambda: [mic(SILENCE)] * 3 + ['{"realtimeInput": {"audio": {"data": "!!"}}}']
                          + [mic(SILENCE)] * 3),
    "windows, stray audio kept": ({}, {"realtimeInputConfig": {"automaticActivityDetection": {"disabled": True}}},
                                  None),
    "windows, stray audio closes": ({"stray_audio_close": True},
                                    {"realtimeInputConfig": {"automaticActivityDetection": {"disabled": True}}}, None),
}


CLOSED = {"odd chunks", "bad base64 closes", "windows, stray audio closes"}   # 1007 partway


def run(name: str, short_way: bool, monkeypatch) -> tuple[list, int]:
    overrides, setup, frames = SCRIPTS[name]
    taken = []
    with monkeypatch.context() as m:
        if short_way:
            real = twin_core.TwinCore._mic
            m.setattr(twin_core.TwinCore, "_mic", lambda self, *a: taken.append(1) or real(self, *a))
        else:
            m.setattr(W, "mic_chunk", lambda obj: None)
        sim = Sim(**overrides)
        new_session(sim, **({"extra": setup} if setup else {}))
        stream(sim, (frames or (lambda: windowed(sim)))())
        sim.after(5)
        c = sim.core.sessions.conns.get(1)
        counts = (c.msg_index, c.inputs, sorted(c.media.kinds)) if c is not None else None
        if c is not None:
            sim.end(1, "close_frame")
        got = [(at, f) for at, f, _ in sim.sent.get(1, [])]
        logs = [(a.kind, a.fields) for a in sim.logs]
        return [got, sim.closed.get(1), logs, counts], len(taken)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_microphone_chunk_does_what_the_general_path_does(name, monkeypatch):
    general, _ = run(name, False, monkeypatch)
    short, taken = run(name, True, monkeypatch)
    assert taken > 0              # the short way was taken, so the comparison says something
    assert (general[1] is not None) == (name in CLOSED), general[1]    # each script ends as it says
    assert short == general


def test_mic_chunk_reads_only_a_lone_audio_blob():
    assert W.mic_chunk(json.loads(mic(SILENCE))) == ({"audio": {"data": base64.b64encode(SILENCE).decode(),
                                                                "mime_type": RATE}},
                                                     base64.b64encode(SILENCE).decode(), 16000)
    assert W.mic_chunk(json.loads(mic(SILENCE, mime_key=None)))[2] == 16000
    assert W.mic_chunk(json.loads(mic(SILENCE, mime="Audio/PCM;rate=24000")))[2] == 24000
    for other in odd_chunks()[1:6] + odd_chunks()[-1:] + ['{"setup": {}}', "[]", '{"realtimeInput": {"audio": {"data": "A"}}, "x": 1}']:
        assert W.mic_chunk(json.loads(other)) is None, other
