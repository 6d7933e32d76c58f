"""What the twin's sans-I/O rooms hand the asyncio shell: the I/O actions to perform (Send, Close, Timer, Log; their base
class is Action), and the base of timer keys.

    Send(conn, data, frame, at)     send one frame (data: bytes for binary, str for text) at `at`
    Close(conn, code, reason, at)   close that connection with a close frame at `at`
    Timer(key, at)                  call timer_fired(key, ...) at `at` (timers are never cancelled:
                                    a stale one finds nothing to do)
    Log(kind, fields)               one twin.jsonl record (no raw handles or keys)

Build Send and Close with lab.twin.wire (it encodes frames and fits close reasons to the 123 bytes a
close frame allows). Knows nothing of sockets, sessions or turns.
"""
from __future__ import annotations

from dataclasses import dataclass

try:    # read only by mypyc when it compiles this module (lab.twin.compiled); the interpreter needs none
    from mypy_extensions import mypyc_attr
except ImportError:
    def mypyc_attr(*_a, **_kw):  # type: ignore[misc]
        return lambda cls: cls


class TwinBug(Exception):
    """A caller broke the core's contract (an id it never issued, a timer no room owns)."""


class UnknownConnection(TwinBug):
    pass


class UnknownSession(TwinBug):
    pass


class UnknownTimer(TwinBug):
    pass


# a key of the shell's own (lab.bench.shell_twin) or a test's is an interpreted subclass
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(frozen=True)
class TimerKey:
    """Base of every timer a room arms; each room's subclasses say what is due."""


@dataclass
class Send:
    conn: int
    data: bytes | str
    frame: dict
    at: float


@dataclass
class Close:
    conn: int
    code: int
    reason: str
    at: float


@dataclass
class Timer:
    key: TimerKey
    at: float


@dataclass
class Log:
    kind: str
    fields: dict


@dataclass
class Hear:
    """Recognize one user turn's audio, off the event loop; the shell hands what was heard back to
    the core's `speech_heard(sid, utt, heard, match, now)`. Only a core told it has an ear asks."""
    sid: str
    utt: int
    script: tuple[str, ...]                 # the conversation's user lines
    asks: tuple                             # ((tool, its asks words), ...)
    expected: int | None                    # the line due by position: the tie-break
    pcm: bytes
    rate: int


@dataclass
class WakeEar:
    """Speech has begun for the first time: the shell readies its recognizer now (its start-up takes
    about half a second), before the first Hear needs it."""


Action = Send | Close | Timer | Log | Hear | WakeEar
