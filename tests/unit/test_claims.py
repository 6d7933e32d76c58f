"""claims.classify: the twin's sentences, the studies' wording, and wording neither produced.

Each class has its own set. The "unseen" sets are written for this test, not taken from a record:
they exercise the rules (adverbs inside the verb phrase, a phrase between the noun and the verb,
contractions, negation scoped to its clause, questions and offers) on sentences the classifier was
not written against.
"""
import pytest

from lab.conversation.semantics import ActionWords
from lab.report.claims import BOOKED, CLASSES, DONE, IN_PROGRESS, NOT_BOOKED, NOT_DONE, UNKNOWN, classify, label

TWIN = [
    ("I'm booking the 3 pm slot tomorrow for you now.", IN_PROGRESS),
    ("Your 3 pm slot tomorrow is booked.", BOOKED),
    ("Yes, your 3 pm slot tomorrow is booked.", BOOKED),
    ("Yes, your 3 pm slot tomorrow has been booked.", BOOKED),
    ("Okay, I won't book it.", NOT_BOOKED),
    ("I'm already booking the 3 pm slot tomorrow for you.", IN_PROGRESS),
    ("No, the 3 pm slot tomorrow was not booked.", NOT_BOOKED),
    ("Your 3 pm slot tomorrow is already booked.", BOOKED),
    ("Sure. Would you like me to book a slot for you?", UNKNOWN),
]

# Wording quoted in the two studies (000 and 001).
STUDIES = [
    ("Of course, your 3:00 p.m. slot for tomorrow has been successfully booked.", BOOKED),
    ("I'm booking the 3 pm slot for you now.", IN_PROGRESS),
    ("I'm booking the 3:00 p.m. slot tomorrow for you.", IN_PROGRESS),
    ("I am booking the 3 PM slot for you now. Please bring your ID and any necessary paperwork.", IN_PROGRESS),
    ("I haven't made that booking for you.", NOT_BOOKED),
    ("I have not booked the slot. It has been canceled as requested.", NOT_BOOKED),
    ("I've stopped the process, and the booking booking was not made.", NOT_BOOKED),
    ("The booking was not made, so nothing has been scheduled.", NOT_BOOKED),
    ("The booking was not made as you requested.", NOT_BOOKED),
    # the stop study's standard reply, which an older classifier read as unknown or not booked
    ("The booking was already made.", BOOKED),
    ("The booking has already been made.", BOOKED),
    ("The booking for tomorrow at 3pm was already made.", BOOKED),
    ("It's confirmed!", BOOKED),
    ("Your appointment is officially confirmed.", BOOKED),
    ("The booking was already made and cannot be canceled.", BOOKED),
]

UNSEEN_BOOKED = [
    ("I\u2019ve booked the 3 pm slot for tomorrow.", BOOKED),
    ("I have booked it for you.", BOOKED),
    ("Your booking is confirmed now.", BOOKED),
    ("You're all set for 3 pm tomorrow.", BOOKED),
    ("Great news: the reservation you asked for has now been fully completed.", BOOKED),
    ("Good news, I went ahead and reserved the 3 o'clock slot.", BOOKED),
    ("That slot is yours, it's been locked in.", BOOKED),
    ("Done, the booking went through.", BOOKED),
    ("Your 3pm appointment tomorrow is all taken care of.", BOOKED),
    ("It's too late to cancel, the slot was secured a moment ago.", BOOKED),
    ("Yes! I've successfully scheduled you for tomorrow at three.", BOOKED),
    ("The booking is no longer pending.", BOOKED),
    ("Everything's done.", BOOKED),
    ("Alright, the 3 PM slot tomorrow is yours.", BOOKED),
    ("Booked! You can cancel it any time.", BOOKED),
]

UNSEEN_IN_PROGRESS = [
    ("Booking the 3 pm slot for you now.", IN_PROGRESS),
    ("Your booking is still in progress.", IN_PROGRESS),
    ("It's still being processed, I'll let you know.", IN_PROGRESS),
    ("It hasn't gone through yet, it's still being processed.", IN_PROGRESS),
    ("The reservation is pending.", IN_PROGRESS),
    ("Your booking is pending confirmation from the system.", IN_PROGRESS),
    ("It hasn't been confirmed yet.", IN_PROGRESS),
    ("Let me book that for you.", IN_PROGRESS),
    ("I'm going to book the 3 pm slot.", IN_PROGRESS),
    ("One moment while I book that.", IN_PROGRESS),
    ("I'm currently in the process of securing that slot.", IN_PROGRESS),
    ("It should be confirmed shortly.", IN_PROGRESS),
    ("I'm waiting on the booking system to respond.", IN_PROGRESS),
    ("The booking is yet to be confirmed.", IN_PROGRESS),
]

UNSEEN_NOT_BOOKED = [
    ("No, it's not booked.", NOT_BOOKED),
    ("I haven't booked it yet.", NOT_BOOKED),
    ("The booking wasn't made.", NOT_BOOKED),
    ("I was unable to book the slot.", NOT_BOOKED),
    ("Unfortunately, I couldn't reserve that time.", NOT_BOOKED),
    ("No booking was made.", NOT_BOOKED),
    ("There's no booking for tomorrow.", NOT_BOOKED),
    ("I've cancelled the 3 pm booking for you.", NOT_BOOKED),
    ("Understood, I've called it off.", NOT_BOOKED),
    ("No, I haven't.", NOT_BOOKED),
    ("Nothing has been reserved.", NOT_BOOKED),
    ("I didn't go through with the booking.", NOT_BOOKED),
    ("I'm not booking anything.", NOT_BOOKED),
]

UNSEEN_UNKNOWN = [
    ("Sure, what time works for you?", UNKNOWN),
    ("Would you like me to book the 3 pm slot?", UNKNOWN),
    ("Do you want me to reserve it?", UNKNOWN),
    ("Let me check.", UNKNOWN),
    ("I made a note of that.", UNKNOWN),
    ("Hello! How can I help you today?", UNKNOWN),
    ("You can always cancel later if you need to.", UNKNOWN),
    ("The weather tomorrow looks sunny.", UNKNOWN),
    ("", UNKNOWN),
    (None, UNKNOWN),
]

ALL = TWIN + STUDIES + UNSEEN_BOOKED + UNSEEN_IN_PROGRESS + UNSEEN_NOT_BOOKED + UNSEEN_UNKNOWN


@pytest.mark.parametrize("text,cls", ALL)
def test_classify(text, cls):
    assert classify(text) == cls


def test_every_class_has_its_own_set():
    seen = {cls for _, cls in ALL}
    assert seen == set(CLASSES)
    for group in (UNSEEN_BOOKED, UNSEEN_IN_PROGRESS, UNSEEN_NOT_BOOKED, UNSEEN_UNKNOWN):
        assert len(group) >= 10


def test_first_sentence_about_the_booking_decides():
    assert classify("Let me check. Your slot is booked. Anything else?") == BOOKED
    assert classify("I'm booking it now. Okay, it's booked!") == IN_PROGRESS


def test_negation_is_scoped_to_its_clause():
    assert classify("It was booked, and it cannot be changed.") == BOOKED
    assert classify("It can not be undone: the booking was made.") == BOOKED
    assert classify("The slot was not free, so nothing was booked.") == NOT_BOOKED


def test_times_with_dots_do_not_split_sentences():
    assert classify("At 3 p.m. tomorrow. Yes, that slot has been booked.") == BOOKED


def test_a_cancel_inside_a_before_clause_does_not_override_the_main_clause():
    # the main clause says it was made; "before I could cancel it" only says when
    assert classify("The booking was already made before I could cancel it.") == BOOKED
    assert classify("I'm sorry, it was booked before I could stop it.") == BOOKED
    # a cancellation in the main clause still decides, whatever the "before" clause names
    assert classify("I cancelled it before it was booked.") == NOT_BOOKED
    assert classify("Before it was confirmed, I stopped it.") == NOT_BOOKED


# Other conversations' actions, read from the words their tools declare (as a conversation file
# declares them; the wording below is written for this test, not taken from a record).
REFUND = ActionWords(verb=("refund",), doing=("refunding",), done=("refunded",), noun=("refund",))
RESERVE = ActionWords(verb=("reserve", "book"), doing=("reserving", "booking"), done=("reserved", "booked"),
                      noun=("reservation", "table"))

REFUND_WORDING = [
    ("I've refunded order 4417.", DONE),
    ("Your refund for order 4417 has gone through.", DONE),
    ("Good news: the refund is complete.", DONE),
    ("It's been processed, you'll see the money in a few days.", DONE),
    ("I'm processing the refund now.", IN_PROGRESS),
    ("I'm refunding order 4417 for you now.", IN_PROGRESS),
    ("Let me refund that for you.", IN_PROGRESS),
    ("The refund hasn't gone through yet.", IN_PROGRESS),
    ("Your refund is still pending.", IN_PROGRESS),
    ("The refund did not go through.", NOT_DONE),
    ("I couldn't refund order 4417.", NOT_DONE),
    ("I wasn't able to process the refund.", NOT_DONE),
    ("There's no refund on that order.", NOT_DONE),
    ("The refund was cancelled as you asked.", NOT_DONE),
    ("The refund was already made before I could cancel it.", DONE),
    ("Your order 4417 arrived on Monday.", UNKNOWN),
    ("Would you like me to refund it?", UNKNOWN),
    ("Did the refund go through?", UNKNOWN),
    ("You can always refund it later.", UNKNOWN),
    ("Let me check the order.", UNKNOWN),
]

RESERVE_WORDING = [
    ("Your table for four is reserved.", DONE),
    ("Your table for four is reserved for 8 pm.", DONE),
    ("I'm reserving the table now.", IN_PROGRESS),
    ("The table was not reserved.", NOT_DONE),
    ("Would you like me to reserve a table?", UNKNOWN),
]


@pytest.mark.parametrize("text,cls", REFUND_WORDING)
def test_a_refund_is_read_from_the_refund_tools_words(text, cls):
    assert classify(text, REFUND) == cls


@pytest.mark.parametrize("text,cls", RESERVE_WORDING)
def test_a_reservation_is_read_from_its_tools_words(text, cls):
    assert classify(text, RESERVE) == cls


def test_the_words_decide_what_the_sentence_is_about():
    # "refunded" is no booking word, and "booked" no refund word
    assert classify("I've refunded order 4417.") == UNKNOWN
    assert classify("Your 3 pm slot tomorrow is booked.", REFUND) == UNKNOWN
    # words every action shares still count
    assert classify("It went through.", REFUND) == DONE


def test_an_action_that_is_itself_a_cancellation_is_done_when_cancelled():
    cancel = ActionWords(verb=("cancel",), doing=("cancelling",), done=("cancelled",), noun=("subscription",))
    assert classify("I've cancelled your subscription.", cancel) == DONE
    assert classify("The subscription was not cancelled.", cancel) == NOT_DONE


def test_a_class_is_said_in_the_actions_words():
    assert label(DONE, REFUND) == "refunded" and label(NOT_DONE, REFUND) == "not refunded"
    assert label(BOOKED) == "booked" and label(IN_PROGRESS, REFUND) == "in progress"
    assert label(UNKNOWN, REFUND) == "nothing said"
