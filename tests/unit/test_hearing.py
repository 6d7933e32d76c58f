"""What the twin heard, read against the conversation's phrases (lab.twin.hearing): pure, no audio.

The recognizer's words come in as strings here, shaped as a weak recognizer gives them: whole, a
line's last words dropped, two phrases in one breath, a noisy onset, or words no phrase holds.
"""
from lab.twin import hearing as H

BOOK = "Book me the 3pm slot tomorrow, please."
STATUS = "Did you book it?"
STOP = "Actually, stop. Don't book it."
SCRIPT = [BOOK, STATUS]


def _vocab(script=SCRIPT, asks=None):
    return H.vocabulary(script, asks if asks is not None else {"book_slot": ("book", "reserve")})


def test_numbers_and_times_are_read_as_they_are_said():
    assert H.words(BOOK) == ("book", "me", "the", "three", "pm", "slot", "tomorrow", "please")
    assert H.words("the 4:30 slot, confirmation 4417") == (
        "the", "four", "thirty", "slot", "confirmation", "four", "thousand", "four", "hundred", "seventeen")
    assert H.words("at 10:05 on the 3rd") == ("at", "ten", "oh", "five", "on", "the", "third")
    assert H.words("at 2:00") == ("at", "two")
    assert H.words("Don’t") == ("don't",)
    assert H.words("table for 2 at 19:30, the 21st") == (
        "table", "for", "two", "at", "nineteen", "thirty", "the", "twenty", "first")
    assert H.words("order 1002 or 120") == ("order", "one", "thousand", "two", "or", "one", "hundred", "twenty")


def test_a_line_heard_whole_is_that_line():
    m = H.match("book me the three pm slot tomorrow please", None, _vocab(), expected=0)
    assert m.lines == (BOOK,) and m.score == 1.0 and m.how == "grammar" and m.understood


def test_a_line_whose_last_words_were_dropped_is_still_that_line():
    m = H.match("book me the three pm slot", None, _vocab(), expected=0)
    assert m.lines == (BOOK,) and m.how == "grammar"
    assert 0.5 <= m.score < 1.0


def test_an_intent_the_script_does_not_hold_is_heard_as_its_own_phrase():
    m = H.match("hi can you hear", None, _vocab(), expected=0)
    assert m.lines == ("Hi, can you hear me?",)


def test_a_request_and_a_stop_in_one_breath_are_two_lines():
    m = H.match("book me the three pm slot tomorrow please actually stop don't book it", None,
                _vocab(), expected=0)
    assert m.lines == (BOOK, STOP)


def test_the_long_stop_beats_the_short_one_inside_it():
    m = H.match("actually stop don't book", None, _vocab(), expected=None)
    assert m.lines == (STOP,)


def test_a_tie_goes_to_the_line_due_next():
    script = ["Book it, please.", "Book it, please."]
    v = H.vocabulary(script)
    assert H.match("book it please", None, v, expected=1).lines == ("Book it, please.",)


def test_too_few_words_of_any_phrase_is_not_understood():
    m = H.match("the", None, _vocab(), expected=0)
    assert not m.understood and m.how == "none" and m.lines == ()


def test_open_words_that_cover_a_phrase_are_that_phrase():
    m = H.match(None, "uh did you book it then", _vocab(), expected=1)
    assert m.lines == (STATUS,) and m.how == "words"


def test_a_tools_own_word_in_other_speech_is_read_as_said():
    m = H.match(None, "reserve a table by the window", _vocab(), expected=0)
    assert m.how == "asks" and m.lines == ("reserve a table by the window",)


def test_speech_no_phrase_and_no_tool_fits_is_not_understood():
    m = H.match(None, "banana telephone purple", _vocab(), expected=0)
    assert not m.understood and m.heard == "banana telephone purple"
    assert m.to_json() == {"heard": "banana telephone purple", "match": None, "score": 0.0, "how": "none"}


def test_a_word_the_recognizer_lacks_is_not_counted_against_the_line():
    v = H.vocabulary(["Book the Zyxwv room."], known=lambda w: w != "zyxwv")
    assert v.phrases[0].words == ("book", "the", "room")
    assert H.match("book the room", None, v, expected=0).score == 1.0


def test_the_grammar_holds_each_phrase_once():
    v = H.vocabulary([STATUS, STATUS, "Hi, can you hear me?"])
    phrases = v.grammar_phrases()
    assert len(phrases) == len(set(phrases))
    assert ("did", "you", "book", "it") in phrases and ("stop",) in phrases


def test_the_intents_are_said_with_the_conversations_own_verbs():
    v = H.vocabulary(["My order arrived broken, please refund it."], {"refund_order": ("refund", "return")})
    texts = [p.text for p in v.phrases]
    assert "Did you refund it?" in texts and "Actually, stop. Don't refund it." in texts
    assert "Did you book it?" not in texts                # the booking story's verbs only by default
    assert "Did you book it?" in [p.text for p in H.vocabulary(["Hello there."]).phrases]
    assert H.match("did you refund it", None, v).lines == ("Did you refund it?",)
