"""The topology of a run that is already inside its Kubernetes pod.

Kubernetes, not the lab, made everything a run needs before this process started: the pod's network
namespace (the client container holds NET_ADMIN and NET_RAW there), the capture sidecar (tcpdump on
eth0 and nflog:5 in the same namespace, started first), and the twin in its own pod behind a Service.
So `up()` and `down()` have nothing to create or remove, `client_exec` is a plain process (we are in
the client's namespace), and the twin and the capture are waited for, not started.

Where things are comes from the variables compose.yaml gives its client container, which the
generated pod spec keeps: LAB_ENDPOINT (host:port of the twin) and LAB_CA (the twin's CA).
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from lab.errors import CapabilityError, LabError
from lab.topology.base import Topology

RAW_PCAPS = ("raw-eth.pcap", "raw-nflog.pcap")      # what the capture sidecar writes into the run folder


class PodTopology(Topology):
    name = "pod"

    def __init__(self, run_id: str, wait_timeout: float = 120.0, **_options):
        # _options: ca_path and uplink, which run_one passes to namespace topologies; the pod has its
        # CA at LAB_CA and reaches the outside (live mode) through the cluster's own network
        self.run_id = run_id
        self.wait_timeout = wait_timeout
        host, _, port = os.environ.get("LAB_ENDPOINT", "").rpartition(":")
        self._host, self._port = host, int(port) if port.isdigit() else 0
        self._ca = Path(os.environ.get("LAB_CA", "/certs/ca.pem"))
        self._capture_dir: Path | None = None

    def up(self) -> None:
        """Nothing to create: Kubernetes made the namespace and the sidecars."""

    def down(self) -> None:
        """Nothing to remove: the sidecar ends with the pod, the twin with `kubectl delete`."""
        self._capture_dir = None

    @property
    def endpoint_host(self) -> str:
        """The twin's name (empty in live mode: the client goes to the real endpoint)."""
        return self._host

    @property
    def endpoint_port(self) -> int:
        return self._port

    @property
    def endpoint_ip(self) -> str:
        """The twin's address as this namespace sees it (destination faults match it)."""
        try:
            return socket.gethostbyname(self.endpoint_host)
        except OSError as e:
            raise LabError(f"pod topology: cannot resolve the twin {self.endpoint_host}: {e}") from None

    @property
    def ca_path(self) -> Path:
        return self._ca

    def client_exec(self, argv: list[str], **popen_kw) -> subprocess.Popen:
        return subprocess.Popen(argv, **popen_kw)

    def start_twin(self, api_key: str, log_path: Path, t0: float, extra: list[str] = (),
                   timeout: float | None = None) -> None:
        """Wait for the twin's pod: it listens and its CA is readable.

        Its options (key, seed, log in this run folder) were fixed when the manifests were rendered
        (lab.deploy.kubernetes); `t0` cannot reach it, as in the Compose topology, so twin.jsonl
        counts from the twin's own start.
        """
        if not self._host:
            raise LabError("pod topology: LAB_ENDPOINT (host:port of the twin) is not set in this pod")
        deadline = time.monotonic() + (timeout or self.wait_timeout)
        last = "not tried"
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.endpoint_host, self.endpoint_port), 2).close()
                if self._ca.is_file():
                    return
                last = f"no CA at {self._ca}"
            except OSError as e:
                last = str(e)
            time.sleep(1)
        raise CapabilityError(f"pod topology: the twin at {self.endpoint_host}:{self.endpoint_port} "
                              f"is not ready: {last}")

    def start_proxy(self, timeout: float = 20.0) -> None:
        raise LabError("pod topology: no freeze proxy in the pod (scenarios with endpoint: {via: proxy})")

    def capture_start(self, run_dir: Path) -> None:
        """Wait for the sidecar's pcaps in this run folder (the pod spec points it there)."""
        run_dir = Path(run_dir)
        deadline = time.monotonic() + self.wait_timeout
        want = [run_dir / n for n in RAW_PCAPS]
        while not all(p.exists() for p in want):
            if time.monotonic() > deadline:
                raise LabError(f"pod topology: the capture sidecar wrote no pcap into {run_dir} "
                               "(is its RUN_DIR this run's folder?)")
            time.sleep(0.2)
        self._capture_dir = run_dir

    def capture_stop(self) -> list[Path]:
        """The raw pcaps so far. The sidecar keeps running until the pod ends (Kubernetes stops a
        native sidecar after the main container); tcpdump -U writes every packet as it comes, so
        the files are whole at any moment."""
        run_dir, self._capture_dir = self._capture_dir, None
        if run_dir is None:
            return []
        return [p for p in (run_dir / n for n in RAW_PCAPS) if p.exists()]
