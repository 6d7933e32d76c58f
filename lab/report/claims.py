"""What the model told the user about the conversation's action, as one of four classes.

`classify(text, words=None)` reads an output transcription (one model turn) and returns what it
says about the action whose words are `words` (lab.conversation.semantics.ActionWords; default the
booking story's, `semantics.BOOKING.words`):

- ``"booked"`` (DONE): the action is said to be done ("has already been made", "is officially
  confirmed", "I've refunded order 4417", "you're all set", "it cannot be cancelled any more");
- ``"in_progress"``: it is said to be under way or pending ("I'm booking ... now", "I'm processing the
  refund now", "still being processed", "pending", "not confirmed yet");
- ``"not_booked"`` (NOT_DONE): it is said not to have happened ("wasn't made", "I won't book it", "the
  refund did not go through", "it has been cancelled as requested");
- ``"unknown"``: nothing is said about the action (a question, an offer, no text at all).

The class values keep the booking story's names: every verdict and metric written before
conversations existed spells them so. `label(cls, words)` says a class in the action's own words.

How it reads, and why (the rules were written against the studies' wording and then checked on
wording they never produced, see tests/unit/test_claims.py):

1. Normalise: lower case, curly quotes, contractions expanded ("hasn't" -> "has not", "it's" ->
   "it is"), so every rule sees one spelling of a negation or an auxiliary.
2. Sentences, then clauses (commas, semicolons, "and", "but", "so", ...). A negation is scoped to its
   own clause: in "The booking was already made and cannot be cancelled" the "not" belongs to the
   cancelling, not to the booking. A clause's "before ...", "until ..." or "whether ..." part only
   says when or if, and claims nothing: "it was already made before I could cancel it" is a claim
   that it was made, not a cancellation.
3. In each clause, find the predicate about the action and its polarity: a state (the action's own
   `done` words, and words every action shares: "confirmed", "gone through", "all set"), an activity
   (its `doing` words, "processing", "pending", "will" + its `verb`), or a cancellation
   ("cancelled", "stopped"). Words may stand between the noun and the verb and inside the verb
   phrase ("the booking for tomorrow at 3pm was already made", "is officially confirmed"). Generic
   verbs ("made", "done", "complete", "processed") count only with one of the action's nouns or a
   pronoun in the clause, so "I made a note" says nothing.
4. The first clause that says something decides, and the first sentence that says something decides
   the turn: that is what the user hears first (the resume study compares first sentences).

Pure: no I/O, no state (the compiled patterns of each set of words are cached).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from lab.conversation.semantics import BOOKING, ActionWords

BOOKED = "booked"
IN_PROGRESS = "in_progress"
NOT_BOOKED = "not_booked"
UNKNOWN = "unknown"
CLASSES = (BOOKED, IN_PROGRESS, NOT_BOOKED, UNKNOWN)
DONE, NOT_DONE = BOOKED, NOT_BOOKED     # the same classes, named for any action


def label(cls: str, words: ActionWords | None = None) -> str:
    """A class in the action's own words: 'refunded', 'not refunded', 'in progress', 'nothing said'."""
    done = ((words or BOOKING.words).done or ("done",))[0]
    return {BOOKED: done, NOT_BOOKED: f"not {done}", IN_PROGRESS: "in progress"}.get(cls, "nothing said")


# ---- the words every action shares ---------------------------------------------------------------
_NEG = r"(?:not|never|no|nothing|none|neither|nor|unable to|failed to|fail to)"
_PRONOUN = r"(?:it|that|this|everything|all)"
_PRONOUN_RE = re.compile(rf"\b{_PRONOUN}\b")
# States that need one of the action's nouns, or a pronoun before them as their subject ("it was
# made", not "I made a note of that"). An action's own `done` word that is one of these stays generic.
_GENERIC = ("made", "done", "complete", "completed", "placed", "successful", "set up", "set for", "set",
            "taken care of", "processed", "secured", "finalised", "finalized", "locked in", "is yours",
            "are yours", "is all yours", "are all yours")
# States any action has by itself
_SHARED_STATE = r"all set|went through|gone through|go through"
# "Yet" with a negated completion means under way ("not confirmed yet", "has not gone through yet").
_COMPLETION = re.compile(r"\b(?:confirmed|finali[sz]ed|complete[d]?|processed|gone through|go through)\b")
# Cancelled or stopped: the action did not happen, unless the cancelling itself is negated ("can not
# be cancelled", "too late to cancel"): then it did.
_CANCEL_WORDS = ("cancelled", "canceled", "cancelling", "canceling", "cancel", "called it off", "called that off",
                 "called off", "stopped", "halted", "aborted", "withdrawn")
_CANCEL_BLOCKED = re.compile(rf"\b{_NEG}\b.*\b(?:cancel|be cancel+ed)\b|\btoo late to cancel\b")
_NO_LONGER_PENDING = re.compile(r"\bno longer (?:pending|in progress|processing)\b")
# The part of a clause that only says when or if ("before I could cancel it"): it claims nothing.
_SUBORDINATE = re.compile(r"(?:^|\s)(?:before|until|till|whether)\b.*$")

_CONTRACTIONS = [
    (r"\bwon't\b", "will not"), (r"\bcan't\b", "can not"), (r"\bcannot\b", "can not"),
    (r"\bshan't\b", "shall not"), (r"\bain't\b", "is not"),
    (r"\b(\w+)n't\b", r"\1 not"),
    (r"\b(i)'m\b", r"\1 am"), (r"\b(\w+)'re\b", r"\1 are"), (r"\b(\w+)'ve\b", r"\1 have"),
    (r"\b(\w+)'ll\b", r"\1 will"), (r"\b(i|you|we|they|he|she|it)'d\b", r"\1 would"),
]
_IS_SUBJECTS = ("it", "that", "this", "there", "what", "everything", "here")


def _alt(*groups) -> str:
    """One regex alternation of literal words (longest first, so "set up" wins over "set");
    a pattern that never matches when there is none (an action that declared no such words)."""
    ws = sorted({w for g in groups for w in g if w}, key=len, reverse=True)
    return "(?:" + "|".join(re.escape(w) for w in ws) + ")" if ws else r"(?!x)x"


@dataclass(frozen=True)
class _Patterns:
    """The compiled rules for one action's words."""
    is_contraction: re.Pattern
    question: re.Pattern
    offer: re.Pattern
    bare_no: re.Pattern
    progress: re.Pattern
    cancel: re.Pattern | None
    state: re.Pattern
    noun: re.Pattern
    action: re.Pattern


@functools.lru_cache(maxsize=64)
def _patterns(w: ActionWords) -> _Patterns:
    noun, verb, doing = _alt(w.noun), _alt(w.verb), _alt(w.doing)
    own_done = [d for d in w.done if d not in _GENERIC]
    progress = re.compile(
        r"\bin progress\b|\bpending\b|\bprocessing\b|\bunder way\b|\bunderway\b"
        rf"|\bbeing {_alt(w.done, ('processed', 'handled', 'confirmed', 'finalised', 'finalized', 'made', 'placed'))}\b"
        r"|\bstill (?:working|going through|waiting)\b"
        rf"|\bwaiting (?:for|on) (?:the )?{_alt(w.noun, ('confirmation', 'system', 'backend'))}\b"
        r"|\b(?:am|are|is)(?: not| now| already| currently| just| still| in the process of)* "
        rf"{_alt(w.doing, ('securing', 'placing', 'making', 'finalising', 'finalizing', 'working on'))}\b"
        rf"|^(?:now )?{_alt(w.doing, ('securing',))} (?:the|your|that|it|this|you)\b"
        r"|\b(?:let me|going to|will|i will go ahead and|about to|one moment while i) "
        rf"(?:now |just |go ahead and )?(?:{_alt(w.verb, ('secure', 'place'))}|make the {noun})\b"
        rf"|\bshould be {_alt(w.done, ('confirmed', 'done', 'complete', 'completed'))} (?:shortly|soon|in a moment)\b"
        rf"|\byet to be {_alt(w.done, ('confirmed', 'finalised', 'finalized', 'processed'))}\b")
    # an action whose own words are a cancellation (a cancel_order tool) is not undone by them
    cancels = [c for c in _CANCEL_WORDS if not any(c in x or x in c for x in w.verb + w.done + w.doing)]
    return _Patterns(
        is_contraction=re.compile(rf"\b({_alt(_IS_SUBJECTS, w.noun)})'s\b"),
        # a clause that asks or offers claims nothing about what happened ("Would you like me to book it?")
        question=re.compile(
            r"^(?:would|should|shall|do|did|does|can|could|may|will) (?:you|i|we)\b|^(?:want|like) me to\b|"
            r"^(?:what|which|when|how|is there)\b|\bwould you like\b|\bdo you want\b|\bshall i\b|"
            rf"\bif you (?:like|want)\b|^(?:did|does|has|is) (?:the|your|my) {noun}\b"),
        # offers about the future claim nothing either ("you can cancel it any time")
        offer=re.compile(r"\b(?:you can|you may|you could|if you (?:want|need|would like) to|feel free to) "
                         rf"(?:always |still |easily )?(?:cancel|change|reschedule|{verb})\b"),
        # a bare negative answer to "Did you book it?" ("No, I have not.") and "there is no booking"
        bare_no=re.compile(rf"^(?:no )?(?:i|we) (?:have|did|has) not$|^there is no {noun}\b|^no {noun}\b"),
        progress=progress,
        cancel=re.compile(rf"\b{_alt(cancels)}\b") if cancels else None,
        state=re.compile(rf"\b(?:{_alt(own_done)}|{_SHARED_STATE}|(?:got|have) you (?:{_alt(w.done)}|down|in))\b"
                         rf"|\b(?P<generic>{_alt(_GENERIC)})\b"),
        noun=re.compile(rf"\b{noun}\b"),
        # actions in the base form: "I did not book", "I will not refund it", "I was unable to process the refund"
        action=re.compile(rf"\b(?:{verb}|(?:make|place|process) (?:the|that|your|this) {noun}|confirm)\b"),
    )


# ---- 1. normalisation ----------------------------------------------------------------------------
def _norm(text: str, p: _Patterns) -> str:
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    t = re.sub(r"\b([ap])\.m\.?", r"\1m", t)          # "3:00 p.m." must not end a sentence
    for pat, rep in _CONTRACTIONS:
        t = re.sub(pat, rep, t)
    t = p.is_contraction.sub(r"\1 is", t)
    return re.sub(r"\s+", " ", t).strip()


# ---- 2. sentences and clauses --------------------------------------------------------------------
def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


_CLAUSE_BREAK = re.compile(
    r"\s*[,;:\u2014]\s*|\s+-\s+|\s+(?:and|but|so|because|although|though|however|whereas|"
    r"which|since)\s+")


def _clauses(sentence: str) -> list[str]:
    out = []
    for c in _CLAUSE_BREAK.split(sentence):
        c = _SUBORDINATE.sub("", c.strip(" .!?\"'")).strip(" .!?\"'")
        if c:
            out.append(c)
    return out


# ---- 3. predicates in a clause -------------------------------------------------------------------
def _negated_before(clause: str, pos: int) -> bool:
    before = clause[:pos]
    return bool(re.search(rf"\b{_NEG}\b", before)) and not re.search(r"\bnot only\b", before)


def _classify_clause(c: str, p: _Patterns) -> str | None:
    """The class one clause states, or None when it says nothing about the action.

    Order matters: an activity ("still being processed") is checked before the states its words
    contain ("processed"), and a cancellation before the action it names.
    """
    if p.question.search(c) or p.offer.search(c):
        return None
    if _NO_LONGER_PENDING.search(c):
        return BOOKED
    if p.cancel is not None and p.cancel.search(c):
        return BOOKED if _CANCEL_BLOCKED.search(c) else NOT_BOOKED
    m = p.progress.search(c)
    if m:
        # the negation may stand inside the activity's own verb phrase ("am not booking")
        return NOT_BOOKED if _negated_before(c, m.end()) else IN_PROGRESS
    m = p.state.search(c)
    if m and (not m.group("generic") or p.noun.search(c) or _PRONOUN_RE.search(c[:m.start()])):
        if not _negated_before(c, m.start()):
            return BOOKED
        return IN_PROGRESS if (_COMPLETION.search(m.group(0)) and re.search(r"\byet\b", c)) else NOT_BOOKED
    m = p.action.search(c)
    if m and _negated_before(c, m.start()):
        return NOT_BOOKED
    if p.bare_no.search(c):
        return NOT_BOOKED
    return None


def _classify_sentence(s: str, p: _Patterns) -> str:
    for clause in _clauses(s):
        cls = _classify_clause(clause, p)
        if cls is not None:
            return cls
    return UNKNOWN


def classify(text: str | None, words: ActionWords | None = None) -> str:
    """The class of what `text` tells the user about the action of `words` (default: the booking)."""
    if not text or not text.strip():
        return UNKNOWN
    p = _patterns(words or BOOKING.words)
    for sentence in _sentences(_norm(text, p)):
        cls = _classify_sentence(sentence, p)
        if cls != UNKNOWN:
            return cls
    return UNKNOWN
