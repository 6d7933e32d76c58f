"""compose.yaml's two nodes as plain values: where the Kubernetes manifests take images, capabilities
and sysctls from. (Commands come from the service objects, lab/topology/services.py: compose.yaml's
nodes carry none.)

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
from lab.topology.compose import COMPOSE_FILE, NODES

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


@dataclass(frozen=True)
class NodeSpec:
    """One of compose.yaml's containers (a node of the topology): what a pod's container keeps of it."""
    name: str
    image: str
    cap_add: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)


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


def nodes(path: Path = COMPOSE_FILE) -> dict[str, NodeSpec]:
    """name -> NodeSpec for each of compose.yaml's nodes (NODES); LabError if one is missing."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise LabError(f"cannot read {path}: {e}") from None
    found = doc.get("services") or {}
    out = {}
    for name in NODES:
        if name not in found:
            raise LabError(f"{path} has no {name} service (the topology's nodes are {', '.join(NODES)})")
        svc = _resolved(found[name])
        out[name] = NodeSpec(name=name, image=svc.get("image", ""), cap_add=list(svc.get("cap_add") or []),
                             sysctls={k: str(v) for k, v in (svc.get("sysctls") or {}).items()})
    return out
