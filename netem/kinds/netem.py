"""netem: delay, jitter, loss, reorder and duplication on the way out of one device.

dev, delay_ms, jitter_ms, loss, reorder, duplicate (probabilities 0..1), rate, limit, queue.
Two paths to the same effect, chosen at install:
  kernel     tc netem as the root qdisc of `dev` (pyroute2), where the kernel has sch_netem
  userspace  where it has none (this machine, many CI and Docker Desktop kernels): every packet
             leaving `dev` goes to NFQUEUE and the userspace worker of the delay kind holds, drops,
             reorders or duplicates it (netem/kinds/delay.py). Two differences, both said here:
             jitter keeps the packets' order (tc netem's jitter reorders), and `rate` has no
             userspace path (refused there, one line).
`self.path` says which took effect; the agent records it in `fault.apply`, `lab netem probe` names it.
"""
from __future__ import annotations

import re
from typing import Any

from netem import spec as S
from netem.errors import FaultUnsupported, NetemError, NoPrivilege
from netem.fault import InstalledFault, RuleFault
from netem.kernel import in_netns
from netem.kinds.delay import DUP_MARK, Held, Plan, default_queue, start_worker, stop_worker
from netem.qdisc import NETEM_HANDLE, remove_netem
from netem.rules import Rules

_RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")


class Netem(RuleFault, InstalledFault):
    kind = "netem"
    requires = frozenset({"netem"})
    alternatives = (Held.requires,)
    lives_with_owner = True   # on the userspace path its worker ends with its owner
    fields = frozenset({"dev", "delay_ms", "jitter_ms", "rate", "loss", "limit", "reorder", "duplicate", "queue"})

    def __init__(self, spec: dict):
        super().__init__(spec)
        self._proc = None          # the userspace path's worker (start_worker / stop_worker)
        self._pidfile = None
        self._last_error = ""

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
        for k in ("loss", "reorder", "duplicate"):
            S.number(cls.kind, k, spec.get(k, 0), "a probability 0..1", high=1)
        if spec.get("reorder") and not spec.get("delay_ms"):
            raise S.fail(cls.kind, "reorder needs delay_ms (the packets not drawn are the ones held)")
        S.queue(cls.kind, spec.setdefault("queue", default_queue(spec["name"])), " for the userspace path's worker")
        limit = spec.get("limit", 1000)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise S.fail(cls.kind, f"limit must be a packet count >= 1, got {limit!r}")
        if not any(spec.get(k) for k in ("delay_ms", "rate", "loss", "duplicate")):
            raise S.fail(cls.kind, "give at least one of delay_ms, rate, loss, duplicate")
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
        for k in ("reorder", "duplicate"):
            if s.get(k):
                kw[k] = float(s[k]) * 100  # percent
        return kw

    # ---- the userspace path -------------------------------------------------------------------
    def plan(self) -> Plan:
        s = self.spec
        return Plan(delay_ms=s.get("delay_ms", 0), jitter_ms=s.get("jitter_ms", 0), reorder=s.get("reorder", 0),
                    duplicate=s.get("duplicate", 0), loss=s.get("loss", 0))

    def rules(self) -> Rules:
        """Nothing on the kernel path; on the userspace one, what leaves `dev` goes to the worker."""
        r = Rules()
        if self.path == "userspace":
            skip = f" -m mark ! --mark {DUP_MARK:#x}" if self.spec.get("duplicate") else ""
            r.out.append(f"-o {self.spec['dev']}{skip} -j NFQUEUE --queue-num {self.spec['queue']} --queue-bypass")
        return r

    def install(self, netns: str | None) -> None:
        try:
            self._install_qdisc(netns)
            self.path = "kernel"
        except FaultUnsupported:
            if self.spec.get("rate"):
                raise FaultUnsupported(f"fault netem {self.name}: this kernel has no sch_netem, and rate has no "
                                       f"userspace path (delay, jitter, loss, reorder, duplicate have)") from None
            start_worker(self, netns)
            self.path = "userspace"

    @property
    def worker_pid(self) -> int | None:
        """The userspace path's worker (None on the kernel path)."""
        return self._proc.pid if self._proc else None

    def _install_qdisc(self, netns: str | None) -> None:
        from pyroute2 import IPRoute  # lazy: building and checking specs needs no netlink
        from pyroute2.netlink.exceptions import NetlinkError

        # in_netns, not pyroute2's NetNS (netem.kernel.in_netns says why)
        with in_netns(netns), IPRoute() as ipr:
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

    def uninstall(self, netns: str | None) -> None:
        if self.path == "userspace":
            stop_worker(self)
        else:
            remove_netem(self.spec["dev"], netns)
        self.path = None
