"""The actions a timeline step may script: each defined once, with who performs it.

- `client`: the client under test does it (`await client.action(name)`): drop, close, resume.
- `proxy`: the freeze proxy does it (a POST to its control API, `verb`); needs `endpoint: {via: proxy}`.

`cuts_path` marks an action that ends the client's path to the server. The agent writes the run's
`loss` event at the first such action unless a fault came first (lab.anchors); the others (resume,
unfreeze, ...) never make a loss. Fault and heal steps are not actions: the agent applies them itself.
"""
from __future__ import annotations

from dataclasses import dataclass

CLIENT, PROXY = "client", "proxy"


@dataclass(frozen=True)
class Action:
    name: str
    by: str                     # CLIENT or PROXY
    cuts_path: bool
    description: str
    verb: str | None = None     # the proxy's control verb (proxy actions)


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("abort", CLIENT, True, "the client drops its connection without a close frame (the server sees a RST)"),
    Action("close", CLIENT, True, "the client closes its connection cleanly (close 1000) and waits for the echo"),
    Action("resume", CLIENT, False, "the client makes one resume attempt with its last handle"),
    Action("reuse_old", CLIENT, False, "the client sends on the old connection again (after an unfreeze)"),
    Action("freeze", PROXY, True, "the proxy stops forwarding the first connection's bytes; its TCP stays up",
           verb="freeze"),
    Action("unfreeze", PROXY, False, "the proxy forwards the frozen connection again", verb="unfreeze"),
    Action("proxy_close", PROXY, False, "the proxy closes the frozen tunnel's sockets", verb="close"),
)}


def known_names() -> list[str]:
    return sorted(ACTIONS)


def cutting_names() -> tuple[str, ...]:
    """The actions that cut the path (the timeline marks them apart)."""
    return tuple(a.name for a in ACTIONS.values() if a.cuts_path)
