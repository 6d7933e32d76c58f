"""When an app client has started: its first connection to the endpoint, waited for with a limit.

A framework app (LiveKit's worker, pipecat's pipeline, ADK's runner) spends seconds on its imports
and its framework's own set-up before it dials, longer on a loaded machine. The scenario's clock
(its steps hung on `start` with a `plus`, and its duration) must not run during that: a step
`{at: start, plus: 5}` means five seconds into the app's conversation, not into its imports. So
the client's start (lab/clients/command.py) returns only once the twin saw the app's first
connection; the agent starts the timeline when the client's start returns.

`first_connection(connected, exited, timeout_s)` races the three ways a start ends: the twin saw a
connection (`connected` set), the app exited before that, or the limit passed. Pure asyncio: the
caller supplies the event and the process's wait.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable

# the longest an app may take from its start to its first connection. A LiveKit app on this
# machine under a load of 6-7 took more than 20 s (docs/matrix.md); the orchestrator lets an
# agent outlive its duration by 120 s, so the limit leaves room for the run and its stop.
CONNECT_TIMEOUT_S = 90.0
# after the app exits, the twin's record is read once more before "never connected" is decided:
# a connection the twin logged just before the exit is still the app's (the tail polls every 20 ms)
EXIT_SETTLE_S = 0.2

CONNECTED, EXITED, TIMED_OUT = "connected", "exited", "timed out"


@dataclass(frozen=True)
class Start:
    outcome: str            # CONNECTED | EXITED | TIMED_OUT
    waited_s: float         # from the wait's start to its outcome
    rc: int | None = None   # the app's exit code when it EXITED

    def error_line(self, timeout_s: float) -> str | None:
        """The one line a start that is not CONNECTED ends the run with (without the app's output)."""
        if self.outcome == EXITED:
            return f"the client command exited before it ever connected (exit {self.rc})"
        if self.outcome == TIMED_OUT:
            return (f"the client command did not connect to the endpoint within {timeout_s:.0f} s of "
                    "starting")
        return None


async def first_connection(connected: asyncio.Event, exited: Awaitable[int],
                           timeout_s: float = CONNECT_TIMEOUT_S, settle_s: float = EXIT_SETTLE_S) -> Start:
    """Wait for the app's first connection, its exit, or `timeout_s`, whichever comes first. A
    connection wins a tie with an exit: the app reached the twin, and its exit is the run's to judge."""
    began = time.monotonic()
    conn_task = asyncio.ensure_future(connected.wait())
    exit_task = asyncio.ensure_future(exited)
    try:
        done, _ = await asyncio.wait({conn_task, exit_task}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if conn_task in done or connected.is_set():
            return Start(CONNECTED, time.monotonic() - began)
        if exit_task in done:
            try:
                await asyncio.wait_for(connected.wait(), settle_s)
                return Start(CONNECTED, time.monotonic() - began)
            except asyncio.TimeoutError:
                return Start(EXITED, time.monotonic() - began, rc=exit_task.result())
        return Start(TIMED_OUT, time.monotonic() - began)
    finally:
        conn_task.cancel()
        if not exit_task.done():
            exit_task.cancel()
