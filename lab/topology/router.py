"""A router node between client and endpoint, reached over one or two access links (netns, Compose).

    client ll-<run>-c                  router ll-<run>-r                       endpoint ll-<run>-e
      wifi 10.203.N.18/28 <── veth ──> wifi 10.203.N.17/28
      cell 10.203.N.34/28 <── veth ──> cell 10.203.N.33/28
                                        eth0 10.203.N.1/28  <── veth ──>  eth0 10.203.N.2/28

The router forwards (ip_forward 1) with conntrack on from the start (`nf_conntrack_timestamp` 1,
so relay_age counts a flow's age from its creation) and a strict reverse-path filter (rp_filter 1):
a packet from an address that does not belong behind the link it came in by is dropped, which is
what an access network does with a phone's old address after it moved. Faults that act on what the
router forwards (netem/kinds: nat_reap, relay_age, mtu_blackhole, or any match fault) go into the
router's own FaultTable (`router_table()`, chains hooked from FORWARD: netem.table.ROUTER_HOOKS).

Access links (LINKS): each has its own /28 and, optionally, a round-trip time and a loss rate made
on the router by the userspace `delay` kind (half the RTT each way: this kernel has no tc netem) and
the `loss` kind, both aimed at the client's address on that link. Only the first link of a run is up
at the start; `switch()` moves the client to another one, as a phone moving from Wi-Fi to cellular:

    break-before-make (overlap_s 0)  the old link goes down and its address is withdrawn, then the
                                     new one comes up and carries the default route
    make-before-break (overlap_s>0)  the new link comes up and new connections leave by it; the old
                                     one keeps carrying its own flows for overlap_s, then goes

The client routes by source address (one table per link, `ip rule from <addr>`), so during an
overlap an old flow keeps its old path; once the old address is gone its packets reach the router
by the new link with a source that does not belong there and die silently (rp_filter).

In Compose the same Router runs on addresses Docker assigned (`Assigned`, read from the containers
by lab/topology/compose.py), its client side in the client container's own namespace (the agent's:
`ns_client` None), and its FaultTable in the router container, reached through the router service
(`control`: lab/topology/router_service.py). The switch is the same code in both: it changes only
the client's addresses, rules and routes; the router's ends of the links stay up.
"""
from __future__ import annotations

import ipaddress
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from lab.errors import CapabilityError, LabError
from lab.topology.router_service import RemoteTable, forwarding_table
from netem import faults as fault_registry
from netem.kernel import in_netns
from netem.table import FaultTable

CORE_DEV = "eth0"         # the router's and the endpoint's ends of the core link
LINKS = ("wifi", "cell")  # the access links a scenario may name, in slot order (slot 1, 2 of the /24)
LINK_KEYS = {"rtt_ms", "loss"}
TABLE_BASE = 100          # the client's routing table for link slot i is TABLE_BASE + i


@dataclass(frozen=True)
class AccessLink:
    """One access link: its name (also both ends' device name), slot in the run's /24, and its
    path properties (made on the router)."""
    name: str
    rtt_ms: float = 0.0
    loss: float = 0.0

    @property
    def slot(self) -> int:
        return LINKS.index(self.name) + 1


def parse_links(value) -> tuple[AccessLink, ...]:
    """Links from a list of names, or of {name: {rtt_ms, loss}}; LabError (one line) on anything else."""
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= len(LINKS):
        raise LabError(f"links must be a list of 1-{len(LINKS)} access links from {list(LINKS)}, got {value!r}")
    out = []
    for item in value:
        name, props = (item, {}) if isinstance(item, str) else (next(iter(item)), next(iter(item.values()))) \
            if isinstance(item, dict) and len(item) == 1 else (None, None)
        if name not in LINKS or not isinstance(props, dict):
            raise LabError(f"links: each is a name from {list(LINKS)} or {{name: {{rtt_ms, loss}}}}, got {item!r}")
        extra = sorted(set(props) - LINK_KEYS)
        if extra:
            raise LabError(f"links: {name}: unknown key(s) {extra}; allowed: {sorted(LINK_KEYS)}")
        rtt, loss = props.get("rtt_ms", 0), props.get("loss", 0)
        if isinstance(rtt, bool) or not isinstance(rtt, (int, float)) or not 0 <= rtt <= 10000:
            raise LabError(f"links: {name}: rtt_ms must be milliseconds 0..10000, got {rtt!r}")
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss < 1:
            raise LabError(f"links: {name}: loss must be a share 0 <= loss < 1, got {loss!r}")
        if any(l.name == name for l in out):
            raise LabError(f"links: {name} is named twice")
        out.append(AccessLink(name, float(rtt), float(loss)))
    return tuple(out)


class Addresses:
    """Where everything sits in a run's 10.203.N.0/24 (/28 slots: 0 the core link, 1.. access links)."""

    def __init__(self, subnet: ipaddress.IPv4Network):
        self.subnet = subnet

    def slot(self, i: int) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"{self.subnet.network_address + 16 * i}/28")

    @property
    def core(self) -> ipaddress.IPv4Network:
        return self.slot(0)

    @property
    def router_core(self) -> str:
        return str(self.core.network_address + 1)

    @property
    def endpoint(self) -> str:
        return str(self.core.network_address + 2)

    def router_on(self, link: AccessLink) -> str:
        return str(self.slot(link.slot).network_address + 1)

    def client_on(self, link: AccessLink) -> str:
        return str(self.slot(link.slot).network_address + 2)

    def prefixlen(self, link: AccessLink) -> int:
        return 28

    @property
    def routed(self) -> str:
        """What the client reaches by its access link: the whole run subnet."""
        return str(self.subnet)

    def links(self) -> tuple[str, ...]:
        """The links settle() withdraws first: none in netns, where up() attached only the first."""
        return ()


@dataclass(frozen=True)
class Assigned:
    """Addresses someone else assigned (Docker's IPAM in Compose), with the methods of Addresses
    the Router asks: `client` link -> (address, prefix length), `router` link -> the router's
    address on it, `routed` the subnet the client reaches through the router (the core network's)."""
    routed: str
    client: dict
    router: dict

    def router_on(self, link: AccessLink) -> str:
        return self.router[link.name]

    def client_on(self, link: AccessLink) -> str:
        return self.client[link.name][0]

    def prefixlen(self, link: AccessLink) -> int:
        return int(self.client[link.name][1])

    def links(self) -> tuple[str, ...]:
        """Every access link the client container is attached to (compose.router.yaml: all of LINKS)."""
        return tuple(n for n in LINKS if n in self.client)

    def to_json(self) -> dict:
        return {"routed": self.routed, "client": {k: list(v) for k, v in self.client.items()}, "router": self.router}

    @classmethod
    def from_json(cls, d: dict) -> "Assigned":
        return cls(d["routed"], {k: tuple(v) for k, v in d["client"].items()}, dict(d["router"]))


@contextmanager
def netlink(ns: str | None):
    """A netlink socket (pyroute2's IPRoute) in namespace `ns` (None: the caller's own; the agent's, in
    a container), the calling thread inside the namespace for the block: netem.kernel.in_netns, the
    lab's one way into a namespace for netlink, never pyroute2's NetNS (in_netns says why)."""
    from pyroute2 import IPRoute  # pyroute2 is slow to import; only building or switching a topology needs it

    with in_netns(ns), IPRoute() as ipr:
        yield ipr


def make_netns(name: str) -> None:
    """Create network namespace `name` with `ip netns add` (pyroute2's netns.create forks a helper:
    netem.kernel.in_netns says why the lab uses none)."""
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        raise CapabilityError(f"could not create namespace {name}: {p.stderr.strip() or f'ip exited {p.returncode}'}")


def _veth(ns_a: str, dev_a: str, ns_b: str, dev_b: str, tmp: str) -> None:
    """A veth pair with end `dev_a` in `ns_a` and `dev_b` in `ns_b`, both down, no address."""
    with netlink(ns_a) as a:
        a.link("add", ifname=dev_a, kind="veth", peer=tmp)
        a.link("set", index=a.link_lookup(ifname=tmp)[0], net_ns_fd=ns_b)
    with netlink(ns_b) as b:
        b.link("set", index=b.link_lookup(ifname=tmp)[0], ifname=dev_b)


def _addr_up(ns: str, dev: str, address: str, prefixlen: int) -> None:
    with netlink(ns) as n:
        idx = n.link_lookup(ifname=dev)[0]
        n.addr("add", index=idx, address=address, prefixlen=prefixlen)
        n.link("set", index=idx, state="up")
        n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")


@dataclass(frozen=True)
class Place:
    """What a Router needs of its topology: the run id, the namespaces, the run's /24 (netns; in
    Compose the namespaces are the containers' own and the subnet is Docker's: None). The agent,
    which knows no topology, rebuilds a Router from `Router.describe()` with one of these."""
    run_id: str
    ns_client: str | None
    ns_endpoint: str | None
    subnet: ipaddress.IPv4Network | None


class Router:
    """The router part of a topology: in netns builds the core and access links; owns the router's
    FaultTable (link delay/loss and middlebox faults; in Compose the router service's, `control`)
    and moves the client between links. `assigned`: addresses the topology did not choose (Compose)."""

    def __init__(self, topo, links: tuple[AccessLink, ...], assigned: Assigned | None = None,
                 control: str | None = None):
        self.topo = topo
        self.links = links
        self.ns = f"ll-{topo.run_id}-r"
        self.active = links[0]
        self.assigned, self.control = assigned, control
        self._table: FaultTable | RemoteTable | None = None
        self._lock = threading.Lock()

    @property
    def addresses(self) -> Addresses | Assigned:
        return self.assigned or Addresses(self.topo.subnet)

    def describe(self) -> dict:
        """Enough to act on this router from another process (the agent's `--router`)."""
        t = self.topo
        return {"run_id": t.run_id, "ns_client": t.ns_client, "ns_endpoint": t.ns_endpoint,
                "subnet": str(t.subnet) if t.subnet else None,
                "links": [{l.name: {"rtt_ms": l.rtt_ms, "loss": l.loss}} for l in self.links],
                "active": self.active.name,
                **({"assigned": self.assigned.to_json()} if self.assigned else {}),
                **({"control": self.control} if self.control else {})}

    @classmethod
    def from_description(cls, d: dict) -> "Router":
        """A Router on an existing topology (made by `describe()`): switch() and table() work, up() is not for it."""
        place = Place(d["run_id"], d["ns_client"], d["ns_endpoint"],
                      ipaddress.ip_network(d["subnet"]) if d.get("subnet") else None)
        assigned = Assigned.from_json(d["assigned"]) if d.get("assigned") else None
        r = cls(place, parse_links(d["links"]), assigned=assigned, control=d.get("control"))
        r.active = r.link(d["active"])
        return r

    def link(self, name: str) -> AccessLink:
        for l in self.links:
            if l.name == name:
                return l
        raise LabError(f"no access link {name!r} in this run (links: {[l.name for l in self.links]})")

    # ---- up ----------------------------------------------------------------------------------
    def up(self) -> None:
        """Called by NetnsTopology.up() with the client and endpoint namespaces made, no links yet."""
        a, t = self.addresses, self.topo
        make_netns(self.ns)
        tmp = f"llr{t.run_id[:8]}"[:15]
        _veth(self.ns, CORE_DEV, t.ns_endpoint, CORE_DEV, tmp)
        _addr_up(self.ns, CORE_DEV, a.router_core, 28)
        _addr_up(t.ns_endpoint, CORE_DEV, a.endpoint, 28)
        with netlink(t.ns_endpoint) as e:
            e.route("add", dst=str(a.subnet), gateway=a.router_core)
        self._table = forwarding_table(self.ns, t.run_id)   # what the router service makes in Compose
        for link in self.links:
            _veth(self.ns, link.name, t.ns_client, link.name, tmp)
            _addr_up(self.ns, link.name, a.router_on(link), 28)
            with netlink(t.ns_client) as c:
                c.link("set", index=c.link_lookup(ifname="lo")[0], state="up")
        self._attach(self.active, main=True)
        for link in self.links:
            for spec in self.link_faults(link):
                fault_registry.build(spec).apply(self.table())

    def link_faults(self, link: AccessLink) -> list[dict]:
        """The fault specs that give a link its RTT and loss (on the router, aimed at the client's
        address on that link: `both` directions, so each way carries half the RTT)."""
        target = {"dst": self.addresses.client_on(link)}
        specs = []
        if link.rtt_ms:
            specs.append({"kind": "delay", "name": f"link-{link.name}-rtt", "target": target,
                          "direction": "both", "delay_ms": link.rtt_ms / 2})
        if link.loss:
            specs.append({"kind": "loss", "name": f"link-{link.name}-loss", "target": target,
                          "direction": "both", "p": link.loss})
        return specs

    def table(self) -> FaultTable | RemoteTable:
        """The router's FaultTable (chains hooked from FORWARD): the router namespace's, or with a
        `control` address the router service's in its container; made on first use, closed by down()."""
        if self._table is None:
            self._table = RemoteTable(self.control) if self.control else forwarding_table(self.ns, self.topo.run_id)
        return self._table

    def down(self) -> None:
        """Stop the router's fault workers (the namespace itself goes with `lab down`'s by run id)."""
        if self._table is not None:
            try:
                self._table.close()
            except Exception:
                pass
            self._table = None

    # ---- the client's side of a link ---------------------------------------------------------
    def _attach(self, link: AccessLink, main: bool) -> None:
        """Bring the client's end of `link` up with its address and its own routing table; with
        `main`, new connections to the endpoint leave by it."""
        a = self.addresses
        table = TABLE_BASE + link.slot
        with netlink(self.topo.ns_client) as c:
            idx = c.link_lookup(ifname=link.name)[0]
            c.addr("add", index=idx, address=a.client_on(link), prefixlen=a.prefixlen(link))
            c.link("set", index=idx, state="up")
            c.route("add", dst="0.0.0.0/0", gateway=a.router_on(link), oif=idx, table=table)
            c.rule("add", src=a.client_on(link), src_len=32, table=table, priority=table)
            if main:
                self._main_route(c, link, idx)

    def _main_route(self, c, link: AccessLink, idx: int) -> None:
        a = self.addresses
        c.route("replace", dst=a.routed, gateway=a.router_on(link), oif=idx, prefsrc=a.client_on(link))

    def _withdraw(self, link: AccessLink) -> None:
        """The client loses `link`: its address is withdrawn and the link goes down (as when a phone
        leaves Wi-Fi): nothing of the old flow leaves by it any more."""
        a = self.addresses
        table = TABLE_BASE + link.slot
        with netlink(self.topo.ns_client) as c:
            idx = c.link_lookup(ifname=link.name)[0]
            try:
                c.rule("del", src=a.client_on(link), src_len=32, table=table, priority=table)
            except Exception:
                pass
            c.addr("del", index=idx, address=a.client_on(link), prefixlen=a.prefixlen(link))
            c.link("set", index=idx, state="down")

    def settle(self) -> None:
        """The start state on links someone else made (Compose: Docker attaches the client to every
        access network with its address up): every link the client has is withdrawn, then the first
        one of the run attached as up() does in netns. Runs where the client's links are."""
        for name in self.addresses.links():
            self._withdraw(AccessLink(name))
        self.active = self.links[0]
        self._attach(self.active, main=True)

    def switch(self, to: str, overlap_s: float = 0.0, sleep=None) -> dict:
        """Move the client to access link `to`. overlap_s 0: break-before-make; > 0: make-before-
        break, the old link kept that long. Returns {from, to, old_ip, new_ip, t_made, t_broken}."""
        sleep = sleep or time.sleep
        new = self.link(to)
        with self._lock:
            old = self.active
            if new == old:
                raise LabError(f"switch: the client is on {to} already")
            a = self.addresses
            out = {"from": old.name, "to": new.name, "old_ip": a.client_on(old), "new_ip": a.client_on(new)}
            if overlap_s <= 0:
                self._withdraw(old)
                out["t_broken"] = time.time()
                self._attach(new, main=True)
                out["t_made"] = time.time()
            else:
                self._attach(new, main=True)
                out["t_made"] = time.time()
                sleep(overlap_s)
                self._withdraw(old)
                out["t_broken"] = time.time()
            self.active = new
            return out


def _main(argv: list[str] | None = None) -> int:
    """`python -m lab.topology.router switch DESCRIPTION TO OVERLAP_S`: one switch, its record as JSON;
    `python -m lab.topology.router settle DESCRIPTION`: the client's start state (Compose, Router.settle).

    The agent switches through this process rather than in its own: a switch is blocking netlink
    work and a sleep for the overlap, with a thread inside the client's namespace (netlink()), all
    kept off the agent's event loop and its main thread."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m lab.topology.router")
    p.add_argument("verb", choices=["switch", "settle"])
    p.add_argument("description", help="JSON from Router.describe()")
    p.add_argument("to", nargs="?", choices=LINKS)
    p.add_argument("overlap_s", nargs="?", type=float, default=0.0)
    a = p.parse_args(argv)
    router = Router.from_description(json.loads(a.description))
    if a.verb == "settle":
        router.settle()
        print(json.dumps({"active": router.active.name}), flush=True)
        return 0
    if a.to is None:
        p.error("switch needs TO")
    print(json.dumps(router.switch(a.to, a.overlap_s)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
