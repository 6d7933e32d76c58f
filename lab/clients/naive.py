"""The naive client: what most apps do. After a loss it resumes with its handle, one attempt per
second for `resume_for_s` (60 by default), and never falls back to a new session. After a silent
loss that the server still holds, every attempt is refused and the user is never told (the study's
"plain resume loop": 118 of 118 refused).
"""
from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from lab.clients.connection import SRC, Connection
from lab.clients.sdk import SdkClient


class NaiveClient(SdkClient):
    name = "naive"
    DEFAULTS = {
        **SdkClient.DEFAULTS,
        "ping_interval_s": 0.5,
        "lost_after_s": 2.0,
        "resume_interval_s": 1.0,
        "resume_for_s": 60.0,
    }

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._loop_task: asyncio.Task | None = None

    def on_loss(self, c: Connection, cause: str) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = self.spawn(self._resume_loop(c), name="naive-loop")

    async def _resume_loop(self, lost: Connection) -> None:
        t0 = time.monotonic()
        every, for_s = float(self.p["resume_interval_s"]), float(self.p["resume_for_s"])
        k = 0           # the next slot
        made = 0        # the attempts made (a slot an attempt ran into is skipped, not made)
        while self.current is lost:
            at = t0 + k * every
            if at - t0 >= for_s:
                self.log.write("resume.gave_up", src=SRC, conn=lost.n, attempts=made,
                               after_ms=round((time.monotonic() - t0) * 1000, 1))
                return
            if at > time.monotonic():
                await asyncio.sleep(at - time.monotonic())
            k += 1
            if self.current is not lost:
                return
            made += 1
            c = await self.attempt_resume("loop")
            if c is not None:
                await self.accept_resume(c)
                return
            # one attempt per second: the next whole slot (a slot an attempt ran into is skipped)
            k = max(k, math.ceil((time.monotonic() - t0) / every))
