"""Where a run happens, behind one interface: plain network namespaces or Docker Compose.

A topology has two nodes joined by one link (Mininet-style: plain objects): the client's namespace,
where the agent, the faults and the capture live, and the endpoint's, where the twin (or the proxy)
runs. The orchestrator only uses this interface, so every scenario runs in either topology.
"""
from __future__ import annotations

import abc
import subprocess
from pathlib import Path


class Topology(abc.ABC):
    name: str

    @abc.abstractmethod
    def up(self) -> None:
        """Create the nodes and the link; start the endpoint twin. Raises CapabilityError if it cannot."""

    @abc.abstractmethod
    def down(self) -> None:
        """Remove everything up() made; idempotent, never raises."""

    @property
    @abc.abstractmethod
    def endpoint_host(self) -> str:
        """The address the client dials to reach the twin (an IP in the lab's own range)."""

    @property
    @abc.abstractmethod
    def endpoint_port(self) -> int: ...

    @property
    @abc.abstractmethod
    def ca_path(self) -> Path:
        """The twin's CA certificate, readable from the client's side."""

    @abc.abstractmethod
    def client_exec(self, argv: list[str], **popen_kw) -> subprocess.Popen:
        """Start a process inside the client's network namespace."""

    @abc.abstractmethod
    def capture_start(self, run_dir: Path) -> None:
        """Start tcpdump on the client's link and on nflog:5, writing into run_dir."""

    @abc.abstractmethod
    def capture_stop(self) -> list[Path]:
        """Stop the capture; return the raw pcap files it wrote."""

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
