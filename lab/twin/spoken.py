"""A spoken user turn and the twin's ear, for either protocol's turn room (lab.twin.turns for the
Live API, lab.twin.openai_session for OpenAI Realtime): what the recognizer is handed, how the
script's position moves when its lines are heard, and the record of how the turn was read.

The recognizer (lab.twin.recognizer) and the match (lab.twin.hearing) know nothing of sessions; the
turn rooms know nothing of how a turn is heard. This is the one place between them.
"""
from __future__ import annotations

from typing import Any

from lab.conversation.engine import Engine
from lab.twin import hearing as H
from lab.twin.io_actions import Hear


def hear_request(sid: str, utt: int, engine: Engine, pcm: bytes, rate: int) -> Hear:
    """Hand one utterance's audio (16-bit PCM at `rate`) to the shell's recognizer, with the lines it
    may be: the conversation's script and its tools' `asks` words; the line due by position breaks a tie."""
    asks = tuple((name, tuple(t.asks)) for name, t in engine.tools.items() if t.asks)
    expected = engine.utterances if engine.utterances < len(engine.script) else None
    return Hear(sid, utt, tuple(engine.script), asks, expected, pcm, rate)


def advance_position(engine: Engine, lines: list[str] | tuple[str, ...]) -> None:
    """A line of the script heard: the script goes on after it (a line said out of order, or a hello
    the script does not hold, leaves the lines due as they were)."""
    pos, script = engine.story.position, engine.script
    for line in lines:
        if line in script[pos.heard:]:
            pos.heard = script.index(line, pos.heard) + 1


def by_recognizer(heard: Any, match: H.Match) -> dict:
    """The `heard` record of a turn the recognizer read (twin.model): its words, match, score and cost."""
    return {"by": "recognizer", **match.to_json(),
            "cpu_ms": round(heard.cpu_ms, 1) if heard else None,
            "wall_ms": round(heard.wall_ms, 1) if heard else None}
