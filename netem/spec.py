"""Checks for the fields of a fault spec: each raises FaultSpecError naming the key and what is allowed.

Shared by every kind (netem/kinds/*), so "a port", "a target", "a probability" mean the same everywhere.

Targets
-------
flow         {"src", "sport", "dst", "dport"[, "proto"]}: exactly one connection. A new connection
             to the same endpoint (another source port) passes.
destination  {"dst"[, "dport"][, "proto"]}: everything to that address (and port); dst may be a
             network (a.b.c.0/24).
proto is tcp|udp|any: tcp by default when a port is given; without a port, the kind's default.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any

from netem.errors import FaultSpecError

NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,32}$")


def fail(kind: str, msg: str) -> FaultSpecError:
    return FaultSpecError(f"fault {kind}: {msg}")


def only_keys(spec: dict, kind: str, allowed: set[str]) -> None:
    extra = sorted(set(spec) - allowed)
    if extra:
        raise fail(kind, f"unknown field(s) {extra}; allowed: {sorted(allowed)}")


def port(kind: str, where: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
        raise fail(kind, f"{where} must be a port number 1..65535, got {v!r}")
    return v


def queue(kind: str, v: Any, why: str) -> int:
    """An NFQUEUE number; `why` says what the queue is for (shown in the error)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
        raise fail(kind, f"queue must be an NFQUEUE number 0..65535{why}, got {v!r}")
    return v


def number(kind: str, key: str, v: Any, what: str, low: float = 0, high: float | None = None) -> float:
    """A number low <= v (<= high); `what` names the unit or meaning for the error line."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < low or (high is not None and v > high):
        raise fail(kind, f"{key} must be {what}, got {v!r}")
    return v


def host(kind: str, where: str, v: Any, net_ok: bool = False) -> str:
    if not isinstance(v, str):
        raise fail(kind, f"{where} must be an IPv4 address string, got {v!r}")
    try:
        n = ipaddress.ip_network(v, strict=True) if net_ok else ipaddress.ip_address(v)
    except ValueError:
        what = "an IPv4 address or network (a.b.c.d[/n])" if net_ok else "an IPv4 address"
        raise fail(kind, f"{where} must be {what}, got {v!r}") from None
    if n.version != 4:
        raise fail(kind, f"{where}: IPv6 is not supported (the lab's chains are iptables, IPv4 only)")
    if net_ok and n.prefixlen == 32:
        return str(n.network_address)
    return str(n)


def target(kind: str, t: Any, portless_proto: str = "any") -> dict:
    """Validate a target. proto defaults to tcp when ports are given, else to `portless_proto`."""
    if not isinstance(t, dict):
        raise fail(kind, "target must be an object: a flow {src,sport,dst,dport} or a destination {dst[,dport]}")
    keys = set(t) - {"proto"}
    proto = t.get("proto", "tcp" if keys & {"sport", "dport"} else portless_proto)
    if proto not in ("tcp", "udp", "any"):
        raise fail(kind, f"target.proto must be tcp, udp or any, got {proto!r}")
    if keys == {"src", "sport", "dst", "dport"}:
        if proto == "any":
            raise fail(kind, "a flow target needs proto tcp or udp (ports)")
        return {"src": host(kind, "target.src", t["src"]), "sport": port(kind, "target.sport", t["sport"]),
                "dst": host(kind, "target.dst", t["dst"]), "dport": port(kind, "target.dport", t["dport"]),
                "proto": proto}
    if keys in ({"dst"}, {"dst", "dport"}):
        out = {"dst": host(kind, "target.dst", t["dst"], net_ok=True), "proto": proto}
        if "dport" in t:
            if proto == "any":
                raise fail(kind, "target.dport needs proto tcp or udp")
            out["dport"] = port(kind, "target.dport", t["dport"])
        return out
    if "src" in keys or "sport" in keys:
        need = sorted({"src", "sport", "dst", "dport"} - keys)
        raise fail(kind, f"a flow target needs src, sport, dst and dport (missing {need})")
    raise fail(kind, f"target must be a flow {{src,sport,dst,dport}} or a destination {{dst[,dport]}}, got keys {sorted(t)}")


def direction(kind: str, v: Any) -> str:
    if v not in ("both", "out", "in"):
        raise fail(kind, f"direction must be both, out or in, got {v!r}")
    return v
