"""The probe: the resume study's measuring harness, as a client.

It detects a loss with its own WebSocket pings (one every `ping_interval_s`, lost after
`lost_after_s` without a frame or a pong), then resumes with its handle on a policy: an attempt at
detection (`resume_at_detection`), then every `resume_every_s` (or at the explicit offsets
`resume_offsets_s`) for `resume_for_s`; after the first refusal of an episode one quick retry
`retry_after_refusal_s` later. Every attempt is a resume.attempt / resume.result pair with the close
code, reason and latency. On success it answers the call that was pending before the drop from its
own ledger (with the backend's status; if the job is still pending, as soon as it commits), unless
`answer_pending_after_resume` is false. It never falls back to a new session: if no resume works,
the user is never told (finding 3 of the study).

Scripted actions drive the rest: 'abort', 'close' (clean close of the current or the old lost
connection, waiting briefly for the echo), 'resume' (one attempt now, plus the quick retry after a
refusal if configured), 'reuse_old'. A connection the probe ended itself (abort, close) does not
start the policy: after those the scenario decides when to resume.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from lab.clients.connection import SRC, Connection
from lab.clients.schedule import ResumeSchedule
from lab.clients.sdk import SdkClient


class ProbeClient(SdkClient):
    name = "probe"
    DEFAULTS = {
        **SdkClient.DEFAULTS,
        "ping_interval_s": 0.5,
        "lost_after_s": 2.0,
        "resume_at_detection": True,
        "resume_every_s": 10.0,
        "resume_offsets_s": None,       # e.g. [0, 1.6, 4.1, 8.7] seconds after detection
        "resume_for_s": None,           # None: for the whole run
        "retry_after_refusal_s": None,  # e.g. 1.0
        "close_old_on_detect": False,
        "answer_pending_after_resume": True,
    }

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._policy: asyncio.Task | None = None

    def on_loss(self, c: Connection, cause: str) -> None:
        if cause == "closed:client":
            return                                   # its own scripted abort/close: the scenario drives
        if self._policy is not None and not self._policy.done():
            return
        self._policy = self.spawn(self._resume_policy(c, cause), name="probe-policy")

    def _schedule(self) -> ResumeSchedule:
        p = self.p
        return ResumeSchedule(at_detection=bool(p["resume_at_detection"]), every_s=float(p["resume_every_s"] or 0),
                              for_s=None if p["resume_for_s"] is None else float(p["resume_for_s"]),
                              retry_after_refusal_s=p["retry_after_refusal_s"],
                              offsets_s=p["resume_offsets_s"])

    async def _resume_policy(self, lost: Connection, cause: str) -> None:
        if self.p["close_old_on_detect"] and not lost.closed:
            self.spawn(lost.close(float(self.p["close_wait_s"])), name="probe-close-old")
        sched = self._schedule()
        t0 = time.monotonic()
        tries = 0
        while self.current is lost or (self.current is not None and not self.current.usable):
            at = sched.next_at(time.monotonic() - t0)
            if at is None:
                if tries:
                    self.log.write("resume.gave_up", src=SRC, conn=lost.n, attempts=tries,
                                   after_ms=round((time.monotonic() - t0) * 1000, 1))
                return
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.current is not lost:
                return                               # a scripted resume got there first
            if self._attempt_lock.locked():
                await asyncio.sleep(0.05)
                continue
            sched.attempted(at)
            tries += 1
            c = await self.attempt_resume("policy")
            if c is not None:
                await self.accept_resume(c)
                return
            sched.refused(time.monotonic() - t0)

    async def scripted_resume(self) -> Connection | None:
        c = await super().scripted_resume()
        retry = self.p["retry_after_refusal_s"]
        if c is None and retry is not None and self.current is not None and not self.current.usable:
            self.spawn(self._retry_once(float(retry)), name="probe-retry")
        return c

    async def _retry_once(self, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if self.current is not None and self.current.usable:
            return
        c = await self.attempt_resume("retry")
        if c is not None:
            await self.accept_resume(c)
