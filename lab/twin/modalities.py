"""Which input modalities a client message carries, and what a connection or session has carried.

The session room records them (twin.jsonl's `twin.conn.end` names each connection's and its session's
modalities) because one rule depends on the history: 002, a resumed session that ever carried both
microphone audio and video frames later fails with 1007. Read from the message's shape only (no
base64 decoding: the turn room decodes, and refuses what is malformed); a blob's modality follows
the turn room's reading: its mime type, and a `video` field is video unless its mime says audio.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

AUDIO, VIDEO, TEXT = "audio", "video", "text"


@dataclass(frozen=True)
class Media:
    """What one client message carried."""
    kinds: frozenset[str]
    stream_end: bool = False        # realtimeInput.audioStreamEnd


NONE = Media(frozenset())


def _of_mime(mime: Any, default: str) -> str | None:
    m = str(mime or default).lower()
    if m.startswith("audio/"):
        return AUDIO
    if m.startswith("image/") or m.startswith("video/"):
        return VIDEO
    return None


def _blob_kind(blob: Any, where: str) -> str | None:
    if not isinstance(blob, dict):
        return None
    mime = blob.get("mimeType")
    if where == "video":
        return AUDIO if str(mime or "").lower().startswith("audio/") else VIDEO
    return _of_mime(mime, "audio/pcm" if where == "audio" else "image/jpeg")


def media_of(kind: str, body: Any) -> Media:
    """The modalities of one parsed client message (camelCase body, as lab.twin.wire normalises it)."""
    if not isinstance(body, dict):
        return NONE
    if kind == "realtimeInput" and len(body) == 1 and "audio" in body:
        # a microphone chunk, most of what a stream sends: only its audio field can say anything
        k = _blob_kind(body["audio"], "audio")
        return NONE if k is None else _media(frozenset((k,)), False)
    kinds: set[str | None] = set()
    stream_end = False
    if kind == "realtimeInput":
        kinds.add(_blob_kind(body.get("audio"), "audio"))
        kinds.add(_blob_kind(body.get("video"), "video"))
        chunks = body.get("mediaChunks") or []
        for ch in chunks if isinstance(chunks, list) else [chunks]:
            kinds.add(_blob_kind(ch, "mediaChunks"))
        if isinstance(body.get("text"), str) and body["text"].strip():
            kinds.add(TEXT)
        stream_end = bool(body.get("audioStreamEnd"))
    elif kind == "clientContent":
        turns = body.get("turns") or []
        for t in turns if isinstance(turns, list) else []:
            parts = t.get("parts") if isinstance(t, dict) else None
            for part in parts if isinstance(parts, list) else []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("text"), str):
                    kinds.add(TEXT)
                if isinstance(part.get("inlineData"), dict):
                    kinds.add(_of_mime(part["inlineData"].get("mimeType"), ""))
    kinds.discard(None)
    return _media(frozenset(kinds), stream_end)     # type: ignore[arg-type]


@functools.lru_cache(maxsize=64)
def _media(kinds: frozenset[str], stream_end: bool) -> Media:
    """One shared Media per value (it is frozen): a stream's every chunk carries the same."""
    return Media(kinds, stream_end)


# what a microphone chunk carries (lab.twin.wire.mic_chunk's message): media_of's value for it
MIC = _media(frozenset((AUDIO,)), False)


@dataclass(slots=True)
class Carried:
    """What a connection (or a whole session) has carried so far."""
    kinds: set[str] = field(default_factory=set)
    last_video_at: float | None = None
    stream_ended: bool = False      # an audioStreamEnd came after the last audio chunk

    def note(self, m: Media, now: float) -> None:
        self.kinds |= m.kinds
        if VIDEO in m.kinds:
            self.last_video_at = now
        if AUDIO in m.kinds:
            self.stream_ended = False
        if m.stream_end:
            self.stream_ended = True

    @property
    def audio_and_video(self) -> bool:
        return AUDIO in self.kinds and VIDEO in self.kinds

    def names(self) -> list[str]:
        return sorted(self.kinds)
