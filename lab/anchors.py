"""The anchors a timeline step may hang on: each defined once, with the event that fires it.

A step's `at:` names one anchor (or a list that must all have fired). The scenario loader refuses a
name this module does not know; the agent waits for `predicate(name)` to hold for an event of the
run's record. A predicate sees the event, the record so far (`lab.events.EventLog`) and the run's
loss time (the agent's `loss` event, None before it).

The loss: the agent writes exactly one `loss` event, at the first fault start or the first action
that cuts the path (lab.actions), whichever comes first. Its `cuts_path` says whether the path was
cut (blackhole, reject, abort, close, freeze) or only degraded (random `loss`, `netem`): a degraded
path still gives loss-relative figures, measured from the fault's start. A path-cutting action after
an earlier loss (b2's `close` after the blackhole) is not a second loss. The report's metrics read
that one event and nothing else.

`step:<id>` fires when the earlier step with that id is done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lab.conversation import intents
from lab.events import Event, EventLog

STEP_PREFIX = "step:"

def is_stop(text: object) -> bool:
    """The user's line withdraws what was asked (lab.conversation.intents: the one vocabulary the twin's
    model and the report share)."""
    return intents.is_stop(text)

Predicate = Callable[[Event, EventLog, "float | None"], bool]


@dataclass(frozen=True)
class Anchor:
    name: str
    description: str
    fires: Predicate


def _kind(kind: str) -> Predicate:
    return lambda e, log, loss_ms: e.kind == kind


def _recovered(e: Event, log: EventLog, loss_ms: float | None) -> bool:
    return loss_ms is not None and e.ms >= loss_ms and (
        (e.kind == "resume.result" and bool(e.get("ok"))) or e.kind == "session.restored")


# the twin's word for a response that says the call's effect is done (lab.conversation.engine's DONE:
# the twin reads every response's status into it, the studies' spelling)
DONE_STATUS = "booked"


def _committed(e: Event, log: EventLog, loss_ms: float | None) -> bool:
    """The backend's first commit; for an app that executes its tools itself (nothing of the lab's
    backend in the record), the first side-effecting call the twin saw answered done, or, in a
    conversation whose tools only read (`only_reads`), the first call's answer."""
    if e.kind == "backend.commit":
        return True
    if e.kind != "tool.response" or log.find("backend.request"):
        return False
    if e.get("side_effect") is True:
        return e.get("status") == DONE_STATUS
    # a conversation whose tools only read has no commit to wait for: the first answer is what was asked
    first = next(iter(log.find("tool.call")), None)
    return (e.get("only_reads") is True and e.get("sent") is not False and first is not None
            and first.get("id") == e.get("id"))


def _answered(e: Event, log: EventLog, loss_ms: float | None) -> bool:
    if e.kind != "model.text":
        return False
    says = log.find("user.say")
    return bool(says) and e.ms > says[-1].ms


ANCHORS: dict[str, Anchor] = {a.name: a for a in (
    Anchor("start", "the run starts (the client is about to connect)", _kind("run.start")),
    Anchor("setup_complete", "the first session's setupComplete", _kind("conn.setup_complete")),
    Anchor("tool_call", "the model issues its first tool call", _kind("tool.call")),
    Anchor("commit", "the backend commits the first booking (an app with tools of its own: the twin sees the "
           "first side-effecting call answered done; tools that only read: the first answer)", _committed),
    Anchor("first_audio", "the first chunk of model audio",
           lambda e, log, loss_ms: e.kind == "model.audio" and bool(e.get("first"))),
    Anchor("loss", "the run's loss: the first fault start or path-cutting action", _kind("loss")),
    Anchor("detected", "the client detects the loss", _kind("loss.detected")),
    Anchor("recovered", "a session is usable again after the loss (resume accepted or fallback restored)",
           _recovered),
    Anchor("answered", "the model answered the last line said", _answered),
    Anchor("stop", "the user said stop (the first user.say that withdraws the booking)",
           lambda e, log, loss_ms: e.kind == "user.say" and is_stop(e.get("text"))),
)}


def is_known(name: object, step_ids: set[str] | frozenset[str] = frozenset()) -> bool:
    """A named anchor, or step:<id> of a step in `step_ids`."""
    if not isinstance(name, str):
        return False
    return name in ANCHORS or (name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX):] in step_ids)


def known_names(step_ids: set[str] | frozenset[str] = frozenset()) -> list[str]:
    return sorted(ANCHORS) + [STEP_PREFIX + s for s in sorted(step_ids)]


def predicate(name: str) -> Predicate:
    """What the agent waits for. A name the loader let through is always known here."""
    if name.startswith(STEP_PREFIX):
        sid = name[len(STEP_PREFIX):]
        return lambda e, log, loss_ms: e.kind == "step" and e.get("id") == sid
    return ANCHORS[name].fires
