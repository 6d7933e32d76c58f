"""The twin's message order and realtimeInputConfig (issue 9 items 1-2), seen through the UNMODIFIED
google-genai SDK over loopback TLS: what a client's receive() loop gets, and when.

An order is asserted exactly; a time within the recorded range the twin draws it from
(tests/integration/record_windows.py: never below the record's minimum, at most its maximum plus the
test machine's load allowance).
"""
from __future__ import annotations

import asyncio
import contextlib
import time

from google.genai import types

from lab.twin.model import tone
from tests.integration.record_windows import LOAD_S, assert_within, recorded
from tests.integration.test_twin_sdk import BOOK, STATUS, Live, cfg, run, sdk, twin_server

# a tone stands for the user's speech here, so the twin reads each turn by its position, not its
# words: these tests time the frames; what the twin hears is test_twin_hearing's
FAST = {"reply_delay_s": 0.1, "tool_call_delay_s": 0.1, "hear_speech": False}
RATE = "audio/pcm;rate=16000"
NO_BOOKING = "I haven't made that booking for you."


class Timed(Live):
    """A Live session that stamps every message with its arrival (monotonic seconds)."""

    def __init__(self, client, config):
        super().__init__(client, config)
        self.at: list[tuple[float, object]] = []

    async def turn(self, stop=None) -> list:
        out = []
        async for m in self.s.receive():
            self.at.append((time.monotonic(), m))
            out.append(m)
            self.msgs.append(m)
            if stop and stop(m):
                break
        return out

    def when(self, pred) -> list[float]:
        return [t for t, m in self.at if pred(m)]


def sc(field):
    return lambda m: bool(m.server_content and getattr(m.server_content, field))


def va(kind):
    return lambda m: bool(m.voice_activity and m.voice_activity.voice_activity_type == kind)


async def stream(live: Live, seconds: float, voiced: bool, chunk_s: float = 0.1) -> float:
    """The mic in real time: one chunk every chunk_s. Returns when the last chunk was sent."""
    pcm = tone(chunk_s, 16000, 300, 8000) if voiced else bytes(int(chunk_s * 16000) * 2)
    t0 = sent = time.monotonic()
    for i in range(round(seconds / chunk_s)):
        sent = time.monotonic()
        await live.s.send_realtime_input(audio=types.Blob(data=pcm, mime_type=RATE))
        await asyncio.sleep(max(0.0, t0 + (i + 1) * chunk_s - time.monotonic()))
    return sent


@contextlib.asynccontextmanager
async def timed_session(overrides: dict, config: types.LiveConnectConfig | None = None):
    """A twin and one Timed SDK session on it: (twin, live)."""
    async with twin_server(overrides=overrides) as twin:
        async with Timed(sdk(twin), config or cfg()) as live:
            yield twin, live


async def model_speaking(live: Live) -> None:
    """Ask the status question and read until the answer's first audio: the model is speaking."""
    await live.s.send_realtime_input(text=STATUS)
    await live.turn(stop=lambda m: bool(m.data))


async def listen(live: Timed, until, timeout: float = 20) -> None:
    """Read turn after turn until until() holds."""
    async def go():
        while not until():
            await live.turn()
    await asyncio.wait_for(go(), timeout)


def test_speech_arrives_in_a_burst_then_generation_complete_then_turn_complete_at_playback_end():
    async def go():
        async with timed_session({**FAST, "audio_chunk_ms": 300}) as (twin, live):
            await live.s.send_realtime_input(text=STATUS)
            msgs = await live.turn()
            audio = live.when(lambda m: bool(m.data))
            pcm = b"".join(m.data for m in msgs if m.data)
            duration = len(pcm) / 48000                                 # 24 kHz, 16-bit
            (gen,), (done,) = live.when(sc("generation_complete")), live.when(sc("turn_complete"))
            assert duration > 1.5 and len(audio) >= 5
            # 4.4x real time: the whole burst in well under the audio's own length
            assert audio[-1] - audio[0] < 0.6 * duration
            assert audio[-1] <= gen < done
            # turnComplete at the end of playback (first chunk + duration); the first chunk's own
            # delivery may be late by the load allowance, which shortens the span as much
            assert duration - LOAD_S <= done - audio[0] <= duration + LOAD_S
            assert Live.said(msgs) == [NO_BOOKING]
            pieces = [m for m in msgs if m.server_content and m.server_content.output_transcription]
            assert len(pieces) > 1                                      # alongside the audio
            assert msgs[-1].usage_metadata.total_token_count > 0        # in the turnComplete frame
    run(go())


def test_interrupted_is_followed_by_turn_complete_and_the_next_reply_is_a_new_turn():
    async def go():
        async with timed_session(FAST) as (twin, live):
            await model_speaking(live)
            await live.s.send_realtime_input(text=BOOK)
            cut = await live.turn()                                     # ends at the cut turn's turnComplete
            assert cut[-1].server_content.turn_complete
            (intr,) = live.when(sc("interrupted"))
            assert_within(live.when(sc("turn_complete"))[0] - intr, "interrupt_turn_complete_s")
            nxt = await live.turn()
            assert [c.name for c in Live.calls(nxt)] == ["book_slot"]   # a turn of its own
            assert nxt[-1].server_content.turn_complete
            assert any(m.server_content and m.server_content.generation_complete for m in nxt)
    run(go())


def test_usage_metadata_grows_with_the_conversation():
    async def go():
        async with twin_server(overrides=FAST) as twin:
            async with Live(sdk(twin), cfg()) as live:
                usage = []
                for line in (BOOK, STATUS, STATUS):
                    await live.s.send_realtime_input(text=line)
                    msgs = await live.turn()
                    assert msgs[-1].server_content.turn_complete and msgs[-1].usage_metadata
                    usage.append(msgs[-1].usage_metadata)
                prompts = [u.prompt_token_count for u in usage]
                assert prompts[0] < prompts[1] < prompts[2]
                for u in usage:
                    assert u.total_token_count == u.prompt_token_count + u.response_token_count
                assert {d.modality.value for d in usage[1].response_tokens_details} == {"AUDIO"}
    run(go())


def test_voice_activity_and_input_transcription_while_the_user_speaks():
    async def go():
        async with timed_session(FAST) as (twin, live):
            reader = asyncio.create_task(listen(live, lambda: bool(Live.calls(live.msgs))))
            t0 = time.monotonic()
            t_last = await stream(live, 1.5, True)
            await stream(live, 2.0, False)
            await reader
            (start,), (end,) = live.when(va("ACTIVITY_START")), live.when(va("ACTIVITY_END"))
            # the onset is heard once vad_onset_ms of speech has arrived: from the chunk that
            # completes it (real-time pacing), at most the records' latest ACTIVITY_START (262 ms)
            onset_s = recorded("vad_onset_ms")[0] / 1000
            assert (onset_s // 0.1) * 0.1 <= start - t0 <= 0.262 + LOAD_S
            assert_within(end - t_last, "vad_end_s")                     # records: 786-1279 ms
            heard = [(t, m.server_content.input_transcription.text) for t, m in live.at
                     if m.server_content and m.server_content.input_transcription]
            # fidelity §3, §8 F7 [records]: the whole utterance once, with ACTIVITY_END
            assert [x for _, x in heard] == [BOOK] and abs(heard[0][0] - end) < 0.05
            assert live.when(lambda m: bool(m.tool_call))[0] >= end
    run(go())


def test_a_voice_barge_in_interrupts_with_activity_start():
    async def go():
        async with timed_session(FAST) as (twin, live):
            await model_speaking(live)
            reader = asyncio.create_task(listen(live, lambda: bool(live.when(sc("interrupted")))))
            await stream(live, 0.6, True)
            await reader
            (start,), (intr,) = live.when(va("ACTIVITY_START")), live.when(sc("interrupted"))
            kinds = [("va" if m.voice_activity else "int" if m.server_content.interrupted else "")
                     for _, m in live.at if m.voice_activity or (m.server_content and m.server_content.interrupted)]
            assert kinds[:2] == ["va", "int"] and intr - start < 0.05    # the same ms, on the wire
    run(go())


MANUAL = types.RealtimeInputConfig(automatic_activity_detection=types.AutomaticActivityDetection(disabled=True))


def test_manual_activity_windows_are_the_turns():
    async def go():
        async with timed_session(FAST, cfg(realtime_input_config=MANUAL)) as (twin, live):
            reader = asyncio.create_task(listen(live, lambda: bool(Live.calls(live.msgs)), 30))
            await stream(live, 0.8, True)                               # outside a window: discarded
            await stream(live, 1.5, False)
            await live.s.send_realtime_input(activity_start=types.ActivityStart())
            await live.s.send_realtime_input(activity_end=types.ActivityEnd())    # empty: no utterance
            await asyncio.sleep(1.0)
            assert not [e for e in twin.log.events if e.kind == "twin.user"]
            await live.s.send_realtime_input(activity_start=types.ActivityStart())
            await stream(live, 0.5, True)
            await stream(live, 1.5, False)                              # a pause inside the window
            await stream(live, 0.3, True)
            assert not [e for e in twin.log.events if e.kind == "twin.user"]
            t_end = time.monotonic()
            await live.s.send_realtime_input(activity_end=types.ActivityEnd())
            await reader
            users = [e for e in twin.log.events if e.kind == "twin.user"]
            assert [(u["source"], u["intent"]) for u in users] == [("speech", "BOOK")]   # script line 1
            assert live.when(lambda m: bool(m.tool_call))[0] > t_end
            assert not live.when(lambda m: bool(m.voice_activity))       # the client's VAD, not the server's
    run(go())


def test_no_interruption_lets_the_model_finish():
    async def go():
        cfg_ = cfg(realtime_input_config=types.RealtimeInputConfig(
            activity_handling=types.ActivityHandling.NO_INTERRUPTION))
        async with timed_session({**FAST, "vad_end_s": 0.4}, cfg_) as (twin, live):
            await model_speaking(live)
            reader = asyncio.create_task(listen(live, lambda: bool(Live.calls(live.msgs)), 30))
            await stream(live, 0.8, True)
            await stream(live, 1.0, False)
            await reader
            assert live.when(va("ACTIVITY_START")) and not live.when(sc("interrupted"))
            assert Live.said(live.msgs) == [NO_BOOKING]                 # spoken to its end
    run(go())

