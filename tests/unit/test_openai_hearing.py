"""The OpenAI twin with an ear: server VAD on input_audio_buffer.append audio, the committed turn handed
to the recognizer once, the response waiting for its words, and the words (not the turn's position)
choosing what the model does, as on the Gemini twin. The recognizer itself is not run here: each Hear
is answered with the words a test says were heard (read by lab.twin.hearing, as the worker reads
them), on the simulated clock of test_openai_twin. Every event sent is checked against the SDK's type.
"""
from __future__ import annotations

import base64
import warnings

from lab.twin import hearing as H
from lab.twin import io_actions as A
from lab.twin.model import tone
from tests.unit.test_openai_twin import Sim

BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
RATE = 24000
VOICED = tone(1.0, RATE, 300.0, 8000)
TRANSCRIBE = {"audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}}}}


class EarSim(Sim):
    """A Sim whose shell has an ear: each Hear is kept, and answered by `hear(...)`."""

    def __init__(self, conversation=None, **overrides):
        super().__init__(conversation=conversation, **{"reply_delay_s": 0.1, "tool_call_delay_s": 0.1,
                                                       **overrides})
        self.core.ear = True
        self.asked: list[A.Hear] = []
        self.woken = 0

    def _take(self, acts):
        for a in acts:
            if isinstance(a, A.Hear):
                self.asked.append(a)
            elif isinstance(a, A.WakeEar):
                self.woken += 1
        super()._take([a for a in acts if not isinstance(a, (A.Hear, A.WakeEar))])

    def configure(self, conn=1, **session):
        self.open(conn)
        self.send(conn, {"type": "session.update", "session": {"type": "realtime", **session}})

    def append(self, pcm: bytes, conn=1, chunk=4800):
        for i in range(0, len(pcm), chunk):
            self.send(conn, {"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(pcm[i:i + chunk]).decode()})
            self.run(self.now + 0.1)

    def speak(self, conn=1, quiet_s=0.8):
        """Half a second of silence, a second of voice, then silence past the end of speech."""
        self.append(bytes(RATE) + VOICED + bytes(int(quiet_s * RATE) * 2), conn)

    def hear(self, words: str | None, free: str | None = None):
        """The recognizer's answer to the last Hear, read as lab.twin.recognizer reads it."""
        h = self.asked[-1]
        m = H.match(words, free, H.vocabulary(list(h.script), dict(h.asks)), h.expected)
        self._take(self.core.speech_heard(h.sid, h.utt, None, m, self.now))
        self.run(self.now + 3)

    def models(self) -> list[dict]:
        return [log.fields for log in self.logs if log.kind == "twin.model"]

    def said(self) -> list[str]:
        return [f["transcript"] for f in self.of("response.output_audio_transcript.done")]


def test_a_spoken_turn_is_committed_at_once_and_its_response_waits_for_the_words():
    sim = EarSim()
    sim.configure(**TRANSCRIBE)
    sim.speak()
    t = sim.types()
    order = [t.index(k) for k in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                                  "input_audio_buffer.committed", "conversation.item.added",
                                  "conversation.item.done", "response.created")]
    assert order == sorted(order)
    # handed over once, with the lines it may be and its audio from the prefix padding on
    assert len(sim.asked) == 1 and sim.woken == 1
    h = sim.asked[0]
    assert h.script == (BOOK, STATUS) and h.expected == 0 and h.rate == RATE
    assert len(VOICED) <= len(h.pcm) <= len(VOICED) + int(0.3 * RATE) * 2 + 4800 + int(0.8 * RATE) * 2
    # the response is under way, but nothing is said or called and nothing transcribed before the words
    assert not sim.of("response.output_item.added") and not sim.of("response.done")
    assert "conversation.item.input_audio_transcription.completed" not in t
    sim.hear("book me the three pm slot tomorrow please")
    tr = sim.of("conversation.item.input_audio_transcription.completed")
    assert [f["transcript"] for f in tr] == [BOOK]
    assert tr[0]["item_id"] == sim.of("input_audio_buffer.committed")[0]["item_id"]
    assert tr[0]["usage"]["type"] == "duration" and 1.0 <= tr[0]["usage"]["seconds"] <= 2.4
    call = sim.of("response.function_call_arguments.done")
    assert [c["name"] for c in call] == ["book_slot"] and "3pm" in call[0]["arguments"]
    read = sim.models()[-1]
    assert read["source"] == "audio" and read["text"] == BOOK
    assert read["heard"]["by"] == "recognizer" and read["heard"]["how"] == "grammar"


def test_a_greeting_said_first_is_answered_as_a_greeting_and_the_script_waits():
    sim = EarSim()
    sim.configure()
    sim.speak()
    sim.hear("hi can you hear me")
    assert not sim.of("response.function_call_arguments.done")
    assert sim.said() and "hear you" in sim.said()[0].lower()
    # the booking line is still the one due next
    sim.speak()
    assert sim.asked[-1].expected == 0
    sim.hear("book me the three pm slot tomorrow please")
    assert [c["name"] for c in sim.of("response.function_call_arguments.done")] == ["book_slot"]


def test_the_status_question_said_first_is_not_read_as_the_booking():
    sim = EarSim()
    sim.configure()
    sim.speak()
    sim.hear("did you book it")
    assert not sim.of("response.function_call_arguments.done")
    assert sim.models()[-1]["match"]["intent"] == "STATUS"


def test_speech_no_phrase_fits_is_not_understood_asked_again_and_adds_no_user_turn():
    sim = EarSim()
    sim.configure(**TRANSCRIBE)
    sim.speak()
    sim.hear(None, "banana telephone purple")
    assert sim.said() == ["Sorry, I didn't catch that. Could you say it again?"]
    assert not sim.of("response.function_call_arguments.done")
    assert [e.fields["intent"] for e in sim.logs if e.kind == "twin.user"] == ["UNCLEAR"]
    assert sim.models()[-1]["heard"]["how"] == "none"
    # the transcript is the words heard, not a line
    assert sim.of("conversation.item.input_audio_transcription.completed")[-1]["transcript"] == "banana telephone purple"
    assert ("user", "banana telephone purple") not in sim.core.sessions.sessions[1].engine.history


def test_a_request_and_a_stop_in_one_breath_books_and_keeps_the_stop_as_history():
    sim = EarSim()
    sim.configure()
    sim.speak()
    sim.hear("book me the three pm slot tomorrow please actually stop don't book it")
    assert [c["name"] for c in sim.of("response.function_call_arguments.done")] == ["book_slot"]
    history = sim.core.sessions.sessions[1].engine.history
    assert ("user", BOOK) in history and ("user", "Actually, stop. Don't book it.") in history


def test_a_failed_recognizer_falls_back_to_the_turns_position():
    sim = EarSim()
    sim.configure()
    sim.speak()
    h = sim.asked[-1]
    sim._take(sim.core.speech_heard(h.sid, h.utt, None, None, sim.now))
    sim.run(sim.now + 3)
    assert [c["name"] for c in sim.of("response.function_call_arguments.done")] == ["book_slot"]
    assert sim.models()[-1]["heard"] == {"by": "position", "why": "the recognizer failed"}


def test_without_transcription_asked_no_transcript_event_is_sent():
    sim = EarSim()
    sim.configure()
    sim.speak()
    sim.hear("book me the three pm slot tomorrow please")
    assert "conversation.item.input_audio_transcription.completed" not in sim.types()


def test_hear_speech_off_reads_by_position_even_with_an_ear():
    sim = EarSim(hear_speech=False)
    sim.configure(**TRANSCRIBE)
    sim.speak()
    assert not sim.asked and not sim.woken
    # the line by position, at once: the transcript is that line
    assert sim.of("conversation.item.input_audio_transcription.completed")[0]["transcript"] == BOOK
    sim.run(sim.now + 3)
    assert sim.models()[-1]["heard"] == {"by": "position"}


def test_a_manual_commit_hands_the_whole_buffer_and_response_create_waits_for_the_words():
    sim = EarSim()
    sim.configure(audio={"input": {"turn_detection": None}})
    sim.append(bytes(RATE) + VOICED + bytes(RATE))
    assert not sim.asked and "input_audio_buffer.speech_started" not in sim.types()
    sim.send(1, {"type": "input_audio_buffer.commit"})
    assert len(sim.asked) == 1 and len(sim.asked[0].pcm) == RATE * 2 + len(VOICED)
    sim.send(1, {"type": "response.create"})
    sim.run(sim.now + 3)
    assert sim.of("response.created") and not sim.of("response.done")
    sim.hear("did you book it")
    assert sim.of("response.done")[0]["response"]["status"] == "completed"
    assert sim.models()[-1]["match"]["intent"] == "STATUS"


def test_speech_while_a_response_waits_cancels_it_and_the_first_turn_becomes_history():
    sim = EarSim()
    sim.configure()
    sim.speak()
    first = sim.asked[-1]
    sim.append(VOICED + bytes(int(0.8 * RATE) * 2))       # the user goes on before the words are back
    done = sim.of("response.done")
    assert done and done[0]["response"]["status"] == "cancelled"
    assert done[0]["response"]["status_details"]["reason"] == "turn_detected"
    vocab = H.vocabulary(list(first.script), dict(first.asks))
    sim._take(sim.core.speech_heard(first.sid, first.utt, None,
                                    H.match("hi can you hear me", None, vocab, first.expected), sim.now))
    assert len(sim.of("response.created")) == 2 and len(sim.of("response.done")) == 1   # the second waits
    sim.hear("book me the three pm slot tomorrow please")
    assert [c["name"] for c in sim.of("response.function_call_arguments.done")] == ["book_slot"]
    assert ("user", "Hi, can you hear me?") in sim.core.sessions.sessions[1].engine.history


def test_g711_u_law_input_is_heard_at_8_khz():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop      # the standard library's G.711 coder, as an independent reference
    pcm8k = tone(1.0, 8000, 300.0, 8000)
    sim = EarSim()
    sim.configure(audio={"input": {"format": {"type": "audio/pcmu"}}})
    sim.append(audioop.lin2ulaw(bytes(8000) + pcm8k + bytes(int(0.8 * 8000) * 2), 2), chunk=800)
    assert sim.of("input_audio_buffer.speech_stopped") and len(sim.asked) == 1
    h = sim.asked[0]
    assert h.rate == 8000
    assert abs(sim.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"] - 2000) <= 300
    # the decoded voice is the tone again, within u-law's quantisation
    decoded = audioop.ulaw2lin(audioop.lin2ulaw(pcm8k, 2), 2)
    assert decoded[:1600] in h.pcm
