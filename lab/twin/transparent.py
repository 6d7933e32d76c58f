"""Transparent resumption on the twin: what a resumed client must resend, and whether it did.

The rule comes from seed 004 (the SessionManager guide), §3 and §5: the client numbers the messages
it sends on a connection from 1 (index 0 is the setup), the server's sessionResumptionUpdate says
the last index it consumed (`lastConsumedClientMessageIndex`, int64 as a string and only with
`transparent`, protocol.md §3), and after a reconnect the client resends every message after that
index, the first one as index 1 of the new connection, BEFORE anything else.

What "consumed" means on the real service is not recorded. Assumption: the twin consumes a message
when a handle update goes out after it; the update's index is the count of messages on that
connection so far, and the session a handle restores holds exactly those. Everything after it is
unconsumed: a resume with that handle must begin with those messages, in order, each once, before
any new input. Messages are compared by content (a fingerprint of the parsed frame), so identical
frames (two silent audio chunks) cannot be told apart: a skip among identical ones passes.

The wrong replays, by the first message that shows one (the `verdict` of a twin.replay record):

    resent_consumed   a message the handle already holds (a replay from index 0, a buffer never pruned)
    gap               a later unconsumed message while an earlier one was never resent
    duplicate         an unconsumed message resent twice
    new_input_first   a message the session never saw before the replay was complete

Pure bookkeeping: no sockets, clocks, frames or close codes (the session room acts on a verdict).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

OK = "ok"
WRONG_REPLAYS = ("resent_consumed", "gap", "duplicate", "new_input_first")


def fingerprint(kind: str, body: dict) -> str:
    """The content of one parsed client message, for comparing a resend with the original."""
    return hashlib.sha1(json.dumps([kind, body], sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class _Conn:
    session: str
    base: int           # the session history's position of this connection's message 1
    count: int = 0      # messages seen on this connection
    owed: int = 0       # unconsumed messages the resume must begin with (0: nothing left to check)
    judged: bool = False


@dataclass
class Replays:
    """Each session's message history (as the server saw it) and each handle's place in it."""
    _history: dict[str, list[str]] = field(default_factory=dict)
    _handle_at: dict[str, int] = field(default_factory=dict)    # handle -> messages it holds
    _conns: dict[int, _Conn] = field(default_factory=dict)

    def started(self, conn: int, session: str) -> None:
        """A new session on a transparent connection."""
        self._history[session] = []
        self._conns[conn] = _Conn(session, 0)

    def resumed(self, conn: int, session: str, handle: str) -> int | None:
        """A transparent resume accepted: the number of messages it owes, None when the handle was
        not issued on a transparent connection (nothing to check)."""
        at = self._handle_at.get(handle)
        hist = self._history.get(session)
        if at is None or hist is None:
            return None
        c = _Conn(session, at, owed=len(hist) - at)
        self._conns[conn] = c
        return c.owed

    def handle_issued(self, conn: int, handle: str, consumed_index: int) -> None:
        """A handle update went out on `conn` with lastConsumedClientMessageIndex = consumed_index."""
        c = self._conns.get(conn)
        if c is not None:
            self._handle_at[handle] = c.base + consumed_index

    def message(self, conn: int, kind: str, body: dict) -> dict | None:
        """One message on a transparent connection. The judgement of the replay when this message
        settles it ({"verdict": OK or one of WRONG_REPLAYS, "index", "owed"}), else None."""
        c = self._conns.get(conn)
        if c is None:
            return None
        hist = self._history[c.session]
        fp = fingerprint(kind, body)
        c.count += 1
        pos = c.base + c.count - 1          # where this message stands in the session's history
        owed_until = c.base + c.owed
        verdict = None
        if not c.judged and c.owed:
            if pos < owed_until and hist[pos] == fp:
                verdict = OK if pos + 1 == owed_until else None
            else:
                verdict = self._wrong(hist, c, pos, fp)
        if verdict in WRONG_REPLAYS:
            del hist[pos:]      # what the client sends from here on replaces what the server held
        if pos >= len(hist):    # not a resend of a message the history already holds
            hist.append(fp)
        if verdict is None:
            return None
        c.judged = True
        return {"verdict": verdict, "index": c.count, "owed": c.owed}

    @staticmethod
    def _wrong(hist: list[str], c: _Conn, pos: int, fp: str) -> str:
        unconsumed = hist[c.base:c.base + c.owed]
        if fp in hist[:c.base]:
            return "resent_consumed"
        if fp in unconsumed[pos - c.base + 1:]:
            return "gap"
        if fp in unconsumed[:pos - c.base]:
            return "duplicate"
        return "new_input_first"

    def ended(self, conn: int) -> None:
        self._conns.pop(conn, None)
