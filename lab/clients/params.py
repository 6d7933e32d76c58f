"""A client's parameters: the names it declares (its `DEFAULTS`) with the scenario's values on top.

Every read goes through `Params[name]`, which refuses a name the client did not declare: a client
cannot depend on a parameter that scenario validation does not know about (validation refuses
unknown `client_params` keys against the same `DEFAULTS`).
"""
from __future__ import annotations

from typing import Any, Mapping

from lab.errors import LabError


class UndeclaredParam(LabError):
    """A client read a parameter missing from its DEFAULTS: a bug in the client, not in the scenario."""


class Params:
    def __init__(self, client: str, declared: Mapping[str, Any], given: Mapping[str, Any] | None):
        self.client = client
        self._declared = frozenset(declared)
        # what the scenario gave is kept as given (a key meant for another client under `all:` too),
        # so `client.params` records the run's inputs as they were; reads see only declared names
        self._values: dict[str, Any] = {**declared, **(given or {})}

    def __getitem__(self, name: str) -> Any:
        if name not in self._declared:
            raise UndeclaredParam(f"client {self.client!r} reads parameter {name!r}, which its DEFAULTS do not "
                                  f"declare (declared: {', '.join(sorted(self._declared))})")
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._declared

    def recorded(self, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Every value the client was started with, for the `client.params` event."""
        return {k: v for k, v in self._values.items() if k not in omit}
