"""How the netns topology starts the lab's own Python processes: a hook the orchestration fills.

    install(factory)    the orchestration's starter factory, factory(log) -> Starter | None
                        (lab/forkserver installs its fork server here when it is imported)
    current(log)        this invocation's starter, or None: every process exec'd with `ip netns exec`

A Starter has `spawn(netns, argv, **popen_kw)`: a process used as a subprocess.Popen, or None when
the command is not its to start (it is then exec'd). The topology starts processes for the
orchestration above it and so names none of its modules: what starts them is installed from above.
"""
from __future__ import annotations

from typing import Any, Callable

_factory: Callable[[Callable[[str], Any]], Any] | None = None


def install(factory: Callable[[Callable[[str], Any]], Any] | None) -> None:
    """Make `factory(log)` the topology's starter (None: exec every process again)."""
    global _factory
    _factory = factory


def current(log: Callable[[str], Any] = print) -> Any:
    """The installed starter for this invocation (None when none is installed, or it says none)."""
    return _factory(log) if _factory is not None else None
