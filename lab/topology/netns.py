"""The lab in two plain network namespaces joined by a veth pair (root, no Docker).

    client  ll-<run>-c   eth0 10.203.N.1/24  <── veth ──>  eth0 10.203.N.2/24   ll-<run>-e  endpoint

Both ends are called eth0, as in the Compose topology, so faults and captures name the same
device everywhere. N is chosen per run id (a hash, skipping subnets that another lab namespace
already uses) so runs can coexist. `up()` builds only the network (setup ~tens of ms); the nodes
`topo.client` and `topo.endpoint` start processes with `popen([...])`. Every process started on
them, tcpdump included, is recorded under /run/livelab/ so `lab down` can end it after a SIGKILL;
the process that calls `up()` is recorded as the run's owner there, so `lab down` spares the run
while that process lives (netem.cleanup). `down()` is idempotent and never raises.

With `links=[...]` (a scenario's `topology: {router: true, links: [wifi, cell]}`) a third namespace
ll-<run>-r sits between them as `topo.router`, and the client reaches it over one or two access
links, each with its own /28, RTT and loss (lab/topology/router.py, which also does `switch()`).
Without it the two nodes and their one link are exactly as above.

With `uplink=True` (live mode) the client namespace also reaches the outside world through the host:

    client  ll-<run>-c   up0 10.204.M.2/30  <── veth ──>  llu-<hash> 10.204.M.1/30   root namespace

a default route via the host end, MASQUERADE for the /30 (nat chain LL_NAT, from POSTROUTING),
ACCEPT rules in LL_FWD (from FORWARD) where the FORWARD policy is DROP (Docker's), ip_forward on,
and /etc/netns/ll-<run>-c/resolv.conf so `ip netns exec` processes resolve names. Faults still go
into the client namespace's OUTPUT/INPUT, so they hit the uplink flows as they hit eth0's. Every
rule carries the comment `livelab <run>`; `down()` (and `lab down` after a SIGKILL) removes them.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from lab.errors import CapabilityError, LabError
from lab.topology.base import Node, Topology, require_tools
from lab.topology import starter
from lab.topology import uplink as uplinks  # the module; `uplink` is the flag below
from lab.topology.router import Router, make_netns, netlink, parse_links
from netem import cleanup
from netem.kernel import in_netns, list_netns, write_sysctl

BASE_NET = ipaddress.ip_network("10.203.0.0/16")
UPLINK_NET = ipaddress.ip_network("10.204.0.0/16")
UPLINK_SLOTS = UPLINK_NET.num_addresses // 4  # /30s
DEV = "eth0"
UPLINK_DEV = "up0"
HOST_RESOLV = Path("/etc/resolv.conf")
RESOLVED_UPSTREAM = Path("/run/systemd/resolve/resolv.conf")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _lab_addresses(root: bool = False) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses in every lab namespace (and the current one if `root`)."""
    from pyroute2 import IPRoute

    found: list[ipaddress.IPv4Address] = []
    # in_netns, not pyroute2's NetNS (netem.kernel.in_netns says why; this scan visits every lab
    # namespace on the machine, another run's being torn down among them). In a thread of its own, never the caller's: a teardown finds what still runs in a namespace
    # with `ip netns pids` (netem.cleanup), which reads each process's main thread, so a main thread
    # visiting another run's namespace as that run goes down would be taken for a leftover and killed.
    names = ([None] if root else []) + [ns for ns in list_netns() if ns.startswith("ll-")]

    def scan() -> None:
        for ns in names:
            try:
                with in_netns(ns), IPRoute() as ipr:
                    found.extend(ipaddress.ip_address(a.get_attr("IFA_ADDRESS")) for a in ipr.get_addr(family=2))
            except Exception:
                continue

    t = threading.Thread(target=scan, name="lab-address-scan", daemon=True)
    t.start()
    t.join()
    return found


def _used_subnets() -> set[int]:
    """Third octets of 10.203.x.0/24 already used in any lab namespace."""
    return {ip.packed[2] for ip in _lab_addresses() if ip in BASE_NET}


def _used_uplinks() -> set[int]:
    """Indices of the 10.204.0.0/16 /30s used in a lab namespace or on a link of this one."""
    return {(int(ip) - int(UPLINK_NET.network_address)) // 4 for ip in _lab_addresses(root=True) if ip in UPLINK_NET}


class _Claims:
    """Subnets and uplink /30s this process has picked and not yet released. A pick scans the lab
    namespaces for used addresses, and a subnet is in use only once its addresses are set: two runs
    of one process side by side (`lab matrix -j N`) could both scan before either set them and pick
    the same one. The scan and the claim are one step under the lock; down() releases."""

    def __init__(self):
        self.lock = threading.Lock()
        self.subnets: set[int] = set()
        self.uplinks: set[int] = set()


_CLAIMS = _Claims()


def _host_resolv() -> str:
    """The host's resolv.conf; systemd-resolved's upstream list if the host's names only a
    loopback stub (127.0.0.53 is not reachable from another namespace)."""
    text = HOST_RESOLV.read_text()
    servers = [l.split()[1] for l in text.splitlines() if l.startswith("nameserver") and len(l.split()) > 1]
    try:
        loopback_only = servers and all(ipaddress.ip_address(s.split("%")[0]).is_loopback for s in servers)
    except ValueError:
        loopback_only = False
    if loopback_only and RESOLVED_UPSTREAM.exists():
        return RESOLVED_UPSTREAM.read_text()
    return text


class NetnsTopology(Topology):
    name = "netns"

    def __init__(self, run_id: str, endpoint_port: int = 8443, ca_path: str | Path | None = None,
                 sysctls: dict[str, str | int] | None = None, subnet: int | None = None,
                 pid_dir: Path | None = None, uplink: bool = False, secrets_dir: Path | str | None = None,
                 run_dir: Path | str | None = None, log=print, links=()):
        # secrets_dir: the twin's certificates go under it (both namespaces see the host's files);
        # run_dir: part of every topology's signature, nothing to do with it here; log: the fork
        # server's one line if it cannot start
        if not _RUN_ID_RE.match(run_id):
            raise LabError(f"run id {run_id!r}: use 1-64 characters of A-Z a-z 0-9 _ . -")
        self.run_id = run_id
        self.ns_client = f"ll-{run_id}-c"
        self.ns_endpoint = f"ll-{run_id}-e"
        self._port = int(endpoint_port)
        if ca_path is None and secrets_dir is not None:
            ca_path = Path(secrets_dir) / "certs" / "ca.pem"
        self._ca_path = Path(ca_path) if ca_path else None
        self.sysctls = dict(sysctls or {})
        self._subnet = subnet
        self._claimed_subnet: int | None = None     # picked by this topology: released by down()
        self._claimed_uplink: int | None = None
        self.pid_dir = pid_dir
        self._procs: list[tuple[subprocess.Popen, Path]] = []    # or the starter's Popen-likes
        self.log = log
        self._forks = None   # the invocation's process starter (lab.topology.starter), from up() on
        self.uplink = bool(uplink)
        self.uplink_ifname = uplinks.uplink_ifname(run_id)  # root-namespace end of the uplink veth
        self.uplink_dev = UPLINK_DEV                          # client-namespace end
        self._uplink: int | None = None                       # index of the /30 in 10.204.0.0/16
        self.uplink_forward_rules = False                     # LL_FWD rules added (FORWARD policy DROP)
        self._up = False
        self.client = NetnsNode(self, "client", self.ns_client)
        self.endpoint = NetnsNode(self, "endpoint", self.ns_endpoint)
        # links: a router between the nodes (lab/topology/router.py); none: the one direct link
        self.router_part = Router(self, parse_links(links)) if links else None
        self.router = NetnsNode(self, "router", self.router_part.ns) if self.router_part else None
        if self.router_part and self.uplink:
            raise LabError("a router topology has no live-mode uplink yet: drop links or uplink")

    @classmethod
    def preflight(cls, client_tools: frozenset[str] = frozenset(), uplink: bool = False) -> None:
        if os.geteuid() != 0:
            raise CapabilityError("the netns topology needs root (network namespaces and iptables); "
                                  "run as root or use --topology compose")
        for tool in ("ip", "iptables", "iptables-restore", "tcpdump"):
            if not shutil.which(tool):
                raise CapabilityError(f"the netns topology needs {tool!r}; run `make setup` as root")
        require_tools("this machine (the netns client runs on the host's files)", client_tools, shutil.which,
                      "apt-get install {}")

    # --------------------------------------------------------------------------- addresses
    @property
    def subnet(self) -> ipaddress.IPv4Network:
        if self._subnet is None:
            raise LabError("the topology is not up yet: no subnet chosen")
        return ipaddress.ip_network(f"10.203.{self._subnet}.0/24")

    @property
    def client_host(self) -> str:
        if self.router_part:  # the address on the access link the client is on now
            return self.addresses.client_on(self.router_part.active)
        return str(self.subnet.network_address + 1)

    @property
    def addresses(self):
        """A router topology's layout of the subnet (lab.topology.router.Addresses)."""
        return self.router_part.addresses

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

    @property
    def cert_dir(self) -> Path:
        return self.ca_path.parent

    @property
    def uplink_subnet(self) -> ipaddress.IPv4Network:
        if not self.uplink:
            raise LabError("this topology has no uplink (pass uplink=True)")
        if self._uplink is None:
            raise LabError("the topology is not up yet: no uplink subnet chosen")
        return ipaddress.ip_network(f"{UPLINK_NET.network_address + 4 * self._uplink}/30")

    @property
    def uplink_host_ip(self) -> str:
        """The root-namespace end of the uplink (the client's default gateway), e.g. 10.204.M.1."""
        return str(self.uplink_subnet.network_address + 1)

    @property
    def uplink_client_ip(self) -> str:
        """The client namespace's address on up0, e.g. 10.204.M.2."""
        return str(self.uplink_subnet.network_address + 2)

    def _pick_subnet(self) -> int:
        with _CLAIMS.lock:
            used = _used_subnets() | _CLAIMS.subnets
            start = int(hashlib.sha1(self.run_id.encode()).hexdigest(), 16) % 254 + 1
            for i in range(254):
                n = (start - 1 + i) % 254 + 1
                if n not in used:
                    _CLAIMS.subnets.add(n)
                    self._claimed_subnet = n
                    return n
        raise CapabilityError("every 10.203.x.0/24 is used by lab namespaces; run `lab down`")

    def _pick_uplink(self) -> int:
        with _CLAIMS.lock:
            used = _used_uplinks() | _CLAIMS.uplinks
            start = int(hashlib.sha1(b"uplink " + self.run_id.encode()).hexdigest(), 16) % UPLINK_SLOTS
            for i in range(UPLINK_SLOTS):
                n = (start + i) % UPLINK_SLOTS
                if n not in used:
                    _CLAIMS.uplinks.add(n)
                    self._claimed_uplink = n
                    return n
        raise CapabilityError("every 10.204.x.y/30 is in use; run `lab down`")

    def _release_claims(self) -> None:
        with _CLAIMS.lock:
            _CLAIMS.subnets.discard(self._claimed_subnet)
            _CLAIMS.uplinks.discard(self._claimed_uplink)
        self._claimed_subnet = self._claimed_uplink = None

    # --------------------------------------------------------------------------- up / down
    def up(self) -> None:
        if self._up:
            return
        if os.geteuid() != 0:
            raise CapabilityError("the netns topology needs root (network namespaces, veth, iptables)")
        from pyroute2.netlink.exceptions import NetlinkError

        for ns in (self.ns_client, self.ns_endpoint) + ((self.router_part.ns,) if self.router_part else ()):
            if ns in list_netns():
                raise LabError(f"namespace {ns} already exists: run id {self.run_id!r} is in use (or run `lab down`)")
        # this process owns the run from here: a machine-wide `lab down` leaves it alone while we live
        try:
            cleanup.claim(self.run_id, self.pid_dir)
        except RuntimeError as e:
            raise LabError(f"{e} (or run `lab down` once it is gone)") from None
        except OSError as e:
            raise CapabilityError(f"could not record the run's owner under {self.pid_dir or cleanup.PID_DIR}: "
                                  f"{e.strerror}") from None
        if self._subnet is None:
            self._subnet = self._pick_subnet()
        # started now, its imports run while the namespaces are made (a second run finds it ready)
        self._forks = starter.current(self.log)
        self._up = True  # from here on, down() has something to remove
        try:
            make_netns(self.ns_client)
            make_netns(self.ns_endpoint)
            if self.router_part:
                self.router_part.up()
            else:
                self._direct_link_up()
            for key, value in self.sysctls.items():
                self.set_sysctl(key, value)
            if self.uplink:
                self._uplink_up()
        except NetlinkError as e:
            self.down()
            raise CapabilityError(f"could not build the netns topology: {os.strerror(e.code)}") from None
        except LabError:
            self.down()
            raise
        except Exception as e:
            self.down()
            raise CapabilityError(f"could not build the netns topology: {type(e).__name__}: {e}") from None

    def _direct_link_up(self) -> None:
        """The one veth between client and endpoint (no router)."""
        tmp = f"llp{os.getpid() % 10**8}"
        with netlink(self.ns_client) as c:
            c.link("add", ifname=DEV, kind="veth", peer=tmp)
            peer = c.link_lookup(ifname=tmp)[0]
            c.link("set", index=peer, net_ns_fd=self.ns_endpoint)
            idx = c.link_lookup(ifname=DEV)[0]
            c.addr("add", index=idx, address=self.client_host, prefixlen=24)
            c.link("set", index=idx, state="up")
            c.link("set", index=c.link_lookup(ifname="lo")[0], state="up")
        with netlink(self.ns_endpoint) as e:
            idx = e.link_lookup(ifname=tmp)[0]
            e.link("set", index=idx, ifname=DEV)
            e.addr("add", index=idx, address=self.endpoint_host, prefixlen=24)
            e.link("set", index=idx, state="up")
            e.link("set", index=e.link_lookup(ifname="lo")[0], state="up")

    def _uplink_up(self) -> None:
        """The veth to the root namespace, its addresses and route, NAT/forwarding, resolv.conf."""
        host = self.uplink_ifname
        with uplinks.uplink_lock():  # the /30 pick, the shared chains and ip_forward, one run at a time
            if host in uplinks.uplink_links():
                raise LabError(f"uplink {host} already exists: run id {self.run_id!r} is in use (or run `lab down`)")
            self._uplink = self._pick_uplink()
            net = self.uplink_subnet
            with netlink(None) as ipr:
                ipr.link("add", ifname=host, kind="veth", peer={"ifname": UPLINK_DEV, "net_ns_fd": self.ns_client})
                idx = ipr.link_lookup(ifname=host)[0]
                ipr.addr("add", index=idx, address=self.uplink_host_ip, prefixlen=30)
                ipr.link("set", index=idx, state="up")
            with netlink(self.ns_client) as c:
                idx = c.link_lookup(ifname=UPLINK_DEV)[0]
                c.addr("add", index=idx, address=self.uplink_client_ip, prefixlen=30)
                c.link("set", index=idx, state="up")
                c.route("add", dst="0.0.0.0/0", gateway=self.uplink_host_ip, oif=idx)
            uplinks.enable_ip_forward()
            self._uplink_rules(host, net)
        d = uplinks.NETNS_ETC / self.ns_client
        d.mkdir(parents=True, exist_ok=True)
        (d / "resolv.conf").write_text(_host_resolv())

    def _uplink_rules(self, host: str, net: ipaddress.IPv4Network) -> None:
        """MASQUERADE in LL_NAT; ACCEPT in LL_FWD if FORWARD drops by default. Only the lab's chains
        and one jump to each are created; nothing else in the tables is touched."""
        tag = f'-m comment --comment "{uplinks.uplink_comment(self.run_id)}"'
        rc, out, err = uplinks.ipt(["iptables", "-S", "FORWARD"])
        if rc != 0:
            raise CapabilityError(f"iptables in the root namespace: {err.strip() or rc}")
        self.uplink_forward_rules = "-P FORWARD DROP" in out.splitlines()
        plan = [("nat", "POSTROUTING", uplinks.NAT_CHAIN, [f"-s {net} ! -o {host} {tag} -j MASQUERADE"])]
        if self.uplink_forward_rules:
            plan.append(("filter", "FORWARD", uplinks.FWD_CHAIN, [
                f"-i {host} {tag} -j ACCEPT",
                f"-o {host} -m conntrack --ctstate RELATED,ESTABLISHED {tag} -j ACCEPT"]))
        for table, hook, chain, rules in plan:
            rc, out, err = uplinks.ipt(["iptables", "-t", table, "-S"])
            if rc != 0:
                raise CapabilityError(f"iptables -t {table} in the root namespace: {err.strip() or rc}")
            lines = out.splitlines()
            text = [f"*{table}"]
            if f"-N {chain}" not in lines:
                text.append(f"-N {chain}")  # not ":chain": under --noflush that would flush other runs' rules
            if f"-A {hook} -j {chain}" not in lines:
                text.append(f"-I {hook} 1 -j {chain}")
            text += [f"-A {chain} {r}" for r in rules] + ["COMMIT"]
            rc, _, err = uplinks.ipt(["iptables-restore", "--noflush"], "\n".join(text) + "\n")
            if rc != 0:
                raise CapabilityError(f"could not add the uplink rules ({table}): {err.strip()[-300:]}")

    def set_sysctl(self, key: str, value: str | int, where: str = "client") -> None:
        """Set a net.* sysctl inside one namespace (opening /proc/sys from a thread inside it)."""
        if not re.match(r"^net\.[A-Za-z0-9_.-]+$", key):
            raise LabError(f"sysctl {key!r}: only net.* keys are per-namespace")
        ns = self.ns_client if where == "client" else self.ns_endpoint
        try:
            write_sysctl(ns, key, value)
        except OSError as e:
            raise LabError(f"sysctl {key}={value} in {ns}: {e.strerror}") from None

    def down(self) -> None:
        """Stop what was started on the nodes, delete both namespaces. Idempotent, never raises."""
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
        if self.router_part:
            self.router_part.down()
        # A loaded machine can make one pass fail part-way (a slow `ip netns pids`, a namespace busy
        # for a moment): a run must not leave its namespaces behind, so a second pass takes what the
        # first left, and what still stays is said, not swallowed.
        errors: list[str] = []
        for _ in range(2):
            try:
                errors = uplinks.down(self.run_id, current_ns=False, pid_dir=self.pid_dir)["errors"]
            except Exception as e:
                errors = [f"{type(e).__name__}: {e}"]
            if not any(n.startswith(f"ll-{self.run_id}-") for n in list_netns()):
                break
        else:
            self.log(f"  teardown left namespaces of {self.run_id}: {'; '.join(errors) or 'no error said why'}")
        self._up = False
        self._release_claims()     # the addresses went with the namespaces

    # --------------------------------------------------------------------------- processes
    def _exec(self, ns: str, role: str, argv: list[str], **popen_kw) -> subprocess.Popen:
        """The lab's own Python processes started by the installed starter (lab.topology.starter: the
        fork server, lab/forkserver/, forks them pre-imported); anything else (tcpdump, another venv's
        app), or everything when none is installed, exec'd with `ip netns exec`.
        Either way the same namespace, /sys and /etc view, stdio, pidfile."""
        if not self._up:
            raise LabError("the topology is not up")
        popen_kw.setdefault("start_new_session", True)  # a Ctrl-C to the lab does not hit it twice
        proc = None
        if self._forks is not None:
            try:
                proc = self._forks.spawn(ns, argv, **popen_kw)
            except OSError as e:
                self.log(f"  fork server: {e}; this one started with `ip netns exec`")
        if proc is None:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], **popen_kw)
        pidfile = cleanup.record(role, proc.pid, self.run_id, self.pid_dir, argv=argv[:4], netns=ns)
        self._procs.append((proc, pidfile))
        return proc


class NetnsNode(Node):
    """A network namespace of a NetnsTopology: `popen` is `ip netns exec <ns>`, every process is
    recorded under /run/livelab/ so `lab down` can end it after a SIGKILL."""

    def __init__(self, topo: NetnsTopology, name: str, ns: str):
        super().__init__(name)
        self.topo, self.ns = topo, ns

    @property
    def host(self) -> str:
        return self.ip

    @property
    def ip(self) -> str:
        if self.name == "router":  # its end of the core link (lab/topology/router.py)
            return self.topo.addresses.router_core
        return self.topo.client_host if self.name == "client" else self.topo.endpoint_host

    @property
    def dev(self) -> str:
        # in live mode the client's traffic leaves through the uplink, not the link to the endpoint;
        # behind a router, through the access link it is on now
        if self.name == "client" and self.topo.router_part:
            return self.topo.router_part.active.name
        return self.topo.uplink_dev if self.name == "client" and self.topo.uplink else DEV

    def popen(self, argv: list[str], role: str = "proc", **popen_kw) -> subprocess.Popen:
        return self.topo._exec(self.ns, role, argv, **popen_kw)
