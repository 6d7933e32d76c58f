"""The client's own ledger of tool calls, by call id, across connections and sessions.

Pure (no sockets, no clock of its own): the client tells it what arrived, what was sent when, and
which pongs came back; it answers what is still owed to which session.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """One tool call as the client's own ledger keeps it, across connections and sessions."""
    id: str
    name: str
    args: dict[str, Any]
    conn: int                          # the connection it arrived on
    session: int                       # the session lineage (a resume keeps it, a fallback starts a new one)
    job: str | None = None             # the backend job that serves it
    result: dict[str, Any] | None = None   # the FunctionResponse payload, once there is one
    sent: list[tuple[int, float]] = field(default_factory=list)   # (conn, monotonic time) of each send
    confirmed: bool = False            # a pong for a ping sent after the response came back
    superseded: bool = False           # its session was replaced by a fallback: never answer it

    @property
    def owed(self) -> bool:
        """A result exists and the session has not been shown to have it."""
        return self.result is not None and not self.confirmed and not self.superseded


class ToolLedger:
    """Tool calls by call id across connections: what was asked, what is owed, what was delivered.

    A result counts as delivered on a connection only once a pong comes back for a ping sent after
    it (the server read the response before the ping). Anything else is still owed and is replayed,
    all of it, on the next connection of the same session.
    """

    def __init__(self) -> None:
        self.calls: dict[str, ToolCall] = {}

    def add(self, call: ToolCall) -> ToolCall:
        self.calls.setdefault(call.id, call)
        return self.calls[call.id]

    def get(self, call_id: str) -> ToolCall | None:
        return self.calls.get(call_id)

    def set_result(self, call_id: str, result: dict[str, Any]) -> ToolCall:
        c = self.calls[call_id]
        c.result = result
        return c

    def mark_sent(self, call_id: str, conn: int, at: float) -> None:
        self.calls[call_id].sent.append((conn, at))

    def confirm(self, conn: int, ping_sent_at: float) -> list[str]:
        """A pong arrived on `conn` for a ping sent at `ping_sent_at`: every response sent on that
        connection before then has reached the server. Returns the ids newly confirmed."""
        out = []
        for c in self.calls.values():
            if not c.confirmed and any(n == conn and t <= ping_sent_at for n, t in c.sent):
                c.confirmed = True
                out.append(c.id)
        return out

    def owed(self, session: int) -> list[ToolCall]:
        """Every result of `session` not yet shown delivered, in call order (the replay set)."""
        return [c for c in self.calls.values() if c.session == session and c.owed]

    def unanswered(self, session: int) -> list[ToolCall]:
        """Calls of `session` with no result yet (their job has not committed)."""
        return [c for c in self.calls.values() if c.session == session and c.result is None and not c.superseded]

    def supersede(self, session: int) -> list[ToolCall]:
        """The session was replaced by a fallback: its call ids must never be answered again."""
        out = [c for c in self.calls.values() if c.session == session and not c.superseded]
        for c in out:
            c.superseded = True
        return out
