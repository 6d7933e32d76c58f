"""The run's single record: an append-only events.jsonl on one clock, plus an in-process bus.

Every part of a run (client, faults, backend, orchestrator) writes here. Each line is flushed as it
is written, so a run killed half-way leaves a readable record. Each event carries the wall time
(`t`, CLOCK_REALTIME, the same clock as the pcap's timestamps) and `ms` since the run started, so
an event and its packets line up in Wireshark.

The bus side lets the orchestrator anchor a fault to a protocol event ("1.0 s after the tool call")
with `await log.wait_for("tool.call")`.

Secrets never reach a record: `redact_handle` turns a resumption handle into its length and a short
hash, and `EventLog.write` refuses any field named like a key or a raw handle.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    """

    def __init__(self, path: Path | str | None = None, t0: float | None = None):
        self.t0 = time.time() if t0 is None else t0
        self.path = Path(path) if path else None
        self._fh = open(self.path, "a", buffering=1) if self.path else None
        self.events: list[Event] = []
        self._waiters: list[tuple[Callable[[Event], bool], asyncio.Future]] = []
        self._listeners: list[Callable[[Event], None]] = []

    def now_ms(self) -> float:
        return (time.time() - self.t0) * 1000.0

    def write(self, kind: str, src: str = "lab", **data: Any) -> Event:
        bad = FORBIDDEN_FIELDS.intersection(data)
        if bad:
            raise ValueError(f"refusing to record secret-looking field(s) {sorted(bad)} in event {kind!r}")
        t = time.time()
        ev = Event(kind=kind, t=t, ms=(t - self.t0) * 1000.0, src=src, data=data)
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
