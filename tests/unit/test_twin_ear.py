"""The twin's turn room with an ear: a spoken turn is handed to the recognizer once, its end waits
for the words, and the words (not the turn's position) choose what the model does. The recognizer
itself is not run here: each Hear action is answered with the words a test says were heard, on the
simulated clock of test_twin_core."""
from __future__ import annotations

from lab.twin import hearing as H
from lab.twin import io_actions as A
from lab.twin.model import tone
from tests.unit.test_twin_core import Sim, _blob, new_session

VOICED = tone(1.0, 16000, 300, 8000)
SILENCE = bytes(3200)
GREETING_WORDS = "hi can you hear me"


class EarSim(Sim):
    """A Sim whose shell has an ear: each Hear is kept, and answered by `hear(...)`."""

    def __init__(self, **overrides):
        super().__init__(**overrides)
        self.core.turns.ear = True
        self.asked: list[A.Hear] = []
        self.woken: list[int] = []      # how many turns had been asked when the ear was woken

    def apply(self, acts):
        for a in acts:
            if isinstance(a, A.Hear):
                self.asked.append(a)
            elif isinstance(a, A.WakeEar):
                self.woken.append(len(self.asked))
        return super().apply([a for a in acts if not isinstance(a, (A.Hear, A.WakeEar))])

    def speak(self, conn=1):
        for i in range(0, len(VOICED), 3200):
            self.send(conn, _blob("audio", VOICED[i:i + 3200], "audio/pcm;rate=16000"))
            self.after(0.1)
        for _ in range(16):     # past the end of speech (fidelity §8 F9: 1.1-1.3 s)
            self.send(conn, _blob("audio", SILENCE, "audio/pcm;rate=16000"))
            self.after(0.1)

    def hear(self, words: str | None, free: str | None = None):
        """The recognizer's answer to the last Hear, read as lab.twin.recognizer reads it."""
        h = self.asked[-1]
        vocab = H.vocabulary(list(h.script), dict(h.asks))
        m = H.match(words, free, vocab, h.expected)
        self.apply(self.core.speech_heard(h.sid, h.utt, None, m, self.now))


def test_a_spoken_turn_is_handed_over_once_with_its_audio_and_the_lines_it_may_be():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.speak()
    assert len(sim.asked) == 1
    h = sim.asked[0]
    assert h.script == ("Book me the 3pm slot tomorrow, please.", "Did you book it?")
    assert h.expected == 0 and h.rate == 16000
    assert len(h.pcm) >= len(VOICED)                    # the whole utterance, its onset included
    # ACTIVITY_END is out, but the turn waits for its words: nothing is said or called yet
    assert not sim.frames(1, "toolCall") and not sim.content(1, "inputTranscription")
    assert any(f.get("waiting") == "recognizer" for f in sim.logs_of("twin.vad"))
    # the ear was woken once, as the speech began, before the turn was handed to it
    assert sim.woken == [0]
    sim.hear("book me the three pm slot tomorrow please")
    sim.speak()
    assert sim.woken == [0] and len(sim.asked) == 2


def test_a_greeting_said_first_is_answered_as_a_greeting_with_no_call():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.speak()
    sim.hear(GREETING_WORDS)
    sim.after(3)
    assert not sim.frames(1, "toolCall")
    assert [t["text"] for t in sim.content(1, "inputTranscription")] == ["Hi, can you hear me?"]
    model = sim.logs_of("twin.model")[-1]
    assert model["heard"]["by"] == "recognizer" and model["heard"]["match"] == "Hi, can you hear me?"
    assert model["plan"] and model["tool"] is None
    # the booking line is still due: said next, it is the booking
    sim.speak()
    assert sim.asked[-1].expected == 0
    sim.hear("book me the three pm slot tomorrow please")
    sim.after(3)
    calls = sim.frames(1, "toolCall")
    assert calls and calls[0]["toolCall"]["functionCalls"][0]["name"] == "book_slot"


def test_the_status_question_said_first_is_not_read_as_the_booking():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.speak()
    sim.hear("did you book it")
    sim.after(3)
    assert not sim.frames(1, "toolCall")
    assert sim.logs_of("twin.model")[-1]["match"].get("intent") == "STATUS"


def test_speech_no_phrase_fits_is_not_understood_and_adds_no_user_turn():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.speak()
    sim.hear(None, "banana telephone purple")
    sim.after(3)
    assert not sim.frames(1, "toolCall")
    assert sim.said(1) == ["Sorry, I didn't catch that. Could you say it again?"]
    user = sim.logs_of("twin.user")[-1]
    assert user["intent"] == "UNCLEAR"
    assert sim.logs_of("twin.model")[-1]["heard"]["how"] == "none"
    # the transcription is what was heard, as the service's own (fidelity §3): words, not a line
    assert [t["text"] for t in sim.content(1, "inputTranscription")] == ["banana telephone purple"]
    # the history holds no user turn made up from the noise
    sess = next(iter(sim.core.turns.plays.values()))
    assert not any(who == "user" for who, _ in sess.model.history)


def test_a_failed_recognizer_falls_back_to_the_turns_position():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    sim.speak()
    h = sim.asked[-1]
    sim.apply(sim.core.speech_heard(h.sid, h.utt, None, None, sim.now))
    sim.after(3)
    assert sim.frames(1, "toolCall")
    model = sim.logs_of("twin.model")[-1]
    assert model["heard"] == {"by": "position", "why": "the recognizer failed"}


def test_without_an_ear_the_nth_utterance_stands_for_line_n():
    sim = Sim(reply_delay_s=0.1, tool_call_delay_s=0.1)
    new_session(sim)
    EarSim.speak(sim)
    sim.after(3)
    assert sim.frames(1, "toolCall")
    assert sim.logs_of("twin.model")[-1].get("heard") in (None, {"by": "position"})


def test_hear_speech_off_in_the_profile_reads_by_position_even_with_an_ear():
    sim = EarSim(reply_delay_s=0.1, tool_call_delay_s=0.1, hear_speech=False)
    new_session(sim)
    sim.speak()
    assert not sim.asked and not sim.woken
    sim.after(3)
    assert sim.frames(1, "toolCall")
