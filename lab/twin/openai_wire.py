"""The OpenAI Realtime wire (GA): the upgrade, client events in, server events out, and nothing of
what they mean to a session (lab.twin.openai_session).

- the upgrade: `GET /v1/realtime?model=M` with `Authorization: Bearer KEY`. The key is not refused at
  the HTTP level: a bad one is accepted and then answered on the socket (an `error`, then a close; the
  profile's openai_bad_key_*), so `check_upgrade` only says what it saw;
- client events: one JSON object per text frame with a `type` among the GA protocol's eleven
  (md L8-9); anything else raises ClientError with the error event it earns;
- server events: one builder per event, each with its own `event_id`; items and responses as the
  SDK's types spell them (openai-python `types/realtime/*`).

Ids (`event_`, `item_`, `resp_`, `sess_`, `call_`) come from a random generator the caller passes, so
a seeded twin writes the same ids every run. Pure: no sockets, no clock, no profile.
"""
from __future__ import annotations

import json
import random
import re
import secrets
import string
from typing import Any
from urllib.parse import parse_qs

from lab.twin.wire import KEY_MISSING, KEY_OK, KEY_WRONG, Upgrade, _header

ROUTE = "/v1/realtime"
# The eleven client events of the GA protocol (md L8-9; openai-python RealtimeClientEvent)
CLIENT_EVENTS = ("session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
                 "input_audio_buffer.clear", "output_audio_buffer.clear", "conversation.item.create",
                 "conversation.item.delete", "conversation.item.retrieve", "conversation.item.truncate",
                 "response.create", "response.cancel")

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"        # the error type of the server's own failure (md L28)
SERVER_ERROR = "server_error"

# ---------------------------------------------------------------------------------------------
# The upgrade


def check_upgrade(path: str, headers: Any, api_key: str | None) -> Upgrade:
    """404 for any path but /v1/realtime; else accepted, with what the key was (KEY_OK, KEY_MISSING,
    KEY_WRONG; "" when the twin has no key to check) for the session room to answer on the socket.
    The route carries the model because the shell hands the core only the route and the key, and
    OpenAI names the model in the URL (Gemini in its setup frame)."""
    raw_path, _, query = (path or "/").partition("?")
    p = re.sub(r"/{2,}", "/", raw_path or "/").rstrip("/")
    if p != ROUTE:
        return Upgrade(404, "not found")
    model = (parse_qs(query).get("model") or [""])[0]
    route = f"{ROUTE.lstrip('/')}?model={model}"
    if not api_key:
        return Upgrade(None, "", route)
    auth = _header(headers, "authorization") or ""
    scheme, _, token = auth.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return Upgrade(None, "", route, "", KEY_MISSING)
    ok = secrets.compare_digest(token.strip().encode(), api_key.encode())
    return Upgrade(None, "", route, "authorization", KEY_OK if ok else KEY_WRONG)


def model_of(route: str) -> str:
    """The model an upgrade's route named ("" when the URL gave none)."""
    return route.partition("?model=")[2]


# ---------------------------------------------------------------------------------------------
# Client events


class ClientError(Exception):
    """A client event the server answers with an `error` event (the session stays open)."""

    def __init__(self, code: str | None, message: str, param: str | None = None, event_id: str | None = None,
                 kind: str = INVALID_REQUEST):
        super().__init__(message)
        self.code, self.message, self.param, self.event_id, self.kind = code, message, param, event_id, kind


def load_event(data: bytes | str) -> tuple[str, dict]:
    """(type, event) of one client frame; ClientError for what the server refuses. The wording of
    these errors is an assumption (no record of the real service's): the codes follow the REST API's
    (invalid_json, missing_required_parameter, invalid_value)."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ClientError("invalid_json", "The server could not parse the event as JSON.") from None
    if not isinstance(obj, dict):
        raise ClientError("invalid_json", "An event must be a JSON object.")
    event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ClientError("missing_required_parameter", "Missing required parameter: 'type'.", "type", event_id)
    if kind not in CLIENT_EVENTS:
        raise ClientError("invalid_value", f"Invalid value: '{kind[:64]}'. Supported values are: "
                          + ", ".join(f"'{k}'" for k in CLIENT_EVENTS) + ".", "type", event_id)
    return kind, obj


# ---------------------------------------------------------------------------------------------
# Ids and server events

_ALNUM = string.ascii_letters + string.digits


def new_id(prefix: str, rng: random.Random) -> str:
    """An id as the service spells them: a prefix and 20 letters or digits (its exact length: assumption)."""
    return prefix + "".join(rng.choice(_ALNUM) for _ in range(20))


class Events:
    """Builds server events, each with a fresh event_id."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def event(self, kind: str, **fields: Any) -> dict:
        return {"type": kind, "event_id": new_id("event_", self.rng), **fields}

    def error(self, code: str | None, message: str, param: str | None = None, event_id: str | None = None,
              kind: str = INVALID_REQUEST) -> dict:
        """md L28: {type: error, event_id, error: {type, code, message, param, event_id}}; the
        inner event_id names the client event that caused it."""
        return self.event("error", error={"type": kind, "code": code, "message": message, "param": param,
                                          "event_id": event_id})


def session_object(sid: str, model: str, config: dict) -> dict:
    """The session as session.created / session.updated carry it (RealtimeSessionCreateRequest)."""
    return {"type": "realtime", "object": "realtime.session", "id": sid, "model": model, **config}


def message_item(item_id: str, role: str, content: list[dict], status: str = "completed") -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "message", "status": status, "role": role,
            "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments}


def response_object(rid: str, status: str, output: list[dict], modalities: list[str],
                    details: dict | None = None, usage: dict | None = None, metadata: dict | None = None) -> dict:
    """RealtimeResponse: status in_progress at response.created; completed | cancelled at response.done.
    `metadata`: what the client's response.create attached (RealtimeResponseCreateParams.metadata, carried
    on RealtimeResponse.metadata in the SDK's types); a client may match its request to the response by it."""
    return {"id": rid, "object": "realtime.response", "status": status, "status_details": details,
            "output": output, "output_modalities": modalities, "conversation_id": None, "usage": usage,
            "metadata": metadata}


def rate_limits(requests: tuple[int, int], tokens: tuple[int, int]) -> list[dict]:
    """(limit, remaining) of each; reset_seconds: assumption (one minute windows)."""
    return [{"name": "requests", "limit": requests[0], "remaining": requests[1], "reset_seconds": 60.0},
            {"name": "tokens", "limit": tokens[0], "remaining": tokens[1], "reset_seconds": 60.0}]


def arguments_json(args: dict) -> str:
    """A call's arguments as the service sends them: a JSON string."""
    return json.dumps(args, separators=(",", ":"))


def output_value(output: Any) -> Any:
    """A function_call_output's `output` (a string, usually JSON) as the conversation engine reads a
    tool's response: the parsed JSON, else the string itself."""
    if isinstance(output, str):
        try:
            return json.loads(output)
        except ValueError:
            return output
    return output


# ---------------------------------------------------------------------------------------------
# Input audio: the session's audio.input.format (SDK RealtimeAudioFormats): audio/pcm (16-bit PCM,
# "Always 24000"), audio/pcmu (G.711 u-law) or audio/pcma (G.711 A-law), at 8 kHz as G.711 is

PCM_RATE = 24000
G711_RATE = 8000


def _ulaw(byte: int) -> int:
    u = ~byte & 0xFF
    magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 7)
    return 0x84 - magnitude if u & 0x80 else magnitude - 0x84


def _alaw(byte: int) -> int:
    a = byte ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    magnitude = (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
    return magnitude if a & 0x80 else -magnitude


# each code's 16-bit little-endian sample (ITU-T G.711's expansion)
_G711 = {"audio/pcmu": [_ulaw(b).to_bytes(2, "little", signed=True) for b in range(256)],
         "audio/pcma": [_alaw(b).to_bytes(2, "little", signed=True) for b in range(256)]}


def input_format(audio_input: Any) -> str:
    """The input format's type a session's `audio.input` names (audio/pcm when it names none)."""
    fmt = audio_input.get("format") if isinstance(audio_input, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    return kind if kind in _G711 else "audio/pcm"


def input_pcm(kind: str, data: bytes) -> tuple[bytes, int]:
    """An input_audio_buffer.append's audio as (16-bit little-endian PCM, its rate)."""
    table = _G711.get(kind)
    if table is None:
        return data, PCM_RATE
    return b"".join(table[b] for b in data), G711_RATE


def encode(frame: dict) -> str:
    """A server event as one text frame (the service sends JSON text frames: assumption, the SDK
    reads either)."""
    return json.dumps(frame, separators=(",", ":"))


__all__ = ["CLIENT_EVENTS", "ClientError", "Events", "KEY_MISSING", "KEY_OK", "KEY_WRONG", "ROUTE",
           "check_upgrade", "load_event", "model_of"]
