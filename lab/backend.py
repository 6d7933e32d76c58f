"""The fake booking backend: the ground truth for side effects in every run.

A client that receives a `book_slot(slot=...)` tool call asks the backend for a job at once. The
backend keys jobs by business key (the slot, normalised), not by call id: a second request for the
same slot, under any call id, gets the existing job back and is logged as `tool.dedup`. A job
commits `commit_after_s` after its first request (`backend.commit`), unless it is cancelled first
(`cancel()`, `backend.cancel`): the commit guard's grace window (001's follow-up). `dedup=False` is
the stop study's fake service: every request books, so a re-issued call books twice. Whatever the
model says, the verdict compares it with `status()` / `bookings()` here.

Pure asyncio, no I/O. The event log forbids a field named `key` (it is reserved for secrets), so
the business key is recorded as `business_key`.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

_FILLER = {"at", "the", "slot", "for", "on", "please", "a", "o'clock", "oclock"}


def business_key(slot: Any) -> str:
    """Normalise a slot so the same booking worded slightly differently maps to one key.

    Case, punctuation, filler words and the time's spelling are folded and the words sorted, so
    'Tomorrow 3pm', 'tomorrow at 3 p.m.' and 'the 3:00 PM slot tomorrow' all give '3pm tomorrow'.
    """
    s = str(slot if slot is not None else "").lower()
    s = re.sub(r"(\d{1,2}):00\b", r"\1", s)                 # 3:00 pm -> 3 pm
    s = re.sub(r"(\d{1,2})\s*([ap])\.?\s*m\b\.?", r"\1\2m", s)  # 3 p.m. / 3 pm -> 3pm
    s = re.sub(r"[^a-z0-9:]+", " ", s)
    words = [w for w in s.split() if w not in _FILLER]
    return " ".join(sorted(words))


@dataclass
class Job:
    id: str
    key: str
    slot: str
    call_id: str                      # the call id that created the job
    name: str = "book_slot"
    requested_ms: float = 0.0
    committed_ms: float | None = None
    call_ids: list[str] = field(default_factory=list)   # every call id that asked for it
    _done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _settled: asyncio.Event = field(default_factory=asyncio.Event, repr=False)   # committed or cancelled

    cancelled: bool = False

    @property
    def state(self) -> str:
        if self.cancelled:
            return "cancelled"
        return "booked" if self._done.is_set() else "pending"

    @property
    def booked(self) -> bool:
        return self._done.is_set()

    async def wait(self, timeout: float | None = None) -> "Job":
        """Until the job has committed."""
        await asyncio.wait_for(self._done.wait(), timeout)
        return self

    async def settled(self) -> "Job":
        """Until the job has committed or been cancelled."""
        await self._settled.wait()
        return self

    def result(self) -> dict[str, Any]:
        """The FunctionResponse payload for this job as it stands now."""
        if self.booked:
            return {"status": "booked", "job": self.id, "slot": self.slot}
        if self.cancelled:
            return {"status": "cancelled", "job": self.id, "slot": self.slot}
        return {"status": "pending", "job": self.id, "slot": self.slot}


def status_line(job: Job) -> str:
    """One side effect as a line the model can read."""
    what = "booked" if job.booked else ("cancelled" if job.cancelled else "still being processed")
    return f"System note: {job.name}(slot={job.slot!r}) -> {what} (job {job.id})"


class Backend:
    """Jobs by business key; commit after a delay; one line per side effect for a restore note."""

    def __init__(self, log: Any = None, commit_after_s: float = 4.0, dedup: bool = True):
        self.log = log
        self.commit_after_s = float(commit_after_s)
        self.dedup = dedup
        self._jobs: dict[str, Job] = {}          # job id -> job, in creation order
        self._by_key: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()
        self._commits: dict[str, asyncio.Task] = {}     # job id -> its scheduled commit
        self._n = 0

    def _write(self, kind: str, **data: Any) -> None:
        if self.log is not None:
            self.log.write(kind, src="backend", **data)

    def _now_ms(self) -> float:
        return self.log.now_ms() if self.log is not None else asyncio.get_running_loop().time() * 1000.0

    async def request(self, slot: Any, call_id: str, name: str = "book_slot") -> Job:
        """Ask for the booking of `slot` on behalf of tool call `call_id`; returns at once.

        Idempotent by business key: a repeated request returns the existing job (pending or booked).
        """
        key = business_key(slot)
        job = self._by_key.get(key) if self.dedup else None
        if job is not None:
            if call_id not in job.call_ids:
                job.call_ids.append(call_id)
            self._write("tool.dedup", id=call_id, business_key=key, job=job.id, state=job.state)
            return job
        self._n += 1
        job = Job(id=f"J{self._n}", key=key, slot=str(slot), call_id=call_id, name=name,
                  requested_ms=self._now_ms(), call_ids=[call_id])
        self._jobs[job.id] = job
        self._by_key.setdefault(key, job)
        self._write("backend.request", business_key=key, job=job.id, call_id=call_id, slot=job.slot,
                    commit_after_s=self.commit_after_s)
        t = asyncio.get_running_loop().create_task(self._commit_later(job))
        self._commits[job.id] = t
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return job

    async def _commit_later(self, job: Job) -> None:
        await asyncio.sleep(self.commit_after_s)
        self._commits.pop(job.id, None)
        job.committed_ms = self._now_ms()
        job._done.set()
        job._settled.set()
        self._write("backend.commit", business_key=job.key, job=job.id, call_id=job.call_id, slot=job.slot)

    def cancel(self, job_id: str, why: str = "") -> bool:
        """Cancel a job that has not committed (its commit never happens); False if it already did.

        The job keeps its business key, so a later request for the same slot gets the cancelled job
        back (with dedup on) instead of booking it anew."""
        job = self._jobs.get(job_id)
        if job is None or job.booked or job.cancelled:
            return False
        job.cancelled = True
        job._settled.set()
        t = self._commits.pop(job_id, None)
        if t is not None:
            t.cancel()
        self._write("backend.cancel", business_key=job.key, job=job.id, call_id=job.call_id, slot=job.slot, why=why)
        return True

    def job(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def job_for(self, slot: Any) -> Job | None:
        return self._by_key.get(business_key(slot))

    def status(self, key: str) -> str | None:
        """'pending' | 'booked' | 'cancelled' | None for a business key (or a raw slot, normalised here)."""
        job = self._by_key.get(key) or self._by_key.get(business_key(key))
        return job.state if job else None

    def ledger(self) -> list[dict[str, Any]]:
        """Every job, oldest first, as plain dicts (for reports and tests)."""
        return [{"job": j.id, "business_key": j.key, "slot": j.slot, "name": j.name, "call_id": j.call_id,
                 "call_ids": list(j.call_ids), "state": j.state, "requested_ms": j.requested_ms,
                 "committed_ms": j.committed_ms} for j in self._jobs.values()]

    def status_note(self) -> str:
        """One 'System note: ...' line per side effect, oldest first; '' when there is none."""
        return "\n".join(status_line(j) for j in self._jobs.values())

    def bookings(self) -> int:
        """How many bookings actually committed (the number a verdict checks against 1)."""
        return sum(1 for j in self._jobs.values() if j.booked)

    async def aclose(self) -> None:
        """Cancel commits still scheduled (end of a run)."""
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
