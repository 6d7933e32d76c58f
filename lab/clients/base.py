"""The one small interface every client under test speaks behind.

The agent (inside the client's network namespace) creates a client with a ClientContext, calls
start(), feeds it the user's lines with say(), asks it for scripted actions (abort, close, resume),
and reads its open connection's 4-tuple with flow() so a fault can target exactly that flow.
Everything a client observes goes to ctx.log as events (docs/DESIGN.md lists the kinds).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from lab.events import EventLog
from lab.model_id import DEFAULT_MODEL
from lab.protocols import GEMINI


@dataclass
class Endpoint:
    """Where the client connects. For the twin: its https base URL and CA; for live: Google's."""
    base_url: str | None            # None = the SDK's default (the real endpoint; live mode only)
    api_key: str
    ca_path: str | None = None
    model: str = DEFAULT_MODEL
    api_version: str | None = None
    keylog_path: str | None = None  # TLS secrets for Wireshark (twin runs; live only behind a flag)


@dataclass
class ClientContext:
    endpoint: Endpoint
    log: EventLog
    backend: Any                    # lab.backend.Backend: the ground truth for side effects
    params: dict[str, Any] = field(default_factory=dict)   # the scenario's client parameters
    speech: bool = False            # user lines as synthetic 16 kHz speech instead of text
    # called with the purpose ('initial' | 'resume' | 'new') before the client opens any connection;
    # raising (a LabError such as the live budget's BudgetError) refuses that open (docs/DESIGN.md)
    before_connect: Callable[[str], None] | None = None


def not_opened(refusal: Exception) -> str:
    """The reason a client records when ctx.before_connect refused an open (lab.live.errors reads
    it as a budget stop)."""
    return f"not opened ({type(refusal).__name__}): {refusal}"[:200]


class Client(abc.ABC):
    name: ClassVar[str]
    # whether the lab can make it take a scripted action (resume, close, abort): the lab's own
    # clients can; a black-box app refuses every one (lab/clients/command.py)
    askable: ClassVar[bool] = True
    # the realtime protocol it speaks (lab.protocols): a run of another protocol refuses it before
    # anything starts (lab.clients.protocols_of)
    protocol: ClassVar[str] = GEMINI

    def __init__(self, ctx: ClientContext):
        self.ctx = ctx

    @classmethod
    def declared_params(cls) -> dict[str, Any]:
        """The parameters a scenario's client_params may set for this client, name -> default.

        Scenario validation refuses any other key. The SDK clients keep theirs in `DEFAULTS`."""
        return dict(getattr(cls, "DEFAULTS", {}))

    @abc.abstractmethod
    async def start(self) -> None:
        """Open the first session (with sessionResumption enabled) and start receiving."""

    @abc.abstractmethod
    async def say(self, text: str, line: int) -> None:
        """The user speaks (or types) line number `line` of the scenario's script."""

    @abc.abstractmethod
    async def action(self, what: str, **kw: Any) -> None:
        """A scripted client action: 'abort', 'close', 'resume', 'reuse_old', ..."""

    @abc.abstractmethod
    def flow(self) -> tuple[str, int, str, int] | None:
        """(local ip, local port, remote ip, remote port) of the current connection, if any."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Close everything; never raises."""
