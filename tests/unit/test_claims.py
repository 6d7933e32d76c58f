"""claims.classify on the twin's sentences and on live model wording seen in the studies."""
import pytest

from lab.report.claims import classify

TWIN = [
    ("I'm booking the 3 pm slot tomorrow for you now.", "in_progress"),
    ("Your 3 pm slot tomorrow is booked.", "booked"),
    ("Yes, your 3 pm slot tomorrow is booked.", "booked"),
    ("Yes, your 3 pm slot tomorrow has been booked.", "booked"),
]

LIVE = [
    ("Of course, your 3:00 p.m. slot for tomorrow has been successfully booked.", "booked"),
    ("I\u2019ve booked the 3 pm slot for tomorrow.", "booked"),
    ("I have booked it for you.", "booked"),
    ("Your booking is confirmed now.", "booked"),
    ("You're all set for 3 pm tomorrow.", "booked"),
    ("I'm booking the 3:00 p.m. slot tomorrow for you.", "in_progress"),
    ("Booking the 3 pm slot for you now.", "in_progress"),
    ("I'm booking the 3 pm slot for you now.", "in_progress"),
    ("Your booking is still in progress.", "in_progress"),
    ("It's still being processed, I'll let you know.", "in_progress"),
    ("It hasn't gone through yet, it's still being processed.", "in_progress"),
    ("No, it's not booked.", "not_booked"),
    ("I haven't booked it yet.", "not_booked"),
    ("The booking wasn't made.", "not_booked"),
    ("The booking was not made.", "not_booked"),
    ("Okay, I won't book it.", "not_booked"),
    ("I was unable to book the slot.", "not_booked"),
    ("Sure, what time works for you?", "unknown"),
    ("", "unknown"),
    (None, "unknown"),
]


@pytest.mark.parametrize("text,cls", TWIN + LIVE)
def test_classify(text, cls):
    assert classify(text) == cls


def test_first_sentence_about_the_booking_decides():
    assert classify("Let me check. Your slot is booked. Anything else?") == "booked"
    assert classify("I'm booking it now. Okay, it's booked!") == "in_progress"


def test_times_with_dots_do_not_split_sentences():
    assert classify("At 3 p.m. tomorrow. Yes, that slot has been booked.") == "booked"
