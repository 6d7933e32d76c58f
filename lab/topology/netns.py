"""The lab in two plain network namespaces joined by a veth pair (root, no Docker).

    client  ll-<run>-c   eth0 10.203.N.1/24  <── veth ──>  eth0 10.203.N.2/24   ll-<run>-e  endpoint

Both ends are called eth0, as in the Compose topology, so faults and captures name the same
device everywhere. N is chosen per run id (a hash, skipping subnets that another lab namespace
already uses) so runs can coexist. `up()` builds only the network (setup ~tens of ms); the lead
starts the twin with `endpoint_exec([...])` and the agent with `client_exec([...])`. Every process
started here, tcpdump included, is recorded under /run/livelab/ so `lab down` can end it after a
SIGKILL. `down()` is idempotent and never raises.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from lab.errors import CapabilityError, LabError
from lab.topology.base import Topology
from netem import cleanup
from netem.kernel import in_netns, list_netns

BASE_NET = ipaddress.ip_network("10.203.0.0/16")
DEV = "eth0"
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _used_subnets() -> set[int]:
    """Third octets of 10.203.x.0/24 already used in any lab namespace."""
    from pyroute2 import NetNS

    used = set()
    for ns in list_netns():
        if not ns.startswith("ll-"):
            continue
        try:
            with NetNS(ns) as ipr:
                for a in ipr.get_addr(family=2):
                    ip = ipaddress.ip_address(a.get_attr("IFA_ADDRESS"))
                    if ip in BASE_NET:
                        used.add(ip.packed[2])
        except Exception:
            continue
    return used


class NetnsTopology(Topology):
    name = "netns"

    def __init__(self, run_id: str, endpoint_port: int = 8443, ca_path: str | Path | None = None,
                 sysctls: dict[str, str | int] | None = None, subnet: int | None = None,
                 pid_dir: Path | None = None):
        if not _RUN_ID_RE.match(run_id):
            raise LabError(f"run id {run_id!r}: use 1-64 characters of A-Z a-z 0-9 _ . -")
        self.run_id = run_id
        self.ns_client = f"ll-{run_id}-c"
        self.ns_endpoint = f"ll-{run_id}-e"
        self.client_dev = DEV
        self._port = int(endpoint_port)
        self._ca_path = Path(ca_path) if ca_path else None
        self.sysctls = dict(sysctls or {})
        self._subnet = subnet
        self.pid_dir = pid_dir
        self._procs: list[tuple[subprocess.Popen, Path]] = []
        self._capture: list[tuple[subprocess.Popen, Path, Path]] = []
        self._up = False

    # --------------------------------------------------------------------------- addresses
    @property
    def subnet(self) -> ipaddress.IPv4Network:
        if self._subnet is None:
            raise LabError("the topology is not up yet: no subnet chosen")
        return ipaddress.ip_network(f"10.203.{self._subnet}.0/24")

    @property
    def client_host(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def endpoint_host(self) -> str:
        return str(self.subnet.network_address + 2)

    @property
    def endpoint_port(self) -> int:
        return self._port

    @endpoint_port.setter
    def endpoint_port(self, port: int) -> None:
        self._port = int(port)

    @property
    def ca_path(self) -> Path:
        if self._ca_path is None:
            raise LabError("no CA path set for this topology (pass ca_path=...)")
        return self._ca_path

    @ca_path.setter
    def ca_path(self, p: str | Path) -> None:
        self._ca_path = Path(p)

    def _pick_subnet(self) -> int:
        used = _used_subnets()
        start = int(hashlib.sha1(self.run_id.encode()).hexdigest(), 16) % 254 + 1
        for i in range(254):
            n = (start - 1 + i) % 254 + 1
            if n not in used:
                return n
        raise CapabilityError("every 10.203.x.0/24 is used by lab namespaces; run `lab down`")

    # --------------------------------------------------------------------------- up / down
    def up(self) -> None:
        if self._up:
            return
        if os.geteuid() != 0:
            raise CapabilityError("the netns topology needs root (network namespaces, veth, iptables)")
        from pyroute2 import NetNS, netns
        from pyroute2.netlink.exceptions import NetlinkError

        for ns in (self.ns_client, self.ns_endpoint):
            if ns in list_netns():
                raise LabError(f"namespace {ns} already exists: run id {self.run_id!r} is in use (or run `lab down`)")
        if self._subnet is None:
            self._subnet = self._pick_subnet()
        self._up = True  # from here on, down() has something to remove
        try:
            netns.create(self.ns_client)
            netns.create(self.ns_endpoint)
            tmp = f"llp{os.getpid() % 10**8}"
            with NetNS(self.ns_client) as c:
                c.link("add", ifname=DEV, kind="veth", peer=tmp)
                peer = c.link_lookup(ifname=tmp)[0]
                c.link("set", index=peer, net_ns_fd=self.ns_endpoint)
                idx = c.link_lookup(ifname=DEV)[0]
                c.addr("add", index=idx, address=self.client_host, prefixlen=24)
                c.link("set", index=idx, state="up")
                c.link("set", index=c.link_lookup(ifname="lo")[0], state="up")
            with NetNS(self.ns_endpoint) as e:
                idx = e.link_lookup(ifname=tmp)[0]
                e.link("set", index=idx, ifname=DEV)
                e.addr("add", index=idx, address=self.endpoint_host, prefixlen=24)
                e.link("set", index=idx, state="up")
                e.link("set", index=e.link_lookup(ifname="lo")[0], state="up")
            for key, value in self.sysctls.items():
                self.set_sysctl(key, value)
        except NetlinkError as e:
            self.down()
            raise CapabilityError(f"could not build the netns topology: {os.strerror(e.code)}") from None
        except LabError:
            self.down()
            raise
        except Exception as e:
            self.down()
            raise CapabilityError(f"could not build the netns topology: {type(e).__name__}: {e}") from None

    def set_sysctl(self, key: str, value: str | int, where: str = "client") -> None:
        """Set a net.* sysctl inside one namespace (opening /proc/sys from a thread inside it)."""
        if not re.match(r"^net\.[A-Za-z0-9_.-]+$", key):
            raise LabError(f"sysctl {key!r}: only net.* keys are per-namespace")
        ns = self.ns_client if where == "client" else self.ns_endpoint
        path = "/proc/sys/" + key.replace(".", "/")
        with in_netns(ns):
            try:
                with open(path, "w") as fh:
                    fh.write(str(value))
            except OSError as e:
                raise LabError(f"sysctl {key}={value} in {ns}: {e.strerror}") from None

    def down(self) -> None:
        """Stop what was started here, delete both namespaces. Idempotent, never raises."""
        try:
            self.capture_stop()
        except Exception:
            pass
        for proc, pidfile in self._procs:
            try:
                if proc.poll() is None:
                    cleanup.stop_pid(proc.pid, grace=1.0)
                proc.wait(timeout=1)
            except Exception:
                pass
            cleanup.forget(pidfile)
        self._procs = []
        if not self._up:
            return
        try:
            cleanup.down(self.run_id, current_ns=False, pid_dir=self.pid_dir)
        except Exception:
            pass
        self._up = False

    # --------------------------------------------------------------------------- processes
    def _exec(self, ns: str, role: str, argv: list[str], **popen_kw) -> subprocess.Popen:
        if not self._up:
            raise LabError("the topology is not up")
        popen_kw.setdefault("start_new_session", True)  # a Ctrl-C to the lab does not hit it twice
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], **popen_kw)
        pidfile = cleanup.record(role, proc.pid, self.run_id, self.pid_dir, argv=argv[:4], netns=ns)
        self._procs.append((proc, pidfile))
        return proc

    def client_exec(self, argv: list[str], role: str = "agent", **popen_kw) -> subprocess.Popen:
        """Start a process inside the client namespace (recorded for `lab down`)."""
        return self._exec(self.ns_client, role, argv, **popen_kw)

    def endpoint_exec(self, argv: list[str], role: str = "twin", **popen_kw) -> subprocess.Popen:
        """Start a process inside the endpoint namespace (recorded for `lab down`)."""
        return self._exec(self.ns_endpoint, role, argv, **popen_kw)

    # --------------------------------------------------------------------------- capture
    def capture_start(self, run_dir: Path) -> None:
        """tcpdump on the client's eth0 and on nflog:5 (the packets the lab's faults dropped)."""
        if self._capture:
            raise LabError("a capture is already running in this topology")
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        common = ["tcpdump", "--immediate-mode", "-U", "-Z", "root"]
        plan = [("tcpdump-eth", ["-i", self.client_dev, "--time-stamp-precision=nano"], "raw-eth.pcap"),
                ("tcpdump-nflog", ["-i", "nflog:5"], "raw-nflog.pcap")]
        try:
            for role, args, out in plan:
                log = run_dir / f"{role}.log"
                with open(log, "wb") as fh:
                    proc = self._exec(self.ns_client, role, [*common, *args, "-w", str(run_dir / out)],
                                      stdout=subprocess.DEVNULL, stderr=fh)
                self._capture.append((proc, run_dir / out, log))
            self._wait_listening()
        except Exception:
            self.capture_stop()
            raise

    def _wait_listening(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        pending = list(self._capture)
        while pending and time.monotonic() < deadline:
            for item in list(pending):
                proc, _out, log = item
                text = log.read_text(errors="replace")
                if "listening on" in text:
                    pending.remove(item)
                elif proc.poll() is not None:
                    raise CapabilityError(f"tcpdump in {self.ns_client} exited: {text.strip().splitlines()[-1:] or proc.returncode}")
            time.sleep(0.005)
        if pending:
            raise CapabilityError("tcpdump did not start listening within 5 s")

    def capture_stop(self) -> list[Path]:
        """SIGINT both tcpdumps (they flush and close their files), wait; return the pcap paths."""
        out = []
        for proc, path, _log in self._capture:
            try:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        for proc, path, _log in self._capture:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2)
            for p, pidfile in list(self._procs):
                if p is proc:
                    cleanup.forget(pidfile)
                    self._procs.remove((p, pidfile))
            if path.exists():
                out.append(path)
        self._capture = []
        return out
