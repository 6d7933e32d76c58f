"""loss: drop a random share p of what matches (0 < p <= 1).

target, direction, p: `-m statistic --mode random --probability p`, then the silent drop. NFLOG and
the drop sit in a per-fault chain so both see the same coin toss.
"""
from __future__ import annotations

import hashlib

from netem import spec as S
from netem.fault import MatchFault, Shape
from netem.kinds.blackhole import DEFAULT_QUEUE
from netem.iptables import FAULT_CHAIN_PREFIX, Rules


class Loss(MatchFault):
    kind = "loss"
    shape = Shape.DEGRADE   # even p = 1: the kind says what it is for, a lossy path TCP retransmits through
    does = "a random share of the target's packets vanishes"
    requires = frozenset({"iptables", "nflog", "nfqueue", "statistic"})
    fields = MatchFault.fields | {"p", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        if "p" not in spec:
            raise S.fail(cls.kind, "p (the drop probability, 0 < p <= 1) is required")
        p = spec["p"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise S.fail(cls.kind, f"p must be a probability with 0 < p <= 1, got {p!r}")
        spec["p"] = float(p)
        S.queue(cls.kind, spec.setdefault("queue", DEFAULT_QUEUE), "")
        return spec

    @property
    def chain(self) -> str:
        return FAULT_CHAIN_PREFIX + hashlib.sha1(self.name.encode()).hexdigest()[:10]

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
