"""Where a run happens, behind one interface: plain network namespaces or Docker Compose.

A topology has two nodes joined by one link (Mininet-style: plain objects): the client's namespace,
where the agent, the faults and the capture live, and the endpoint's, where the twin (or the proxy)
runs. The orchestrator only uses this interface, so every scenario runs in either topology.
"""
from __future__ import annotations

import abc
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from lab.errors import CapabilityError


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

    # ---- shared: the twin and the proxy run in the endpoint's namespace ---------------------------
    def endpoint_exec(self, argv: list[str], **popen_kw) -> subprocess.Popen:
        """Start a process in the endpoint's namespace (topologies that run the twin themselves)."""
        raise NotImplementedError

    def start_twin(self, api_key: str, log_path: Path, t0: float, extra: list[str] = (),
                   timeout: float = 20.0) -> None:
        """Start `lab twin serve` on the endpoint node and wait until its CA exists and it listens."""
        cert_dir = Path(self.ca_path).parent
        argv = [sys.executable, "-m", "lab", "twin", "serve", "--host", self.endpoint_host,
                "--port", str(self.endpoint_port), "--cert-dir", str(cert_dir), "--api-key", api_key,
                "--log", str(log_path), "--san", self.endpoint_host, *extra]
        self._twin = self.endpoint_exec(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._wait_ready(self._twin, "twin", timeout)

    def start_proxy(self, timeout: float = 20.0) -> None:
        """Start the freeze proxy on the endpoint node (scenarios with endpoint: {via: proxy})."""
        h = self.endpoint_host
        # only the first tunnel (the session's first connection) freezes: resumes must reach the twin
        argv = [sys.executable, "-m", "lab", "proxy", "serve", "--listen", f"{h}:{self.proxy_port}",
                "--control", f"{h}:{self.proxy_control_port}", "--freeze-first", "1"]
        self._proxy = self.endpoint_exec(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._wait_ready(self._proxy, "proxy", timeout)

    proxy_port = 8080
    proxy_control_port = 8081

    @property
    def proxy_url(self) -> str:
        return f"http://{self.endpoint_host}:{self.proxy_port}"

    @property
    def proxy_control_url(self) -> str:
        return f"http://{self.endpoint_host}:{self.proxy_control_port}"

    @staticmethod
    def _wait_ready(proc: subprocess.Popen, what: str, timeout: float) -> None:
        """Wait until the service prints its address line (it then accepts connections).

        The twin prints its https:// URL, the proxy "proxy: CONNECT on ...". The wait has a real
        deadline: a service that prints nothing must not hang the run.
        """
        deadline = time.time() + timeout
        seen: list[str] = []
        buf = b""
        fd = proc.stdout.fileno()
        while time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, min(0.2, deadline - time.time())))
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").rstrip()
                seen.append(line)
                if any(w in line.lower() for w in ("listening", "https://", "ws://", "connect on")):
                    # keep draining its output so the service never blocks on a full pipe
                    threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(fd, 65536), b"")],
                                     daemon=True).start()
                    return
        proc.kill()
        raise CapabilityError(f"the {what} did not start within {timeout:.0f} s: "
                              f"{' | '.join(seen[-3:]) or 'no output'}")

    def stop_services(self) -> None:
        for name in ("_twin", "_proxy"):
            p = getattr(self, name, None)
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
