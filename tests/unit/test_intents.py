"""The user-intent vocabulary (lab.conversation.intents) on the studies' lines and on other stories' words."""
import glob

import pytest
import yaml

from lab.conversation import intents
from lab.conversation.intents import GREETING, OTHER, STATUS, STOP
from lab.conversation.semantics import ActionWords

REFUND = ActionWords(verb=("refund",), doing=("refunding",), done=("refunded",), noun=("refund",))


@pytest.mark.parametrize("line,want", [
    ("Book me the 3pm slot tomorrow, please.", OTHER),            # a request belongs to its conversation
    ("Did you book it?", STATUS),                                  # 000: every round's status question
    ("Have you booked it?", STATUS),
    ("Has it been booked?", STATUS),
    ("Did it go through?", STATUS),
    ("Actually, stop. Don't book it.", STOP),                      # 001's stop line
    ("Stop, did you book it already?", STOP),                      # a stop wins over the question in it
    ("Hi, can you hear me?", GREETING),                            # fidelity.md §8 F14
    ("Hello.", GREETING),
    ("Is there anything I should bring?", OTHER),
    ("What should I bring to the appointment?", OTHER),
])
def test_booking_lines(line, want):
    assert intents.intent(line) == want


@pytest.mark.parametrize("line,want", [
    ("Did the refund go through?", STATUS),
    ("Is it refunded?", STATUS),
    ("What's the status of my refund?", STATUS),
    ("Please refund order 4417, it arrived broken.", OTHER),
    ("Don't refund it.", STOP),
    ("Did you book it?", OTHER),                                   # another story's verb is not this one's question
])
def test_other_story_words(line, want):
    assert intents.intent(line, REFUND) == want


def test_every_catalogue_line_has_one_reading():
    """The anchors (what the agent and the report call a stop) read the same vocabulary."""
    from lab import anchors
    for f in glob.glob("lab/scenarios/*.yaml"):
        for line in yaml.safe_load(open(f))["script"]:
            assert anchors.is_stop(line) == (intents.intent(line) == STOP), (f, line)
