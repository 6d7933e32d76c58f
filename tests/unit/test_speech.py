import shutil

import pytest

from lab import speech
from lab.speech import PlaybackModel


def test_playback_back_to_back_from_arrival():
    # 24 kHz s16 mono: 48 bytes per ms. Two 100 ms chunks arriving together play back to back.
    assert PlaybackModel.spans([(1000.0, 4800), (1000.0, 4800)]) == (1000.0, 1200.0)
    # A late chunk starts at its arrival, after a gap.
    assert PlaybackModel.spans([(0.0, 4800), (500.0, 4800)]) == (0.0, 600.0)
    assert PlaybackModel.spans([]) is None


def test_playback_turns_queue_behind_each_other_and_interrupt():
    pm = PlaybackModel()
    pm.begin_turn()
    pm.add(0.0, 48000)                     # 1 s of audio
    t1 = pm.end_turn()
    pm.begin_turn()
    pm.add(200.0, 4800)                    # arrives while turn 1 still plays: queued behind it
    t2 = pm.end_turn()
    assert (t1.start_ms, t1.end_ms) == (0.0, 1000.0) and (t2.start_ms, t2.end_ms) == (1000.0, 1100.0)
    pm.begin_turn()
    pm.add(2000.0, 48000)
    pm.interrupt(2300.0)
    t3 = pm.end_turn()
    assert (t3.start_ms, t3.end_ms) == (2000.0, 2300.0)


def test_chunks_and_silence():
    pcm = speech.silence(250)
    assert len(pcm) == 8000
    cs = list(speech.chunks(pcm, ms=100))
    assert [len(c) for c in cs] == [3200, 3200, 1600]


def test_resample_length():
    pcm = b"\x01\x00" * 22050
    assert len(speech.resample(pcm, 22050, 16000)) == 32000


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="espeak-ng not installed")
def test_synth_is_16k_pcm_and_cached():
    a = speech.synth("Did you book it?")
    assert len(a) % 2 == 0 and 0.5 < len(a) / 32000 < 5
    assert speech.synth("Did you book it?") is a


def test_synth_without_espeak_is_a_capability_error(monkeypatch):
    from lab.errors import CapabilityError
    monkeypatch.setattr(speech.shutil, "which", lambda name: None)
    with pytest.raises(CapabilityError):
        speech.synth("a line never synthesised before")


def test_voiced_ms_ends_at_the_last_loud_frame_not_at_the_quiet_tail():
    import math
    import struct

    def tone(ms, amplitude):
        n = 16 * ms
        return struct.pack(f"<{n}h", *(int(amplitude * math.sin(2 * math.pi * 220 * i / 16000)) for i in range(n)))
    pcm = tone(1000, 6000) + tone(300, 200) + speech.silence(500)     # speech, a fade below any VAD, silence
    assert speech.voiced_ms(pcm) == 1000.0
    assert speech.voiced_ms(speech.silence(400)) == 0.0 and speech.voiced_ms(b"") == 0.0


def test_prepare_makes_each_line_once_before_it_is_said(monkeypatch):
    from lab import speech as sp

    made = []
    monkeypatch.setattr(sp, "synth", lambda text, voice="en-us": made.append((text, voice)))
    sp.prepare(["Book it.", "Did you book it?", "Book it."])
    assert made == [("Book it.", "en-us"), ("Did you book it?", "en-us")]
