"""The twin's wire room: what goes over the WebSocket, and nothing of what it means to a session.

- the upgrade: routes (Developer API v1/v1beta/v1alpha, Constrained, Vertex) and the API key check;
- client frames: lenient parsing (snake_case or camelCase, base64 in either alphabet, padding
  optional) into a kind and a normalised body, and the bodies' shapes (`realtime_input`,
  `client_content`, `tool_response`) checked into small records; bad input raises BadInput with the
  reason the real server puts in its 1007;
- server frames: one builder per frame the twin sends, encoded as binary or text (`Wire.send`);
- close frames: the reason fitted to the 123 bytes a close frame can carry (`Wire.close`), UTF-8 safe.

Pure: no sockets, no clock, no session state, no profile file (the shell's `binary` flag and the
size limit come in as arguments).
"""
from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qs

import orjson

from lab.twin.io_actions import Close, Send

INVALID_ARGUMENT = "Request contains an invalid argument."
# RFC 6455 5.5: a control frame's payload is at most 125 bytes, two of them the close code
MAX_CLOSE_REASON_BYTES = 123

# ---------------------------------------------------------------------------------------------
# Routing and auth at the upgrade

ROUTE_RE = re.compile(
    r"/ws/(?:google\.ai\.generativelanguage\.(?P<ver>v1|v1beta|v1alpha)\.GenerativeService\."
    r"(?P<method>BidiGenerateContent(?:Constrained)?)"
    r"|(?P<vertex>google\.cloud\.aiplatform\.v1beta1\.LlmBidiService/BidiGenerateContent))$")


KEY_OK, KEY_MISSING, KEY_WRONG = "ok", "missing", "wrong"


@dataclass
class Upgrade:
    status: int | None          # None = accept; else the HTTP status to answer
    reason: str = ""
    route: str = ""             # "v1", "v1beta", "v1alpha", "v1alpha-constrained", "vertex"
    key_source: str = ""        # where the key came from (never the key itself)
    key: str = ""               # KEY_OK / KEY_MISSING / KEY_WRONG; "" when the twin needs no key


def api_version(route: str) -> str:
    """The API version a route serves, as the real server names it in a model-not-found reason."""
    return "v1beta1" if route == "vertex" else route.split("-")[0] or "v1beta"


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    get = getattr(headers, "get", None)
    if get is not None:
        v = get(name)
        if v is None and isinstance(headers, dict):
            for k, val in headers.items():
                if k.lower() == name.lower():
                    return val
        return v
    for k, val in headers:
        if k.lower() == name.lower():
            return val
    return None


def check_upgrade(path: str, headers: Any, api_key: str | None = None, http_refusal: bool = True) -> Upgrade:
    """Route an upgrade request: 404 for an unknown path. With a configured api_key the key is
    checked: with `http_refusal`, 401 when no key was sent and 403 when none matches; without it the
    upgrade succeeds and `key` says what the session room must close the setup with (the real
    service's way, fidelity §5). Keys are read from x-goog-api-key, ?key=, and Authorization:
    Token|Bearer. Double slashes and a path prefix are tolerated."""
    # not urlsplit: a request path "//ws/..." (what the SDK sends) would parse "ws" as a host
    raw_path, _, query = (path or "/").partition("?")
    p = re.sub(r"/{2,}", "/", raw_path or "/").rstrip("/")
    m = ROUTE_RE.search(p)
    if not m:
        return Upgrade(404, f"no Live API route at {raw_path!r}")
    if m.group("vertex"):
        route = "vertex"
    else:
        route = m.group("ver") + ("-constrained" if m.group("method").endswith("Constrained") else "")
    keys: list[tuple[str, str]] = []
    v = _header(headers, "x-goog-api-key")
    if v:
        keys.append(("x-goog-api-key", v.strip()))
    q = parse_qs(query).get("key")
    if q:
        keys.append(("query", q[0]))
    auth = _header(headers, "authorization")
    if auth:
        scheme, _, tok = auth.strip().partition(" ")
        if scheme.lower() in ("token", "bearer") and tok.strip():
            keys.append(("authorization", tok.strip()))
    if api_key:
        if not keys:
            return Upgrade(401, "missing API key", route) if http_refusal else Upgrade(None, "", route, "", KEY_MISSING)
        for src, k in keys:
            if secrets.compare_digest(k.encode(), api_key.encode()):
                return Upgrade(None, "", route, src, KEY_OK)
        return Upgrade(403, "API key not valid", route) if http_refusal else \
            Upgrade(None, "", route, keys[0][0], KEY_WRONG)
    return Upgrade(None, "", route, keys[0][0] if keys else "")


# ---------------------------------------------------------------------------------------------
# Client frames: parsing and normalisation

TOP_LEVEL = ("setup", "clientContent", "realtimeInput", "toolResponse", "contextUpdate")
# BidiGenerateContentSetup's fields (google-genai LiveClientSetup, camelCase): any other closes 1007
SETUP_FIELDS = frozenset({"model", "generationConfig", "systemInstruction", "tools", "realtimeInputConfig",
                          "sessionResumption", "contextWindowCompression", "inputAudioTranscription",
                          "outputAudioTranscription", "proactivity", "explicitVadSignal", "safetySettings",
                          "labels", "historyConfig", "avatarConfig"})
# Values below these keys are user data (function args, JSON schemas): their keys stay as sent.
OPAQUE = frozenset({"args", "response", "parameters", "parametersJsonSchema", "responseJsonSchema",
                    "labels", "partialArgs"})


class BadInput(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@functools.lru_cache(maxsize=1024)
def camel(key: str) -> str:
    """snake_case -> camelCase (cached: the same few dozen keys arrive in every frame)."""
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def normalise(obj: Any) -> Any:
    """camelCase every key at every level (both spellings are accepted), except user data."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            ck = camel(k) if isinstance(k, str) else k
            # a leaf is itself: no call for it (a microphone chunk's every frame has two)
            out[ck] = normalise(v) if isinstance(v, (dict, list)) and ck not in OPAQUE else v
        return out
    if isinstance(obj, list):
        return [normalise(x) for x in obj]
    return obj


_B64_OK = re.compile(r"^[A-Za-z0-9+/\-_]*={0,2}$")


def b64decode_any(s: Any, where: str = "data") -> bytes:
    """Standard or URL-safe base64, padding optional."""
    if not isinstance(s, str):
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), expected a base64 string")
    try:   # the common case (what the SDK sends: standard alphabet, padded) in one C call; the
        # same check as b64decode(validate=True), which would first copy the string into bytes
        return binascii.a2b_base64(s, strict_mode=True)
    except (binascii.Error, ValueError):
        pass   # whitespace, URL-safe, unpadded or bad: the lenient path below decides
    t = "".join(s.split())
    if not _B64_OK.match(t) or len(t.rstrip("=")) % 4 == 1:
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed")
    t = t.rstrip("=").replace("-", "+").replace("_", "/")
    t += "=" * (-len(t) % 4)
    try:
        return base64.b64decode(t, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(f"Invalid value at '{where}' (TYPE_BYTES), Base64 decoding failed") from None


def parse_client_frame(data: bytes | str, max_bytes: int | None = None) -> tuple[str, dict]:
    """(kind, body) of one client message, kind one of TOP_LEVEL; raises BadInput."""
    return message_of(load_client_frame(data, max_bytes))


def load_client_frame(data: bytes | str, max_bytes: int | None = None) -> Any:
    """One client message's JSON, its size checked first; raises BadInput."""
    # a str's isascii() is a flag lookup: an ASCII frame (every JSON frame the SDK sends) is counted
    # without encoding its ~4 KB again
    size = len(data) if not isinstance(data, str) or data.isascii() else len(data.encode())
    if max_bytes and size > max_bytes:
        raise BadInput(f"Request payload size exceeds the limit: {max_bytes} bytes.")
    try:
        return _loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadInput("Invalid JSON payload received. Unexpected token.") from None


def message_of(obj: Any) -> tuple[str, dict]:
    """(kind, body) of a client message's JSON (load_client_frame's), body camelCased; raises BadInput."""
    if not isinstance(obj, dict):
        raise BadInput("Invalid JSON payload received. Expected an object.")
    known = []
    for k in obj:
        ck = camel(k) if isinstance(k, str) else k
        if ck not in TOP_LEVEL:
            raise BadInput(f'Invalid JSON payload received. Unknown name "{k}": Cannot find field.')
        known.append((ck, obj[k]))
    if not known:
        raise BadInput(INVALID_ARGUMENT)
    if len(known) > 1:
        raise BadInput("Invalid JSON payload received. Only one of the message fields may be set.")
    kind, body = known[0]
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadInput(f"Invalid JSON payload received. Expected an object for '{kind}'.")
    if kind == "setup":
        for k in body:
            if not isinstance(k, str) or camel(k) not in SETUP_FIELDS:
                # the name as the client spelt it, as the real server echoes it
                raise BadInput(f'Invalid JSON payload received. Unknown name "{k}" at \'setup\': Cannot find field.')
    return kind, normalise(body)


MIC_WHERE = "realtime_input.audio.data"


def mic_chunk(obj: Any) -> tuple[dict, str, int] | None:
    """(its realtimeInput body as sent, base64 audio, sample rate) when a client message's JSON is exactly a microphone chunk, a
    realtimeInput with one audio blob of an audio mime type and nothing else, as a stream sends ten
    times a second; None for anything else. message_of() would read the same message as
    ("realtimeInput", {"audio": {"data": ..., "mimeType": ...}}) and Blob.audio_rate its rate: this
    is that reading without the copy, for the frame most of a stream is. The base64 is not checked
    here (b64decode_any, with MIC_WHERE, says what is wrong with it)."""
    if type(obj) is not dict or len(obj) != 1:
        return None
    body = obj.get("realtimeInput") or obj.get("realtime_input")
    if type(body) is not dict or len(body) != 1:
        return None
    audio = body.get("audio")
    if type(audio) is not dict:
        return None
    data = audio.get("data")
    mime = audio.get("mimeType", audio.get("mime_type"))
    if type(data) is not str or len(audio) != (1 if mime is None else 2):
        return None
    mime = _lower(mime) if type(mime) is str else "audio/pcm" if mime is None else None
    if mime is None or not mime.startswith("audio/"):
        return None
    return body, data, _rate_of(mime)


@functools.lru_cache(maxsize=64)
def _lower(mime: str) -> str:
    return mime.lower()


def _loads(data: bytes | str) -> Any:
    """json.loads at orjson's speed. What orjson refuses (NaN, Infinity, UTF-16, lone surrogates)
    goes to json.loads, so what is accepted and refused is unchanged. One difference: an integer past
    64 bits comes back a float (as the real server's proto JSON reads a Struct's numbers: doubles)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def encode_frame(frame: dict, binary: bool = True) -> bytes | str:
    """Compact JSON, byte for byte json.dumps': orjson when it takes the frame (not non-str keys or
    integers past 64 bits) and its output has none of what the two write differently (json.dumps
    escapes non-ASCII and DEL; below 1e-4 a float is 1e-05 there and 0.00001 or 1e-7 here; NaN is
    NaN there and null here)."""
    try:
        raw = orjson.dumps(frame)
    except orjson.JSONEncodeError:   # non-str keys, integers past 64 bits
        raw = json.dumps(frame, separators=(",", ":")).encode()
        return raw if binary else raw.decode()
    # a frame of ASCII strings, ints, bools and nulls only is written alike by both: no scan of the
    # output (an audio chunk's is ~20 KB of base64, and the scans cost 30x the encoding)
    if not _plain(frame) and (not raw.isascii() or b"\x7f" in raw or b"e-" in raw or b"0.0000" in raw
                              or b"null" in raw):
        raw = json.dumps(frame, separators=(",", ":")).encode()
    return raw if binary else raw.decode()


def _plain(obj: Any) -> bool:
    """No float and no string orjson and json.dumps write differently (non-ASCII, DEL) in `obj`.
    str.isascii() is a flag lookup, and the DEL search a memchr: cheap on a long base64 string.
    A walk with a stack, not recursion (this runs on every frame the twin sends); a type it does
    not know exactly (a subclass too) answers False, which only costs the output scan."""
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if t is str:
            if not o.isascii() or "\x7f" in o:
                return False
        elif t is dict:
            for k, v in o.items():
                if type(k) is not str or not k.isascii() or "\x7f" in k:
                    return False
                stack.append(v)
        elif t is list or t is tuple:
            stack.extend(o)
        elif not (o is None or t is bool or t is int):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Client bodies: their shapes, checked (what they mean is the turn room's business)


@dataclass(slots=True)
class Blob:
    where: str          # the field path, as the real server names it in a 1007
    mime: str           # lower-case
    data: bytes

    @property
    def audio_rate(self) -> int:
        return _rate_of(self.mime)


@functools.lru_cache(maxsize=64)
def _rate_of(mime: str) -> int:
    """The sample rate a mime type names (a stream sends the same one in every chunk)."""
    m = re.search(r"rate=(\d+)", mime)
    return int(m.group(1)) if m else 16000


@dataclass(slots=True)
class RealtimeInput:
    blobs: list[Blob] = field(default_factory=list)
    text: str | None = None
    activity_start: bool = False
    activity_end: bool = False      # activityEnd or audioStreamEnd


def realtime_input(body: dict) -> RealtimeInput:
    """The blobs decoded in the order audio, video, mediaChunks (the first bad one raises)."""
    blobs: list[Blob] = []
    audio, video, chunks = body.get("audio"), body.get("video"), body.get("mediaChunks")
    if isinstance(audio, dict):
        blobs.append(_blob("realtime_input.audio.data", audio, "audio/pcm"))
    if isinstance(video, dict):
        blobs.append(_blob("realtime_input.video.data", video, "image/jpeg"))
    if chunks:
        for i, ch in enumerate(chunks if isinstance(chunks, list) else [chunks]):   # the fuzz: a number crashed here
            if isinstance(ch, dict):
                blobs.append(_blob(f"realtime_input.media_chunks[{i}].data", ch, "image/jpeg"))
    text = body.get("text")
    return RealtimeInput(blobs, text if isinstance(text, str) and text.strip() else None,
                         body.get("activityStart") is not None,
                         body.get("activityEnd") is not None or bool(body.get("audioStreamEnd")))


def _blob(where: str, blob: dict, default_mime: str) -> Blob:
    data = b64decode_any(blob.get("data", ""), where)
    return Blob(where, str(blob.get("mimeType") or default_mime).lower(), data)


@dataclass
class ClientContent:
    turns: list[dict]
    turn_complete: bool
    texts: list[tuple[str, str]]    # (role, text) of every text part, in order
    mimes: list[str]                # the mime type of every inline blob, in order


def client_content(body: dict) -> ClientContent:
    turns = body.get("turns") or []
    if not isinstance(turns, list):
        raise BadInput("Invalid value at 'client_content.turns', expected a list")
    texts: list[tuple[str, str]] = []
    mimes: list[str] = []
    for t in turns:
        if not isinstance(t, dict):
            raise BadInput("Invalid value at 'client_content.turns', expected objects")
        for part in t.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("inlineData"), dict):
                blob = part["inlineData"]
                b64decode_any(blob.get("data", ""), "client_content.turns.parts.inline_data.data")
                mimes.append(str(blob.get("mimeType", "")).lower())
            if isinstance(part.get("text"), str):
                texts.append((str(t.get("role") or "user"), part["text"]))
    return ClientContent(turns, bool(body.get("turnComplete", False)), texts, mimes)


def has_roleless_turn(body: dict) -> bool:
    """A clientContent turn with no role (3.x models refuse it with 1007)."""
    turns = body.get("turns") or []
    return isinstance(turns, list) and any(isinstance(t, dict) and not t.get("role") for t in turns)


def model_name(setup: dict) -> str:
    """The model's short name: "models/X" and "projects/.../models/X" both give X."""
    m = str(setup.get("model") or "")
    return m.rsplit("models/", 1)[-1] if "models/" in m else m


def response_modalities(setup: dict) -> list[str]:
    gen_cfg = setup.get("generationConfig") or {}
    mods = gen_cfg.get("responseModalities") if isinstance(gen_cfg, dict) else None
    return [str(m).upper() for m in mods] if isinstance(mods, list) else []


def function_responses(body: dict) -> list[dict]:
    frs = body.get("functionResponses") or []
    if not isinstance(frs, list):
        raise BadInput("Invalid value at 'tool_response.function_responses', expected a list")
    return [fr for fr in frs if isinstance(fr, dict)]


# ---------------------------------------------------------------------------------------------
# Server frames


def setup_complete() -> dict:
    return {"setupComplete": {}}


def resumption_update(handle: str, last_consumed_index: int | None = None) -> dict:
    upd: dict = {"newHandle": handle, "resumable": True}
    if last_consumed_index is not None:
        upd["lastConsumedClientMessageIndex"] = str(last_consumed_index)   # int64 as a string
    return {"sessionResumptionUpdate": upd}


def unresumable_update() -> dict:
    """The server's "this session cannot be resumed now": no handle, resumable false."""
    return {"sessionResumptionUpdate": {"resumable": False}}


def go_away(time_left: str) -> dict:
    return {"goAway": {"timeLeft": time_left}}


def tool_call(call_id: str, name: str, args: dict) -> dict:
    return tool_calls([(call_id, name, args)])


def tool_calls(calls: list[tuple[str, str, dict]]) -> dict:
    """One toolCall with several functionCalls, all pending at once (protocol.md: a list)."""
    return {"toolCall": {"functionCalls": [{"id": i, "name": n, "args": a} for i, n, a in calls]}}


def audio_chunk(pcm: bytes, rate: int = 24000) -> dict:
    return {"serverContent": {"modelTurn": {"parts": [{"inlineData": {
        "mimeType": f"audio/pcm;rate={rate}", "data": _b64(pcm)}}]}}}


@functools.lru_cache(maxsize=32)
def _b64(pcm: bytes) -> str:
    """The twin's audio is a few cached tones (lab.twin.model.tone): each is encoded once."""
    return base64.b64encode(pcm).decode()


def output_transcription(text: str) -> dict:
    return {"serverContent": {"outputTranscription": {"text": text}}}


def input_transcription(text: str) -> dict:
    return {"serverContent": {"inputTranscription": {"text": text, "finished": True}}}


def interrupted() -> dict:
    return {"serverContent": {"interrupted": True}}


def generation_complete() -> dict:
    return {"serverContent": {"generationComplete": True}}


def turn_complete() -> dict:
    return {"serverContent": {"turnComplete": True}}


# ---- frames for the turn room's order ----

def input_transcription_piece(text: str) -> dict:
    """One piece of the user's words while they speak (the pieces join to the whole line)."""
    return {"serverContent": {"inputTranscription": {"text": text}}}


def voice_activity(kind: str, audio_offset_s: float | None = None) -> dict:
    """kind: ACTIVITY_START | ACTIVITY_END (the SDK renames the key `type`); audioOffset: where in
    the session's input audio it happened, a protobuf Duration as the records show it ("0.240s",
    "10s"; fidelity §8 F8)."""
    va: dict = {"type": kind}
    if audio_offset_s is not None:
        va["audioOffset"] = duration(audio_offset_s)
    return {"voiceActivity": va}


def duration(seconds: float) -> str:
    """A protobuf Duration in JSON: whole seconds bare ("10s"), else to the millisecond ("3.840s")."""
    ms = round(max(0.0, seconds) * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms / 1000:.3f}s"


def usage_metadata(prompt: dict[str, int], response: dict[str, int]) -> dict:
    """Token counts per modality (e.g. {"TEXT": 120, "AUDIO": 64}); merged into a turnComplete frame."""
    def details(counts: dict[str, int]) -> list[dict]:
        return [{"modality": m, "tokenCount": n} for m, n in counts.items() if n]
    p, r = sum(prompt.values()), sum(response.values())
    out: dict = {"promptTokenCount": p, "responseTokenCount": r, "totalTokenCount": p + r,
                 "promptTokensDetails": details(prompt)}
    if r:
        out["responseTokensDetails"] = details(response)
    return {"usageMetadata": out}


def fit_close_reason(reason: str, limit: int = MAX_CLOSE_REASON_BYTES) -> str:
    """The reason cut to `limit` UTF-8 bytes without splitting a character: websockets refuses a
    longer one ("control frame too long") and the connection would hang instead of closing."""
    raw = reason.encode("utf-8")
    if len(raw) <= limit:
        return reason
    return raw[:limit].decode("utf-8", errors="ignore")


class Wire:
    """Encodes the frames of one twin (binary or text frames, per the profile's frame_type)."""

    def __init__(self, binary: bool = True):
        self.binary = binary
        self._fixed: dict[str, tuple[dict, bytes | str]] = {}

    def send_fixed(self, conn: int, name: str, build: Callable[[], dict], at: float) -> Send:
        """send_plain() of a frame that is the same every time this twin sends it (a reply's audio
        chunk without transcript, generationComplete): built by `build` and encoded once, kept
        under `name`, so that each reply does not encode ~20 KB of the same base64 again. Every Send
        of it holds the same dict and bytes: a sent frame is never changed."""
        fixed = self._fixed.get(name)
        if fixed is None:
            frame = build()
            fixed = self._fixed[name] = (frame, self.send_plain(conn, frame, at).data)
        return Send(conn, fixed[1], fixed[0], at)

    def send(self, conn: int, frame: dict, at: float) -> Send:
        return Send(conn, encode_frame(frame, self.binary), frame, at)

    def send_plain(self, conn: int, frame: dict, at: float) -> Send:
        """send() for a frame whose builder makes it of ASCII strings, ints, bools and nulls only
        (an audio chunk without transcript, generationComplete, turnComplete with its usageMetadata:
        the tests hold each builder to it): orjson's bytes are json.dumps' already, so the check of
        encode_frame is skipped on the frames every reply sends."""
        raw = orjson.dumps(frame)
        return Send(conn, raw if self.binary else raw.decode(), frame, at)

    def close(self, conn: int, code: int, reason: str, at: float) -> Close:
        return Close(conn, code, fit_close_reason(reason), at)
