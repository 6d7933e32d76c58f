"""What the model told the user about the booking, as one of four classes.

`classify(text)` reads an output transcription (one model turn) and returns

- ``"booked"``: the model says the booking is done ("is booked", "has been successfully booked",
  "I've booked", "confirmed");
- ``"in_progress"``: the model says it is booking or the booking is pending ("I'm booking ... now",
  "in progress", "still being processed");
- ``"not_booked"``: the model says no booking was made ("not booked", "haven't", "wasn't made");
- ``"unknown"``: nothing about the booking (or no text at all).

Live transcriptions vary in wording, punctuation and spelling of times ("3 pm", "3:00 p.m."), so
the patterns look at the verb phrase only. The text is read sentence by sentence and the first
sentence that says something about the booking decides: that is what the user hears first (the
resume study compares first sentences, e.g. "I'm booking the 3:00 p.m. slot tomorrow for you.").
Pure: no I/O, no state.
"""
from __future__ import annotations

import re

BOOKED = "booked"
IN_PROGRESS = "in_progress"
NOT_BOOKED = "not_booked"
UNKNOWN = "unknown"
CLASSES = (BOOKED, IN_PROGRESS, NOT_BOOKED, UNKNOWN)

# Pending wording strong enough to win over a negation in the same sentence
# ("it hasn't gone through yet, it's still being processed").
_PENDING_STRONG = [
    r"\bin progress\b",
    r"\b(still )?being (processed|booked|handled|confirmed|finali[sz]ed)\b",
    r"\bstill (processing|booking|working|pending|going through)\b",
    r"\bis pending\b|\bpending confirmation\b",
    r"\bwaiting (for|on) (the )?(confirmation|system|backend|booking)\b",
    r"\bnot (yet )?(been )?(confirmed|finali[sz]ed|complete[d]?) yet\b",
    r"\bnot confirmed yet\b|\bnot yet confirmed\b",
]

_NEGATIVE = [
    r"\b(not|never)\s+(been\s+|yet\s+|actually\s+)*(booked|made|reserved|confirmed|placed|completed?)\b",
    r"\b(haven't|have not|hasn't|has not|didn't|did not|couldn't|could not|wasn't|was not|weren't|"
    r"were not|isn't|is not|won't|will not)\b[^.!?]{0,40}\b(book|booked|made|reserve|reserved|confirm|confirmed|"
    r"able|go through|gone through|place|placed)\b",
    r"\bhaven't\b|\bhasn't\b",
    r"\b(unable|failed|fail) to (book|reserve|make|complete)\b",
    r"\bno (booking|reservation) (was|has been|is)\b|\bthere is no booking\b|\bno booking\b",
    r"\b(booking|reservation) (was|has been|is) (cancel+ed|not made)\b|\bcancel+ed\b",
]

_PENDING = [
    r"\b(i'm|i am|we're|we are|i'll|i will|i'?m going to|let me|currently|now)\s+(just\s+|now\s+|still\s+)?"
    r"(booking|book|reserving|reserve|processing|securing)\b",
    r"\bbooking (it|that|this|the|your|you)\b[^.!?]*\bnow\b",
    r"\b(working on|processing) (it|that|the booking|your booking|the reservation)\b",
    r"\bshould be (booked|confirmed|done) (shortly|soon|in a moment)\b",
    r"\bone moment\b.*\bbook",
]

_BOOKED = [
    r"\b(is|was|are|were|been|now|already|successfully|just)\s+(all\s+|successfully\s+|now\s+)?"
    r"(booked|reserved|confirmed|secured)\b",
    r"\b(i've|i have|we've|we have|i|i just|i successfully|i've successfully|i have successfully|"
    r"i've gone ahead and|i went ahead and)\s+(booked|reserved|secured|confirmed)\b",
    r"\bgot you (booked|down|in)\b|\byou're (all set|booked|confirmed)\b|\ball set\b",
    r"\b(booking|reservation) (is|was|has been) (made|confirmed|complete[d]?|done|successful)\b",
    r"\b(made|completed|confirmed) (the|your) (booking|reservation)\b",
    r"\bbooked\b",
]


def _norm(text: str) -> str:
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    return re.sub(r"\s+", " ", t).strip()


def _sentences(text: str) -> list[str]:
    # "3:00 p.m." must not split: split on terminal punctuation followed by a space and a letter
    # that starts a sentence, after protecting the dotted abbreviations times use.
    protected = re.sub(r"\b([ap])\.m\.", r"\1m", text)
    parts = re.split(r"(?<=[.!?])\s+", protected)
    return [p for p in (s.strip() for s in parts) if p]


def _classify_sentence(s: str) -> str:
    if any(re.search(p, s) for p in _PENDING_STRONG):
        return IN_PROGRESS
    if any(re.search(p, s) for p in _NEGATIVE):
        return NOT_BOOKED
    if any(re.search(p, s) for p in _PENDING):
        return IN_PROGRESS
    if any(re.search(p, s) for p in _BOOKED):
        return BOOKED
    return UNKNOWN


def classify(text: str | None) -> str:
    """The class of what `text` tells the user about the booking (see the module docstring)."""
    if not text or not text.strip():
        return UNKNOWN
    for sentence in _sentences(_norm(text)):
        cls = _classify_sentence(sentence)
        if cls != UNKNOWN:
            return cls
    return UNKNOWN
