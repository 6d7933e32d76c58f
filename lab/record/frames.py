"""Every run's server frames, recorded without secrets, and turned back into a replay script.

Record format (`frames.jsonl`, one JSON object per line, written as frames arrive):

    {"conn": 1, "ms": 412.5, "dir": "in", "kind": "setupComplete", "msg": {...}}
    {"conn": 1, "ms": 430.1, "dir": "in", "kind": "sessionResumptionUpdate",
     "msg": {"sessionResumptionUpdate": {"newHandle": "<handle>", "resumable": true}}}
    {"conn": 1, "ms": 9000.0, "dir": "close", "kind": "close", "code": 1011, "reason": "..."}

- `conn` numbers the connection as in events.jsonl; `ms` is the run clock (ms since run start).
- `kind` is the message's top-level key (setupComplete, serverContent, toolCall,
  toolCallCancellation, sessionResumptionUpdate, goAway, usageMetadata), or "close".
- `msg` is the server message as JSON (the SDK's `model_dump(by_alias=True, exclude_none=True)`
  or the raw frame) with every handle replaced by the placeholder `<handle>`; inline audio data is
  replaced by its length (`"<audio N bytes>"`) unless `keep_audio=True`. Keys never appear: the
  client does not receive them.

`replay_script(records)` turns a record into the steps a twin could serve, per connection:
`{"conn", "after_ms" (since that connection's first frame), "send": msg}` or `{"close": code,
"reason"}`. `materialize(step, handle)` puts the twin's own handle back in place of the
placeholder. Nothing here opens a socket.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

PLACEHOLDER = "<handle>"
HANDLE_FIELDS = ("newHandle", "new_handle", "handle")
KNOWN_KINDS = ("setupComplete", "serverContent", "toolCall", "toolCallCancellation", "sessionResumptionUpdate",
               "goAway", "usageMetadata")


def sanitize(msg: Any, keep_audio: bool = False) -> Any:
    """A deep copy of `msg` with handles replaced by the placeholder (and audio by its length)."""
    if isinstance(msg, dict):
        out = {}
        for k, v in msg.items():
            if k in HANDLE_FIELDS and isinstance(v, str) and v:
                out[k] = PLACEHOLDER
            elif (k == "data" and isinstance(v, (str, bytes)) and not keep_audio
                  and ("mimeType" in msg or "mime_type" in msg)):  # an inline audio part
                out[k] = f"<audio {len(v)} bytes>"
            else:
                out[k] = sanitize(v, keep_audio)
        return out
    if isinstance(msg, list):
        return [sanitize(v, keep_audio) for v in msg]
    return msg


def kind_of(msg: dict[str, Any]) -> str:
    for k in KNOWN_KINDS:
        if k in msg:
            return k
    return next(iter(msg), "unknown") if msg else "unknown"


class FrameRecorder:
    """Append-only frames.jsonl writer (flushed per line, like events.jsonl)."""

    def __init__(self, path: Path | str, keep_audio: bool = False):
        self.path = Path(path)
        self.keep_audio = keep_audio
        self._fh = open(self.path, "a", buffering=1)

    def frame(self, conn: int, ms: float, msg: Any) -> dict[str, Any]:
        """One server frame: a raw JSON frame, a dict, or the SDK's parsed message."""
        if hasattr(msg, "model_dump"):
            msg = msg.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(msg, (str, bytes)):
            msg = json.loads(msg)
        rec = {"conn": conn, "ms": round(ms, 3), "dir": "in", "kind": kind_of(msg), "msg": sanitize(msg, self.keep_audio)}
        self._fh.write(json.dumps(rec) + "\n")
        return rec

    def close_frame(self, conn: int, ms: float, code: int | None, reason: str = "",
                    by: str | None = None) -> dict[str, Any]:
        """The connection's end; `by` (server, client, abnormal) lets a replay repeat only the server's."""
        rec = {"conn": conn, "ms": round(ms, 3), "dir": "close", "kind": "close", "code": code, "reason": reason or ""}
        if by:
            rec["by"] = by
        self._fh.write(json.dumps(rec) + "\n")
        return rec

    def close(self) -> None:
        self._fh.close()


def read_frames(path: Path | str) -> list[dict[str, Any]]:
    """Records from frames.jsonl; a half-written last line is skipped."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def replay_script(records: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Per connection, the frames to send in order, each with its delay from the first one."""
    by_conn: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: (r.get("conn", 0), r.get("ms", 0))):
        steps = by_conn.setdefault(r.get("conn", 0), [])
        t0 = steps[0]["_t"] if steps else r.get("ms", 0)
        step: dict[str, Any] = {"conn": r.get("conn", 0), "after_ms": round(r.get("ms", 0) - t0, 3), "_t": t0}
        if r.get("kind") == "close":
            step["close"], step["reason"] = r.get("code"), r.get("reason", "")
            if r.get("by"):
                step["by"] = r["by"]     # who closed: a replay repeats only the server's closes
        else:
            step["send"] = r.get("msg", {})
        steps.append(step)
    for steps in by_conn.values():
        for s in steps:
            s.pop("_t", None)
    return by_conn


def materialize(step: dict[str, Any], handle: str) -> dict[str, Any]:
    """The step with the placeholder replaced by a real (twin-issued) handle."""
    def put(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: (handle if k in HANDLE_FIELDS and v == PLACEHOLDER else put(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [put(v) for v in x]
        return x
    return put(copy.deepcopy(step))

