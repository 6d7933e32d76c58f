"""Topology registry: `get("netns")`, `get("compose")`, or `get("pod")` (a run inside its Kubernetes pod)."""
from __future__ import annotations

import importlib

from lab.errors import LabError

TOPOLOGIES = {"netns": "lab.topology.netns:NetnsTopology", "compose": "lab.topology.compose:ComposeTopology",
              "pod": "lab.topology.pod:PodTopology"}


def get(name: str):
    if name not in TOPOLOGIES:
        raise LabError(f"unknown topology {name!r}; known: {', '.join(sorted(TOPOLOGIES))}")
    mod, cls = TOPOLOGIES[name].split(":")
    try:
        return getattr(importlib.import_module(mod), cls)
    except ModuleNotFoundError as e:
        raise LabError(f"topology {name!r} is not available: {e}") from None
