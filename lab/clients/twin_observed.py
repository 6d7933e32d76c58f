"""The twin's record (twin.jsonl) read as the lab's own events, for a client the lab cannot see into.

A black-box client (`--client-cmd`, lab/clients/command.py) writes no events of its own. The twin
logs every connection, setup, refusal, tool call and response by call id, and every line the model
said; `TwinObserver.feed(twin_event)` turns each into the client-side kinds the anchors, metrics and
expectations already read (lab.events.EVENT_KINDS), so `at: tool_call`, `all_resumes_refused` and
`told_truth` work unchanged. Every event written this way has src `twin-observed` and carries the
twin's own `twin_ms`.

| twin.jsonl | lab event(s) |
| --- | --- |
| twin.conn.open | (remembered: the client's address for flow()) |
| twin.setup | conn.open (purpose resume / initial / new); resume.attempt when it carries a handle |
| twin.accept | conn.setup_complete; resume.result ok for a resume; session.restored for a new session after the first |
| twin.refuse | (remembered: the close code and reason) |
| twin.conn.end | resume.result refused (code, reason) when a resume was refused; conn.closed (by server after a refusal, else by the client or abnormal, from how it ended) |
| twin.handle | handle.update |
| twin.goaway | conn.go_away |
| twin.conversation | (remembered: which tools have a side effect, lab.conversation.semantics) |
| twin.tool_call / twin.tool_response | tool.call / tool.response (the same call id; `side_effect` once known) |
| twin.say | model.text, then model.turn_complete (one line said = one turn, seen from the twin) |

Connection ids are the twin's, prefixed `t` (t1, t2 ...). Pure: no I/O but `tail()`.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.conversation.semantics import EVENT_KIND as CONVERSATION, tools_from_json

SRC = "twin-observed"

# how a connection ended (twin.conn.end's `how`) -> who ended it, as conn.closed's `by` says it
_BY = {"close_frame": "client", "eof": "abnormal"}


@dataclass
class _Conn:
    peer: tuple[str, int] | None = None
    purpose: str | None = None
    attempt: int | None = None
    refused: tuple[Any, Any] | None = None      # (code, reason) of a twin.refuse
    ended: bool = False


def parse_peer(peer: Any) -> tuple[str, int] | None:
    """'10.0.0.2:41234' (the twin's view of the client) -> ('10.0.0.2', 41234); None if unreadable."""
    if not isinstance(peer, str) or ":" not in peer:
        return None
    host, _, port = peer.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


@dataclass
class TwinObserver:
    """Maps twin.jsonl records to (kind, fields) lab events; remembers the open connections."""

    conns: dict[Any, _Conn] = field(default_factory=dict)
    attempts: int = 0
    sessions_accepted: int = 0
    # the tools with a side effect, from the twin's twin.conversation record (None until it came): an
    # app's own effect is known only by its tool, so `at: commit` can wait for one (lab.anchors)
    effects: frozenset[str] | None = None

    @staticmethod
    def conn_id(twin_conn: Any) -> str:
        return f"t{twin_conn}"

    def open_flow(self) -> tuple[str, int] | None:
        """The client's (address, port) of the newest connection the twin still holds open."""
        for c in reversed(list(self.conns.values())):
            if not c.ended and c.peer is not None:
                return c.peer
        return None

    def feed(self, rec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        kind, tc = rec.get("kind"), rec.get("conn")
        c = self.conns.setdefault(tc, _Conn()) if tc is not None else None
        conn = self.conn_id(tc)
        out: list[tuple[str, dict[str, Any]]] = []
        if kind == "twin.conn.open":
            c.peer = parse_peer(rec.get("peer"))
        elif kind == "twin.setup":
            if rec.get("resume"):
                c.purpose = "resume"
                self.attempts += 1
                c.attempt = self.attempts
            else:
                c.purpose = "initial" if self.sessions_accepted == 0 else "new"
            out.append(("conn.open", {"conn": conn, "purpose": c.purpose,
                                      "local": ":".join(map(str, c.peer)) if c.peer else None}))
            if c.attempt is not None:
                out.append(("resume.attempt", {"attempt": c.attempt, "conn": conn, "why": SRC}))
        elif kind == "twin.accept":
            out.append(("conn.setup_complete", {"conn": conn, "setup_ms": rec.get("setup_ms"),
                                                "purpose": c.purpose}))
            if c.attempt is not None:
                out.append(("resume.result", {"attempt": c.attempt, "conn": conn, "ok": True,
                                              "latency_ms": rec.get("setup_ms")}))
            elif self.sessions_accepted > 0:
                out.append(("session.restored", {"conn": conn, "note": "a new session, seen by the twin"}))
            self.sessions_accepted += 1
        elif kind == "twin.refuse":
            c.refused = (rec.get("code"), rec.get("reason"))
        elif kind == "twin.conn.end":
            c.ended = True
            code, reason = c.refused or (None, None)
            if c.refused and c.attempt is not None:
                # the app learns of a refusal from the close, not from the twin's decision before it
                out.append(("resume.result", {"attempt": c.attempt, "conn": conn, "ok": False,
                                              "code": code, "reason": reason}))
            by = "server" if c.refused else _BY.get(str(rec.get("how")), "abnormal")
            out.append(("conn.closed", {"conn": conn, "code": code, "reason": reason, "by": by,
                                        "how": rec.get("how")}))
        elif kind == "twin.handle":
            out.append(("handle.update", {"conn": conn, "resumable": True, "handle_len": rec.get("handle_len"),
                                          "handle_sha": rec.get("handle_sha")}))
        elif kind == "twin.goaway":
            out.append(("conn.go_away", {"conn": conn, "time_left": rec.get("time_left")}))
        elif kind == CONVERSATION and self.effects is None and rec.get("tools"):
            self.effects = frozenset(n for n, t in tools_from_json(rec).items() if t.side_effect)
        elif kind == "twin.tool_call":
            out.append(("tool.call", self._tool(rec, {"conn": conn, "id": rec.get("id"), "name": rec.get("name"),
                                                      "args": rec.get("args")})))
        elif kind == "twin.tool_response":
            out.append(("tool.response", self._tool(rec, {"conn": conn, "id": rec.get("id"), "name": rec.get("name"),
                                                          "status": rec.get("status")})))
        elif kind == "twin.say":
            out += [("model.text", {"conn": conn, "text": rec.get("text")}), ("model.turn_complete", {"conn": conn})]
        for _, fields in out:
            fields["twin_ms"] = rec.get("ms")
        return out

    def _tool(self, rec: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        if self.effects is not None:
            fields["side_effect"] = rec.get("name") in self.effects
            if not self.effects:
                fields["only_reads"] = True     # no tool of the conversation changes anything
        return fields


async def tail(path: Path, on_record: Callable[[dict[str, Any]], None], stop: asyncio.Event,
               poll_s: float = 0.02) -> None:
    """Call `on_record` for every complete line of `path` (created later is fine) until `stop` is
    set, then once more for what is left. A half-written last line waits for its newline."""
    pos, buf = 0, ""
    while True:
        stopping = stop.is_set()
        try:
            with open(path) as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
        except FileNotFoundError:
            chunk = ""
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            if line.strip():
                try:
                    on_record(json.loads(line))
                except json.JSONDecodeError:
                    continue
        if stopping:
            return
        try:
            await asyncio.wait_for(stop.wait(), poll_s)
        except asyncio.TimeoutError:
            pass
