"""The twin's ear: offline speech recognition of one user turn, with pocketsphinx.

pocketsphinx is there because its wheel carries an English acoustic model, dictionary and language
model, so the twin hears speech with no download and no network, on any machine the lab runs on.
It is weak on synthetic and noisy speech, so a turn is decoded first against a grammar of the
conversation's own phrases (lab.twin.hearing: the closed vocabulary), which is fast (tens of ms a
turn) and robust; only when no phrase fits is it decoded again with the open language model, whose
words lab.twin.hearing matches loosely.

Decoding holds the GIL for up to seconds, so the twin's server runs it in a worker process
(`Ear`), never on its event loop: other sessions' frames are not delayed while one turn is heard.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import time
from dataclasses import dataclass
from typing import Callable

from lab.speech import resample
from lab.twin import hearing as H

IN_RATE = 16000


def missing() -> str | None:
    """Why the twin cannot hear speech here (None: it can)."""
    try:
        import pocketsphinx  # noqa: F401
    except ImportError:
        return "pocketsphinx is not installed (pip install pocketsphinx); spoken turns are read by position"
    return None


@dataclass(frozen=True)
class Heard:
    grammar: str | None      # the words under the phrases' grammar; None: no phrase fit the audio
    free: str | None         # the open language model's words, only when the grammar gave nothing
    cpu_ms: float            # the recognizer's CPU time for the turn
    wall_ms: float = 0.0     # from the turn handed over to its words back (the worker's queue included)


def _jsgf(phrases: tuple[tuple[str, ...], ...]) -> str:
    # one phrase, or two in one turn (a request and a stop said in one breath, fidelity §8 F7)
    alts = " | ".join("(" + " ".join(p) + ")" for p in phrases)
    return f"#JSGF V1.0;\ngrammar lines;\npublic <turn> = <line> [<line>];\n<line> = {alts};\n"


class Recognizer:
    """One pocketsphinx decoder; a grammar per phrase set, made the first time it is asked for."""

    def __init__(self):
        from pocketsphinx import Decoder
        # dither: the lab's synthetic lines have digital silence around them, which without a
        # little noise throws the feature normalisation off and the grammar's end is not reached
        self.decoder = Decoder(samprate=IN_RATE, loglevel="FATAL", dither=True, cmn="batch")
        self._open = self.decoder.current_search()
        self._grammars: dict[tuple, str] = {}
        self._vocab: dict[tuple, H.Vocabulary] = {}

    def known(self, word: str) -> bool:
        return bool(self.decoder.lookup_word(word))

    def _grammar(self, phrases: tuple[tuple[str, ...], ...]) -> str | None:
        phrases = tuple(p for p in (tuple(w for w in ph if self.known(w)) for ph in phrases) if p)
        if not phrases:
            return None
        name = self._grammars.get(phrases)
        if name is None:
            name = f"lines{len(self._grammars)}"
            self.decoder.add_jsgf_string(name, _jsgf(phrases))
            self._grammars[phrases] = name
        return name

    def _decode(self, search: str, pcm: bytes) -> str | None:
        d = self.decoder
        d.activate_search(search)
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return hyp.hypstr if hyp is not None else None

    def hear(self, phrases: tuple[tuple[str, ...], ...], pcm: bytes, rate: int = IN_RATE) -> Heard:
        t0 = time.process_time()
        if rate != IN_RATE:
            pcm = resample(pcm, rate, IN_RATE)
        grammar = self._grammar(phrases)
        said = self._decode(grammar, pcm) if grammar else None
        free = None if said else self._decode(self._open, pcm)
        return Heard(said or None, free, (time.process_time() - t0) * 1000)


    def vocabulary(self, script: tuple[str, ...], asks: tuple[tuple[str, tuple[str, ...]], ...]) -> H.Vocabulary:
        """The closed vocabulary of one conversation, with the words this recognizer's dictionary has."""
        key = (script, asks)
        v = self._vocab.get(key)
        if v is None:
            v = self._vocab[key] = H.vocabulary(list(script), dict(asks), known=self.known)
        return v

    def hear_turn(self, script: tuple[str, ...], asks, expected: int | None, pcm: bytes,
                  rate: int = IN_RATE) -> tuple[Heard, H.Match]:
        """One user turn heard and read against the conversation's phrases."""
        vocab = self.vocabulary(script, asks)
        heard = self.hear(vocab.grammar_phrases(), pcm, rate)
        return heard, H.match(heard.grammar, heard.free, vocab, expected)


_worker: Recognizer | None = None


def _recognizer() -> Recognizer:
    global _worker
    if _worker is None:
        _worker = Recognizer()
    return _worker


def _warm() -> None:
    _recognizer()


def _hear_in_worker(script, asks, expected, pcm: bytes, rate: int) -> tuple[Heard, H.Match]:
    return _recognizer().hear_turn(script, asks, expected, pcm, rate)


class Ear:
    """A worker process that hears turns for the twin's server: `hear(...)` returns at once and
    `done(heard)` is called on the caller's event loop when the turn is heard."""

    def __init__(self):
        ctx = multiprocessing.get_context("spawn")     # no copy of the server's loop or sockets
        self._pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx)
        # the model loads now, beside the server's start, so the first turn does not wait for it
        self._pool.submit(_warm)

    def hear(self, loop, script: tuple[str, ...], asks, expected: int | None, pcm: bytes, rate: int,
             done: Callable[[Heard | None, H.Match | None], None]) -> None:
        t0 = loop.time()
        fut = self._pool.submit(_hear_in_worker, script, asks, expected, pcm, rate)

        def finished(f: concurrent.futures.Future) -> None:
            try:
                heard, m = f.result()
                heard = Heard(heard.grammar, heard.free, heard.cpu_ms, (loop.time() - t0) * 1000)
            except Exception:
                heard, m = None, None       # the worker died: the turn is read by position
            loop.call_soon_threadsafe(done, heard, m)

        fut.add_done_callback(finished)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
