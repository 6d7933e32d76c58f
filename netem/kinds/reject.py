"""reject: answer what matches with a reset (tcp) or icmp-port-unreachable (udp/any).

target, direction. out: the client's packet is answered by a RST that the kernel makes and delivers
to the local socket through lo (ECONNRESET / ECONNREFUSED); it never crosses eth0, so an extra NFLOG
rule in LL_IN logs it (prefix `... rst`). in: the endpoint's packet is answered by a RST on the wire;
incoming RSTs themselves are never rejected (that would swallow the reset the out side made).
"""
from __future__ import annotations

from netem.fault import MatchFault, Shape
from netem.iptables import Rules


class Reject(MatchFault):
    kind = "reject"
    shape = Shape.CUT
    does = "every packet to or from the target is answered by a reset"
    requires = frozenset({"iptables", "nflog", "reject"})
    portless_proto = "tcp"  # a reset fault: tcp unless told otherwise

    def verdict(self, direction: str) -> str:
        if self.spec["target"]["proto"] == "tcp":
            return "-j REJECT --reject-with tcp-reset"
        return "-j REJECT --reject-with icmp-port-unreachable"

    def rules(self) -> Rules:
        if self.spec["target"]["proto"] != "tcp":
            return super().rules()
        r = Rules()
        m = self.matches()
        if "out" in m:
            r.out += [f"{m['out']} {self.nflog('out')}", f"{m['out']} {self.verdict('out')}"]
            in_m = self.match_pair()[1]
            r.in_.append(f'{in_m} --tcp-flags RST RST {self.nflog("rst")}')
        if "in" in m:
            r.in_ += [f"{m['in']} ! --tcp-flags RST RST {self.nflog('in')}",
                      f"{m['in']} ! --tcp-flags RST RST {self.verdict('in')}"]
        return r
