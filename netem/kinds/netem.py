"""netem: tc netem as the root qdisc of one device (pyroute2). Not an iptables fault.

dev, delay_ms, jitter_ms, rate, loss, limit. Raises FaultUnsupported naming sch_netem where the
kernel has none (this machine's has none: the `delay` kind does delay in userspace instead).
"""
from __future__ import annotations

import re
from typing import Any

from netem import spec as S
from netem.errors import FaultUnsupported, NetemError, NoPrivilege
from netem.fault import InstalledFault

NETEM_HANDLE = 0x1AB0  # "1ab0:" marks the lab's netem root qdisc, so clean-up removes only ours
_RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")


class Netem(InstalledFault):
    kind = "netem"
    requires = frozenset({"netem"})
    fields = frozenset({"dev", "delay_ms", "jitter_ms", "rate", "loss", "limit"})

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        dev = spec.get("dev")
        if not isinstance(dev, str) or not _IFNAME_RE.match(dev):
            raise S.fail(cls.kind, f"dev must be an interface name (e.g. eth0), got {dev!r}")
        for k in ("delay_ms", "jitter_ms"):
            S.number(cls.kind, k, spec.get(k, 0), "a number of milliseconds >= 0")
        if spec.get("jitter_ms") and not spec.get("delay_ms"):
            raise S.fail(cls.kind, "jitter_ms needs delay_ms")
        if "rate" in spec and not (isinstance(spec["rate"], str) and _RATE_RE.match(spec["rate"])):
            raise S.fail(cls.kind, f"rate must look like 1mbit, 500kbit or 64kbps, got {spec['rate']!r}")
        S.number(cls.kind, "loss", spec.get("loss", 0), "a probability 0..1", high=1)
        limit = spec.get("limit", 1000)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise S.fail(cls.kind, f"limit must be a packet count >= 1, got {limit!r}")
        if not any(spec.get(k) for k in ("delay_ms", "rate", "loss")):
            raise S.fail(cls.kind, "give at least one of delay_ms, rate, loss")
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

    def install(self, netns: str | None) -> None:
        from pyroute2 import IPRoute, NetNS  # lazy: building and checking specs needs no netlink
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
                        f"(CONFIG_NET_SCH_NETEM); use delay (userspace, NFQUEUE) or blackhole/reject/loss") from None
                if e.code == 1:
                    raise NoPrivilege(f"fault netem {self.name}: tc needs CAP_NET_ADMIN") from None
                raise NetemError(f"fault netem {self.name}: tc netem failed: {e}") from None
        finally:
            ipr.close()

    def uninstall(self, netns: str | None) -> None:
        remove_netem(self.spec["dev"], netns)


def remove_netem(dev: str | None, netns: str | None) -> list[str]:
    """Remove the lab's netem root qdisc (handle 1ab0:) from `dev` (None: every device). Quiet."""
    from pyroute2 import IPRoute, NetNS  # lazy, as in install()

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
