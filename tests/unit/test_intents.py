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


def _lines(conv) -> list[str]:
    out = [t.text for t in getattr(conv, "turns", ()) if getattr(t, "text", None)]
    for f in glob.glob("examples/*/lines.txt"):
        out += [ln.strip() for ln in open(f) if ln.strip() and not ln.startswith("#")]
    return out + ["Is my reservation confirmed?", "Did the refund go through?", "Have you booked it?",
                  "Stop, don't refund it.", "Did you reserve the table?", "Never mind."]


@pytest.mark.parametrize("name", ["booking", "support", "reservation"])
def test_the_twin_and_the_report_hear_a_line_alike(name):
    """The twin's model decides whether a line is a stop or a status question by the same rule the
    report judges it by (lab.conversation.semantics.words_of): one line, one reading, per conversation."""
    import random

    from lab.conversation import engine as E
    from lab.conversation import format as F
    from lab.report.run_tools import RunTools

    conv = F.load(name)
    e = E.Engine(conv, E.Params(), random.Random(1))
    words = RunTools({t.name: t.semantics for t in conv.tools.values()} if isinstance(conv.tools, dict)
                     else {t.name: t.semantics for t in conv.tools}, "test").words
    for line in _lines(conv):
        twin = e.read(line)["intent"]
        report = intents.intent(line, words)
        if report in (STOP, STATUS) or twin in (STOP, STATUS):
            assert twin == report, (name, line, twin, report)
