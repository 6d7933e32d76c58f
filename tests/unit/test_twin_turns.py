"""The turn room's order and realtimeInputConfig (issue 9 items 1-2), on the simulated clock of
test_twin_core (time injected, timers as actions, no sleeping)."""
from __future__ import annotations

import pytest

from lab.twin import activity, pieces, usage
from lab.twin import wire as W
from lab.twin.model import SAY_BOOKED, tone
from tests.unit.test_twin_core import Sim, _blob, new_session

BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
NO_BOOKING = "I haven't made that booking for you."
RATE = "audio/pcm;rate=16000"


def timed(sim: Sim, conn: int = 1) -> list[tuple[float, dict]]:
    return [(at, f) for at, f, _ in sim.sent.get(conn, [])]


def sc_at(sim: Sim, field: str, conn: int = 1) -> list[float]:
    return [at for at, f in timed(sim, conn) if f.get("serverContent", {}).get(field)]


def voice(sim: Sim, field: str, conn: int = 1) -> list[float]:
    return [at for at, f in timed(sim, conn) if f.get("voiceActivity", {}).get("type") == field]


def speak(sim: Sim, seconds: float, voiced: bool = True, conn: int = 1, chunk_s: float = 0.1) -> None:
    """Stream audio in real time, one chunk every chunk_s."""
    pcm = tone(chunk_s, 16000, 300, 8000) if voiced else bytes(int(chunk_s * 16000) * 2)
    for _ in range(round(seconds / chunk_s)):
        sim.send(conn, _blob("audio", pcm, RATE))
        sim.after(chunk_s)


def activity_frame(which: str) -> dict:
    return {"realtime_input": {which: {}}}


# ------------------------------------------------------------------------------------------ pure pieces

def test_pieces_join_back_to_the_sentence():
    text = "I haven't made that booking for you."
    for n in (1, 3, 7, 40):
        got = pieces.spread(text, n)
        assert len(got) == n and "".join(got) == text
    assert pieces.words("a  b") == ["a", "  b"]
    assert pieces.heard(BOOK, 0, 60) == 0
    assert pieces.heard(BOOK, 4 * 60, 60) == 1            # "Book" is 4 characters
    assert pieces.heard(BOOK, 1e9, 60) == len(pieces.words(BOOK))


def test_usage_prompt_grows_with_the_conversation():
    u = usage.Usage(audio_tokens_per_s=32, chars_per_token=4)
    u.heard_text(40)
    u.said_audio(1.0)
    p1, r1 = u.close_turn()
    assert p1 == {"TEXT": 10, "AUDIO": 0} and r1 == {"TEXT": 0, "AUDIO": 32}
    u.heard_audio(0.5)
    p2, _ = u.close_turn()
    assert p2 == {"TEXT": 10, "AUDIO": 32 + 16}           # the model's own reply is now prompt too
    frame = W.usage_metadata(p2, {"AUDIO": 8})["usageMetadata"]
    assert frame["totalTokenCount"] == frame["promptTokenCount"] + frame["responseTokenCount"] == 66
    assert frame["promptTokensDetails"] == [{"modality": "TEXT", "tokenCount": 10},
                                            {"modality": "AUDIO", "tokenCount": 48}]


@pytest.mark.parametrize("setup,want", [
    ({}, activity.ActivityConfig()),
    ({"realtimeInputConfig": {"automaticActivityDetection": {"disabled": True}}},
     activity.ActivityConfig(automatic=False)),
    ({"realtimeInputConfig": {"activityHandling": "NO_INTERRUPTION",
                              "automaticActivityDetection": {"silenceDurationMs": 300, "prefixPaddingMs": "20"}}},
     activity.ActivityConfig(interrupts=False, silence_ms=300, prefix_ms=20)),
])
def test_activity_config_from_a_normalised_setup(setup, want):
    assert activity.activity_config(setup) == want


def test_snake_case_realtime_input_config_is_read():
    # what the SDK sends: nested snake_case keys
    sim = Sim()
    new_session(sim, extra={"realtime_input_config": {"automatic_activity_detection": {"disabled": True},
                                                      "activity_handling": "NO_INTERRUPTION"}})
    assert sim.core.turns.play("s1").activity == activity.ActivityConfig(automatic=False, interrupts=False)


# ------------------------------------------------------------------------------------------ order out

def test_burst_chunks_then_generation_complete_then_turn_complete_at_playback_end():
    sim = Sim(reply_delay_s=0.1, audio_chunk_ms=300, audio_send_speed=4.4)
    new_session(sim)
    sim.text(1, STATUS)
    sim.after(8)
    audio = [at for at, f in timed(sim) if "modelTurn" in f.get("serverContent", {})]
    n = len(audio)
    assert n >= 3
    gaps = [b - a for a, b in zip(audio, audio[1:])]
    assert all(g == pytest.approx(0.3 / 4.4) for g in gaps)           # faster than real time
    (gen,), (done,) = sc_at(sim, "generationComplete"), sc_at(sim, "turnComplete")
    assert gen == pytest.approx(audio[-1] + 0.3 / 4.4)                # the burst's end
    assert done == pytest.approx(audio[0] + n * 0.3)                  # first chunk + duration
    frames = [f for _, f in timed(sim)]
    assert frames[-1]["usageMetadata"]["responseTokensDetails"] == [{"modality": "AUDIO",
                                                                      "tokenCount": round(n * 0.3 * 32)}]


def test_output_transcription_rides_with_the_chunks():
    sim = Sim(reply_delay_s=0.1)
    new_session(sim)
    sim.text(1, STATUS)
    sim.after(8)
    kinds = [("audio" if "modelTurn" in f["serverContent"] else "text")
             for _, f in timed(sim) if {"modelTurn", "outputTranscription"} & set(f.get("serverContent", {}))]
    assert kinds[0] == "audio" and kinds.count("text") > 1           # pieces, not one sentence first
    assert sim.said(1) == [NO_BOOKING]


def test_barge_in_during_playback_after_the_burst_is_interrupted_and_completed():
    # 001 G2: the audio had all arrived (burst) but the client was still playing it
    sim = Sim(reply_delay_s=0.1, interrupt_turn_complete_s=[0.0, 0.036])
    new_session(sim)
    sim.text(1, STATUS)
    sim.after(1.5)
    assert sc_at(sim, "generationComplete") and not sc_at(sim, "turnComplete")
    t0 = sim.now
    sim.text(1, STATUS)
    (intr,) = sc_at(sim, "interrupted")
    first_done = sc_at(sim, "turnComplete")[0]
    # a typed turn's interrupted 13-23 ms after it (fidelity §4 C, §8 F14: text_interrupt_s)
    assert 0.013 <= intr - t0 <= 0.023 and 0 <= first_done - intr <= 0.036
    sim.after(8)
    assert len(sc_at(sim, "turnComplete")) == 2                       # the old playback end is stale


def test_a_turn_not_yet_heard_is_still_interrupted_and_completed():
    sim = Sim(tool_call_delay_s=0.5)
    new_session(sim)
    sim.text(1, BOOK)
    sim.after(0.2)                                                    # the call is not out yet
    sim.text(1, STATUS)
    assert sc_at(sim, "interrupted") and sc_at(sim, "turnComplete")
    sim.after(8)
    assert not sim.frames(1, "toolCall")                              # that turn is gone


def test_usage_grows_turn_after_turn():
    sim = Sim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    for line in (BOOK, STATUS, STATUS):
        sim.text(1, line)
        sim.after(8)
    prompts = [f["usageMetadata"]["promptTokenCount"] for f in sim.frames(1, "usageMetadata")]
    assert len(prompts) == 3 and prompts[0] < prompts[1] < prompts[2]
    for f in sim.frames(1, "usageMetadata"):
        assert f["serverContent"] == {"turnComplete": True}            # in the turnComplete frame


# ------------------------------------------------------------------------------------------ speech in

def test_voice_activity_follows_the_records_wall_clock():
    sim = Sim(tool_call_delay_s=0.7, vad_onset_ms=150, vad_end_s=1.0, vad_end_request_s=1.0)
    new_session(sim)
    t0 = sim.now
    speak(sim, 1.0)
    speak(sim, 1.5, voiced=False)
    (start,), (end,) = voice(sim, "ACTIVITY_START"), voice(sim, "ACTIVITY_END")
    assert start - t0 == pytest.approx(0.15, abs=0.01)                # vad_onset_ms after the first chunk
    assert end - (t0 + 0.9) == pytest.approx(1.0, abs=0.01)           # vad_end_s after the last voiced chunk
    # fidelity §3, §8 F7 [records]: the whole utterance once, in the same ms as ACTIVITY_END
    assert sim.content(1, "inputTranscription") == [{"text": BOOK}]
    assert [at for at, f in timed(sim) if "inputTranscription" in f.get("serverContent", {})] == [end]
    (call_at,) = [at for at, f in timed(sim) if "toolCall" in f]
    assert 0 <= call_at - end <= 0.008                                  # records: 0-8 ms after ACTIVITY_END


def test_speech_barge_in_sends_interrupted_in_the_same_ms_as_activity_start():
    sim = Sim(reply_delay_s=0.1)
    new_session(sim)
    sim.text(1, STATUS)
    sim.after(0.6)
    speak(sim, 0.5)
    (start,) = voice(sim, "ACTIVITY_START")
    (intr,) = sc_at(sim, "interrupted")
    assert start == intr
    frames = [f for _, f in timed(sim)]
    i = next(k for k, f in enumerate(frames) if "voiceActivity" in f)
    assert frames[i + 1] == {"serverContent": {"interrupted": True}}
    assert frames[i + 2]["serverContent"] == {"turnComplete": True}


def test_no_interruption_lets_the_model_finish_then_answers():
    sim = Sim(reply_delay_s=0.1, vad_end_s=0.5)
    new_session(sim, extra={"realtimeInputConfig": {"activityHandling": "NO_INTERRUPTION"}})
    sim.text(1, STATUS)
    sim.after(0.6)
    speak(sim, 1.0)
    speak(sim, 1.0, voiced=False)
    sim.after(10)
    assert voice(sim, "ACTIVITY_START") and not sc_at(sim, "interrupted")
    assert sim.said(1) == [NO_BOOKING]                                 # spoken to its end
    frames = [f for _, f in timed(sim)]
    call = next(i for i, f in enumerate(frames) if "toolCall" in f)   # the user's turn, queued behind it
    done = [i for i, f in enumerate(frames) if f.get("serverContent", {}).get("turnComplete")]
    assert len(done) == 2 and done[0] < call < done[1]


def test_client_silence_duration_sets_the_end():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, extra={"realtimeInputConfig": {"automaticActivityDetection": {"silenceDurationMs": 300}}})
    t0 = sim.now
    speak(sim, 1.0)
    speak(sim, 1.0, voiced=False)
    (end,) = voice(sim, "ACTIVITY_END")
    assert end - (t0 + 0.9) == pytest.approx(0.3, abs=0.11)


def test_client_prefix_padding_sets_the_start():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, extra={"realtimeInputConfig": {"automaticActivityDetection": {"prefixPaddingMs": 400}}})
    t0 = sim.now
    speak(sim, 1.0)
    (start,) = voice(sim, "ACTIVITY_START")
    assert start - t0 == pytest.approx(0.4, abs=0.01)


# ------------------------------------------------------------------------------------------ manual windows

MANUAL = {"realtimeInputConfig": {"automaticActivityDetection": {"disabled": True}}}


def test_manual_window_is_exactly_one_turn_and_a_pause_inside_does_not_end_it():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, extra=MANUAL)
    sim.send(1, activity_frame("activityStart"))
    speak(sim, 0.5)
    speak(sim, 2.0, voiced=False)                                      # far beyond any VAD silence
    speak(sim, 0.5)
    assert not sim.logs_of("twin.user") and not sim.frames(1, "voiceActivity")
    sim.send(1, activity_frame("activityEnd"))
    sim.after(3)
    assert [u["source"] for u in sim.logs_of("twin.user")] == ["speech"]
    assert sim.frames(1, "toolCall")
    assert "".join(t["text"] for t in sim.content(1, "inputTranscription")) == BOOK


def test_manual_audio_outside_a_window_is_discarded():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, extra=MANUAL)
    speak(sim, 1.0)
    speak(sim, 2.0, voiced=False)
    sim.send(1, {"realtime_input": {"audio_stream_end": True}})
    sim.after(3)
    assert not sim.logs_of("twin.user") and 1 not in sim.closed
    sim.send(1, activity_frame("activityStart"))                      # the first window is still line 1
    speak(sim, 0.5)
    sim.send(1, activity_frame("activityEnd"))
    sim.after(2)
    assert [u["intent"] for u in sim.logs_of("twin.user")] == ["BOOK"]


def test_manual_stray_audio_closes_1007_when_switched_on():
    sim = Sim(stray_audio_close=True)
    new_session(sim, extra=MANUAL)
    speak(sim, 0.1)
    assert sim.closed[1][1] == 1007


def test_an_empty_window_is_no_utterance():
    sim = Sim(tool_call_delay_s=0.1)
    new_session(sim, extra=MANUAL)
    for _ in range(2):
        sim.send(1, activity_frame("activityStart"))
        speak(sim, 0.3, voiced=False)
        sim.send(1, activity_frame("activityEnd"))
        sim.after(2)
    sim.send(1, activity_frame("activityStart"))
    sim.send(1, activity_frame("activityEnd"))
    sim.after(2)
    assert not sim.logs_of("twin.user") and not sim.frames(1, "serverContent")
    assert sim.core.turns.play("s1").model.utterances == 0            # script line 1 is still unspoken


def test_manual_activity_start_barges_in_unless_no_interruption():
    for handling, cut in (("START_OF_ACTIVITY_INTERRUPTS", True), ("NO_INTERRUPTION", False)):
        sim = Sim(reply_delay_s=0.1)
        new_session(sim, extra={"realtimeInputConfig": {"automaticActivityDetection": {"disabled": True},
                                                        "activityHandling": handling}})
        sim.text(1, STATUS)
        sim.after(0.6)
        sim.send(1, activity_frame("activityStart"))
        assert bool(sc_at(sim, "interrupted")) is cut


def test_a_per_turn_handle_also_precedes_an_interrupted_turns_turn_complete():
    sim = Sim("vertex", reply_delay_s=0.1)
    new_session(sim)
    sim.text(1, STATUS)
    sim.after(0.5)
    before = len(sim.frames(1, "sessionResumptionUpdate"))
    sim.text(1, STATUS)
    tail = [next(iter(f)) for f in sim.frames(1)[-3:]]
    assert tail == ["serverContent", "sessionResumptionUpdate", "serverContent"]   # interrupted, handle, turnComplete
    assert len(sim.frames(1, "sessionResumptionUpdate")) == before + 1


# ------------------------------------------------------------------------------------------ two calls at once

TWO = "Book me the 3pm and the 4pm slots tomorrow, please."


def test_two_slots_go_out_as_one_tool_call_and_the_model_speaks_once_both_are_answered():
    sim = Sim(tool_call_delay_s=0.1, response_reply_delay_s=0.1)
    new_session(sim)
    sim.text(1, TWO)
    sim.after(1)
    (frame,) = sim.frames(1, "toolCall")
    calls = frame["toolCall"]["functionCalls"]
    assert [c["args"]["slot"] for c in calls] == ["tomorrow 3pm", "tomorrow 4pm"]
    assert [c["id"] for c in calls] == [lg["id"] for lg in sim.logs_of("twin.tool_call")]
    said = len(sim.logs_of("twin.say"))
    sim.send(1, {"tool_response": {"functionResponses": [{"id": calls[1]["id"], "response": {"status": "booked"}}]}})
    sim.after(2)
    assert len(sim.logs_of("twin.say")) == said            # one of two answered: the model waits
    sim.send(1, {"tool_response": {"functionResponses": [{"id": calls[0]["id"], "response": {"status": "booked"}}]}})
    sim.after(2)
    assert [s["text"] for s in sim.logs_of("twin.say")[said:]] == [SAY_BOOKED]
