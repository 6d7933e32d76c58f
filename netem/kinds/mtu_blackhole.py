"""mtu_blackhole: a path-MTU black hole: packets larger than mtu vanish, small ones pass.

target, direction (default both), mtu (68..9000 bytes of IP packet, default 1280: a typical
tunnel's), queue. What a VPN or tunnel with a smaller MTU does when the ICMP "fragmentation needed"
that should tell the sender is filtered on the way (pings and text pass; large frames, audio or
a big tool result, vanish): a packet of the target above mtu bytes is logged and dropped
silently (NFQUEUE to a queue nobody binds, as blackhole silent), and every ICMP fragmentation-needed
that crosses the chains is logged and dropped too, so path-MTU discovery never learns. TCP keeps
retransmitting the large segment; pings and small frames still go through: a zombie session.

The size is what the kernel hands netfilter (skb length): on a router a TSO super-packet is longer
than mtu whenever its segments are (the client's segments are its own link's MSS), so the verdict is
the one each segment would get.
"""
from __future__ import annotations

from netem import spec as S
from netem.fault import MatchFault, Shape
from netem.kinds.blackhole import DEFAULT_QUEUE
from netem.iptables import Rules, nflog

MAX_IP_LEN = 65535
FRAG_NEEDED = "-p icmp --icmp-type fragmentation-needed"


class MtuBlackhole(MatchFault):
    kind = "mtu_blackhole"
    shape = Shape.ZOMBIE
    does = "a path-MTU black hole: packets above mtu vanish, small ones pass"
    requires = frozenset({"iptables", "nflog", "nfqueue", "length"})
    fields = MatchFault.fields | {"mtu", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        mtu = spec.setdefault("mtu", 1280)
        if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 9000:
            raise S.fail(cls.kind, f"mtu must be a whole number of bytes 68..9000 (IPv4 minimum to jumbo), got {mtu!r}")
        S.queue(cls.kind, spec.setdefault("queue", DEFAULT_QUEUE), " that nothing listens on")
        return spec

    def verdict(self, direction: str) -> str:
        return f"-j NFQUEUE --queue-num {self.spec['queue']}"

    def matches(self) -> dict[str, str]:
        too_big = f"-m length --length {self.spec['mtu'] + 1}:{MAX_IP_LEN}"
        return {d: f"{m} {too_big}" for d, m in super().matches().items()}

    def rules(self) -> Rules:
        r = super().rules()  # the large packets of the target: NFLOG, then the silent drop
        for direction in self.matches():
            (r.out if direction == "out" else r.in_).extend(
                [f"{FRAG_NEEDED} {nflog(self.prefix('icmp'))}", f"{FRAG_NEEDED} -j DROP"])
        return r
