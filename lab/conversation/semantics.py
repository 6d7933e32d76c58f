"""What a tool call means to the world: the one definition the twin's model and the report both read.

A conversation declares each tool the model may call. The lab needs three facts about it, and only
these, to judge a run whatever the agent does:

- `side_effect`: whether executing the call changes something outside the conversation (a booking, a
  refund). Only side-effecting calls are owed a truthful status, deduplicated, and counted as effects.
- `business_key`: the argument fields that identify the effect. Two calls with the same key are the
  same effect asked twice (R7): a re-issued `book_slot(slot="tomorrow 3pm")` under a new call id, or
  `refund_order(order_id="4417")` asked again after a reconnect.
- `words`: how people speak of the action, so a sentence of the model can be read as "done", "in
  progress", "not done" or "nothing said" about it (the claim classifier), and so the model can say them.

`BOOKING` is the studies' story (000, 001): `book_slot(slot)`, business key the slot. A run folder with
no conversation of its own (every run recorded before conversations existed) is read with it.

Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from lab.backend import business_key as _fold

JSON_FILE = "conversation.json"       # the run folder's copy of the conversation the run played
EVENT_KIND = "twin.conversation"      # twin.jsonl: the semantics a session's model used (lines-only: built at setup)


@dataclass(frozen=True)
class ActionWords:
    """The words for one tool's action. Each is a tuple of lower-case alternatives, most usual first."""
    verb: tuple[str, ...] = ()        # base form: "book", "refund"
    doing: tuple[str, ...] = ()       # progressive: "booking", "refunding"
    done: tuple[str, ...] = ()        # state after it happened: "booked", "refunded"
    noun: tuple[str, ...] = ()        # what it makes: "booking", "refund"

    def to_json(self) -> dict[str, list[str]]:
        return {k: list(getattr(self, k)) for k in ("verb", "doing", "done", "noun")}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> "ActionWords":
        d = d or {}
        return cls(**{k: tuple(str(w).lower() for w in (d.get(k) or ())) for k in ("verb", "doing", "done", "noun")})


@dataclass(frozen=True)
class ToolSemantics:
    name: str
    side_effect: bool = False
    business_key: tuple[str, ...] = ()
    words: ActionWords = field(default_factory=ActionWords)

    def key_of(self, args: Any) -> str | None:
        """The business key of one call's arguments: each key field's value folded (case, filler words,
        the spelling of a time: lab.backend.business_key), joined by ' | '. None when the tool has no key
        fields or the call lacks one of them."""
        if not self.business_key or not isinstance(args, Mapping):
            return None
        parts = []
        for f in self.business_key:
            if args.get(f) in (None, ""):
                return None
            parts.append(_fold(args[f]))
        return " | ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "side_effect": self.side_effect, "business_key": list(self.business_key),
                "words": self.words.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ToolSemantics":
        return cls(name=str(d["name"]), side_effect=bool(d.get("side_effect", False)),
                   business_key=tuple(str(f) for f in (d.get("business_key") or ())),
                   words=ActionWords.from_json(d.get("words")))


BOOKING = ToolSemantics(
    name="book_slot", side_effect=True, business_key=("slot",),
    words=ActionWords(verb=("book", "reserve", "schedule"), doing=("booking", "reserving", "scheduling"),
                      done=("booked", "reserved", "scheduled", "made", "confirmed"),
                      noun=("booking", "reservation", "appointment", "slot")))


def tools_from_json(d: Mapping[str, Any] | None) -> dict[str, ToolSemantics]:
    """{name: ToolSemantics} from a conversation.json's or a twin.conversation event's "tools" list;
    the booking story's when there is none (a run recorded before conversations)."""
    tools = (d or {}).get("tools")
    if not tools:
        return {BOOKING.name: BOOKING}
    return {t["name"]: ToolSemantics.from_json(t) for t in tools}


def side_effecting(tools: Mapping[str, ToolSemantics]) -> dict[str, ToolSemantics]:
    return {n: t for n, t in tools.items() if t.side_effect}


def words_of(tools: Iterable[ToolSemantics]) -> ActionWords:
    """The words a user's line is read with: every side-effecting tool's together (most runs have
    one such tool), the booking's when there is none. The one rule the twin's model and the report
    both hear a stop or a status question by, so the two never read one line two ways."""
    effecting = [t for t in tools if t.side_effect] or [BOOKING]
    return ActionWords(**{k: tuple(dict.fromkeys(w for t in effecting for w in getattr(t.words, k)))
                          for k in ("verb", "doing", "done", "noun")})
