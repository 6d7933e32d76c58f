"""What the twin heard: a recognized utterance matched to the turns the conversation knows.

A small offline recognizer (lab.twin.recognizer) is weak on synthetic and noisy speech, so its words
are not taken as they come. The vocabulary is closed: the conversation's user lines, a few phrasings
of the intents every conversation has (a hello, a status question, a stop) and each tool's `asks`
words. The recognizer decodes against a grammar of those phrases; this module scores what it gave
against each phrase and picks one, or two when one turn carried a request and a stop (fidelity §8
F7), or none: the turn was "not understood" and the model asks the user to say it again, as a
person would (assumption: the records hold no unclear audio).

Pure: no audio, no recognizer; the phrases and the heard words in, a `Match` out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from lab.conversation import intents

# a phrase is accepted when at least this share of its words was heard in order (a weak recognizer
# drops a word or two, most often at the end of a line: "and what" for "And what about London?")
MIN_COVER = 0.5
# ... and at least this many of them, unless the phrase is that short and was heard whole
MIN_WORDS = 2
# an open-vocabulary transcript is matched by the words it shares, in any order: a higher bar
MIN_FREE_COVER = 0.6

_WORD = re.compile(r"[a-z']+|\d+:\d\d|\d+(?:st|nd|rd|th)?")
_ORDINAL_TOKEN = re.compile(r"(\d+)(?:st|nd|rd|th)$")


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
             "nine": "ninth", "twelve": "twelfth"}


def _cardinal(n: int) -> list[str]:
    """A whole number in words, as an American reads it (no "and"): 4417 -> four thousand four
    hundred seventeen. Written here, not taken from num2words: that package needs docopt, which
    has no wheel, and the lab's offline images install wheels only."""
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    for size, name in ((10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"), (100, "hundred")):
        if n >= size:
            return _cardinal(n // size) + [name] + (_cardinal(n % size) if n % size else [])
    raise AssertionError(n)


def _ordinal(n: int) -> list[str]:
    said = _cardinal(n)
    last = said[-1]
    said[-1] = _ORDINALS.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return said


def _spoken(token: str) -> list[str]:
    """A token as it is said: numerals in words, for the recognizer's dictionary spells none
    ("4417" -> four thousand four hundred seventeen, "4:30" -> four thirty, "3rd" -> third)."""
    if token[0].isdigit():
        if ":" in token:
            hour, minute = token.split(":")
            tail = [] if minute == "00" else (["oh"] if minute[0] == "0" else []) + _cardinal(int(minute))
            return _cardinal(int(hour)) + tail
        m = _ORDINAL_TOKEN.match(token)
        return _ordinal(int(m.group(1))) if m else _cardinal(int(token))
    return [token]


def words(text: str) -> tuple[str, ...]:
    """A line's words as the recognizer spells them: lower case, no punctuation, numbers in words
    ("3pm" is "three pm")."""
    return tuple(w for t in _WORD.findall(text.lower().replace("’", "'")) for w in _spoken(t))


@dataclass(frozen=True)
class Phrase:
    text: str                   # as the conversation spells it: what the engine reads
    words: tuple[str, ...]      # the words the recognizer knows (a word not in its dictionary is left out)
    index: int | None = None    # its place in the script (None: an intent phrase)


@dataclass(frozen=True)
class Vocabulary:
    """The closed set an utterance is matched against, built once per conversation."""
    phrases: tuple[Phrase, ...]
    asks: dict = field(default_factory=dict)     # a tool's asks word -> the tool

    def grammar_phrases(self) -> tuple[tuple[str, ...], ...]:
        """The phrases' word sequences, each once, for the recognizer's grammar."""
        return tuple(dict.fromkeys(p.words for p in self.phrases if p.words))


def vocabulary(script: list[str], asks: dict[str, tuple[str, ...]] | None = None,
               known=lambda w: True) -> Vocabulary:
    """The script's lines, then the intent phrases; `known(word)`: the recognizer has the word (one
    its dictionary lacks is not counted against what was heard)."""
    out: list[Phrase] = []
    for i, line in enumerate(script):
        out.append(Phrase(line, tuple(w for w in words(line) if known(w)), i))
    seen = {p.words for p in out}
    verbs = tuple(dict.fromkeys(w for ws in (asks or {}).values() for w in ws[:1]))
    for line in intents.phrases(verbs):
        ws = tuple(w for w in words(line) if known(w))
        if ws not in seen:
            out.append(Phrase(line, ws))
            seen.add(ws)
    by_word = {w: tool for tool, ws in (asks or {}).items() for w in ws if known(w)}
    return Vocabulary(tuple(out), by_word)


@dataclass(frozen=True)
class Match:
    """What an utterance stands for: the lines read from it (none: not understood), and why."""
    lines: tuple[str, ...]
    score: float                # the share of the first line's words heard (0 when none)
    how: str                    # grammar | words | asks | none
    heard: str                  # the recognizer's words, as it gave them

    @property
    def understood(self) -> bool:
        return bool(self.lines)

    @property
    def text(self) -> str:
        return " ".join(self.lines)

    def to_json(self) -> dict:
        return {"heard": self.heard, "match": self.text or None, "score": round(self.score, 2), "how": self.how}


def _in_order(heard: tuple[str, ...], phrase: tuple[str, ...]) -> tuple[int, int]:
    """(words of `phrase` heard in order, where in `heard` the last of them was + 1): the longest
    common subsequence, so a dropped or misheard word costs one word, not the line."""
    n, m = len(heard), len(phrase)
    if not n or not m:
        return 0, 0
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best[i][j] = (best[i - 1][j - 1] + 1 if heard[i - 1] == phrase[j - 1]
                          else max(best[i - 1][j], best[i][j - 1]))
    total = best[n][m]
    end = next(i for i in range(n + 1) if best[i][m] == total)
    return total, end


def _accepted(got: int, phrase: tuple[str, ...], cover: float) -> bool:
    if not phrase or got / len(phrase) < cover:
        return False
    return got >= MIN_WORDS or got == len(phrase)


def _rank(got: int, p: Phrase, expected: int | None) -> tuple:
    """Words heard, less half a word for each of the phrase's not heard (so a whole long phrase beats
    a short one inside it: "actually stop don't book" is the long stop, not "Stop."); a tie goes to
    the script line due next, then the earliest."""
    return (got - 0.5 * (len(p.words) - got), p.index is not None and p.index == expected,
            -(p.index if p.index is not None else 1_000))


def _best(heard: tuple[str, ...], vocab: Vocabulary, expected: int | None) -> tuple[Phrase, int, int] | None:
    """The phrase `heard` begins with best, with the words of it heard and where they end in `heard`."""
    ranked = []
    for p in vocab.phrases:
        got, end = _in_order(heard, p.words)
        if _accepted(got, p.words, MIN_COVER):
            ranked.append((_rank(got, p, expected), p, got, end))
    if not ranked:
        return None
    _, p, got, end = max(ranked, key=lambda r: r[0])
    return p, got, end


def _parse(heard: tuple[str, ...], vocab: Vocabulary, expected: int | None) -> list[Phrase] | None:
    """The grammar's words read exactly as one phrase or two, when they are (the decoder reached the
    grammar's end); a tie goes to the line due next."""
    whole = [p for p in vocab.phrases if p.words == heard]
    if whole:
        return [max(whole, key=lambda p: _rank(len(p.words), p, expected))]
    for p in vocab.phrases:
        n = len(p.words)
        if n and heard[:n] == p.words:
            q = next((q for q in vocab.phrases if q.words == heard[n:]), None)
            if q is not None:
                return [p, q]
    return None


def match(grammar: str | None, free: str | None, vocab: Vocabulary, expected: int | None = None) -> Match:
    """Read one utterance. `grammar`: the recognizer's words under the phrases' grammar (None when
    no phrase fit the audio); `free`: its open-vocabulary words, asked for only when the grammar gave
    nothing; `expected`: the script line due by position, the tie-break."""
    heard = words(grammar or "")
    exact = _parse(heard, vocab, expected) if heard else None
    if exact:
        return Match(tuple(p.text for p in exact), 1.0, "grammar", grammar or "")
    # the decoder stopped inside a phrase (a weak recognizer's usual miss: a line's last words)
    first = _best(heard, vocab, expected) if heard else None
    if first is not None:
        p, got, end = first
        lines = [p.text]
        rest = heard[end:]
        second = _best(rest, vocab, None if p.index is None else p.index + 1) if rest else None
        if second is not None and second[0].text != p.text:
            if got < MIN_WORDS:
                # one short word before a whole line ("hi" out of a noisy onset) is not a turn of
                # its own; a one-word phrase after a line is (a request, then "stop", F7)
                p, got = second[0], second[1]
                lines = [p.text]
            else:
                lines.append(second[0].text)
        return Match(tuple(lines), got / len(p.words), "grammar", grammar or "")
    bag = words(free or "")
    if bag:
        ranked = [(sum(w in bag for w in p.words) / len(p.words), p) for p in vocab.phrases if p.words]
        cover, p = max(ranked, key=lambda r: r[0]) if ranked else (0.0, None)
        if p is not None and cover >= MIN_FREE_COVER and sum(w in bag for w in p.words) >= min(MIN_WORDS, len(p.words)):
            return Match((p.text,), cover, "words", free or "")
        if any(w in vocab.asks for w in bag):
            # a tool's own word in speech the phrases do not hold: the engine reads the words as said
            return Match((" ".join(bag),), 0.0, "asks", free or "")
    return Match((), 0.0, "none", (grammar or free or "").strip())
