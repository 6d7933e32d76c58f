"""Where a run happens, behind one interface: plain network namespaces or Docker Compose.

Mininet's model, in plain objects: a topology joins two nodes by one link, and a node is a place
where processes run. `topo.client` is where the agent, its faults and the capture live;
`topo.endpoint` is where the twin and the freeze proxy listen. A node knows how to `popen()` a
process inside itself, its address, and the interface its traffic leaves by; the services started
on it (lab/topology/services.py) are the same code in every topology. The orchestrator only uses
this interface, so every scenario runs in either topology.
"""
from __future__ import annotations

import abc
import subprocess
from pathlib import Path

from lab.errors import CapabilityError
from netem import kernel as netem_kernel


class Node(abc.ABC):
    """One end of the link. `popen` starts a process inside it; `role` names the process for
    cleanup and messages (agent, twin, proxy, tcpdump-eth ...)."""

    # does the node have files of its own (a container), or share the host's (a namespace)?
    own_files = False

    def __init__(self, name: str):
        self.name = name

    @property
    @abc.abstractmethod
    def host(self) -> str:
        """The name or address the other node dials to reach this one."""

    @property
    @abc.abstractmethod
    def ip(self) -> str:
        """This node's IPv4 address on the link (what a fault rule matches with -d)."""

    @property
    @abc.abstractmethod
    def dev(self) -> str:
        """The interface this node's traffic leaves by (what a capture listens on)."""

    @abc.abstractmethod
    def popen(self, argv: list[str], role: str = "proc", **popen_kw) -> subprocess.Popen:
        """Start `argv` inside this node; the Popen's signals reach the process inside."""

    def path(self, host_path: str | Path) -> str:
        """A host path (under the run folder or the secrets folder) as this node's processes see it:
        the same path, unless the node is a container that mounts those folders elsewhere."""
        return str(host_path)

    @property
    def capture_node(self) -> "Node":
        """Where this node's traffic is captured: a node on the same network namespace. Itself, unless
        a sidecar shares its namespace (the Compose client's `capture`), so a capture outlives it."""
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Topology(abc.ABC):
    """Two nodes and their link. Every topology takes the same keyword arguments:
    `(run_id, run_dir=None, secrets_dir=None, uplink=False, log=print)`."""

    name: str
    client: Node
    endpoint: Node
    endpoint_port = 8443        # where the twin listens on the endpoint node

    @classmethod
    def preflight(cls, client_tools: frozenset[str] = frozenset(), uplink: bool = False) -> None:
        """Raise CapabilityError (one line) if a run cannot happen here: privileges, tools, images,
        `client_tools` (programs a scenario needs on the client node, e.g. espeak-ng) and, with
        `uplink`, a way out to the real endpoint (live mode)."""

    @classmethod
    def kernel_caps(cls) -> netem_kernel.Capabilities:
        """What the kernel offers the faults where this topology's client node runs them: here, the
        host's (the namespaces share its kernel and tools); a container topology asks its image."""
        return netem_kernel.probe()

    @abc.abstractmethod
    def up(self) -> None:
        """Create the nodes and the link. Raises CapabilityError if it cannot."""

    @abc.abstractmethod
    def down(self) -> None:
        """Remove everything up() made, the processes started on its nodes included; idempotent,
        never raises."""

    @property
    @abc.abstractmethod
    def cert_dir(self) -> Path:
        """Where the twin writes its CA and certificate, as a path on the endpoint node."""

    @property
    @abc.abstractmethod
    def ca_path(self) -> Path:
        """The twin's CA certificate, as a path on the client node."""

    @property
    def endpoint_host(self) -> str:
        return self.endpoint.host

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()


def require_tools(where: str, tools, which, fix: str) -> None:
    """Raise one CapabilityError naming the tools `which(tool)` does not find on `where`, and `fix`
    (with {} for the missing names)."""
    missing = [t for t in sorted(tools) if not which(t)]
    if missing:
        raise CapabilityError(f"{where} lacks {', '.join(missing)}: {fix.format(' '.join(missing))}")
