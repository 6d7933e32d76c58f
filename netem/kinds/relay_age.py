"""relay_age: a relay that cuts every flow at a fixed age, whatever it carries.

target (the destination whose flows pass the relay), age_s > 0, mode silent|rst (netem.conntrack),
direction (default both). One Live API user saw every session closed at exactly 150 s by a relay on
the path; a load balancer's maximum
connection lifetime does the same.

While the fault is active a watcher thread in the owner's process reads the namespace's conntrack
table (a netlink dump filtered to the target) every scan_s(age_s) to learn each target flow's
deadline, its creation plus age_s (conntrack's own start timestamp, which `nf_conntrack_timestamp`
turns on; a router node turns it on at up(), and the fault turns it on for flows that start after
it), and sleeps until the next deadline, where it deletes that flow's entry. The flow's next packet
then finds no entry and is dropped or reset by the rules of netem.conntrack, so the cut shows on
the wire at age_s + (time to the next packet) + the thread's wake-up. A flow older than age_s when
the fault starts is cut at once. Deadlines, not a dump every few ms: a dump costs a few ms of
Python, and under load a watcher busy dumping was 170 ms late (a 1.5 s relay cut at 1.67 s); the
thread runs SCHED_FIFO where allowed (netem.realtime), so a deadline is not kept waiting behind the
other processes. The thread ends with uninstall(), or with its owner (`lives_with_owner`).
"""
from __future__ import annotations

import ipaddress
import socket
import sys
import threading
import time

from netem import spec as S
from netem.conntrack import ForgottenFlowFault
from netem.errors import NetemError
from netem.kernel import in_netns
from netem.realtime import thread_realtime

OPEN_TIMEOUT_S = 10.0  # for the conntrack socket, on a loaded machine
SCAN_S = 0.25          # how often new flows are looked for, at most (a flow is cut at its deadline)
TIMESTAMP_KEY = "nf_conntrack_timestamp"


class RelayAge(ForgottenFlowFault):
    kind = "relay_age"
    lives_with_owner = True  # the watcher is a thread of the process that applied it
    fields = ForgottenFlowFault.fields | {"age_s"}

    def __init__(self, spec: dict):
        super().__init__(spec)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open_error: Exception | None = None   # why the watcher could not open its socket
        self.cut: list[tuple[float, tuple]] = []  # (wall time, (src, sport, dst, dport)) per flow cut

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        if "age_s" not in spec:
            raise S.fail(cls.kind, "age_s (the age in seconds at which the relay cuts a flow) is required")
        spec["age_s"] = float(S.number(cls.kind, "age_s", spec["age_s"], "seconds > 0 (and <= 86400)", high=86400))
        if spec["age_s"] <= 0:
            raise S.fail(cls.kind, "age_s must be seconds > 0 (and <= 86400), got 0")
        return spec

    def sysctls(self) -> dict:
        return {**super().sysctls(), TIMESTAMP_KEY: 1}

    def install(self, netns: str | None) -> None:
        super().install(netns)
        self._stop.clear()
        opened, self._open_error = threading.Event(), None
        self._thread = threading.Thread(target=self._watch_in, args=(netns, opened), daemon=True,
                                        name=f"relay_age {self.name}")
        self._thread.start()
        if not opened.wait(OPEN_TIMEOUT_S) or self._open_error is not None:
            self.uninstall(netns)
            raise NetemError(f"fault relay_age {self.name}: no conntrack netlink socket: "
                             f"{self._open_error or 'no answer in %s s' % OPEN_TIMEOUT_S}")

    def uninstall(self, netns: str | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        super().uninstall(netns)

    # ---- the watcher -------------------------------------------------------------------------
    def _flows(self, ct):
        """(tuple_orig, start ns or None) of each TCP conntrack entry whose original tuple is the target's."""
        t = self.spec["target"]
        for msg in ct.dump():
            orig = msg.get_attr("CTA_TUPLE_ORIG")
            ip, proto = orig.get_attr("CTA_TUPLE_IP"), orig.get_attr("CTA_TUPLE_PROTO")
            if proto.get_attr("CTA_PROTO_NUM") != socket.IPPROTO_TCP:
                continue
            key = (ip.get_attr("CTA_IP_V4_SRC"), proto.get_attr("CTA_PROTO_SRC_PORT"),
                   ip.get_attr("CTA_IP_V4_DST"), proto.get_attr("CTA_PROTO_DST_PORT"))
            if not _is_target(key, t):
                continue
            stamp = msg.get_attr("CTA_TIMESTAMP")
            yield key, (stamp.get_attr("CTA_TIMESTAMP_START") if stamp else None)

    def _watch_in(self, netns: str | None, opened: threading.Event) -> None:
        """The watcher's thread, inside the namespace for its life (in_netns, not pyroute2's netns=:
        netem.kernel.in_netns says why). pyroute2 makes its socket on first use, so the first dump
        is made here too, inside the namespace."""
        from pyroute2 import NFCTSocket  # pyroute2 is slow to import; only this kind needs conntrack's netlink

        try:
            with in_netns(netns):
                ct = NFCTSocket()
                try:
                    list(ct.dump())
                except Exception:
                    ct.close()
                    raise
                opened.set()
                self._watch(ct)
        except Exception as e:
            if not opened.is_set():
                self._open_error = e
                opened.set()

    def _watch(self, ct) -> None:
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple  # imported with NFCTSocket

        note = thread_realtime()
        if note:   # one line, as the delay worker says it: the cut is then only as punctual as the load allows
            print(f"relay_age {self.name}: {note}", file=sys.stderr, flush=True)
        first_seen: dict[tuple, int] = {}  # flows without a timestamp (begun before it was on)
        age_ns = int(self.spec["age_s"] * 1e9)
        scan_ns = int(scan_s(self.spec["age_s"]) * 1e9)
        deadlines: dict[tuple, int] = {}
        next_scan = 0
        try:
            while True:
                now = time.time_ns()
                if now >= next_scan:
                    deadlines = {}
                    for key, start in list(self._flows(ct)):
                        deadlines[key] = (start or first_seen.setdefault(key, now)) + age_ns
                    first_seen = {k: v for k, v in first_seen.items() if k in deadlines}
                    next_scan = now + scan_ns
                due, wake = due_and_next(deadlines, now, next_scan)
                for key in due:
                    src, sport, dst, dport = key
                    try:
                        ct.entry("del", tuple_orig=NFCTAttrTuple(saddr=src, daddr=dst, proto=socket.IPPROTO_TCP,
                                                                 sport=sport, dport=dport))
                        self.cut.append((time.time_ns() / 1e9, key))
                    except Exception:
                        pass  # gone already (closed, or reaped by another timeout)
                    deadlines.pop(key, None)
                    first_seen.pop(key, None)
                if self._stop.wait(max(0.0, (wake - time.time_ns()) / 1e9)):
                    return
        finally:
            ct.close()


def scan_s(age_s: float) -> float:
    """How often the watcher looks for new flows: often enough that a flow is known well before its
    deadline (a quarter of the age), and never more than SCAN_S."""
    return min(SCAN_S, age_s / 4)


def due_and_next(deadlines: dict[tuple, int], now: int, next_scan: int) -> tuple[list[tuple], int]:
    """(the flows whose deadline has come, in deadline order; when to wake next: the next deadline
    or the next scan, whichever is first). Times in ns on one clock."""
    due = sorted((d, k) for k, d in deadlines.items() if d <= now)
    later = [d for d in deadlines.values() if d > now]
    return [k for _, k in due], min([next_scan, *later])


def _is_target(key: tuple, t: dict) -> bool:
    """Whether the original tuple (src, sport, dst, dport) is a flow to the fault's target."""
    src, sport, dst, dport = key
    if "src" in t:
        return (src, sport, dst, dport) == (t["src"], t["sport"], t["dst"], t["dport"])
    net = ipaddress.ip_network(t["dst"] if "/" in t["dst"] else f"{t['dst']}/32")
    return ipaddress.ip_address(dst) in net and t.get("dport", dport) == dport
