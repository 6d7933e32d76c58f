"""What this kernel and this namespace offer the fault machinery, found by trying, not by guessing.

`FEATURES` is the one table of what is looked for: each feature's name (the word a fault kind's
`requires` uses), how it is found, and the line said when it is absent. `probe()` answers with a
`Capabilities`, one bool per feature: root and CAP_NET_ADMIN, a usable iptables (and which xtables
pieces it accepts), whether a queue can be bound (nfnetlink_queue), SCHED_FIFO, the `netem` qdisc,
namespaces, tcpdump's nflog interface. netem is probed by really adding a netem qdisc to a veth in a
throw-away namespace (`ll-probe-<pid>`) and removing it; where namespaces cannot be made
(a container without CAP_SYS_ADMIN) a throw-away veth in the current namespace is used instead.
The iptables targets are tried in an unhooked throw-away chain (`LL_PROBE`), so no packet is touched.

All system access goes through a `Prober`, so the detection logic is tested with a fake one.

`in_netns(name)` switches the *calling thread* into a named namespace (setns on the thread), so a
socket created or a process spawned inside the block lives there. Python 3.11 has no os.setns.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import Callable, Iterator

from netem.errors import NoPrivilege, NetemError
from netem.nfqueue import NfQueue
from netem.iptables import PROBE_CHAIN
from netem.realtime import fifo_refusal, zero_wakeup_latency

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
CAP_NET_ADMIN = 12
PROBE_QUEUE = 65000  # + pid % 500: a queue bound for a moment by the probe; never the blackhole's 99


# --------------------------------------------------------------------------------------- namespaces

_libc = None


def setns_net(fd: int) -> None:
    """Move the calling thread into the network namespace open at `fd` (setns(2), CLONE_NEWNET):
    what in_netns and a process started in a namespace (lab/topology/nsenter.py) both stand on."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


@contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block with the calling thread inside network namespace `name` (None: stay put).

    The one way the lab enters a namespace for netlink and sockets (a process started in one enters
    it as `ip netns exec` does: lab/topology/nsenter.py, on the same setns), and the one place that
    says why not pyroute2's NetNS, netns= arguments or netns.create. Each of those forks a helper
    process and ends it with SIGTERM. A child forked from an asyncio process shares the parent's
    signal wake-up pipe (signal.set_wakeup_fd), so the helper's SIGTERM wakes the parent's loop as
    the parent's own SIGTERM and ends it; a fork of a process with other threads copies their held
    locks without the threads. NetNS also creates the namespace when it is missing, so a clean-up
    racing a teardown would bring back the namespace just deleted (and that empty copy blocks a
    later run with the same id); and a helper per namespace is a cost that grows with the
    namespaces visited. Here a netlink socket created inside the block stays bound to the namespace
    for its life; the thread is back where it was when the block ends."""
    if not name:
        yield
        return
    try:
        target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetemError(f"network namespace {name!r} does not exist (no {NETNS_DIR}/{name})") from None
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            setns_net(target)
        except PermissionError:
            raise NoPrivilege(f"cannot enter network namespace {name!r}: needs root (CAP_SYS_ADMIN)") from None
        try:
            yield
        finally:
            setns_net(here)
    finally:
        os.close(target)
        os.close(here)


def write_sysctl(netns: str | None, key: str, value) -> None:
    """Set sysctl `key` (dotted: net.ipv4.ip_forward) in namespace `netns` (None: this one); /proc/sys
    is opened from the thread inside it, so a net.* key is that namespace's. OSError as the kernel says."""
    with in_netns(netns), open("/proc/sys/" + key.replace(".", "/"), "w") as fh:
        fh.write(str(value))


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def netns_name() -> str | None:
    """The name (under /run/netns) of the calling thread's network namespace; None if it has none."""
    try:
        here = os.stat("/proc/thread-self/ns/net")
    except OSError:
        return None
    for name in list_netns():
        try:
            st = os.stat(os.path.join(NETNS_DIR, name))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino):
            return name
    return None


class Prober:
    """Every system access of probe(); tests pass a fake with the same methods."""

    def euid(self) -> int:
        return os.geteuid()

    def cap_eff(self) -> int:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("CapEff:"):
                        return int(line.split()[1], 16)
        except OSError:
            pass
        return 0

    def which(self, tool: str) -> bool:
        return shutil.which(tool) is not None

    def run(self, argv: list[str], input: str | None = None, timeout: float = 10.0) -> tuple[int, str, str]:
        try:
            p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            return 127, "", f"{argv[0]}: not found"
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]}: timed out"
        return p.returncode, p.stdout, p.stderr

    def try_qdisc(self, kind: str = "netem") -> tuple[bool, str, str]:
        """Add and remove a `kind` root qdisc on a throw-away veth.

        Returns (ok, where, error text). `where` says which throw-away place was used.
        """
        from pyroute2 import IPRoute  # lazy: unit tests never need netlink
        from pyroute2.netlink.exceptions import NetlinkError

        # a namespace of its own (made with `ip netns`, entered with in_netns: the one way in),
        # else the current one, where the veth is removed again by name
        name = f"ll-probe-{os.getpid()}"
        made_ns = self.run(["ip", "netns", "add", name])[0] == 0
        where = f"namespace {name}" if made_ns else "current namespace"
        peer_a, peer_b = f"llpa{os.getpid() % 100000}", f"llpb{os.getpid() % 100000}"
        try:
            with in_netns(name if made_ns else None), IPRoute() as ipr:
                try:
                    ipr.link("add", ifname=peer_a, kind="veth", peer=peer_b)
                    idx = ipr.link_lookup(ifname=peer_a)[0]
                    ipr.link("set", index=idx, state="up")
                    try:
                        ipr.tc("add", kind, idx, handle="1:0", **({"delay": 1000} if kind == "netem" else {}))
                    except NetlinkError as e:
                        return False, where, f"{os.strerror(e.code)} (errno {e.code})"
                    ipr.tc("del", kind, idx, handle="1:0")
                    return True, where, ""
                except NetlinkError as e:
                    return False, where, f"could not make a throw-away veth: {os.strerror(e.code)} (errno {e.code})"
                finally:
                    if not made_ns:
                        for i in ipr.link_lookup(ifname=peer_a):
                            try:
                                ipr.link("del", index=i)
                            except NetlinkError:
                                pass
        except Exception as e:  # pragma: no cover - odd platforms
            return False, where, f"{type(e).__name__}: {e}"
        finally:
            if made_ns:
                self.run(["ip", "netns", "delete", name])

    def try_nfqueue_bind(self) -> tuple[bool, str]:
        """Bind a throw-away NFQUEUE queue in this namespace for a moment. (ok, error text)."""
        try:
            NfQueue(PROBE_QUEUE + os.getpid() % 500).close()
            return True, ""
        except NetemError as e:
            return False, str(e)

    def try_realtime(self) -> tuple[bool, str]:
        """Whether SCHED_FIFO may be set here (root alone is not enough in a container without
        CAP_SYS_NICE, or under a cgroup with no real-time budget), asked in a throw-away child so this
        process stays as it is. (ok, error text)"""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: try, say, leave at once
            os.close(r)
            why = fifo_refusal(1)
            os.write(w, b"ok" if why is None else (why or "refused").encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            said = fh.read().decode(errors="replace")
        os.waitpid(pid, 0)
        return (True, "") if said == "ok" else (False, said or "no answer")

    def try_wake_latency(self) -> tuple[bool, str]:
        """Whether the zero wake-up latency request may be held here (it is let go at once; taking
        it wakes the idle CPUs for a moment). (ok, the note on why not)"""
        fd, note = zero_wakeup_latency()
        if fd is None:
            return False, note or "refused"
        os.close(fd)
        return True, ""

    def can_make_netns(self) -> bool:
        name = f"ll-probe-{os.getpid()}-n"
        if self.run(["ip", "netns", "add", name])[0] != 0:
            return False
        self.run(["ip", "netns", "delete", name])
        return True


# ----------------------------------------------------------------------------------- capabilities

@dataclass(frozen=True)
class Unasked:
    """The probe could not ask about a feature here. `why` is said instead of the feature's own
    missing line; None: the line of what it depends on (root, iptables) already says it."""
    why: str | None = None


# How a feature is found: (prober, the capabilities found so far, the feature) -> present, or Unasked.
Detect = Callable[[Prober, "Capabilities", "Feature"], "bool | Unasked"]


@dataclass(frozen=True)
class Feature:
    """One thing the probe looks for, defined once: its name (the Capabilities field, and the word a
    fault kind's `requires` uses), how it is found, how `lab netem probe` prints it and the line said
    when it is absent. Which kinds need it is theirs to say (netem.faults.needing)."""
    name: str
    label: str                     # its line in the summary, before yes / NO
    missing: str | None            # the line when it is absent (None: never "missing", a note says why)
    detect: Detect
    for_kinds: bool = True         # a fault kind may require it (False: a fact about the machine)
    aside: tuple[str, str] = ("", "")   # words after yes / after NO in the summary
    trial: str | None = None       # for an xtables piece: the rule tried alone in the unhooked LL_PROBE


def _root(p: Prober, c, f: Feature) -> bool:
    return p.euid() == 0


def _net_admin(p: Prober, c, f: Feature) -> bool:
    return bool(p.cap_eff() & (1 << CAP_NET_ADMIN))


def _restore(prober: Prober, body: list[str]) -> tuple[int, str]:
    text = "*filter\n" + "".join(line + "\n" for line in body) + "COMMIT\n"
    rc, _out, err = prober.run(["iptables-restore", "--noflush"], input=text)
    return rc, err.strip()


def _iptables(p: Prober, c, f: Feature) -> bool | Unasked:
    if not c.tools.get("iptables-restore"):
        return Unasked("iptables-restore is not installed")
    rc, out, _err = p.run(["iptables", "--version"])
    if rc == 0:
        c.iptables_version = out.strip() or None
    rc, err = _restore(p, [f":{PROBE_CHAIN} - [0:0]"])
    if rc != 0:
        c.notes.append(f"iptables-restore failed: {err.splitlines()[0] if err else f'rc={rc}'}")
    return rc == 0


def _xtables(p: Prober, c, f: Feature) -> bool | Unasked:
    """An xtables piece, tried alone so a missing one is named exactly (the chain is unhooked: no
    packet is touched)."""
    if not c.iptables:
        return Unasked()
    rc, err = _restore(p, [f":{PROBE_CHAIN} - [0:0]", f"-A {PROBE_CHAIN} {f.trial}"])
    if rc != 0 and err:
        c.notes.append(f"{f.name}: {err.splitlines()[-1]}")
    return rc == 0


def _admin(c) -> bool:
    return c.root or c.net_admin


def _nfqueue_bind(p: Prober, c, f: Feature) -> bool | Unasked:
    if not _admin(c):
        return Unasked()
    ok, err = p.try_nfqueue_bind()
    if err:
        c.notes.append(f"nfqueue bind: {err}")
    return ok


def _realtime(p: Prober, c, f: Feature) -> bool:
    ok, err = p.try_realtime()
    if err:
        c.notes.append(f"SCHED_FIFO refused ({err}): the delay worker and the relay watcher run as ordinary "
                       f"processes, their timing as good as the machine's load allows")
    return ok


def _wake_latency(p: Prober, c, f: Feature) -> bool:
    ok, err = p.try_wake_latency()
    if err:
        c.notes.append(f"{err} (the real-time workers and fault changes of a quiet VM wait for it)")
    return ok


def _netem(p: Prober, c, f: Feature) -> bool | Unasked:
    if not _admin(c):
        return Unasked("sch_netem could not be probed (needs root / CAP_NET_ADMIN)")
    ok, where, err = p.try_qdisc("netem")
    if not ok:
        c.notes.append(f"netem probe ({where}): {err}")
    return ok


def _netns(p: Prober, c, f: Feature) -> bool | Unasked:
    return p.can_make_netns() if c.root else Unasked()


def _tcpdump_nflog(p: Prober, c, f: Feature) -> bool:
    if not c.tools.get("tcpdump"):
        return False
    rc, out, _err = p.run(["tcpdump", "-D"])
    return rc == 0 and "nflog" in out


def _x(name: str, label: str, missing: str, trial: str) -> Feature:
    return Feature(name, label, missing, _xtables, trial=trial)


# Every feature the probe looks for, in the order it is found and printed (a later one may read an
# earlier: the xtables pieces need iptables, the netlink probes root or CAP_NET_ADMIN).
FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("root", "root", "not root (faults, namespaces and capture need root or CAP_NET_ADMIN)", _root,
            for_kinds=False),
    Feature("net_admin", "CAP_NET_ADMIN", "no CAP_NET_ADMIN in this namespace (iptables, tc and nflog need it)",
            _net_admin, for_kinds=False),
    Feature("iptables", "iptables-restore", "iptables-restore is not usable here", _iptables),
    _x("nflog", "  NFLOG target", "the xtables NFLOG target (xt_NFLOG / nfnetlink_log): dropped packets cannot "
       "be logged", '-j NFLOG --nflog-group 5 --nflog-threshold 1 --nflog-prefix "ll probe"'),
    _x("nfqueue", "  NFQUEUE target", "the xtables NFQUEUE target (xt_NFQUEUE): no silent drop, no packet "
       "handed to a worker", "-j NFQUEUE --queue-num 99"),
    _x("statistic", "  statistic match", "the xtables statistic match (xt_statistic): no random share of the "
       "packets", "-m statistic --mode random --probability 0.5 -j RETURN"),
    _x("reject", "  REJECT target", "the xtables REJECT target (nft_reject / ipt_REJECT): no reset",
       "-p tcp -j REJECT --reject-with tcp-reset"),
    _x("conntrack", "  conntrack match", "the xtables conntrack match (xt_conntrack / nft ct): a flow's "
       "tracking state cannot be matched", "-m conntrack --ctstate INVALID -j RETURN"),
    _x("length", "  length match", "the xtables length match (xt_length): packets cannot be told apart by size",
       "-m length --length 1281:65535 -j RETURN"),
    Feature("nfqueue_bind", "NFQUEUE bind", "nfnetlink_queue: no NFQUEUE queue can be bound here, so no worker "
            "can hold packets", _nfqueue_bind),
    # SCHED_FIFO refused is no missing feature: the workers run, their timing as good as the load allows
    Feature("realtime", "SCHED_FIFO", None, _realtime, for_kinds=False,
            aside=("  (the delay worker, the relay watcher and fault changes wake on time under load)",
                   "  (the delay worker, the relay watcher and fault changes wait behind other work under load)")),
    # the PM QoS request netem.realtime holds for a real-time worker or fault table: without it, a
    # quiet VM's idle CPUs halt, and a real-time wake-up waits for one (docs/benchmarks.md)
    Feature("wake_latency", "idle CPUs kept awake", None, _wake_latency, for_kinds=False,
            aside=("  (/dev/cpu_dma_latency: while a real-time worker or fault table lives)",
                   "  (idle CPUs may halt: a real-time wake-up can wait for one)")),
    Feature("netem", "tc qdisc netem", "sch_netem: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM)", _netem),
    Feature("netns", "network namespaces", "network namespaces cannot be created here (the netns topology needs "
            "root and CAP_SYS_ADMIN)", _netns, for_kinds=False),
    Feature("tcpdump_nflog", "tcpdump nflog:5", "tcpdump cannot open nflog:5 (libpcap without nflog support, or "
            "tcpdump missing)", _tcpdump_nflog, for_kinds=False),
)}
# the features a fault kind may name in `requires` (netem.fault checks each kind's against these)
KIND_FEATURES = frozenset(n for n, f in FEATURES.items() if f.for_kinds)
TOOLS = ("iptables", "iptables-restore", "ip", "tcpdump", "tshark", "editcap", "mergecap")


@dataclass
class _Found:
    """What the probe found besides the features' yes / no (Capabilities adds one field per feature)."""
    iptables_version: str | None = None
    tools: dict[str, bool] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)   # one line per feature absent, or not askable here
    lacks: list[str] = field(default_factory=list)     # the features behind those lines, in their order
    notes: list[str] = field(default_factory=list)

    def features(self) -> frozenset[str]:
        """The features present that fault kinds may require, as they name them in `requires`."""
        return frozenset(n for n in KIND_FEATURES if getattr(self, n))

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self, needed_by: Callable[[str], list[str]] | None = None) -> str:
        """What `lab netem probe` prints; `needed_by(feature)` (netem.faults.needing) names the fault
        kinds a missing feature costs."""
        lines = []
        for f in FEATURES.values():
            have = getattr(self, f.name)
            extra = f"  ({self.iptables_version})" if f.name == "iptables" and self.iptables_version else ""
            lines.append(f"{f.label:21s}{'yes' if have else 'NO'}{f.aside[0] if have else f.aside[1]}{extra}")
        lines.append("tools                " + " ".join(f"{k}={'yes' if v else 'NO'}"
                                                     for k, v in sorted(self.tools.items())))
        if self.missing:
            lines.append("missing:")
            for text, name in zip(self.missing, self.lacks):
                kinds = needed_by(name) if needed_by is not None and name in KIND_FEATURES else []
                lines.append(f"  - {text}" + (f" (needed by {', '.join(kinds)})" if kinds else ""))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# One bool per feature of the table, so a feature is spelt only there: c.conntrack, Capabilities(netem=True).
Capabilities = make_dataclass("Capabilities", [(n, bool, field(default=False)) for n in FEATURES], bases=(_Found,))
Capabilities.__doc__ = "What this kernel and namespace offer: one bool per feature of FEATURES, and what _Found adds."
Capabilities.__module__ = __name__  # so it pickles (a probe's answer may cross to another process)


def probe(prober: Prober | None = None, *, netem: bool = True) -> Capabilities:
    """Find out what faults and captures this namespace supports. Never raises. `netem=False` does
    not try the qdisc (it says netem is absent)."""
    p = prober or Prober()
    c = Capabilities()
    for tool in TOOLS:
        c.tools[tool] = p.which(tool)
    for f in FEATURES.values():
        found = f.detect(p, c, f) if netem or f.name != "netem" else False
        setattr(c, f.name, found is True)
        why = found.why if isinstance(found, Unasked) else (None if found else f.missing)
        if why is not None:
            c.missing.append(why)
            c.lacks.append(f.name)
    if c.iptables:
        _restore(p, [f":{PROBE_CHAIN} - [0:0]", f"-X {PROBE_CHAIN}"])
    return c
