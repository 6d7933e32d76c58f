"""Transcription in pieces: a sentence cut at word boundaries so the pieces join back to it exactly.

The real service sends outputTranscription alongside the audio and inputTranscription while the user
speaks, a few words at a time (fidelity.md §3). The twin knows the whole sentence up front (it speaks
a scripted line, and an utterance stands for a script line), so it cuts the sentence by time.
"""
from __future__ import annotations

import re


def words(text: str) -> list[str]:
    """Each word with the spaces before it: ''.join(words(t)) == t."""
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


def spread(text: str, n: int) -> list[str]:
    """The sentence over n audio chunks: piece i is the words whose start falls in chunk i ('' if none)."""
    ws = words(text)
    if n <= 0:
        return []
    out = []
    for i in range(n):
        lo, hi = i * len(ws) // n, (i + 1) * len(ws) // n
        out.append("".join(ws[lo:hi]))
    return out


def heard(text: str, ms: float, ms_per_char: float) -> int:
    """How many words of the line have been spoken after `ms` of speech at `ms_per_char`."""
    n, chars = 0, 0
    for w in words(text):
        chars += len(w)
        if chars * ms_per_char > ms:
            break
        n += 1
    return n
