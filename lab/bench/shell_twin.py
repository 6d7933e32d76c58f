"""The floor of `lab bench twin`: the twin's own server with the baseline's answers.

    python -m lab.bench.shell_twin twin serve ARGS    # `lab twin serve`, its core's answers swapped

`lab twin serve` whole (its shell, the TLS and websockets set-up, the session set-up its core does
for a setup frame), except that on a live connection a client frame is answered the way the
baseline answers it (lab.bench.echo.answer: the frame parsed, a microphone chunk's audio decoded, a
question given the same audio chunk at once and generationComplete and turnComplete on two timers,
at the baseline's times), through the shell's own actions (Send, Timer) and its own outbox. What
it costs beyond the baseline is the shell's and the process's; what the twin costs beyond it is the
core's answering of those frames. So `twin / shell` is the ratio the core's work can move, and
`shell / baseline` the part no change to the core can.

The connection is still looked up and its client data still noted (two attribute writes), so the
session stays what the twin's rules say it is for the rest of the level; nothing else of the core
runs for those frames.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from lab.bench import echo
from lab.errors import run_command
from lab.twin import cli as twin_cli
from lab.twin import server
from lab.twin.core import TwinCore
from lab.twin.io_actions import Send, Timer, TimerKey
from lab.twin.params import GEMINI


@dataclass(frozen=True)
class Due(TimerKey):
    """One of the baseline's later frames of a reply (generationComplete, turnComplete)."""
    conn: int
    data: bytes


class ShellCore:
    """The twin's core, with a live connection's frames and the timers they arm answered as the
    baseline does. It holds the core rather than patching its class, so the same shell runs the
    core's .py files or its compiled build (lab.twin.compiled), whose methods cannot be replaced.
    Every other call of the server is the core's own bound method, so the wrapper adds no step."""

    def __init__(self, core: TwinCore):
        self.core = core
        self.profile = core.profile
        self._frame_received, self._timer_fired = core.frame_received, core.timer_fired
        self.check_upgrade = core.check_upgrade
        self.connection_opened = core.connection_opened
        self.connection_ended = core.connection_ended
        self.speech_heard = core.speech_heard
        self.set_fault = core.set_fault
        self.go_away = core.go_away
        self.pong_delay = core.pong_delay

    @property
    def ear(self) -> bool:
        return self.core.ear

    @ear.setter
    def ear(self, on: bool) -> None:
        self.core.ear = on

    @property
    def hears(self) -> bool:
        return self.core.hears

    def frame_received(self, conn_id: int, data: bytes | str, now: float) -> list:
        # on a live connection, the baseline's answer through the shell's actions; a setup, or a
        # connection not yet or no longer live, is the core's (one call a frame, as the core is)
        sessions = self.core.sessions
        c = sessions.conns.get(conn_id)
        if c is None or not sessions.in_turns(c):
            return self._frame_received(conn_id, data, now)
        reply = echo.answer(data)
        if reply is not None and reply is not echo.REPLY_NOW:
            return self._frame_received(conn_id, data, now)
        sessions.client_data(c, now)
        if reply is None:
            return []
        return [Send(conn_id, f, {}, now) for f in reply] + [
            Timer(Due(conn_id, echo.GENERATED), now + echo.GENERATED_S),
            Timer(Due(conn_id, echo.PLAYED), now + echo.REPLY_CHUNK_S)]

    def timer_fired(self, key: TimerKey, now: float) -> list:
        if type(key) is Due:
            return [Send(key.conn, key.data, {}, now)]
        return self._timer_fired(key, now)


def _swap_answers() -> None:
    """The server's Gemini core made as usual, then held by the shell (TwinServer asks CORES)."""
    core, default_profile = server.CORES[GEMINI]
    server.CORES[GEMINI] = (lambda *a, **kw: ShellCore(core(*a, **kw)), default_profile)


def main(argv: list[str]) -> int:
    args = twin_cli.parse_twin_command(argv, "python -m lab.bench.shell_twin", __doc__.splitlines()[0],
                                       "twin serve ARGS")
    _swap_answers()
    return run_command(args.func, args, who="shell twin")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
