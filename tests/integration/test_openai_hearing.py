"""The OpenAI twin hears what the unmodified openai SDK says: spoken lines (espeak-ng, the lab's voice)
sent as input_audio_buffer.append over loopback TLS, the twin's server VAD ending each turn and its
real recognizer (pocketsphinx, offline) reading it. The words, not the turn's position, choose the
answer: "Hi, can you hear me?" said first gets a greeting and no call, the booking line the booking,
speech no phrase holds the unclear answer, the status question the status.

The VAD runs on the audio's own clock, so the audio is sent faster than real time: the test is short.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import warnings

import pytest

from lab import speech
from lab.events import EventLog
from lab.twin import recognizer
from lab.twin.server import TwinServer
from tests.integration.test_openai_twin import KEY, connect, run, until

pytestmark = pytest.mark.skipif(recognizer.missing() is not None, reason="no recognizer installed")

BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
GREETING = "Hi, can you hear me?"
BOOK_SLOT = {"type": "function", "name": "book_slot", "description": "Book an appointment slot.",
             "parameters": {"type": "object", "properties": {"slot": {"type": "string"}}}}
FAST = {"reply_delay_s": 0.05, "tool_call_delay_s": 0.05, "response_reply_delay_s": 0.05,
        "script": [BOOK, STATUS]}


def _clip(text: str) -> bytes:
    """A line as a microphone gives it (16 kHz), then silence past the VAD's end of speech."""
    return speech.silence(300) + speech.synth(text) + speech.silence(900)


async def _say(conn, text: str, encode=lambda pcm16k: speech.resample(pcm16k, speech.IN_RATE, 24000)) -> None:
    for chunk in speech.chunks(_clip(text)):
        await conn.input_audio_buffer.append(audio=base64.b64encode(encode(chunk)).decode())
        await asyncio.sleep(0.005)


async def _turn(conn, seen: list) -> list:
    """The events of one spoken turn, up to its response.done."""
    start = len(seen)
    await asyncio.wait_for(until(conn, "response.done", seen), 30)
    return seen[start:]


def _of(events: list, kind: str) -> list:
    return [e for e in events if e.type == kind]


@contextlib.asynccontextmanager
async def _session(log: EventLog, audio_input: dict):
    """A twin recording into `log`, and an SDK session on it that declared book_slot: (conn, events seen)."""
    twin = TwinServer(protocol="openai", api_key=KEY, seed=5, overrides=FAST, log=log)
    await twin.start()
    try:
        seen: list = []
        async with connect(twin) as conn:
            await until(conn, "session.created", seen)
            await conn.session.update(session={"type": "realtime", "tools": [BOOK_SLOT],
                                               "audio": {"input": audio_input}})
            await until(conn, "session.updated", seen)
            yield conn, seen
    finally:
        await twin.stop()


def test_the_sdks_spoken_lines_are_answered_by_what_they_say():
    log = EventLog()

    async def body():
        async with _session(log, {"transcription": {"model": "gpt-4o-mini-transcribe"}}) as (conn, seen):
            await _say(conn, GREETING)
            first = await _turn(conn, seen)
            assert not _of(first, "response.function_call_arguments.done")
            said = [e.transcript for e in _of(first, "response.output_audio_transcript.done")]
            assert said and "book" not in said[0].lower()

            await _say(conn, BOOK)
            second = await _turn(conn, seen)
            (call,) = _of(second, "response.function_call_arguments.done")
            assert call.name == "book_slot" and json.loads(call.arguments) == {"slot": "tomorrow 3pm"}
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id,
                                                      "output": json.dumps({"status": "booked"})})
            await conn.response.create()
            await _turn(conn, seen)

            await _say(conn, "What's the weather like today?")
            third = await _turn(conn, seen)
            assert [e.transcript for e in _of(third, "response.output_audio_transcript.done")] == \
                ["Sorry, I didn't catch that. Could you say it again?"]

            await _say(conn, STATUS)
            fourth = await _turn(conn, seen)
            assert not _of(fourth, "response.function_call_arguments.done")
            assert any("book" in e.transcript.lower() for e in _of(fourth, "response.output_audio_transcript.done"))
            # the transcription events: each committed turn's words, as heard, under its item
            await asyncio.sleep(0.2)
            while True:
                try:
                    seen.append(await asyncio.wait_for(conn.recv(), 0.3))
                except asyncio.TimeoutError:
                    break
            committed = [e.item_id for e in _of(seen, "input_audio_buffer.committed")]
            tr = _of(seen, "conversation.item.input_audio_transcription.completed")
            assert [e.item_id for e in tr] == committed
            assert [tr[0].transcript, tr[1].transcript, tr[3].transcript] == [GREETING, BOOK, STATUS]

    run(body(), timeout=120)
    model = [e for e in log.events if e.kind == "twin.model" and e.get("source") == "audio"]
    assert [e["heard"]["match"] for e in model] == [GREETING, BOOK, None, STATUS]
    assert [e["heard"]["how"] for e in model][2] == "none"
    assert all(e["heard"]["by"] == "recognizer" for e in model)
    assert [e["tool"] for e in model] == [None, "book_slot", None, None]


def test_telephone_audio_in_g711_u_law_is_heard():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop      # the standard library's G.711 coder: what a telephony bridge sends

    def ulaw(pcm16k: bytes) -> bytes:
        return audioop.lin2ulaw(speech.resample(pcm16k, speech.IN_RATE, 8000), 2)

    log = EventLog()

    async def body():
        async with _session(log, {"format": {"type": "audio/pcmu"}}) as (conn, seen):
            await _say(conn, STATUS, encode=ulaw)
            turn = await _turn(conn, seen)
            assert not _of(turn, "response.function_call_arguments.done")

    run(body(), timeout=60)
    (model,) = [e for e in log.events if e.kind == "twin.model" and e.get("source") == "audio"]
    assert model["heard"]["match"] == STATUS and model["match"]["intent"] == "STATUS"
