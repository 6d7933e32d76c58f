"""blackhole: drop everything to/from a target.

target, direction both|out|in, mode silent|eperm.
silent: NFQUEUE to a queue nobody listens on (default 99). The packet is dropped after the stack
        has sent it, so TCP sees real loss: RTO retransmissions, `ss` timer `on`.
eperm:  DROP. On OUTPUT the stack gets EPERM back (a local send failure): no retransmission timer,
        the persist timer runs and every write retries at once (round 3 of the seed study).
"""
from __future__ import annotations

from netem import spec as S
from netem.fault import MatchFault, Shape

DEFAULT_QUEUE = 99  # never bind it: a queue with no listener is what makes the drop silent


class Blackhole(MatchFault):
    kind = "blackhole"
    shape = Shape.CUT
    does = "every packet to and from the target vanishes"
    requires = frozenset({"iptables", "nflog", "nfqueue"})
    fields = MatchFault.fields | {"mode", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        mode = spec.setdefault("mode", "silent")
        if mode not in ("silent", "eperm"):
            raise S.fail(cls.kind, f"mode must be silent (NFQUEUE, real loss) or eperm (DROP, EPERM to the stack), got {mode!r}")
        if mode == "eperm":
            if "queue" in spec:
                raise S.fail(cls.kind, "queue only applies to mode silent")
            return spec
        S.queue(cls.kind, spec.setdefault("queue", DEFAULT_QUEUE), " that nothing listens on")
        return spec

    def verdict(self, direction: str) -> str:
        if self.spec["mode"] == "eperm":
            return "-j DROP"
        return f"-j NFQUEUE --queue-num {self.spec['queue']}"
