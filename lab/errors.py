"""One error type that the CLI turns into one clear line and a non-zero exit.

Every room raises a LabError (or a subclass) for bad input or a missing capability; the CLI prints
`lab: <message>` and exits with `code`. Nothing already recorded is removed on the way out.
"""
import sys
from typing import Any, Callable

from netem.errors import NetemError

# A close or error text that starts with this is the lab's own configuration error reported from
# inside a run (the twin refusing a setup whose client lacks the conversation's tools): the agent
# ends the run with it as one line (lab.live.errors reads it), instead of judging what followed
LAB_REASON = "livelab: "


class LabError(Exception):
    code = 2

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class ScenarioError(LabError):
    """A malformed scenario file; the message names the file and line."""


class CapabilityError(LabError):
    """The machine lacks something a run needs (root, NET_ADMIN, netem, Docker, a tool)."""
    code = 3


class BudgetError(LabError):
    """Opening one more live connection would pass a session cap; it was not opened."""
    code = 4


# netem stands alone (it imports nothing from lab), so its errors are not LabErrors; they carry the
# same one line and `code`. Where lab turns an error into one line (the CLI, the agent) it catches these.
ONE_LINE_ERRORS = (LabError, NetemError)


def run_command(func: Callable[[Any], Any], args: Any, who: str = "lab") -> int:
    """func(args) as an exit code; one of the ONE_LINE_ERRORS is its line on stderr (`who: why`)
    and its code instead of a traceback. Every entry point a user starts asks it (lab, the proxy,
    the bench's timed twin)."""
    try:
        return int(func(args) or 0)
    except ONE_LINE_ERRORS as e:
        print(f"{who}: {e}", file=sys.stderr)
        return e.code
