"""compose.yaml's services as plain values: the definition the Kubernetes manifests are rendered from.

Variables are resolved to compose.yaml's own defaults (`${VAR:-default}`; `${VAR}` without one is
empty), never from this process's environment, so the same checkout renders the same manifests;
`$$` becomes `$`, the literal text the container's shell sees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.errors import LabError
from lab.topology.compose import COMPOSE_FILE

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    command: list[str]
    cap_add: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    health: list[str] | None = None        # the healthcheck as an argv (CMD-SHELL becomes sh -c)


def resolve(text: str) -> str:
    """One compose string with its variables at their defaults and `$$` unescaped."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else (m.group(2) or ""), text)


def _resolved(value: Any) -> Any:
    if isinstance(value, str):
        return resolve(value)
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(v) for k, v in value.items()}
    return value


def _health(check: dict | None) -> list[str] | None:
    test = (check or {}).get("test")
    if not test:
        return None
    if isinstance(test, str):
        return ["sh", "-c", test]
    head, *rest = test
    return ["sh", "-c", rest[0]] if head == "CMD-SHELL" else rest


def services(path: Path = COMPOSE_FILE) -> dict[str, Service]:
    """name -> Service for every service in the compose file; LabError if it is not readable."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise LabError(f"cannot read {path}: {e}") from None
    out = {}
    for name, raw in (doc.get("services") or {}).items():
        svc = _resolved(raw)
        command = svc.get("command") or []
        out[name] = Service(name=name, image=svc.get("image", ""),
                            command=command if isinstance(command, list) else ["sh", "-c", command],
                            cap_add=list(svc.get("cap_add") or []),
                            sysctls={k: str(v) for k, v in (svc.get("sysctls") or {}).items()},
                            environment={k: "" if v is None else str(v) for k, v in (svc.get("environment") or {}).items()},
                            health=_health(svc.get("healthcheck")))
    return out
