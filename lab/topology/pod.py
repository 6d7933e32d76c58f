"""The pod topology: a run already inside the Kubernetes pod that lab.deploy.kubernetes renders.

Kubernetes, not the lab, made both nodes before this process started, and started on them the
services the pod spec holds, with the command lines the service objects gave it
(lab/topology/services.py, read when the manifests were rendered):

    client    this container, in the pod's network namespace (NET_ADMIN): the agent and its faults
              run here as plain local processes. The capture's two tcpdumps run in the capture
              sidecar of the same namespace, writing into SPOOL (an emptyDir both containers mount).
    endpoint  the twin, in a pod of its own behind a headless Service (LAB_ENDPOINT=host:port), its
              throw-away CA in CERT_DIR.

So `up()` waits for both instead of creating them, and when the run asks a node to start a service
the pod spec already runs (the twin, a tcpdump), the node starts a local stand-in that waits for it
and stands for it: `twin` prints the twin's URL once it answers; `capture` passes on the tcpdump's
own "listening on" line and, when signalled to stop, copies the spooled capture to the file the
Capture asked for (tcpdump -U writes whole packets, so the spool is a valid pcap at any moment).
The stand-ins are this module: `python -m lab.topology.pod twin|capture|attach ...`; the first two
are also the pod spec's readiness probes.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from lab.errors import CapabilityError, LabError
from lab.topology.base import Node, Topology, require_tools
from lab.topology.services import Capture, stop_process

ENDPOINT_ENV = "LAB_ENDPOINT"         # host:port of the twin's Service ("" in live mode)
SPOOL = Path("/spool")                # where the capture sidecar's tcpdumps write
CERT_DIR = Path("/certs")             # the twin's CA: read-write in the twin's pod, read-only here
DEV = "eth0"                          # the pod's one interface
WAIT_TIMEOUT = 120.0
STANDIN = [sys.executable, "-m", "lab.topology.pod"]


# ---- readiness: what up(), the stand-ins and the pod spec's probes wait for ---------------------------
def twin_problem(host: str, port: int, ca: Path) -> str | None:
    """None when the twin answers on host:port and its CA is readable; else what is missing."""
    try:
        socket.create_connection((host, port), 2).close()
    except OSError as e:
        return f"{host}:{port}: {e}"
    return None if ca.is_file() else f"no CA at {ca}"


def capture_problem(logs: list[Path]) -> str | None:
    """None when every tcpdump's log says it is listening; else which one is not."""
    for log in logs:
        if "listening on" not in (log.read_text(errors="replace") if log.exists() else ""):
            return f"{log} does not say `listening on` (is the capture sidecar running?)"
    return None


def wait_for(problem, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (why := problem()) is not None:
        if time.monotonic() > deadline:
            raise CapabilityError(f"pod topology: the {what} is not ready after {timeout:.0f} s: {why}")
        time.sleep(0.5)


def sidecar_capture(run_dir: Path | None = None) -> Capture:
    """The capture the sidecar runs: the Capture service's own tcpdumps, on the pod's eth0, into
    `run_dir` (default SPOOL)."""
    return Capture(PodNode("client", host="localhost", dev=DEV), run_dir or SPOOL)


# ---- nodes ----------------------------------------------------------------------------------------------
class PodNode(Node):
    """A node of the pod topology. `standins` maps a service role the pod spec already runs on this
    node to the stand-in's arguments, made from the command line the service asked for; any other
    role runs as a local process, if `local`."""

    def __init__(self, name: str, host: str, dev: str = DEV, local: bool = False,
                 standins: dict[str, Callable[[list[str]], list[str]]] | None = None):
        super().__init__(name)
        self._host, self._dev, self.local, self.standins = host, dev, local, dict(standins or {})
        self.procs: list[subprocess.Popen] = []        # what down() ends if the run did not

    @property
    def host(self) -> str:
        return self._host

    @property
    def ip(self) -> str:
        try:
            return socket.gethostbyname(self._host)
        except OSError as e:
            raise LabError(f"pod topology: cannot resolve the {self.name} {self._host}: {e}") from None

    @property
    def dev(self) -> str:
        return self._dev

    def popen(self, argv: list[str], role: str = "proc", **popen_kw) -> subprocess.Popen:
        if role in self.standins:
            argv = [*STANDIN, *self.standins[role](argv)]
        elif not self.local:
            raise LabError(f"pod topology: the pod spec runs no {role} on the {self.name} "
                           "(scenarios through the freeze proxy run with --topology netns or compose)")
        proc = subprocess.Popen(argv, **popen_kw)
        self.procs.append(proc)
        return proc


class PodTopology(Topology):
    """`PodTopology(run_id, ...)`: the common keyword arguments are accepted; the pod has nothing to
    build (run_dir and secrets_dir are the run's, as everywhere; uplink: live mode leaves by the
    cluster's own network)."""

    name = "pod"

    def __init__(self, run_id: str, run_dir=None, secrets_dir=None, uplink: bool = False, log=print,
                 wait_timeout: float = WAIT_TIMEOUT):
        self.run_id, self.wait_timeout = run_id, wait_timeout
        host, _, port = os.environ.get(ENDPOINT_ENV, "").rpartition(":")
        self._port = int(port) if port.isdigit() else 0
        spooled = sidecar_capture().commands()
        self.capture_logs = [log for _role, _argv, _out, log in spooled]
        # a Capture's tcpdump writes `-w FILE`: its stand-in copies the sidecar's spool there
        self.client = PodNode("client", host=socket.gethostname(), local=True, standins={
            role: lambda argv, out=out, log=log: ["attach", str(out), str(log), argv[argv.index("-w") + 1]]
            for role, _argv, out, log in spooled})
        self.endpoint = PodNode("endpoint", host=host, standins={
            "twin": lambda _argv: ["twin", host, str(self._port), str(self.ca_path), "--hold"]})

    @classmethod
    def preflight(cls, client_tools: frozenset[str] = frozenset(), uplink: bool = False) -> None:
        if not SPOOL.is_dir():
            raise CapabilityError(f"the pod topology runs only inside the pod lab.deploy.kubernetes renders "
                                  f"(no {SPOOL} from its capture sidecar here); use --topology netns or compose")
        require_tools("the client image", client_tools, shutil.which, "install {} in Dockerfile.client")

    @property
    def endpoint_port(self) -> int:
        return self._port

    def up(self) -> None:
        """Nothing to create: wait until the capture sidecar listens and (twin runs) the twin answers."""
        wait_for(lambda: capture_problem(self.capture_logs), "capture sidecar", self.wait_timeout)
        if self.endpoint.host:
            wait_for(lambda: twin_problem(self.endpoint.host, self._port, self.ca_path), "twin", self.wait_timeout)

    def down(self) -> None:
        """Nothing of the pod's to remove (the sidecar ends with the pod, the twin with `kubectl
        delete`): only what the run started on the nodes and left running."""
        for node in (self.client, self.endpoint):
            for proc in node.procs:
                stop_process(proc)
            node.procs = []

    @property
    def cert_dir(self) -> Path:
        return CERT_DIR

    @property
    def ca_path(self) -> Path:
        return CERT_DIR / "ca.pem"


# ---- the stand-ins and probes ---------------------------------------------------------------------------
_stopped: list[int] = []


def _catch_stop() -> None:
    """From here on, SIGINT and SIGTERM (what stopping a service sends) only mark the stand-in stopped:
    set before it says it is ready, so a stop right after is never lost."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: _stopped.append(signum))
    # a Capture asks its tcpdumps for their counts (SIGUSR1) before it stops them; the sidecar's real
    # tcpdump cannot be asked from here, so the stand-in says nothing and the Capture does not wait
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _hold(on_stop=None) -> int:
    """Stay until stopped, run `on_stop`, exit 0."""
    while not _stopped:
        time.sleep(0.05)
    if on_stop:
        on_stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.topology.pod", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("twin", help="ready when the twin answers and its CA is there")
    t.add_argument("host")
    t.add_argument("port", type=int)
    t.add_argument("ca", type=Path)
    t.add_argument("--timeout", type=float, default=5.0)
    t.add_argument("--hold", action="store_true", help="stand for the twin: print its URL, stay until stopped")
    c = sub.add_parser("capture", help="ready when every tcpdump log says it is listening")
    c.add_argument("logs", nargs="+", type=Path)
    a = sub.add_parser("attach", help="stand for one sidecar tcpdump; on stop copy its spool to -w's file")
    a.add_argument("spool", type=Path)
    a.add_argument("log", type=Path)
    a.add_argument("out", type=Path, help="the file the Capture asked its tcpdump to write")
    args = p.parse_args(argv)
    if args.cmd == "attach" or (args.cmd == "twin" and args.hold):
        _catch_stop()
    if args.cmd == "capture":
        why = capture_problem(args.logs)
        print(why or "capture sidecar listening", file=sys.stderr if why else sys.stdout)
        return 1 if why else 0
    if args.cmd == "twin":
        why = twin_problem(args.host, args.port, args.ca)
        deadline = time.monotonic() + args.timeout
        while why and time.monotonic() < deadline:
            time.sleep(0.5)
            why = twin_problem(args.host, args.port, args.ca)
        if why:
            print(f"twin not ready: {why}", file=sys.stderr)
            return 1
        print(f"twin of the pod spec at https://{args.host}:{args.port}", flush=True)
        return _hold() if args.hold else 0
    wait_for(lambda: capture_problem([args.log]), "capture sidecar", 5.0)
    sys.stderr.write(args.log.read_text(errors="replace"))      # the tcpdump's own lines, for the Capture
    sys.stderr.flush()
    return _hold(lambda: shutil.copyfile(args.spool, args.out))


if __name__ == "__main__":
    raise SystemExit(main())
