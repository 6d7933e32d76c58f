"""Synthetic speech for the user's lines, and a playback model for the model's audio.

`synth(text)` turns a line into 16 kHz mono s16le PCM with espeak-ng (one fixed voice, digital
silence around it), cached per text. `chunks()` cuts PCM into 100 ms pieces to stream at real time.

`PlaybackModel` answers "when would the user have heard this turn?" without a sound card: 24 kHz
mono s16le audio is played back to back from its arrival (a chunk starts when it arrives or when the
previous one ends, whichever is later). The study used the same model for its gap figures.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from typing import Iterator

from lab.errors import CapabilityError

IN_RATE = 16000      # what the Live API takes: audio/pcm;rate=16000
OUT_RATE = 24000     # what it sends back
SAMPLE_BYTES = 2

_cache: dict[tuple[str, str], bytes] = {}


def _wav_pcm(wav: bytes) -> tuple[bytes, int]:
    """(PCM s16le mono, sample rate) from espeak-ng's WAV; its sizes are bogus when piped, so scan."""
    if wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise CapabilityError("espeak-ng did not produce a WAV stream")
    pos, rate, channels = 12, None, 1
    while pos + 8 <= len(wav):
        cid, size = wav[pos:pos + 4], struct.unpack("<I", wav[pos + 4:pos + 8])[0]
        body = pos + 8
        if cid == b"fmt ":
            _fmt, channels, rate = struct.unpack("<HHI", wav[body:body + 8])
            pos = body + size + (size & 1)
        elif cid == b"data":
            data = wav[body:]                      # to the end: the size field is a placeholder
            data = data[: len(data) - len(data) % (SAMPLE_BYTES * channels)]
            if channels != 1:                      # keep the first channel
                data = b"".join(data[i:i + 2] for i in range(0, len(data), 2 * channels))
            return data, int(rate or 22050)
        else:
            pos = body + size + (size & 1)
    raise CapabilityError("espeak-ng WAV had no data chunk")


def resample(pcm: bytes, src_rate: int, dst_rate: int = IN_RATE) -> bytes:
    """Linear-interpolation resampling of s16le mono PCM (good enough for server VAD and ASR)."""
    if src_rate == dst_rate or not pcm:
        return pcm
    import numpy as np

    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    n_out = int(round(len(x) * dst_rate / src_rate))
    t = np.arange(n_out) * (src_rate / dst_rate)
    y = np.interp(t, np.arange(len(x)), x)
    return np.clip(np.round(y), -32768, 32767).astype("<i2").tobytes()


def prepare(lines: list[str], voice: str = "en-us") -> None:
    """Make every line's speech now (synth's cache keeps it): a line made when it is said waits
    for espeak-ng inside the caller's event loop."""
    for text in dict.fromkeys(lines):
        synth(text, voice)


def synth(text: str, voice: str = "en-us", wpm: int = 165) -> bytes:
    """16 kHz mono s16le PCM of `text` spoken by espeak-ng; cached per (text, voice)."""
    k = (text, voice)
    if k in _cache:
        return _cache[k]
    exe = shutil.which("espeak-ng")
    if not exe:
        raise CapabilityError("espeak-ng is not installed; install it (apt-get install espeak-ng) or use text mode")
    try:
        out = subprocess.run([exe, "--stdout", "-v", voice, "-s", str(wpm), text],
                             capture_output=True, check=True, timeout=30).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        raise CapabilityError(f"espeak-ng failed: {e}") from e
    pcm, rate = _wav_pcm(out)
    pcm = resample(pcm, rate, IN_RATE)
    _cache[k] = pcm
    return pcm


VOICED_RMS = 500     # assumption: the twin's VAD threshold (vad_threshold_rms); espeak's fade-out is below it
VOICED_FRAME_MS = 20


def voiced_ms(pcm: bytes, rate: int = IN_RATE, threshold: float = VOICED_RMS) -> float:
    """Where the speech in `pcm` ends: the end of its last 20 ms frame with an int16 RMS at or above
    `threshold` (0 for silence). espeak-ng trails each line with a few hundred ms of near-silence,
    which no VAD hears as speech, so a line's length is not where its speech ends."""
    import numpy as np      # here: only a spoken line needs it, and a text client never loads it

    step = int(rate * VOICED_FRAME_MS / 1000)
    n = len(pcm) // (2 * step)
    if n == 0:
        return 0.0
    frames = np.frombuffer(pcm[:n * step * 2], dtype="<i2").astype(np.float64).reshape(n, step)
    loud = np.flatnonzero(np.sqrt((frames ** 2).mean(axis=1)) >= threshold)
    return float((loud[-1] + 1) * VOICED_FRAME_MS) if loud.size else 0.0


def silence(ms: int, rate: int = IN_RATE) -> bytes:
    return b"\x00\x00" * int(rate * ms / 1000)


def chunks(pcm: bytes, ms: int = 100, rate: int = IN_RATE) -> Iterator[bytes]:
    """`pcm` in pieces of `ms` milliseconds (the last one may be shorter)."""
    step = int(rate * ms / 1000) * SAMPLE_BYTES
    for i in range(0, len(pcm), step):
        yield pcm[i:i + step]


def duration_ms(nbytes: int, rate: int = OUT_RATE) -> float:
    return nbytes / (rate * SAMPLE_BYTES) * 1000.0


@dataclass
class HeardTurn:
    start_ms: float
    end_ms: float
    nbytes: int


@dataclass
class PlaybackModel:
    """Back-to-back playback from arrival at `rate` Hz, 16-bit mono.

    Feed it `add(arrival_ms, nbytes)` for every audio chunk in order; `begin_turn()` before a new
    turn's first chunk and `end_turn()` after its last give the span the user heard it in.
    `interrupt(at_ms)` drops whatever was queued but not yet played (a client that flushes on
    `interrupted`).
    """
    rate: int = OUT_RATE
    cursor_ms: float = float("-inf")          # when the queued audio runs out
    _turn: HeardTurn | None = field(default=None, repr=False)

    def add(self, arrival_ms: float, nbytes: int) -> tuple[float, float]:
        start = max(arrival_ms, self.cursor_ms)
        end = start + duration_ms(nbytes, self.rate)
        self.cursor_ms = end
        if self._turn is None:
            self._turn = HeardTurn(start, end, 0)
        self._turn.end_ms = end
        self._turn.nbytes += nbytes
        return start, end

    def begin_turn(self) -> None:
        self._turn = None

    def end_turn(self) -> HeardTurn | None:
        t, self._turn = self._turn, None
        return t

    def interrupt(self, at_ms: float) -> None:
        if self.cursor_ms > at_ms:
            self.cursor_ms = at_ms
            if self._turn is not None and self._turn.end_ms > at_ms:
                self._turn.end_ms = max(self._turn.start_ms, at_ms)

    @classmethod
    def spans(cls, arrivals: list[tuple[float, int]], rate: int = OUT_RATE) -> tuple[float, float] | None:
        """(start_ms, end_ms) of one turn's audio from its [(arrival_ms, nbytes), ...]."""
        if not arrivals:
            return None
        pm = cls(rate=rate)
        for a, n in arrivals:
            pm.add(a, n)
        t = pm.end_turn()
        return (t.start_ms, t.end_ms) if t else None
