"""The clients under test, by name; and the hook for a user's own client.

`get("probe" | "recovery" | "naive" | "guard" | "openai" | "openai-recovery")` returns the class.
`get("pkg.mod:Class")` imports a user's module and returns its class, which must subclass
`lab.clients.base.Client` (or at least provide start/say/action/flow/stop). Anything else is a LabError naming the known clients. The framework
clients (lab.clients.frameworks: livekit, pipecat, adk) are apps run black-box, which the orchestrator
starts through lab/clients/command.py rather than through this lookup. Which realtime protocols a
client speaks: `protocols_of(name)`; `not_speaking(name, protocol)` is the line that refuses a run.
"""
from __future__ import annotations

import importlib

from lab.clients.base import Client, ClientContext, Endpoint
from lab.clients.frameworks import names as framework_names
from lab.clients.frameworks import resolve as resolve_framework
from lab.errors import LabError
from lab.protocols import GEMINI, PROTOCOLS

_BUILTIN = {
    "probe": ("lab.clients.probe", "ProbeClient"),
    "recovery": ("lab.clients.recovery", "RecoveryClient"),
    "naive": ("lab.clients.naive", "NaiveClient"),
    "recovery-sequential": ("lab.clients.sequential", "SequentialRecoveryClient"),
    "guard": ("lab.clients.guard", "GuardClient"),
    "session-manager": ("lab.clients.managed", "SessionManagerClient"),
    # the OpenAI Realtime API on the openai SDK (serve the twin with --protocol openai)
    "openai": ("lab.clients.openai_realtime", "OpenAIRealtimeClient"),
    # its recovery reference: a new session restored from the transcript and a status note
    "openai-recovery": ("lab.clients.openai_recovery", "OpenAIRecoveryClient"),
}

_REQUIRED = ("start", "say", "action", "flow", "stop")


def names() -> list[str]:
    return list(_BUILTIN)


def protocols_of(name: str) -> tuple[str, ...]:
    """The realtime protocols a client speaks (lab.protocols), in the order lab.protocols lists them: a
    lab client's class's `protocol` (a user's class without one: Gemini); a framework's, with any
    release or user's agent, its `Framework.protocols` (its app and host speak each, by the key they
    are given)."""
    build = resolve_framework(name)
    if build is not None:
        return build.framework.protocols
    return (getattr(get(name), "protocol", GEMINI),)


def speaks(name: str, protocol: str) -> bool:
    return protocol in protocols_of(name)


def speaking(protocol: str) -> list[str]:
    """The built-in clients, then the frameworks, that speak `protocol`."""
    return [n for n in (*names(), *framework_names()) if speaks(n, protocol)]


def not_speaking(name: str, protocol: str) -> str | None:
    """Why client `name` cannot run a `protocol` run, as the one line that refuses it; None when it can."""
    spoken = protocols_of(name)
    if protocol in spoken:
        return None
    build = resolve_framework(name)
    why = f" ({build.framework.why_only})" if build is not None and build.framework.why_only else ""
    others = [p for p in PROTOCOLS if p in spoken]
    return (f"client {name} speaks {' and '.join(others)}, not {protocol}{why}: with --protocol {protocol} "
            f"use --client " + " or --client ".join(speaking(protocol)))


def get(name: str) -> type[Client]:
    """A client class by name, or by module path `pkg.mod:Class` for a user's own client."""
    if name in _BUILTIN:
        mod, cls = _BUILTIN[name]
        return getattr(importlib.import_module(mod), cls)
    if isinstance(name, str) and ":" in name:
        mod_name, _, cls_name = name.partition(":")
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            raise LabError(f"client {name!r}: cannot import {mod_name!r} ({e})") from e
        cls = getattr(mod, cls_name, None)
        if cls is None or not isinstance(cls, type):
            raise LabError(f"client {name!r}: module {mod_name!r} has no class {cls_name!r}")
        missing = [m for m in _REQUIRED if not callable(getattr(cls, m, None))]
        if missing:
            raise LabError(f"client {name!r} does not implement lab.clients.base.Client (missing {', '.join(missing)})")
        if getattr(cls, "__abstractmethods__", None):
            raise LabError(f"client {name!r} leaves abstract methods unimplemented: "
                           f"{', '.join(sorted(cls.__abstractmethods__))}")
        return cls
    raise LabError(f"unknown client {name!r}; known: {', '.join(names())}, a framework ({', '.join(framework_names())}), "
                   "or a module path pkg.mod:Class implementing lab.clients.base.Client")


__all__ = ["Client", "ClientContext", "Endpoint", "get", "names", "not_speaking", "protocols_of", "speaks",
           "speaking"]
