"""What the model told the user about the booking, as one of four classes.

`classify(text)` reads an output transcription (one model turn) and returns

- ``"booked"``: the booking is said to be done ("has already been made", "is officially confirmed",
  "I've gone ahead and booked", "you're all set", "it cannot be cancelled any more");
- ``"in_progress"``: it is said to be under way or pending ("I'm booking ... now", "still being
  processed", "pending", "not confirmed yet");
- ``"not_booked"``: it is said not to exist ("wasn't made", "I won't book it", "nothing has been
  scheduled", "it has been cancelled as requested");
- ``"unknown"``: nothing is said about the booking (a question, an offer, no text at all).

How it reads, and why (the rules were written against the studies' wording and then checked on
wording they never produced, see tests/unit/test_claims.py):

1. Normalise: lower case, curly quotes, contractions expanded ("hasn't" -> "has not", "it's" ->
   "it is"), so every rule sees one spelling of a negation or an auxiliary.
2. Sentences, then clauses (commas, semicolons, "and", "but", "so", ...). A negation is scoped to its
   own clause: in "The booking was already made and cannot be cancelled" the "not" belongs to the
   cancelling, not to the booking.
3. In each clause, find the predicate about the booking and its polarity: a state ("booked",
   "made", "confirmed", "done", "gone through", ...), an activity ("booking", "processing",
   "pending", "will book"), or a cancellation ("cancelled", "stopped"). Words may stand between the
   noun and the verb and inside the verb phrase ("the booking for tomorrow at 3pm was already
   made", "is officially confirmed"). Generic verbs ("made", "done", "complete") count only with a
   booking noun or a pronoun in the clause, so "I made a note" says nothing.
4. The first clause that says something decides, and the first sentence that says something decides
   the turn: that is what the user hears first (the resume study compares first sentences).

Pure: no I/O, no state.
"""
from __future__ import annotations

import re

BOOKED = "booked"
IN_PROGRESS = "in_progress"
NOT_BOOKED = "not_booked"
UNKNOWN = "unknown"
CLASSES = (BOOKED, IN_PROGRESS, NOT_BOOKED, UNKNOWN)

# ---- 1. normalisation ----------------------------------------------------------------------------
_CONTRACTIONS = [
    (r"\bwon't\b", "will not"), (r"\bcan't\b", "can not"), (r"\bcannot\b", "can not"),
    (r"\bshan't\b", "shall not"), (r"\bain't\b", "is not"),
    (r"\b(\w+)n't\b", r"\1 not"),
    (r"\b(i)'m\b", r"\1 am"), (r"\b(\w+)'re\b", r"\1 are"), (r"\b(\w+)'ve\b", r"\1 have"),
    (r"\b(\w+)'ll\b", r"\1 will"), (r"\b(i|you|we|they|he|she|it)'d\b", r"\1 would"),
    (r"\b(it|that|this|there|what|everything|here|booking|reservation|slot|appointment)'s\b", r"\1 is"),
]


def _norm(text: str) -> str:
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    t = re.sub(r"\b([ap])\.m\.?", r"\1m", t)          # "3:00 p.m." must not end a sentence
    for pat, rep in _CONTRACTIONS:
        t = re.sub(pat, rep, t)
    return re.sub(r"\s+", " ", t).strip()


# ---- 2. sentences and clauses --------------------------------------------------------------------
def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


_CLAUSE_BREAK = re.compile(
    r"\s*[,;:\u2014]\s*|\s+-\s+|\s+(?:and|but|so|because|although|though|however|whereas|"
    r"which|since)\s+")


def _clauses(sentence: str) -> list[str]:
    return [c.strip(" .!?\"'") for c in _CLAUSE_BREAK.split(sentence) if c.strip(" .!?\"'")]


# ---- 3. predicates in a clause -------------------------------------------------------------------
_NEG = r"(?:not|never|no|nothing|none|neither|nor|unable to|failed to|fail to)"
# A generic state ("made", "done") is about the booking when a booking noun stands anywhere in the
# clause, or a pronoun stands before the verb as its subject ("it was made", not "I made a note of that").
_NOUN = r"(?:booking|reservation|appointment|slot)"
_PRONOUN = r"(?:it|that|this|everything|all)"

# A clause that asks or offers claims nothing about what happened ("Would you like me to book it?").
_QUESTION = re.compile(
    r"^(?:would|should|shall|do|did|does|can|could|may|will) (?:you|i|we)\b|^(?:want|like) me to\b|"
    r"^(?:what|which|when|how|is there)\b|\bwould you like\b|\bdo you want\b|\bshall i\b|\bif you (?:like|want)\b")

# Offers about the future claim nothing either ("you can cancel it any time").
_OFFER = re.compile(r"\b(?:you can|you may|you could|if you (?:want|need|would like) to|feel free to) "
                    r"(?:always |still |easily )?(?:cancel|change|book|reschedule)\b")
# A bare negative answer to "Did you book it?" ("No, I have not.") and "there is no booking".
_BARE_NO = re.compile(r"^(?:no )?(?:i|we) (?:have|did|has) not$|^there is no (?:booking|reservation)\b"
                      r"|^no (?:booking|reservation)\b")

# Under way: wording that says the booking is happening or pending now.
_PROGRESS = re.compile(
    r"\bin progress\b|\bpending\b|\bprocessing\b|\bunder way\b|\bunderway\b"
    r"|\bbeing (?:processed|booked|handled|confirmed|finali[sz]ed|made|reserved|placed)\b"
    r"|\bstill (?:working|going through|waiting)\b"
    r"|\bwaiting (?:for|on) (?:the )?(?:confirmation|system|backend|booking|reservation)\b"
    r"|\b(?:am|are|is)(?: not| now| already| currently| just| still| in the process of)* "
    r"(?:booking|reserving|securing|placing|making|finali[sz]ing|working on)\b"
    r"|^(?:now )?(?:booking|reserving|securing) (?:the|your|that|it|this|you)\b"
    r"|\b(?:let me|going to|will|i will go ahead and|about to|one moment while i) "
    r"(?:now |just |go ahead and )?(?:book|reserve|secure|make the booking|place)\b"
    r"|\bshould be (?:booked|confirmed|done|complete[d]?) (?:shortly|soon|in a moment)\b"
    r"|\byet to be (?:confirmed|booked|finali[sz]ed|processed)\b")

# Cancelled or stopped: no booking, unless the cancelling itself is negated ("can not be cancelled",
# "too late to cancel"): then a booking exists.
_CANCEL = re.compile(r"\b(?:cancel+ed|cancel+ing|cancel|called (?:it |that |the booking )?off|stopped|halted|aborted|withdrawn)\b")
_CANCEL_BLOCKED = re.compile(rf"\b{_NEG}\b.*\b(?:cancel|be cancel+ed)\b|\btoo late to cancel\b")

# States that are about the booking by themselves, and generic ones that need a booking noun.
_STATE_OWN = (r"booked|reserved|confirmed|secured|scheduled|finali[sz]ed|all set|(?:got|have) you "
              r"(?:booked|down|in)|went through|gone through|go through|locked in|(?:is|are) (?:all )?yours")
_STATE_GENERIC = r"made|done|complete[d]?|placed|successful|set(?: up| for)?|taken care of|processed"
_STATE = re.compile(rf"\b(?:{_STATE_OWN})\b|\b(?P<generic>{_STATE_GENERIC})\b")
_NOUN_RE = re.compile(rf"\b{_NOUN}\b")
_PRONOUN_RE = re.compile(rf"\b{_PRONOUN}\b")
# Actions in the base form: "I did not book", "I will not book it", "I was unable to book".
_ACTION = re.compile(r"\b(?:book|reserve|make the booking|make that booking|place the booking|confirm)\b")
# "Yet" with a negated completion means under way ("not confirmed yet", "has not gone through yet").
_COMPLETION = re.compile(r"\b(?:confirmed|finali[sz]ed|complete[d]?|processed|gone through|go through)\b")


def _negated_before(clause: str, pos: int) -> bool:
    before = clause[:pos]
    return bool(re.search(rf"\b{_NEG}\b", before)) and not re.search(r"\bnot only\b", before)


def _classify_clause(c: str) -> str | None:
    """The class one clause states, or None when it says nothing about the booking.

    Order matters: an activity ("still being processed") is checked before the states its words
    contain ("processed"), and a cancellation before the booking it names.
    """
    if _QUESTION.search(c) or _OFFER.search(c):
        return None
    if re.search(r"\bno longer (?:pending|in progress|processing)\b", c):
        return BOOKED
    if _CANCEL.search(c):
        return BOOKED if _CANCEL_BLOCKED.search(c) else NOT_BOOKED
    m = _PROGRESS.search(c)
    if m:
        # the negation may stand inside the activity's own verb phrase ("am not booking")
        return NOT_BOOKED if _negated_before(c, m.end()) else IN_PROGRESS
    m = _STATE.search(c)
    if m and (not m.group("generic") or _NOUN_RE.search(c) or _PRONOUN_RE.search(c[:m.start()])):
        if not _negated_before(c, m.start()):
            return BOOKED
        return IN_PROGRESS if (_COMPLETION.search(m.group(0)) and re.search(r"\byet\b", c)) else NOT_BOOKED
    m = _ACTION.search(c)
    if m and _negated_before(c, m.start()):
        return NOT_BOOKED
    if _BARE_NO.search(c):
        return NOT_BOOKED
    return None


def _classify_sentence(s: str) -> str:
    for clause in _clauses(s):
        cls = _classify_clause(clause)
        if cls is not None:
            return cls
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
