"""duplicate: a share p of the packets to a target is sent twice (userspace, NFQUEUE + raw socket).

target, direction out (the only one: a copy can be put back on the way out, not on the way in),
p (0 < p <= 1), queue. The worker asks the kernel for the whole packet, accepts the original and
sends the copy right after it on a raw socket with the fwmark DUP_MARK, which the fault's own rule
lets pass, so a copy is never copied again. The receiver sees the same segment twice (TCP: a
D-SACK; UDP: the datagram twice). The worker and its life cycle are the delay kind's.
"""
from __future__ import annotations

from netem import spec as S
from netem.fault import MatchFault, Shape
from netem.kinds.delay import Held, Plan


class Duplicate(Held):
    kind = "duplicate"
    shape = Shape.DEGRADE
    does = "a random share of the target's packets is sent twice"
    fields = MatchFault.fields | {"p", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec.setdefault("direction", "out")
        spec = super()._normalise(spec)
        if spec["direction"] != "out":
            raise S.fail(cls.kind, f"direction must be out (a copy is re-sent on the way out), got {spec['direction']!r}")
        cls._share(spec, "the share of packets sent twice")
        cls._queue(spec)
        return spec

    def plan(self) -> Plan:
        return Plan(duplicate=self.spec["p"])
