"""Faults as small objects with one interface (Toxiproxy style).

    f = build({"kind": "blackhole", "name": "b1", "target": {"dst": "10.203.7.2", "dport": 8443}})
    f.apply()      # active in the current namespace (through the process-wide FaultTable)
    f.clear()      # gone; idempotent

Every fault has `name`, `kind`, `spec` (the validated, normalised spec), `apply(table=None)` and
`clear()`. The iptables kinds only *describe* their rules (`rules()`); a `netem.table.FaultTable`
owns the chains and installs all active faults in one atomic `iptables-restore --noflush`.

Kinds
-----
blackhole  target, direction both|out|in, mode silent|eperm.
           silent: NFQUEUE to a queue nobody listens on (default 99). The packet is dropped after the
           stack has sent it, so TCP sees real loss: RTO retransmissions, `ss` timer `on`.
           eperm: DROP. On OUTPUT the stack gets EPERM back (a local send failure): no retransmission
           timer, the persist timer runs and every write retries at once (round 3 of the seed study).
reject     target, direction: REJECT --reject-with tcp-reset (icmp-port-unreachable for udp/any).
loss       target, direction, p (0 < p <= 1): `-m statistic --mode random --probability p`, then the
           silent drop. NFLOG and the drop sit in a per-fault chain so both see the same coin toss.
netem      dev, delay_ms, jitter_ms, rate, loss, limit: tc netem (pyroute2) as the root qdisc of `dev`.
           Raises FaultUnsupported naming sch_netem where the kernel has none.

Targets
-------
flow         {"src", "sport", "dst", "dport"[, "proto"]}: exactly one connection. A new connection
             to the same endpoint (another source port) passes.
destination  {"dst"[, "dport"][, "proto"]}: everything to that address (and port); dst may be a
             network (a.b.c.0/24).
proto is tcp|udp|any: tcp by default when a port is given; without a port, any (reject: tcp).

Direction `out` matches packets to the target (OUTPUT), `in` packets from it (INPUT), `both` both.
Every dropped or rejected packet first hits `-j NFLOG --nflog-group 5 --nflog-threshold 1` with the
prefix `ll <kind> <name> <out|in>`, so a capture of nflog:5 shows it.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from netem.errors import FaultSpecError, FaultUnsupported, NetemError, NoPrivilege

NFLOG_GROUP = 5
DEFAULT_QUEUE = 99
OUT_CHAIN = "LL_OUT"
IN_CHAIN = "LL_IN"
NETEM_HANDLE = 0x1AB0  # "1ab0:" marks the lab's netem root qdisc, so clean-up removes only ours

_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,32}$")
_RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")


@dataclass
class Rules:
    """What one fault adds: lines for LL_OUT / LL_IN and any chains of its own (name -> lines)."""
    out: list[str] = field(default_factory=list)
    in_: list[str] = field(default_factory=list)
    chains: dict[str, list[str]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------ validation

def _fail(kind: str, msg: str) -> FaultSpecError:
    return FaultSpecError(f"fault {kind}: {msg}")


def _take(spec: dict, kind: str, allowed: set[str]) -> None:
    extra = sorted(set(spec) - allowed)
    if extra:
        raise _fail(kind, f"unknown field(s) {extra}; allowed: {sorted(allowed)}")


def _port(kind: str, where: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
        raise _fail(kind, f"{where} must be a port number 1..65535, got {v!r}")
    return v


def _host(kind: str, where: str, v: Any, net_ok: bool = False) -> str:
    if not isinstance(v, str):
        raise _fail(kind, f"{where} must be an IPv4 address string, got {v!r}")
    try:
        n = ipaddress.ip_network(v, strict=True) if net_ok else ipaddress.ip_address(v)
    except ValueError:
        what = "an IPv4 address or network (a.b.c.d[/n])" if net_ok else "an IPv4 address"
        raise _fail(kind, f"{where} must be {what}, got {v!r}") from None
    if n.version != 4:
        raise _fail(kind, f"{where}: IPv6 is not supported (the lab's chains are iptables, IPv4 only)")
    if net_ok and n.prefixlen == 32:
        return str(n.network_address)
    return str(n)


def _target(kind: str, t: Any, portless_proto: str = "any") -> dict:
    """Validate a target. proto defaults to tcp when ports are given, else to `portless_proto`."""
    if not isinstance(t, dict):
        raise _fail(kind, "target must be an object: a flow {src,sport,dst,dport} or a destination {dst[,dport]}")
    keys = set(t) - {"proto"}
    proto = t.get("proto", "tcp" if keys & {"sport", "dport"} else portless_proto)
    if proto not in ("tcp", "udp", "any"):
        raise _fail(kind, f"target.proto must be tcp, udp or any, got {proto!r}")
    if keys == {"src", "sport", "dst", "dport"}:
        if proto == "any":
            raise _fail(kind, "a flow target needs proto tcp or udp (ports)")
        return {"src": _host(kind, "target.src", t["src"]), "sport": _port(kind, "target.sport", t["sport"]),
                "dst": _host(kind, "target.dst", t["dst"]), "dport": _port(kind, "target.dport", t["dport"]),
                "proto": proto}
    if keys in ({"dst"}, {"dst", "dport"}):
        out = {"dst": _host(kind, "target.dst", t["dst"], net_ok=True), "proto": proto}
        if "dport" in t:
            if proto == "any":
                raise _fail(kind, "target.dport needs proto tcp or udp")
            out["dport"] = _port(kind, "target.dport", t["dport"])
        return out
    if "src" in keys or "sport" in keys:
        need = sorted({"src", "sport", "dst", "dport"} - keys)
        raise _fail(kind, f"a flow target needs src, sport, dst and dport (missing {need})")
    raise _fail(kind, f"target must be a flow {{src,sport,dst,dport}} or a destination {{dst[,dport]}}, got keys {sorted(t)}")


def _direction(kind: str, v: Any) -> str:
    if v not in ("both", "out", "in"):
        raise _fail(kind, f"direction must be both, out or in, got {v!r}")
    return v


# ---------------------------------------------------------------------------------------- faults

class Fault:
    """One fault. Subclasses set `kind`, validate in `_normalise`, and describe rules."""
    kind: ClassVar[str]
    iptables: ClassVar[bool] = True
    fields: ClassVar[set[str]] = set()

    def __init__(self, spec: dict):
        if not isinstance(spec, dict):
            raise FaultSpecError(f"a fault spec must be an object, got {type(spec).__name__}")
        spec = dict(spec)
        spec.setdefault("kind", self.kind)
        name = spec.setdefault("name", self.kind)
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise _fail(self.kind, f"name must be 1-32 characters of A-Z a-z 0-9 _ . : -, got {name!r}")
        _take(spec, self.kind, {"kind", "name"} | self.fields)
        self.spec = self._normalise(spec)
        self.name: str = name
        self._table = None

    def _normalise(self, spec: dict) -> dict:
        return spec

    # Toxiproxy-style life cycle -----------------------------------------------------------------
    def apply(self, table=None) -> "Fault":
        """Make the fault active (in `table`, default: the process-wide table of this namespace)."""
        from netem.table import default_table

        t = table or default_table()
        t.add(self)
        return self

    def clear(self) -> None:
        """Remove the fault; a no-op when it is not active."""
        if self._table is not None:
            self._table.remove(self)

    @property
    def active(self) -> bool:
        return self._table is not None

    def rules(self) -> Rules:
        raise NotImplementedError

    def prefix(self, direction: str) -> str:
        return f"ll {self.kind} {self.name} {direction}"[:63]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.spec}>"


class _MatchFault(Fault):
    """A fault that matches a target in one or both directions and drops what it matches."""
    fields = {"target", "direction"}
    portless_proto = "any"  # a destination without a port: every protocol, a really dead path

    def _normalise(self, spec: dict) -> dict:
        if "target" not in spec:
            raise _fail(self.kind, "target is required: a flow {src,sport,dst,dport} or a destination {dst[,dport]}")
        spec["target"] = _target(self.kind, spec["target"], self.portless_proto)
        spec["direction"] = _direction(self.kind, spec.get("direction", "both"))
        return spec

    def matches(self) -> dict[str, str]:
        """iptables match text per active direction ('out': packets to the target, 'in': from it)."""
        out, in_ = self.match_pair()
        d = self.spec["direction"]
        return {k: v for k, v in (("out", out), ("in", in_)) if d in (k, "both")}

    def match_pair(self) -> tuple[str, str]:
        """(out match, in match) whatever the direction."""
        t = self.spec["target"]
        proto = t["proto"]
        p = "" if proto == "any" else f" -p {proto}"
        if "src" in t:
            out = f"-s {t['src']}/32 -d {t['dst']}/32{p} --sport {t['sport']} --dport {t['dport']}"
            in_ = f"-s {t['dst']}/32 -d {t['src']}/32{p} --sport {t['dport']} --dport {t['sport']}"
        else:
            dst = t["dst"] if "/" in t["dst"] else f"{t['dst']}/32"
            port_out = f" --dport {t['dport']}" if "dport" in t else ""
            port_in = f" --sport {t['dport']}" if "dport" in t else ""
            out, in_ = f"-d {dst}{p}{port_out}", f"-s {dst}{p}{port_in}"
        return out, in_

    def nflog(self, direction: str) -> str:
        return (f'-j NFLOG --nflog-group {NFLOG_GROUP} --nflog-threshold 1 '
                f'--nflog-prefix "{self.prefix(direction)}"')

    def verdict(self, direction: str) -> str:
        raise NotImplementedError

    def rules(self) -> Rules:
        r = Rules()
        for direction, m in self.matches().items():
            lines = r.out if direction == "out" else r.in_
            lines.append(f"{m} {self.nflog(direction)}")
            lines.append(f"{m} {self.verdict(direction)}")
        return r


class Blackhole(_MatchFault):
    kind = "blackhole"
    fields = _MatchFault.fields | {"mode", "queue"}

    def _normalise(self, spec: dict) -> dict:
        spec = super()._normalise(spec)
        mode = spec.setdefault("mode", "silent")
        if mode not in ("silent", "eperm"):
            raise _fail(self.kind, f"mode must be silent (NFQUEUE, real loss) or eperm (DROP, EPERM to the stack), got {mode!r}")
        if mode == "eperm":
            if "queue" in spec:
                raise _fail(self.kind, "queue only applies to mode silent")
            return spec
        q = spec.setdefault("queue", DEFAULT_QUEUE)
        if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q <= 65535:
            raise _fail(self.kind, f"queue must be an NFQUEUE number 0..65535 that nothing listens on, got {q!r}")
        return spec

    def verdict(self, direction: str) -> str:
        if self.spec["mode"] == "eperm":
            return "-j DROP"
        return f"-j NFQUEUE --queue-num {self.spec['queue']}"


class Reject(_MatchFault):
    """REJECT: tcp-reset for tcp, icmp-port-unreachable otherwise.

    out: the client's packet is answered by a RST that the kernel makes and delivers to the local
    socket through lo (ECONNRESET / ECONNREFUSED); it never crosses eth0, so an extra NFLOG rule
    in LL_IN logs it (prefix `... rst`). in: the endpoint's packet is answered by a RST on the wire;
    incoming RSTs themselves are never rejected (that would swallow the reset the out side made).
    """
    kind = "reject"
    portless_proto = "tcp"  # a reset fault: tcp unless told otherwise

    def verdict(self, direction: str) -> str:
        if self.spec["target"]["proto"] == "tcp":
            return "-j REJECT --reject-with tcp-reset"
        return "-j REJECT --reject-with icmp-port-unreachable"

    def rules(self) -> Rules:
        if self.spec["target"]["proto"] != "tcp":
            return super().rules()
        r = Rules()
        m = self.matches()
        if "out" in m:
            r.out += [f"{m['out']} {self.nflog('out')}", f"{m['out']} {self.verdict('out')}"]
            in_m = self.match_pair()[1]
            r.in_.append(f'{in_m} --tcp-flags RST RST {self.nflog("rst")}')
        if "in" in m:
            r.in_ += [f"{m['in']} ! --tcp-flags RST RST {self.nflog('in')}",
                      f"{m['in']} ! --tcp-flags RST RST {self.verdict('in')}"]
        return r


class Loss(_MatchFault):
    kind = "loss"
    fields = _MatchFault.fields | {"p", "queue"}

    def _normalise(self, spec: dict) -> dict:
        spec = super()._normalise(spec)
        if "p" not in spec:
            raise _fail(self.kind, "p (the drop probability, 0 < p <= 1) is required")
        p = spec["p"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise _fail(self.kind, f"p must be a probability with 0 < p <= 1, got {p!r}")
        spec["p"] = float(p)
        q = spec.setdefault("queue", DEFAULT_QUEUE)
        if isinstance(q, bool) or not isinstance(q, int) or not 0 <= q <= 65535:
            raise _fail(self.kind, f"queue must be an NFQUEUE number 0..65535, got {q!r}")
        return spec

    @property
    def chain(self) -> str:
        return "LL_L_" + hashlib.sha1(self.name.encode()).hexdigest()[:10]

    def rules(self) -> Rules:
        # One coin toss per packet: the statistic match jumps into the fault's own chain, where the
        # NFLOG and the drop both see the packet. Two statistic rules would toss twice.
        r = Rules()
        p = f"{self.spec['p']:.6f}".rstrip("0").rstrip(".")
        for direction, m in self.matches().items():
            chain = f"{self.chain}_{'O' if direction == 'out' else 'I'}"
            (r.out if direction == "out" else r.in_).append(
                f"{m} -m statistic --mode random --probability {p} -j {chain}")
            r.chains[chain] = [self.nflog(direction), f"-j NFQUEUE --queue-num {self.spec['queue']}"]
        return r


class Netem(Fault):
    """tc netem as the root qdisc of one device (pyroute2). Not an iptables fault."""
    kind = "netem"
    iptables = False
    fields = {"dev", "delay_ms", "jitter_ms", "rate", "loss", "limit"}

    def _normalise(self, spec: dict) -> dict:
        dev = spec.get("dev")
        if not isinstance(dev, str) or not _IFNAME_RE.match(dev):
            raise _fail(self.kind, f"dev must be an interface name (e.g. eth0), got {dev!r}")
        for k in ("delay_ms", "jitter_ms"):
            v = spec.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise _fail(self.kind, f"{k} must be a number of milliseconds >= 0, got {v!r}")
        if spec.get("jitter_ms") and not spec.get("delay_ms"):
            raise _fail(self.kind, "jitter_ms needs delay_ms")
        if "rate" in spec and not (isinstance(spec["rate"], str) and _RATE_RE.match(spec["rate"])):
            raise _fail(self.kind, f"rate must look like 1mbit, 500kbit or 64kbps, got {spec['rate']!r}")
        loss = spec.get("loss", 0)
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss <= 1:
            raise _fail(self.kind, f"loss must be a probability 0..1, got {loss!r}")
        limit = spec.get("limit", 1000)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _fail(self.kind, f"limit must be a packet count >= 1, got {limit!r}")
        if not any(spec.get(k) for k in ("delay_ms", "rate", "loss")):
            raise _fail(self.kind, "give at least one of delay_ms, rate, loss")
        return spec

    def tc_kwargs(self) -> dict:
        s = self.spec
        kw: dict[str, Any] = {"handle": f"{NETEM_HANDLE:x}:0", "limit": s.get("limit", 1000)}
        if s.get("delay_ms"):
            kw["delay"] = int(s["delay_ms"] * 1000)  # pyroute2 takes microseconds
        if s.get("jitter_ms"):
            kw["jitter"] = int(s["jitter_ms"] * 1000)
        if s.get("loss"):
            kw["loss"] = float(s["loss"]) * 100  # percent
        if s.get("rate"):
            kw["rate"] = s["rate"]
        return kw

    def rules(self) -> Rules:
        return Rules()

    def install(self, netns: str | None) -> None:
        from pyroute2 import IPRoute, NetNS
        from pyroute2.netlink.exceptions import NetlinkError

        ipr = NetNS(netns) if netns else IPRoute()
        try:
            idx = ipr.link_lookup(ifname=self.spec["dev"])
            if not idx:
                raise NetemError(f"fault netem {self.name}: no device {self.spec['dev']!r} in this namespace")
            try:
                ipr.tc("replace", "netem", idx[0], **self.tc_kwargs())
            except NetlinkError as e:
                if e.code in (2, 95):  # ENOENT / EOPNOTSUPP: the qdisc kind is unknown to the kernel
                    raise FaultUnsupported(
                        f"fault netem {self.name}: this kernel has no sch_netem qdisc "
                        f"(CONFIG_NET_SCH_NETEM); use blackhole/reject/loss instead") from None
                if e.code == 1:
                    raise NoPrivilege(f"fault netem {self.name}: tc needs CAP_NET_ADMIN") from None
                raise NetemError(f"fault netem {self.name}: tc netem failed: {e}") from None
        finally:
            ipr.close()

    def uninstall(self, netns: str | None) -> None:
        remove_netem(self.spec["dev"], netns)


def remove_netem(dev: str | None, netns: str | None) -> list[str]:
    """Remove the lab's netem root qdisc (handle 1ab0:) from `dev` (None: every device). Quiet."""
    from pyroute2 import IPRoute, NetNS

    removed = []
    try:
        ipr = NetNS(netns) if netns else IPRoute()
    except Exception:
        return removed
    try:
        links = {l["index"]: l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}
        for q in ipr.get_qdiscs():
            if q.get_attr("TCA_KIND") == "netem" and (q["handle"] >> 16) == NETEM_HANDLE:
                name = links.get(q["index"])
                if dev is None or name == dev:
                    try:
                        ipr.tc("del", "netem", q["index"], handle=f"{NETEM_HANDLE:x}:0")
                        removed.append(name)
                    except Exception:
                        pass
    except Exception:
        pass
    finally:
        ipr.close()
    return removed


REGISTRY: dict[str, type[Fault]] = {c.kind: c for c in (Blackhole, Reject, Loss, Netem)}


def kinds() -> list[str]:
    return sorted(REGISTRY)


def build(spec: dict) -> Fault:
    """A Fault from its spec, validated; FaultSpecError names the field and what is allowed."""
    if not isinstance(spec, dict):
        raise FaultSpecError(f"a fault spec must be an object, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in REGISTRY:
        raise FaultSpecError(f"unknown fault kind {kind!r}; known kinds: {', '.join(kinds())}")
    return REGISTRY[kind](spec)


def render_restore(faults: list[Fault], out_chain: str = OUT_CHAIN, in_chain: str = IN_CHAIN,
                   stale_chains: list[str] = ()) -> str:
    """The iptables-restore --noflush text that makes the lab's chains hold exactly `faults`.

    Declaring a chain (`:NAME - [0:0]`) under --noflush flushes it, so the whole rule set is
    replaced in one nf_tables transaction. `stale_chains` (per-fault chains of faults just removed)
    are declared too, which empties them; they are deleted afterwards, outside the time-critical step.
    """
    out, in_, extra = [], [], {}
    for f in faults:
        r = f.rules()
        out += r.out
        in_ += r.in_
        extra.update(r.chains)
    lines = ["*filter", f":{out_chain} - [0:0]", f":{in_chain} - [0:0]"]
    lines += [f":{c} - [0:0]" for c in list(extra) + [c for c in stale_chains if c not in extra]]
    for c, body in extra.items():
        lines += [f"-A {c} {b}" for b in body]
    lines += [f"-A {out_chain} {r}" for r in out]
    lines += [f"-A {in_chain} {r}" for r in in_]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def check_spec(spec: dict) -> None:
    """Validate a fault spec without applying it (scenario validation); FaultSpecError names the field."""
    build(spec)
