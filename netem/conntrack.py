"""Faults made by a middlebox that forgets a flow: the conntrack side shared by nat_reap and relay_age.

A NAT or a relay keeps a table of the flows it passes. When it forgets one (an idle timeout, a
maximum age), the flow's next packet finds no entry: the middlebox drops it (silent) or answers it
with a reset (rst). In a namespace that plays the middlebox this is conntrack itself:

    nf_conntrack_tcp_loose = 0       a non-SYN packet without an entry is INVALID, not picked up
                                     mid-stream as a new flow (the default, 1, would heal every reap)
    nf_conntrack_tcp_be_liberal = 1  out-of-window packets (retransmissions of a live flow) are not
                                     INVALID, so only a forgotten flow's packets are
    INVALID packets of the target    NFLOG, then NFQUEUE to a queue nobody binds (silent: the sender
                                     sees real loss) or REJECT with tcp-reset (rst)

Conntrack must already track the flow when the fault starts (a router node turns it on at up(),
netem.table ROUTER_HOOKS; lab/topology/router.py): with loose 0 an untracked flow is INVALID at once.
The sysctls are per namespace; install() remembers what it changed and uninstall() puts it back.
"""
from __future__ import annotations

from netem import spec as S
from netem.errors import NetemError
from netem.fault import InstalledFault, MatchFault
from netem.kernel import in_netns
from netem.kinds.blackhole import DEFAULT_QUEUE
from netem.iptables import Rules

SYSCTL_DIR = "/proc/sys/net/netfilter/"
FORGET_SYSCTLS = {"nf_conntrack_tcp_loose": 0, "nf_conntrack_tcp_be_liberal": 1}
MODES = ("silent", "rst")


def read_sysctl(netns: str | None, key: str) -> str:
    with in_netns(netns), open(SYSCTL_DIR + key) as fh:
        return fh.read().strip()


def write_sysctls(netns: str | None, values: dict) -> dict[str, str]:
    """Set net.netfilter.<key> in `netns`; returns the values they had (for putting them back)."""
    old = {}
    try:
        for key, value in values.items():
            old[key] = read_sysctl(netns, key)
            with in_netns(netns), open(SYSCTL_DIR + key, "w") as fh:
                fh.write(str(value))
    except OSError as e:
        restore_sysctls(netns, old)
        raise NetemError(f"net.netfilter.{key} in {netns or 'this namespace'}: {e.strerror} "
                         "(is nf_conntrack loaded, and are you root here?)") from None
    return old


def restore_sysctls(netns: str | None, old: dict[str, str]) -> None:
    """Quiet: a namespace already gone took its sysctls with it."""
    for key, value in old.items():
        try:
            with in_netns(netns), open(SYSCTL_DIR + key, "w") as fh:
                fh.write(value)
        except (OSError, NetemError):
            pass


class ForgottenFlowFault(MatchFault, InstalledFault):
    """Base of the kinds whose middlebox forgets flows; a subclass says when (`sysctls`, a worker)."""
    requires = frozenset({"iptables", "nflog", "nfqueue", "conntrack", "reject"})
    fields = MatchFault.fields | {"mode", "queue"}
    portless_proto = "tcp"  # conntrack's TCP state is what is forgotten

    def __init__(self, spec: dict):
        super().__init__(spec)
        self._old_sysctls: dict[str, str] = {}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec = super()._normalise(spec)
        if spec["target"]["proto"] != "tcp":
            raise S.fail(cls.kind, "target.proto must be tcp (the middlebox forgets TCP flows)")
        mode = spec.setdefault("mode", "silent")
        if mode not in MODES:
            raise S.fail(cls.kind, f"mode must be silent (the forgotten flow's packets vanish) or rst "
                                   f"(they are answered by a reset), got {mode!r}")
        if mode == "rst" and "queue" in spec:
            raise S.fail(cls.kind, "queue only applies to mode silent")
        if mode == "silent":
            S.queue(cls.kind, spec.setdefault("queue", DEFAULT_QUEUE), " that nothing listens on")
        return spec

    def sysctls(self) -> dict:
        """The conntrack settings this middlebox needs while it is active."""
        return dict(FORGET_SYSCTLS)

    def verdict(self, direction: str) -> str:
        if self.spec["mode"] == "rst":
            return "-j REJECT --reject-with tcp-reset"
        return f"-j NFQUEUE --queue-num {self.spec['queue']}"

    def rules(self) -> Rules:
        r = Rules()
        for direction, m in self.matches().items():
            # a reset never answers a reset (the rst the other side's rule made would be swallowed)
            invalid = f"{m} -m conntrack --ctstate INVALID ! --tcp-flags RST RST"
            (r.out if direction == "out" else r.in_).extend(
                [f"{invalid} {self.nflog(direction)}", f"{invalid} {self.verdict(direction)}"])
        return r

    def install(self, netns: str | None) -> None:
        self._old_sysctls = write_sysctls(netns, self.sysctls())

    def uninstall(self, netns: str | None) -> None:
        restore_sysctls(netns, self._old_sysctls)
        self._old_sysctls = {}
