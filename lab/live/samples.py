"""What a live run's record says about each timed twin parameter: one sample per occurrence.

A live run folder holds what the client saw: `events.jsonl` (the client's own view, on the run's
clock), `frames.jsonl` (every server frame as the client received it, lab.record.frames) and
`run.json`. It has no twin.jsonl (no twin ran), so nothing here reads one: a twin run read the same
way gives what a live run would have given, never the twin's own account of its draws.

Clocks (shared/fidelity.md section 1). The twin starts a setup delay when the setup frame arrives;
the client's `resume.result` latency starts at connect_start, before TCP, TLS and the WebSocket
upgrade. So a setup figure is taken from `conn.setup_sent` (the setup frame leaving the client) to
the server's answer, which leaves one client <-> server round trip in, as the profile's figures do
(lab/twin/profiles/developer-api.yaml, its header). A record without `conn.setup_sent` (older
clients) falls back to `conn.open` (TCP and TLS up): the upgrade's round trip is then left in too,
and each sample says which base it used.

| parameter | one sample | from |
| --- | --- | --- |
| refuse_close_s | a resume closed by the server during setup: setup sent -> close | events |
| resume_setup_s | an accepted resume: setup sent -> setupComplete | events |
| new_setup_s | an initial or new-session connection: setup sent -> setupComplete | events |
| handle_update_delay_s | a new session's setupComplete -> its first sessionResumptionUpdate | frames (events if none) |
| resumed_handle_update_delay_s | the same on a resumed connection | frames (events if none) |
| tool_call_delay_s | the run's first typed request -> the first toolCall (no other line between) | events |
| response_reply_delay_s | a toolResponse sent -> the next turn's first audio on that connection | events |
| vad_onset_ms | a spoken line's first chunk -> ACTIVITY_START | events + frames |
| vad_end_s | a spoken line's last voiced chunk -> ACTIVITY_END | events + frames |

Values are in the parameter's own unit (seconds for `*_s`, ms for `*_ms`). Knows nothing of
profiles or statistics.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from lab.events import Event, read_events
from lab.record.frames import read_frames

REPLY_WINDOW_MS = 5000      # an answer later than this (or after the user spoke again) is another turn's
SERVER_CLOSE_NO_FRAME = 1006


@dataclass
class Record:
    """One run folder, as a live run leaves it."""
    path: Path
    scenario: str
    events: list[Event]
    frames: list[dict[str, Any]] | None      # None: the run recorded no frames.jsonl
    endpoint: str | None = None              # run.json's: live, or twin (then the figures are the twin's own)

    def conn_events(self, conn: Any) -> list[Event]:
        return [e for e in self.events if e.get("conn") == conn]


def read_record(run_dir: Path) -> Record:
    run_dir = Path(run_dir)
    meta: dict[str, Any] = {}
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        pass
    scn = meta.get("scenario")
    name = scn.get("name") if isinstance(scn, dict) else scn
    p = run_dir / "events.jsonl"
    events = sorted(read_events(p), key=lambda e: e.ms) if p.is_file() else []
    fp = run_dir / "frames.jsonl"
    frames = sorted(read_frames(fp), key=lambda f: f.get("ms", 0)) if fp.is_file() else None
    return Record(run_dir, str(name or run_dir.name), events, frames, meta.get("endpoint"))


@dataclass(frozen=True)
class Sample:
    value: float            # in the parameter's unit
    run: str
    base: str = ""          # the start point, where more than one is possible


@dataclass
class Connection:
    conn: Any
    purpose: str | None = None
    open_ms: float | None = None
    sent_ms: float | None = None        # conn.setup_sent
    setup_ms: float | None = None       # conn.setup_complete
    closed: Event | None = None

    @property
    def base(self) -> tuple[float, str] | None:
        if self.sent_ms is not None:
            return self.sent_ms, "setup sent"
        if self.open_ms is not None:
            return self.open_ms, "socket up"
        return None


def connections(rec: Record) -> list[Connection]:
    out: dict[Any, Connection] = {}
    for e in rec.events:
        c = e.get("conn")
        if c is None or not e.kind.startswith("conn."):
            continue
        d = out.setdefault(c, Connection(c))
        if e.kind == "conn.open" and d.open_ms is None:
            d.purpose, d.open_ms = e.get("purpose"), e.ms
        elif e.kind == "conn.setup_sent" and d.sent_ms is None:
            d.sent_ms = e.ms
        elif e.kind == "conn.setup_complete" and d.setup_ms is None:
            d.setup_ms = e.ms
        elif e.kind == "conn.closed" and d.closed is None:
            d.closed = e
    return list(out.values())


def _scale(unit: str) -> float:
    return 1 / 1000.0 if unit == "s" else 1.0


def _setup(rec: Record, purposes: tuple[str, ...], unit: str) -> list[Sample]:
    out = []
    for c in connections(rec):
        if c.purpose in purposes and c.setup_ms is not None and c.base is not None:
            t, base = c.base
            out.append(Sample((c.setup_ms - t) * _scale(unit), rec.path.name, base))
    return out


def refusals(rec: Record, unit: str = "s") -> list[Sample]:
    out = []
    for c in connections(rec):
        e = c.closed
        if (c.purpose == "resume" and c.setup_ms is None and e is not None and e.get("during") == "setup"
                and e.get("by") == "server" and e.get("code") not in (None, SERVER_CLOSE_NO_FRAME)
                and c.base is not None):
            t, base = c.base
            out.append(Sample((e.ms - t) * _scale(unit), rec.path.name, base))
    return out


def resumed_setups(rec: Record, unit: str = "s") -> list[Sample]:
    return _setup(rec, ("resume",), unit)


def new_setups(rec: Record, unit: str = "s") -> list[Sample]:
    return _setup(rec, ("initial", "new"), unit)


def _handle_updates(rec: Record, purposes: tuple[str, ...], unit: str) -> list[Sample]:
    purpose = {c.conn: c.purpose for c in connections(rec)}
    firsts: dict[Any, dict[str, float]] = {}
    if rec.frames is not None:
        pairs = ((f.get("conn"), f.get("kind"), f.get("ms")) for f in rec.frames)
        names = {"setupComplete": "setup", "sessionResumptionUpdate": "update"}
        base = "frames"
    else:
        pairs = ((e.get("conn"), e.kind, e.ms) for e in rec.events)
        names = {"conn.setup_complete": "setup", "handle.update": "update"}
        base = "events"
    for conn, kind, ms in pairs:
        if kind in names and ms is not None:
            firsts.setdefault(conn, {}).setdefault(names[kind], ms)
    return [Sample((d["update"] - d["setup"]) * _scale(unit), rec.path.name, base)
            for conn, d in firsts.items()
            if purpose.get(conn) in purposes and "setup" in d and "update" in d and d["update"] >= d["setup"]]


def handle_updates_new(rec: Record, unit: str = "s") -> list[Sample]:
    return _handle_updates(rec, ("initial", "new"), unit)


def handle_updates_resumed(rec: Record, unit: str = "s") -> list[Sample]:
    return _handle_updates(rec, ("resume",), unit)


def tool_calls(rec: Record, unit: str = "s") -> list[Sample]:
    """The run's first toolCall after a typed line, with no other line between: a reissue or a late
    call after a stop is another parameter's."""
    last_say = None
    for e in rec.events:
        if e.kind == "user.say":
            last_say = e
        elif e.kind == "tool.call":
            if last_say is not None and last_say.get("mode") == "text" and last_say.get("conn") == e.get("conn"):
                return [Sample((e.ms - last_say.ms) * _scale(unit), rec.path.name)]
            return []
    return []


def replies_to_responses(rec: Record, unit: str = "s") -> list[Sample]:
    out = []
    pending: Event | None = None
    for e in rec.events:
        if e.kind == "tool.response" and e.get("sent") is not False:
            pending = e
        elif e.kind == "user.say":
            pending = None
        elif (pending is not None and e.kind == "model.audio" and e.get("first") and e.get("conn") == pending.get("conn")):
            if e.ms - pending.ms <= REPLY_WINDOW_MS:
                out.append(Sample((e.ms - pending.ms) * _scale(unit), rec.path.name))
            pending = None
    return out


def _activity(f: dict[str, Any]) -> str | None:
    va = (f.get("msg") or {}).get("voiceActivity") or {}
    return va.get("voiceActivityType") or va.get("type")


def _vad(rec: Record, which: str, unit: str) -> list[Sample]:
    if rec.frames is None:
        return []
    acts = [f for f in rec.frames if f.get("kind") == "voiceActivity" and _activity(f) == which]
    says = [e for e in rec.events if e.kind == "user.say" and e.get("mode") == "speech"]
    out = []
    for i, say in enumerate(says):
        until = says[i + 1].ms if i + 1 < len(says) else float("inf")
        start = say.ms
        if which == "ACTIVITY_END":
            if say.get("voiced_ms") is None:
                continue
            start = say.ms + float(say["voiced_ms"])
        hit = next((f for f in acts if f.get("conn") == say.get("conn") and say.ms <= f["ms"] < until), None)
        if hit is not None and hit["ms"] >= start:
            out.append(Sample((hit["ms"] - start) * _scale(unit), rec.path.name))
    return out


def vad_onsets(rec: Record, unit: str = "ms") -> list[Sample]:
    return _vad(rec, "ACTIVITY_START", unit)


def vad_ends(rec: Record, unit: str = "s") -> list[Sample]:
    return _vad(rec, "ACTIVITY_END", unit)


@dataclass(frozen=True)
class Measure:
    parameter: str
    what: str                       # one sample, in words
    clock: str                      # where it starts and ends
    take: Callable[[Record, str], list[Sample]]
    observed_by: tuple[str, ...] = field(default=())

    @property
    def unit(self) -> str:
        return "ms" if self.parameter.endswith("_ms") else "s"

    def samples(self, records: Iterable[Record]) -> list[Sample]:
        return [s for r in records for s in self.take(r, self.unit)]


SETUP_CLOCK = "the setup frame leaving the client -> the server's answer arriving (one round trip left in)"
MEASURES: tuple[Measure, ...] = (
    Measure("refuse_close_s", "a resume closed by the server during setup", SETUP_CLOCK, refusals,
            ("b1-silent-loss", "b2-path-return", "r1-idle-abort-immediate", "r2-freeze")),
    Measure("resume_setup_s", "an accepted resume's setupComplete", SETUP_CLOCK, resumed_setups,
            ("r1-idle-abort-immediate", "b2-path-return", "r2-freeze")),
    Measure("new_setup_s", "an initial or new session's setupComplete", SETUP_CLOCK, new_setups, ("control",)),
    Measure("handle_update_delay_s", "a new session's first sessionResumptionUpdate",
            "setupComplete received -> sessionResumptionUpdate received", handle_updates_new, ("control",)),
    Measure("resumed_handle_update_delay_s", "a resumed connection's first sessionResumptionUpdate",
            "setupComplete received -> sessionResumptionUpdate received", handle_updates_resumed,
            ("r1-idle-abort-immediate",)),
    Measure("tool_call_delay_s", "the run's first typed request answered by a toolCall",
            "the client's send of the text -> toolCall received (one round trip left in)", tool_calls, ("control",)),
    Measure("response_reply_delay_s", "a toolResponse answered by speech",
            "the client's send of the toolResponse -> the first audio received", replies_to_responses, ("control",)),
    Measure("vad_onset_ms", "a spoken line's ACTIVITY_START",
            "the line's first chunk sent -> ACTIVITY_START received (wall time)", vad_onsets, ("control-speech",)),
    Measure("vad_end_s", "a spoken line's ACTIVITY_END",
            "the line's last voiced chunk sent -> ACTIVITY_END received (wall time)", vad_ends, ("control-speech",)),
)
