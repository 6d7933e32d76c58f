"""The services a run starts on a topology's nodes: the twin, the freeze proxy, the capture.

Each is a process started with `node.popen()`, so the same object, with the same arguments, runs in
network namespaces and in containers. Each is the one place that knows its own command line:

    Twin(topo.endpoint, ...).start()     `lab twin serve` with the run's clock (--t0) and seed
    Proxy(topo.endpoint).start()         `lab proxy serve --freeze-first 1`
    Capture.of(topo, run_dir).start()    tcpdump on the client's link and on nflog:5 (and the router's)
    RouterService(topo.router, ip, run_id).start()   the router's faults for the agent (Compose)

A service is ready when it says so on its output (the twin prints its https:// URL, the proxy
"proxy: CONNECT on ...", tcpdump "listening on ..."); the wait has a real deadline.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lab.capture import RAW_FILES, finalize
from lab.errors import CapabilityError
from lab.events import read_events
from lab.protocols import DEFAULT as DEFAULT_PROTOCOL
from lab.topology.base import Node
from lab.topology.router_service import PORT as ROUTER_SERVICE_PORT
from lab.topology.router_service import READY_LINE as ROUTER_SERVICE_READY

READY_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0


def _drain(fd: int) -> None:
    """Read a service's output until it closes, so the service never blocks on a full pipe."""
    threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(fd, 65536), b"")], daemon=True).start()


def wait_ready(proc: subprocess.Popen, what: str, words: tuple[str, ...], timeout: float) -> None:
    """Wait until `proc` prints a line holding one of `words`; then keep draining its output."""
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
            if any(w in line.lower() for w in words):
                _drain(fd)
                return
    proc.kill()
    raise CapabilityError(f"the {what} did not start within {timeout:.0f} s: "
                          f"{' | '.join(seen[-3:]) or 'no output'}")


_COUNT_RE = re.compile(r"(\d+) packets? (captured|received by filter)")


def _tcpdump_counts(log: Path) -> tuple[int, int] | None:
    """(packets written, packets its filter took in) from tcpdump's last statistics in its log."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    last: dict[str, int] = {}
    for n, what in _COUNT_RE.findall(text):
        last[what] = int(n)
    if "captured" not in last or "received by filter" not in last:
        return None
    return last["captured"], last["received by filter"]


def stop_process(proc: subprocess.Popen | None, sig: int | None = signal.SIGTERM,
                 timeout: float = STOP_TIMEOUT) -> None:
    """Signal a process on its node (unless `sig` is None) and wait; kill it if it does not end in
    time. Never raises."""
    if proc is None:
        return
    try:
        if sig is not None and proc.poll() is None:
            proc.send_signal(sig)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
    except OSError:
        pass


class Service:
    """A long-running process on one node, ready when it prints one of `ready_words`."""

    role: str
    ready_words: tuple[str, ...]

    def __init__(self, node: Node):
        self.node = node
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = READY_TIMEOUT):
        self.proc = self.node.popen(self.argv(), role=self.role, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_ready(self.proc, self.role, self.ready_words, timeout)
        return self

    def stop(self) -> None:
        stop_process(self.proc)


class Twin(Service):
    """`lab twin serve` on the endpoint node: TLS on `port`, a certificate for the node's name, the
    run's clock (`t0`, so twin.jsonl counts from the run's start) and the run's seed. `t0=None`: a
    twin started before the run has a clock (the Kubernetes pod spec's) counts from its own start."""

    role = "twin"
    ready_words = ("https://",)
    control_port = 8444     # the control channel (lab.twin.control), for the agent's twin actions

    def __init__(self, node: Node, *, cert_dir: Path | str, api_key: str, log_path: Path | str, t0: float | None,
                 seed: int | str, port: int = 8443, extra: tuple[str, ...] = (), conversation: Path | str | None = None,
                 protocol: str = DEFAULT_PROTOCOL):
        # seed may be a placeholder the pod spec fills in per index ("$(SHARD)")
        super().__init__(node)
        self.cert_dir, self.api_key, self.log_path = Path(cert_dir), api_key, Path(log_path)
        self.t0, self.seed, self.port, self.extra = t0, seed, int(port), tuple(extra)
        self.conversation = conversation      # what its model plays (a file the twin's node can read)
        self.protocol = protocol              # the wire it speaks (lab.protocols)

    def argv(self) -> list[str]:
        # 0.0.0.0: the endpoint node has only its link and loopback, in every topology
        return [sys.executable, "-m", "lab", "twin", "serve", "--host", "0.0.0.0", "--port", str(self.port),
                "--cert-dir", str(self.cert_dir), "--san", self.node.host, "--api-key", self.api_key,
                "--log", str(self.log_path), *(["--t0", repr(self.t0)] if self.t0 is not None else []),
                "--seed", str(self.seed), "--control", f"0.0.0.0:{self.control_port}",
                *(["--conversation", str(self.conversation)] if self.conversation else []),
                *(["--protocol", self.protocol] if self.protocol != DEFAULT_PROTOCOL else []), *self.extra]

    @property
    def base_url(self) -> str:
        return f"https://{self.node.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.node.host}:{self.control_port}"


class Proxy(Service):
    """The freeze proxy (lab/proxy.py) on the endpoint node, for scenarios with endpoint: {via: proxy}."""

    role = "proxy"
    ready_words = ("connect on",)
    port = 8080
    control_port = 8081
    # only the session's first tunnel freezes: its resume connections must reach the twin
    freeze_first = 1

    def __init__(self, node: Node, idle_timeout_s: float | None = None, resolve: dict[str, str] | None = None):
        super().__init__(node)
        self.idle_timeout_s = idle_timeout_s  # a corporate proxy's idle timeout (endpoint.idle_timeout_s)
        # names the proxy dials elsewhere than DNS says: an unmodified app's API hostnames -> the twin
        self.resolve = dict(resolve or {})

    def argv(self) -> list[str]:
        idle = ["--idle-timeout", str(self.idle_timeout_s)] if self.idle_timeout_s else []
        names = [a for n, ip in sorted(self.resolve.items()) for a in ("--resolve", f"{n}={ip}")]
        return [sys.executable, "-m", "lab", "proxy", "serve", "--listen", f"0.0.0.0:{self.port}",
                "--control", f"0.0.0.0:{self.control_port}", "--freeze-first", str(self.freeze_first), *idle,
                *names]

    @property
    def url(self) -> str:
        return f"http://{self.node.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.node.host}:{self.control_port}"


class RouterService(Service):
    """The router service (lab/topology/router_service.py) on a router node, listening on `listen_ip`
    (in Compose the router container's ctl address): the router's FaultTable for an agent elsewhere."""

    role = "router-service"
    ready_words = (ROUTER_SERVICE_READY,)

    def __init__(self, node: Node, listen_ip: str, run_id: str, faults: tuple[dict, ...] = ()):
        super().__init__(node)
        self.listen_ip, self.run_id, self.faults = listen_ip, run_id, tuple(faults)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "lab.topology.router_service", "--listen", self.address, "--run-id", self.run_id,
                *(a for spec in self.faults for a in ("--fault", json.dumps(spec)))]

    @property
    def address(self) -> str:
        return f"{self.listen_ip}:{ROUTER_SERVICE_PORT}"


class Capture:
    """tcpdump on the client node's link (nanosecond stamps) and on nflog:5 (the packets the lab's
    faults dropped), written into the run folder; `finish()` merges them into capture.pcapng.

    With a `router` node and its access `links`, the client's wire is captured at the router's end
    of each link instead: the client's end of a link it is not on is down until a switch brings it
    up, and tcpdump cannot open a device that is down, while the router's ends are up for the whole
    run; a veth carries the same packets at both ends, so the cell traffic after a switch is there
    from its first packet. The router's own nflog:5 (its middlebox faults' drops: NFLOG groups are
    per namespace) is captured too."""

    LISTEN_TIMEOUT = 5.0

    def __init__(self, node: Node, run_dir: Path | str, router: Node | None = None, links: tuple[str, ...] = ()):
        if bool(router) != bool(links):
            raise CapabilityError("a capture with a router needs its access links, and links need the router")
        self.node = node
        self.router, self.links = router, tuple(links)
        self.run_dir = Path(run_dir)
        self._procs: list[tuple[subprocess.Popen, Path, Path, str]] = []

    @classmethod
    def of(cls, topo, run_dir: Path | str) -> "Capture":
        """The capture of a topology: its client, and its router with the access links if it has one."""
        part = getattr(topo, "router_part", None)
        if part is None:
            return cls(topo.client, run_dir)
        return cls(topo.client, run_dir, router=topo.router, links=tuple(l.name for l in part.links))

    def plan(self) -> list[tuple[Node, str, list[str], str]]:
        """(node, role, tcpdump options, raw file) for each tcpdump."""
        eth, nflog = RAW_FILES
        stamp = "--time-stamp-precision=nano"
        at = self.node.capture_node       # the client's namespace, from a sidecar where it has one
        if self.router is None:
            return [(at, "tcpdump-eth", ["-i", self.node.dev, stamp], eth),
                    (at, "tcpdump-nflog", ["-i", "nflog:5"], nflog)]
        return [*((self.router, f"tcpdump-{link}", ["-i", link, stamp], f"raw-eth-{link}.pcap") for link in self.links),
                (at, "tcpdump-nflog", ["-i", "nflog:5"], nflog),
                (self.router, "tcpdump-nflog-router", ["-i", "nflog:5"], "raw-nflog-router.pcap")]

    def commands(self) -> list[tuple[str, list[str], Path, Path]]:
        """(role, tcpdump command line, raw file, log of its stderr) for each tcpdump, without
        starting them (the Kubernetes pod spec runs them in its capture sidecar)."""
        return [(role, argv, out, log) for _node, role, argv, out, log in self._commands()]

    def _commands(self) -> list[tuple[Node, str, list[str], Path, Path]]:
        common = ["tcpdump", "--immediate-mode", "-U", "-Z", "root"]
        return [(node, role, [*common, *args, "-w", str(self.run_dir / name)], self.run_dir / name,
                 self.run_dir / f"{role}.log") for node, role, args, name in self.plan()]

    def start(self) -> "Capture":
        if self._procs:
            raise CapabilityError("this capture is already running")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            for node, role, argv, out, log in self._commands():
                out.unlink(missing_ok=True)      # a stale file must not pass for this run's capture
                with open(log, "wb") as fh:
                    proc = node.popen(argv, role=role, stdout=subprocess.DEVNULL, stderr=fh)
                self._procs.append((proc, out, log, node.name))
            self._wait_listening()
        except Exception:
            self.stop()
            raise
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + self.LISTEN_TIMEOUT
        pending = list(self._procs)
        while pending and time.monotonic() < deadline:
            for item in list(pending):
                proc, _out, log, where = item
                text = log.read_text(errors="replace")
                if "listening on" in text:
                    pending.remove(item)
                elif proc.poll() is not None:
                    raise CapabilityError(f"tcpdump on {where} exited: "
                                          f"{text.strip().splitlines()[-1:] or proc.returncode}")
            time.sleep(0.005)
        if pending:
            raise CapabilityError(f"tcpdump did not start listening within {self.LISTEN_TIMEOUT:.0f} s")

    DRAIN_TIMEOUT = 1.0
    DRAIN_SILENT_S = 0.1   # a tcpdump that says no counts by then (signal not passed on) is not waited for

    def _drain(self) -> None:
        """Wait until each tcpdump has written every packet its filter took in. SIGINT ends tcpdump at
        once and what is still in its ring is lost, and on a loaded machine that can be most of a
        quiet link's last packets ("1 packet captured, 10 packets received by filter"). SIGUSR1 makes
        tcpdump print those two counts to its log without stopping; bounded by DRAIN_TIMEOUT."""
        t0 = time.monotonic()
        pending = [(proc, log) for proc, _out, log, _where in self._procs if proc.poll() is None]
        while pending and time.monotonic() - t0 < self.DRAIN_TIMEOUT:
            for proc, _log in pending:
                try:
                    proc.send_signal(signal.SIGUSR1)
                except OSError:
                    pass
            time.sleep(0.02)
            still = []
            for proc, log in pending:
                counts = _tcpdump_counts(log)
                if counts is None and time.monotonic() - t0 < self.DRAIN_SILENT_S:
                    still.append((proc, log))
                elif counts is not None and counts[0] < counts[1] and proc.poll() is None:
                    still.append((proc, log))
            pending = still

    def stop(self) -> list[Path]:
        """Let every tcpdump write what it holds, SIGINT them (they flush and close their files),
        wait; return the raw pcaps."""
        self._drain()
        for proc, *_ in self._procs:
            try:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            except OSError:
                pass
        for proc, *_ in self._procs:
            stop_process(proc, None, timeout=3)      # signalled above: all stop at once
        raw = [out for _proc, out, *_ in self._procs if out.exists()]
        self._procs = []
        return raw

    def finish(self, keylog: Path | None = None) -> Path:
        """One pcapng of the raw files, a marker per event of events.jsonl, and the TLS secrets."""
        evp = self.run_dir / "events.jsonl"
        events = read_events(evp) if evp.exists() else []
        return finalize(self.run_dir, events, keylog=keylog if keylog and keylog.exists() else None)
