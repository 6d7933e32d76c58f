"""The tools of one run and what each means, as the report reads them.

A run's tools are the conversation's (lab.conversation.semantics, docs/conversations.md), taken from
the first `twin.conversation` event in twin.jsonl (a lines-only conversation's tools are known only
once the client declared them), else from the run folder's conversation.json, else the booking
story's (`BOOKING`: every run folder recorded before conversations existed).

    tools = of_run(twin, conversation)      # RunTools
    tools.effect("refund_order")            # ToolSemantics of a side-effecting tool, or None
    tools.key_of(call_event)                # the call's business key, or None
    tools.words                             # the action words the claim classifier reads

The report judges the side-effecting tools only: they are the ones whose status the user is owed,
whose repeats are duplicates and whose effects are counted. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from lab.conversation.semantics import BOOKING, EVENT_KIND, JSON_FILE, ActionWords, ToolSemantics, tools_from_json, words_of
from lab.events import Event

FROM_EVENT = EVENT_KIND               # the twin's record of the conversation a session played
FROM_FILE = JSON_FILE                 # the run folder's copy of the conversation
FROM_DEFAULT = "booking default"      # neither: a run recorded before conversations


@dataclass(frozen=True)
class RunTools:
    tools: Mapping[str, ToolSemantics]
    source: str                       # FROM_EVENT, FROM_FILE or FROM_DEFAULT

    @property
    def default(self) -> bool:
        """The run has no conversation of its own: it is read as every run before conversations was."""
        return self.source == FROM_DEFAULT

    @property
    def side_effecting(self) -> dict[str, ToolSemantics]:
        return {n: t for n, t in self.tools.items() if t.side_effect}

    def effect(self, name: Any) -> ToolSemantics | None:
        """The semantics of `name` when it is a side-effecting tool of the run."""
        t = self.tools.get(str(name)) if name is not None else None
        return t if t is not None and t.side_effect else None

    def key_of(self, call: Event) -> str | None:
        """A tool call's business key (its tool's key fields, folded), None for a call of no
        side-effecting tool or one that lacks a key field."""
        t = self.effect(call.get("name"))
        return t.key_of(call.get("args")) if t is not None else None

    @property
    def names(self) -> str:
        """The side-effecting tools, as a verdict names them ('refund_order'); 'none' when there is none."""
        return ", ".join(self.side_effecting) or "none"

    @property
    def words(self) -> ActionWords:
        """The words the run's user lines are read with (lab.conversation.semantics.words_of)."""
        return words_of(self.tools.values())


DEFAULT = RunTools({BOOKING.name: BOOKING}, FROM_DEFAULT)


def of_run(twin: Iterable[Event] | None, conversation: Mapping[str, Any] | None = None) -> RunTools:
    """The run's tools: the first twin.conversation event, else conversation.json, else the booking's."""
    first = next((e for e in sorted(twin or [], key=lambda e: e.ms) if e.kind == EVENT_KIND and e.get("tools")), None)
    if first is not None:
        return RunTools(tools_from_json({"tools": first.get("tools")}), FROM_EVENT)
    if conversation and conversation.get("tools"):
        return RunTools(tools_from_json(conversation), FROM_FILE)
    return DEFAULT
