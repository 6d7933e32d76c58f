"""The run's single record: an append-only events.jsonl on one clock, plus an in-process bus.

Every part of a run (client, faults, backend, orchestrator) writes here. Each line is flushed as it
is written, so a run killed half-way leaves a readable record. Each event carries the wall time
(`t`, CLOCK_REALTIME, the same clock as the pcap's timestamps) and `ms` since the run started, so
an event and its packets line up in Wireshark.

The bus side lets the orchestrator anchor a fault to a protocol event ("1.0 s after the tool call")
with `await log.wait_for("tool.call")`.

Secrets never reach a record: `redact_handle` turns a resumption handle into its length and a short
hash, and `EventLog.write` refuses any field named like a key or a raw handle.

The kinds a record may hold are defined once, in `EVENT_KINDS` (name -> who writes it and its
fields); docs/DESIGN.md's table is a summary of it. `EventLog.write` refuses a kind that is not
there but sits in one of the lab's own namespaces (`conn.clsoed`, `twin.refuze`), so a misspelling
fails at the first test that reaches it (and tests/unit/test_event_kinds.py checks every literal
kind in lab/ without running it). A kind in another namespace (a user's own client writing
`myclient.retry`) is recorded as it is: a production run never dies on a kind the lab does not own.
The twin's `twin.*` kinds are listed too, so the twin's own record is checked the same way.
"""
from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable



@dataclass(frozen=True)
class EventKind:
    writer: str                     # who writes it: agent, client, backend, twin
    fields: tuple[str, ...]         # the fields its writers set (besides t, ms, src, kind)
    about: str = ""


def _k(writer: str, fields: str, about: str = "") -> EventKind:
    return EventKind(writer, tuple(fields.split()), about)


EVENT_KINDS: dict[str, EventKind] = {
    # the agent: the run and its timeline
    "run.start": _k("agent", "scenario client duration endpoint speech client_cmd",
                    "client_cmd: the app run as the client (--client-cmd, a framework client)"),
    "run.end": _k("agent", "status error not_reached bookings", "status ok | error | interrupted"),
    "step": _k("agent", "id what note", "a timeline step done"),
    "step.error": _k("agent", "id error unaskable", "a step that raised; the run goes on (unaskable: the client "
                                                     "action an app cannot be made to do)"),
    "fault.apply": _k("agent", "name spec path", "path kernel | userspace for a kind with two (netem)"),
    "fault.clear": _k("agent", "name at_exit"),
    "action": _k("agent", "what", "a scripted action (lab.actions)"),
    "network.switch": _k("agent", "from to old_ip new_ip t_made t_broken",
                         "the client moved between access links (lab.topology.router.Router.switch)"),
    "loss": _k("agent", "how cuts_path",
               "the run's one loss (lab.anchors): the first fault start or path-cutting action; how is "
               "fault:<kind> or action:<name>, cuts_path false when the path only degraded (random loss, netem)"),
    # the client under test
    "client.params": _k("client", "client params"),
    "client.error": _k("client", "conn error task"),
    "client.connected": _k("client", "conn waited_ms",
                           "an app client's first connection, waited_ms after its launch: the scenario's "
                           "clock (steps on start, the duration) runs from here (lab/clients/app_start.py)"),
    "conn.open": _k("client", "conn purpose local remote session", "purpose initial | resume | new"),
    "conn.setup_sent": _k("client", "conn",
                          "the setup frame left the client: the server's setup delays count from its arrival"),
    "conn.setup_complete": _k("client", "conn setup_ms purpose created_ms"),
    "conn.closed": _k("client", "conn code reason by how during", "by server | client | abnormal"),
    "conn.go_away": _k("client", "conn time_left"),
    "video.start": _k("client", "conn fps"),
    "video.stop": _k("client", "conn frames", "frames: made by the camera since the client started"),
    "user.audio_stream_end": _k("client", "conn sent"),
    "handle.update": _k("client", "conn resumable handle_len handle_sha"),
    "loss.detected": _k("client", "conn silent_ms ack_silent_ms rto_ms rtt_ms unacked",
                        "the TCP fields when the client asks TCP as a witness (lab.clients.liveness)"),
    "loss.suspected": _k("client", "conn silent_ms ack_silent_ms rto_ms rtt_ms unacked",
                         "silent and TCP unacknowledged past the suspect limit; the session is kept"),
    "loss.cleared": _k("client", "conn after_ms", "a suspected connection was heard again"),
    "resume.attempt": _k("client", "attempt conn why"),
    "resume.result": _k("client", "attempt conn ok code reason latency_ms"),
    "resume.skip": _k("client", "reason why"),
    "resume.gave_up": _k("client", "conn attempts after_ms"),
    "fallback.start": _k("client", "conn note turns old_conn"),
    "fallback.new_failed": _k("client", "error"),
    "fallback.failed": _k("client", "conn"),
    "session.restored": _k("client", "conn note turns superseded"),
    "session.note": _k("client", "conn text sent"),
    # the session-manager client (lab.clients.session_manager, seed 004)
    "session.replay": _k("client", "conn messages", "the buffer resent first on a new connection"),
    "session.consumed": _k("client", "conn index kept", "an update's lastConsumedClientMessageIndex pruned the buffer"),
    "session.plain": _k("client", "reason", "transparent refused: plain resumption from here on"),
    "session.stopped": _k("client", "conn reason", "the manager stopped; later sends and receives raise this reason"),
    "tool.call": _k("client", "conn id name args side_effect"),
    "tool.response": _k("client", "conn id name status job sent replay side_effect only_reads",
                        "side_effect: the tool has one; only_reads: no tool of the conversation has one "
                        "(twin-observed, once the twin named the conversation's tools)"),
    "tool.withheld": _k("client", "conn id name"),
    "tool.cancellation": _k("client", "conn ids"),
    "guard.hold": _k("client", "id business_key grace_s", "the guard holds a call's side effect for its grace window"),
    "guard.cancel": _k("client", "id business_key job why", "the guard withheld or cancelled a side effect after a stop"),
    "guard.dedup": _k("client", "id business_key first_id", "the guard answered a repeated call from the first one"),
    "user.status": _k("client", "conn status text", "a status the client told the user from the backend"),
    "user.say": _k("client", "conn text line mode voiced_ms",
                   "mode text | speech; voiced_ms: where its speech ends, before the quiet tail (lab.speech.voiced_ms)"),
    "user.say.failed": _k("client", "conn line at_ms"),
    "user.replay": _k("client", "conn line how",
                      "a spoken line cut by a loss (lab.clients.recovery): how audio | restore | lost"),
    "user.heard": _k("client", "conn text start_ms end_ms interrupted", "24 kHz playback model"),
    "user.transcript": _k("client", "conn text"),
    "model.audio": _k("client", "conn bytes first", "first only on a turn's first chunk"),
    "model.text": _k("client", "conn text", "output transcription of one turn"),
    "model.interrupted": _k("client", "conn text"),
    "model.turn_complete": _k("client", "conn"),
    # the fake booking backend (the ground truth)
    "backend.request": _k("backend", "business_key job call_id slot commit_after_s"),
    "backend.commit": _k("backend", "business_key job call_id slot"),
    "backend.cancel": _k("backend", "business_key job call_id slot why", "a pending job cancelled (the guard)"),
    "tool.dedup": _k("backend", "id business_key job state"),
    # the twin's own record (twin.jsonl)
    "twin.start": _k("twin", "profile port tls overrides"),
    "twin.http_refuse": _k("twin", "status reason path"),
    "twin.error": _k("twin", "conn timer error"),
    "twin.conn.open": _k("twin", "conn route peer"),
    "twin.conn.end": _k("twin", "conn how session age_ms idle_ms speaking dead modalities session_modalities",
                        "how close_frame | eof | server_timeout | ...; modalities: audio, video, text carried"),
    "twin.av_resume": _k("twin", "conn session mitigations helped_by fails_after",
                         "002: a session with audio+video history resumed; the mitigations the twin saw"),
    "twin.setup": _k("twin", "conn resume handle_len handle_sha route model"),
    "twin.resume_hang": _k("twin", "conn session since_ms",
                           "a resume left without setupComplete or close (resume_hang_s, fidelity §8 F11)"),
    "twin.refuse": _k("twin", "conn session code reason why close_in_ms release_in_ms"),
    "twin.bad_input": _k("twin", "conn session code reason why"),
    "twin.accept": _k("twin", "conn session resume setup_ms"),
    # transparent resumption (lab.twin.transparent): verdict owed (with the count a resume must
    # resend), ok, or the wrong replay (resent_consumed, gap, duplicate, new_input_first)
    "twin.replay": _k("twin", "conn session verdict owed index"),
    "twin.handle": _k("twin", "conn session handle_len handle_sha"),
    "twin.freeze_close": _k("twin", "conn session idle_ms"),
    "twin.goaway": _k("twin", "conn time_left"),
    "twin.goaway_close": _k("twin", "conn"),
    "twin.fault": _k("twin", "name on", "a server fault switched at run time (the control channel)"),
    "twin.session_cap": _k("twin", "conn session audio_video age_ms",
                           "a session without context compression reached its cap"),
    "twin.restore": _k("twin", "conn session turns note plan"),
    "twin.vad": _k("twin", "conn session event line heard_ms", "heard_ms: audio time of an ended utterance"),
    "twin.user": _k("twin", "conn session source intent plan"),
    "twin.model": _k("twin", "conn session source text match plan tool args",
                     "one decision of the model: the user turn it matched (match: intent, by what, score) and why"),
    "twin.conversation": _k("twin", "session source name tools assumed",
                            "the conversation a session's model plays (semantics.EVENT_KIND); lines-only: built at setup"),
    "twin.interrupted": _k("twin", "conn session speaking"),
    "twin.say": _k("twin", "conn session text"),
    "twin.tool_call": _k("twin", "conn session id name args blocking"),
    "twin.tool_response": _k("twin", "conn session id name known status scheduling history",
                             "history (OpenAI): the output of a function_call the client wrote itself (replayed history); "
                             "a second answer only if the id was answered before"),
    "twin.client_event": _k("twin", "conn session type tools item role call_id",
                            "an OpenAI Realtime client event the twin received (audio appends are not recorded): "
                            "tools a session.update declares; item, role, call_id of a conversation.item.create"),
    "twin.error_event": _k("twin", "conn session code type param",
                           "an OpenAI Realtime `error` event the twin sent (the session stays open unless a close follows)"),
}

# The lab's own namespaces (the first word of each kind): an unknown kind in one of them is a
# misspelling and is refused; any other namespace belongs to a user's own client and is recorded.
LAB_NAMESPACES = frozenset(k.split(".")[0] for k in EVENT_KINDS)


def check_kind(kind: str) -> None:
    """Raise ValueError for a kind in the lab's namespaces that EVENT_KINDS does not define."""
    if kind in EVENT_KINDS or kind.split(".")[0] not in LAB_NAMESPACES:
        return
    near = difflib.get_close_matches(kind, EVENT_KINDS, n=3)
    raise ValueError(f"unknown event kind {kind!r}" + (f" (did you mean {', '.join(near)}?)" if near else "")
                     + "; the kinds are defined in lab.events.EVENT_KINDS")


# Field names that must never be written: a raw handle or an API key.
FORBIDDEN_FIELDS = frozenset({"handle", "new_handle", "newHandle", "api_key", "key", "apiKey"})


def redact_handle(handle: str | None) -> dict[str, Any]:
    """A handle as it may appear in a record: its length and the first 8 hex of its sha256."""
    if not handle:
        return {"handle_len": 0, "handle_sha": None}
    return {"handle_len": len(handle), "handle_sha": hashlib.sha256(handle.encode()).hexdigest()[:8]}


@dataclass
class Event:
    kind: str
    t: float
    ms: float
    src: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 6), "ms": round(self.ms, 3), "src": self.src, "kind": self.kind, **self.data}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Event":
        rest = {k: v for k, v in obj.items() if k not in ("t", "ms", "src", "kind")}
        return cls(kind=obj["kind"], t=obj["t"], ms=obj["ms"], src=obj.get("src", "?"), data=rest)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


class EventLog:
    """Append-only, flushed JSONL writer with an asyncio bus for anchors.

    `path=None` keeps events in memory only (unit tests). `t0` is the run's start on the wall clock;
    a child process that joins a run passes the parent's t0 so both write on the same `ms` scale.
    `keep=False`: a writer that never looks back (a served twin) keeps no event in memory, so a
    long-lived process does not grow with everything it ever recorded; `events` stays empty.

    A log that nothing reads (no file, keep=False, no subscriber or waiter: `lab twin serve`
    without --log) records nothing, so `write` returns None at once: no kind check, no field check,
    no Event. Every log that records something checks as strictly as ever, which is every log in
    tests and in a recorded run; `recording` says which a log is.
    """

    def __init__(self, path: Path | str | None = None, t0: float | None = None, keep: bool = True):
        self.t0 = time.time() if t0 is None else t0
        self.path = Path(path) if path else None
        self._fh = open(self.path, "a", buffering=1) if self.path else None
        self.events: list[Event] = []
        self._keep = keep
        self._waiters: list[tuple[Callable[[Event], bool], asyncio.Future]] = []
        self._listeners: list[Callable[[Event], None]] = []

    def now_ms(self) -> float:
        return (time.time() - self.t0) * 1000.0

    @property
    def recording(self) -> bool:
        """Whether a write reaches anything: the file, the kept events, a subscriber or a waiter."""
        return self._fh is not None or self._keep or bool(self._listeners) or bool(self._waiters)

    def write(self, kind: str, src: str = "lab", **data: Any) -> Event | None:
        """Record one event and return it; None from a log that records nothing (`recording`)."""
        if self._fh is None and not (self._keep or self._listeners or self._waiters):
            return None
        check_kind(kind)
        bad = FORBIDDEN_FIELDS.intersection(data)
        if bad:
            raise ValueError(f"refusing to record secret-looking field(s) {sorted(bad)} in event {kind!r}")
        t = time.time()
        ev = Event(kind=kind, t=t, ms=(t - self.t0) * 1000.0, src=src, data=data)
        if self._keep:
            self.events.append(ev)
        if self._fh:
            self._fh.write(json.dumps(ev.to_json(), default=str) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno()) if kind in ("run.start", "run.end") else None
        for fn in list(self._listeners):
            fn(ev)
        for pred, fut in list(self._waiters):
            if not fut.done() and pred(ev):
                fut.set_result(ev)
        self._waiters = [(p, f) for p, f in self._waiters if not f.done()]
        return ev

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        self._listeners.append(fn)

    def find(self, kind: str, **match: Any) -> list[Event]:
        return [e for e in self.events if e.kind == kind and all(e.data.get(k) == v for k, v in match.items())]

    async def wait_for(self, kind: str, timeout: float | None = None, after_ms: float | None = None,
                       **match: Any) -> Event:
        """The first event of `kind` (matching the given fields) at or after `after_ms`.

        An event already recorded counts, so an anchor set after the fact still fires.
        """
        def pred(e: Event) -> bool:
            return (e.kind == kind and (after_ms is None or e.ms >= after_ms)
                    and all(e.data.get(k) == v for k, v in match.items()))

        return await self.wait_until(pred, timeout)

    async def wait_until(self, pred: Callable[[Event], bool], timeout: float | None = None) -> Event:
        """The first event (already recorded or future) for which pred is true."""
        for e in self.events:
            if pred(e):
                return e
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append((pred, fut))
        return await asyncio.wait_for(fut, timeout)

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


def read_events(path: Path | str) -> list[Event]:
    """Read a possibly truncated events.jsonl: a half-written last line is skipped, not fatal."""
    out: list[Event] = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(Event.from_json(json.loads(line)))
            except (json.JSONDecodeError, KeyError):
                continue
    return out
