"""reorder: a share p of a target's packets jumps the queue; the rest are held delay_ms (userspace).

target, direction (default out), delay_ms > 0, p (0 < p <= 1), queue. netem's `reorder`: a packet
drawn (probability p) is sent at once, ahead of the packets held before it; the others leave
delay_ms after they came, in their order. So a stream sees the drawn packet early by up to
delay_ms (TCP: out-of-order segments, duplicate ACKs, maybe a fast retransmit). The worker and its
life cycle are the delay kind's (netem/kinds/delay.py).
"""
from __future__ import annotations

from netem.fault import MatchFault, Shape
from netem.kinds.delay import Held, Plan


class Reorder(Held):
    kind = "reorder"
    shape = Shape.DEGRADE
    does = "a random share of the target's packets overtakes the others"
    fields = MatchFault.fields | {"delay_ms", "p", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec.setdefault("direction", "out")
        spec = super()._normalise(spec)
        cls._hold_ms(spec, "how long the packets not drawn are held")
        cls._share(spec, "the share of packets sent ahead")
        cls._queue(spec)
        return spec

    def plan(self) -> Plan:
        return Plan(delay_ms=self.spec["delay_ms"], reorder=self.spec["p"])
