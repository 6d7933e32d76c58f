"""What the run's side-effecting calls did, moment by moment, and how the lab knows it.

The truth a claim is judged against. Two sources, never mixed in one run:

- **the lab's backend** (`backend.request / commit / cancel`, lab/backend.py), the ground truth for
  every client that books through it (the lab's own clients, an app on $LAB_BACKEND_URL), and for
  every run folder with no conversation of its own (they were all judged so);
- **the twin's observation**, for an app that executes its tools itself (a refund in its own order
  table): a side-effecting call issued is under way; a response seen for its call id says done, or
  not done when its status says so (failed, cancelled, an error: as the twin read it), or still
  pending. That is what the app *told the model*, not the app's own ground truth, and every verdict
  line built on it says so (`EVIDENCE`).

    fx = of_run(events, twin, tools)        # Effects
    fx.truth_at(ms)                         # claims.BOOKED (done) / IN_PROGRESS / NOT_BOOKED
    fx.done                                 # the effects that happened: (ms, business key), in order

Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from lab.events import Event
from lab.report import claims
from lab.report.run_tools import DEFAULT, RunTools

BACKEND, TWIN = "backend", "twin"
EVIDENCE = {BACKEND: "the lab's backend",
            TWIN: "a twin observation (calls issued and the responses the app sent, with their status), "
                  "not the app's own record"}

# a tool response's status (twin.tool_response, as the twin's model read it) that says the effect did
# not happen, or is still under way; any other status, or none, says it is done (the twin's own
# reading: no status and no error is a success)
NOT_DONE_STATUS = ("not_booked", "not_done", "failed", "failure", "error", "cancelled", "canceled", "refused",
                   "rejected", "declined")
PENDING_STATUS = ("pending", "in_progress", "processing", "queued")


@dataclass(frozen=True)
class Done:
    ms: float
    key: Any                      # the business key, None when the record does not say it
    call_id: Any = None


@dataclass
class Effects:
    source: str                                               # BACKEND or TWIN
    tools: RunTools = DEFAULT
    requested: list[tuple[float, Any]] = field(default_factory=list)    # (ms, job or call id)
    done: list[Done] = field(default_factory=list)
    undone: list[tuple[float, Any]] = field(default_factory=list)       # (ms, job or call id): cancelled, failed

    @property
    def evidence(self) -> str:
        return EVIDENCE[self.source]

    def truth_at(self, ms: float) -> str:
        """The effect's state at `ms`: one done -> done; one asked and not undone -> in progress;
        else not done (nothing asked, or all of it undone)."""
        if any(d.ms <= ms for d in self.done):
            return claims.BOOKED
        undone = {j for t, j in self.undone if t <= ms}
        if any(t <= ms and j not in undone for t, j in self.requested):
            return claims.IN_PROGRESS
        return claims.NOT_BOOKED


def backend_key(e: Event) -> Any:
    """A backend event's business key. `key` itself is a forbidden field name in EventLog, so the
    backend may record it under another name; accept the usual ones."""
    for name in ("business_key", "bkey", "booking_key", "key", "slot"):
        if e.get(name) is not None:
            return e.get(name)
    return None


def from_backend(events: Iterable[Event], tools: RunTools = DEFAULT) -> Effects:
    evs = sorted(events, key=lambda e: e.ms)
    return Effects(BACKEND, tools,
                   requested=[(e.ms, e.get("job")) for e in evs if e.kind == "backend.request"],
                   done=[Done(e.ms, backend_key(e), e.get("call_id")) for e in evs if e.kind == "backend.commit"],
                   undone=[(e.ms, e.get("job")) for e in evs if e.kind == "backend.cancel"])


def response_state(status: Any) -> str:
    s = str(status or "").strip().lower()
    if s in NOT_DONE_STATUS:
        return claims.NOT_BOOKED
    if s in PENDING_STATUS:
        return claims.IN_PROGRESS
    return claims.BOOKED


def from_calls(calls: Iterable[Event], responses: Iterable[Event], tools: RunTools) -> Effects:
    """The effects as the calls and their responses show them (the twin's, or on record in a live run):
    each side-effecting call id once, from its first issue; its first response that settles it."""
    fx = Effects(TWIN, tools)
    keys: dict[Any, Any] = {}
    for c in sorted(calls, key=lambda e: e.ms):
        if tools.effect(c.get("name")) is not None and c.get("id") not in keys:
            keys[c.get("id")] = tools.key_of(c)
            fx.requested.append((c.ms, c.get("id")))
    settled: set = set()
    for r in sorted(responses, key=lambda e: e.ms):
        cid = r.get("id")
        if cid not in keys or cid in settled:
            continue
        state = response_state(r.get("status"))
        if state == claims.BOOKED:
            fx.done.append(Done(r.ms, keys[cid], cid))
        elif state == claims.NOT_BOOKED:
            fx.undone.append((r.ms, cid))
        if state != claims.IN_PROGRESS:
            settled.add(cid)
    return fx


def lab_client(events: Iterable[Event]) -> bool:
    """The run's client is one of the lab's own (run.start names it and no command): those book only
    through the lab's backend, so a run where such a client withheld every effect (the guard) leaves
    no backend record and is still judged by the backend, not by the calls the twin issued."""
    start = next((e for e in events if e.kind == "run.start"), None)
    return start is not None and start.get("client") is not None and not start.get("client_cmd")


def uses_backend(events: Iterable[Event], tools: RunTools) -> bool:
    """The lab's backend is the run's truth: it has a record in the run, the run's client is one of
    the lab's own, or the run has no conversation of its own (every such run was judged by it)."""
    return tools.default or any(e.kind.startswith("backend.") for e in events) or lab_client(events)


def of_run(events: list[Event], twin: list[Event] | None, tools: RunTools = DEFAULT) -> Effects:
    if uses_backend(events, tools):
        return from_backend(events, tools)
    src = twin if twin is not None else events
    kinds = ("twin.tool_call", "twin.tool_response") if twin is not None else ("tool.call", "tool.response")
    return from_calls([e for e in src if e.kind == kinds[0]], [e for e in src if e.kind == kinds[1]], tools)
