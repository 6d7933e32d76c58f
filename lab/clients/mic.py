"""A microphone for a black-box app: the scenario's spoken lines as 16 kHz PCM on a local socket.

An app under `--client-cmd` that takes audio connects to the Unix stream socket named in
$LAB_AUDIO_SOCKET and reads raw audio from it as it would from a sound card: signed 16-bit
little-endian mono at 16 kHz (the Live API's input format, $LAB_AUDIO_FORMAT says so), 100 ms per
chunk, in real time, for as long as it stays connected. Between the user's lines the microphone
hears digital silence, as an open microphone in a quiet room would; a line spoken by the scenario
(input: speech) is mixed in at the next chunk boundary. Every connected reader gets the same
stream from the moment it connects; there is no back-catalogue, as there is none on a real mic.

A reader that falls more than MAX_BACKLOG_S behind (it stopped reading) is dropped, so a stuck app
cannot make the lab's memory grow; the app sees its socket close, as a device that went away.

`MicStream` is the pure part (what the next 100 ms holds), `MicServer` the asyncio shell (the
socket, the real-time clock, the readers).
"""
from __future__ import annotations

import asyncio
import os
from collections import deque
from pathlib import Path

from lab import speech

CHUNK_MS = 100
FORMAT = "s16le;rate=16000;channels=1"
MAX_BACKLOG_S = 2.0
CHUNK_BYTES = speech.IN_RATE * CHUNK_MS // 1000 * speech.SAMPLE_BYTES


class MicStream:
    """What the microphone hears next: queued speech, then silence. No I/O, no clock."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = chunk_bytes
        self._queued: deque[bytes] = deque()
        self._silence = b"\x00" * chunk_bytes

    def speak(self, pcm: bytes) -> float:
        """Queue `pcm` after whatever is still to be heard; returns its start, in ms from now."""
        ahead = len(self._queued) * CHUNK_MS
        pcm = pcm + b"\x00" * (-len(pcm) % self.chunk_bytes)        # whole chunks: pad with silence
        for i in range(0, len(pcm), self.chunk_bytes):
            self._queued.append(pcm[i:i + self.chunk_bytes])
        return float(ahead)

    @property
    def speaking(self) -> bool:
        return bool(self._queued)

    def next_chunk(self) -> bytes:
        return self._queued.popleft() if self._queued else self._silence


class MicServer:
    """The socket and its real-time clock: one chunk every CHUNK_MS to every connected reader."""

    def __init__(self, path: Path, stream: MicStream | None = None):
        self.path = Path(path)
        self.stream = stream or MicStream()
        self._readers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._ticker: asyncio.Task | None = None
        self.readers_seen = 0
        self.readers_dropped = 0

    @property
    def readers(self) -> int:
        return len(self._readers)

    @property
    def environment(self) -> dict[str, str]:
        return {"LAB_AUDIO_SOCKET": str(self.path), "LAB_AUDIO_FORMAT": FORMAT}

    async def start(self) -> None:
        if self.path.exists():
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.path))
        os.chmod(self.path, 0o666)      # the app may run as another user than the lab (Compose)
        self._ticker = asyncio.create_task(self._tick())

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.readers_seen += 1
        self._readers.add(writer)
        # the app sends nothing on a microphone; reading only tells us when it hangs up
        try:
            while await reader.read(4096):
                pass
        except (ConnectionError, OSError):
            pass
        self._readers.discard(writer)
        writer.close()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        t0, i = loop.time(), 0
        limit = int(MAX_BACKLOG_S * 1000 / CHUNK_MS) * self.stream.chunk_bytes
        while True:
            chunk = self.stream.next_chunk()
            for w in list(self._readers):
                if w.transport.get_write_buffer_size() > limit:
                    self.readers_dropped += 1
                    self._readers.discard(w)
                    w.transport.abort()
                    continue
                w.write(chunk)
            i += 1
            # on a fixed schedule from t0, so a late tick does not stretch the audio
            await asyncio.sleep(max(0.0, t0 + i * CHUNK_MS / 1000 - loop.time()))

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        for w in list(self._readers):
            w.transport.abort()
        self._readers.clear()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.path.unlink(missing_ok=True)
