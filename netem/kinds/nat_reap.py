"""nat_reap: a NAT that reaps idle TCP flows: after idle_s without a packet the mapping is gone.

target (the destination whose flows pass the NAT, usually the endpoint), idle_s > 0, mode
silent|rst (netem.conntrack), direction (default both). The conntrack idle timeout for established
TCP (nf_conntrack_tcp_timeout_established, one value for the whole namespace, as a carrier NAT has
one) is set to idle_s while the fault is active; a flow that stays quiet that long loses its entry,
and its next packet, from either side, is dropped or reset. A flow that keeps sending (its own
pings) refreshes the entry and lives. Users report idle Live sessions reaped this way and seen as
close 1006 (carrier NATs that reap idle TCP flows).

Applied in a namespace where the flow is already tracked (a router node), the new timeout takes
effect at the flow's next packet: the kernel re-arms an entry's timer from the current value.
"""
from __future__ import annotations

from netem import spec as S
from netem.conntrack import ForgottenFlowFault
from netem.fault import Shape

IDLE_KEY = "nf_conntrack_tcp_timeout_established"


class NatReap(ForgottenFlowFault):
    kind = "nat_reap"
    shape = Shape.ARMED
    does = "a NAT that reaps a flow once it is idle"
    fields = ForgottenFlowFault.fields | {"idle_s"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        if "idle_s" not in spec:
            raise S.fail(cls.kind, "idle_s (seconds of silence after which the NAT forgets a flow) is required")
        v = S.number(cls.kind, "idle_s", spec["idle_s"], "a whole number of seconds 1..86400", low=1, high=86400)
        if v != int(v):
            raise S.fail(cls.kind, f"idle_s must be a whole number of seconds (conntrack counts seconds), got {v!r}")
        spec["idle_s"] = int(v)
        return spec

    def sysctls(self) -> dict:
        return {**super().sysctls(), IDLE_KEY: self.spec["idle_s"]}
