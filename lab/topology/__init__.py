"""Topology registry: `get("netns")`, `get("compose")`, or `get("pod")` (a run inside its Kubernetes pod);
`choose("auto")` picks netns where network namespaces can be made, else compose."""
from __future__ import annotations

import importlib
import os

from lab.errors import LabError
from netem.kernel import Prober

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


AUTO = "auto"


def choose(name: str, say=print) -> str:
    """`name`, or for `auto` the topology that can run here: netns when this is root and a network
    namespace can be made, else compose (Docker only, no host root); says which in one line."""
    if name != AUTO:
        return name
    if os.geteuid() != 0:
        why = "not root"
    elif not Prober().can_make_netns():
        why = "root, but no network namespace can be made here"
    else:
        return "netns"
    say(f"lab: network namespaces are not available ({why}): using --topology compose")
    return "compose"
