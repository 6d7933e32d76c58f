"""What this kernel and this namespace offer the fault machinery, found by trying, not by guessing.

`probe()` answers with a `Capabilities`: root and CAP_NET_ADMIN, a usable iptables (and which
xtables targets it accepts: NFLOG, NFQUEUE, statistic, REJECT), whether a queue can be bound
(nfnetlink_queue: the userspace delay), tcpdump's nflog interface, and whether the `netem` qdisc
exists. `Capabilities.features()` names what is there, in the words fault kinds use in `requires`. netem is probed by really adding a netem qdisc to a veth in a
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
from dataclasses import asdict, dataclass, field
from typing import Iterator

from netem.errors import NoPrivilege, NetemError
from netem.nfqueue import NfQueue
from netem.realtime import fifo_refusal
from netem.rules import PROBE_CHAIN

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
CAP_NET_ADMIN = 12

# One line per thing the probe could not find; the keys of Capabilities they explain.
MISSING_TEXT = {
    "root": "not root (faults, namespaces and capture need root or CAP_NET_ADMIN)",
    "net_admin": "no CAP_NET_ADMIN in this namespace (iptables, tc and nflog need it)",
    "iptables": "iptables-restore is not usable here",
    "nflog": "the xtables NFLOG target (xt_NFLOG / nfnetlink_log): dropped packets cannot be logged",
    "nfqueue": "the xtables NFQUEUE target (xt_NFQUEUE): no silent blackhole or random loss",
    "statistic": "the xtables statistic match (xt_statistic): no random loss",
    "reject": "the xtables REJECT target (nft_reject / ipt_REJECT): no reset fault",
    "conntrack": "the xtables conntrack match (xt_conntrack / nft ct): no NAT reap or fixed-age relay",
    "length": "the xtables length match (xt_length): no path-MTU black hole",
    "nfqueue_bind": "nfnetlink_queue: no NFQUEUE queue can be bound here, so no userspace delay",
    "netem": "sch_netem: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM); the netem kind takes its userspace path (a queue worker) for delay, jitter, loss, reorder and duplicate",
    "netns": "network namespaces cannot be created here (the netns topology needs root and CAP_SYS_ADMIN)",
    "tcpdump_nflog": "tcpdump cannot open nflog:5 (libpcap without nflog support, or tcpdump missing)",
}

# The iptables pieces the faults use, each tried alone so a missing one is named exactly.
IPTABLES_TRIALS = {
    "nflog": "-j NFLOG --nflog-group 5 --nflog-threshold 1 --nflog-prefix \"ll probe\"",
    "nfqueue": "-j NFQUEUE --queue-num 99",
    "statistic": "-m statistic --mode random --probability 0.5 -j RETURN",
    "reject": "-p tcp -j REJECT --reject-with tcp-reset",
    "conntrack": "-m conntrack --ctstate INVALID -j RETURN",
    "length": "-m length --length 1281:65535 -j RETURN",
}
# Capabilities fields that are features a fault kind may require (the rest describe the machine)
FEATURES = ("iptables", "nflog", "nfqueue", "statistic", "reject", "nfqueue_bind", "netem", "conntrack", "length")
PROBE_QUEUE = 65000  # + pid % 500: a queue bound for a moment by the probe; never the blackhole's 99


# --------------------------------------------------------------------------------------- namespaces

_libc = None


def _setns(fd: int) -> None:
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
            _setns(target)
        except PermissionError:
            raise NoPrivilege(f"cannot enter network namespace {name!r}: needs root (CAP_SYS_ADMIN)") from None
        try:
            yield
        finally:
            _setns(here)
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


# ----------------------------------------------------------------------------------- capabilities

@dataclass
class Capabilities:
    root: bool = False
    net_admin: bool = False
    iptables: bool = False
    iptables_version: str | None = None
    nflog: bool = False
    nfqueue: bool = False
    statistic: bool = False
    reject: bool = False
    nfqueue_bind: bool = False
    realtime: bool = False       # SCHED_FIFO may be set (netem.realtime): held packets and relay cuts on time
    netem: bool = False
    conntrack: bool = False
    length: bool = False
    netns: bool = False
    tcpdump_nflog: bool = False
    tools: dict[str, bool] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def faults_ok(self) -> bool:
        """iptables faults (blackhole, reject, loss) can run here."""
        return self.iptables and self.nflog and self.nfqueue

    def netem_path(self) -> str:
        """Which path the netem kind takes here (netem/kinds/netem.py): the words `lab netem probe` prints."""
        if self.netem:
            return "kernel (tc netem qdisc)"
        if self.iptables and self.nfqueue and self.nfqueue_bind:
            return "userspace (NFQUEUE worker: delay, jitter, loss, reorder, duplicate; no rate)"
        return "none (no sch_netem and no NFQUEUE)"

    def features(self) -> frozenset[str]:
        """The features present, named as fault kinds name them in `requires`."""
        return frozenset(f for f in FEATURES if getattr(self, f))

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        yes = lambda b: "yes" if b else "NO"  # noqa: E731
        lines = [
            f"root                 {yes(self.root)}",
            f"CAP_NET_ADMIN        {yes(self.net_admin)}",
            f"iptables-restore     {yes(self.iptables)}" + (f"  ({self.iptables_version})" if self.iptables_version else ""),
            f"  NFLOG target       {yes(self.nflog)}",
            f"  NFQUEUE target     {yes(self.nfqueue)}",
            f"  statistic match    {yes(self.statistic)}",
            f"  REJECT target      {yes(self.reject)}",
            f"  conntrack match    {yes(self.conntrack)}",
            f"  length match       {yes(self.length)}",
            f"NFQUEUE bind         {yes(self.nfqueue_bind)}",
            f"SCHED_FIFO           {yes(self.realtime)}  (the delay worker and the relay watcher "
            f"{'wake on time under load' if self.realtime else 'wait behind other work under load'})",
            f"tc qdisc netem       {yes(self.netem)}",
            f"  netem kind path    {self.netem_path()}",
            f"network namespaces   {yes(self.netns)}",
            f"tcpdump nflog:5      {yes(self.tcpdump_nflog)}",
            "tools                " + " ".join(f"{k}={'yes' if v else 'NO'}" for k, v in sorted(self.tools.items())),
        ]
        if self.missing:
            lines.append("missing:")
            lines += [f"  - {m}" for m in self.missing]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


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
        from pyroute2 import IPRoute, NetNS, netns  # lazy: unit tests never need netlink
        from pyroute2.netlink.exceptions import NetlinkError

        name = f"ll-probe-{os.getpid()}"
        made_ns = False
        try:
            netns.create(name)
            made_ns = True
        except Exception:
            pass
        where = f"namespace {name}" if made_ns else "current namespace"
        peer_a, peer_b = f"llpa{os.getpid() % 100000}", f"llpb{os.getpid() % 100000}"
        ipr = None
        try:
            ipr = NetNS(name) if made_ns else IPRoute()
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
        except Exception as e:  # pragma: no cover - odd platforms
            return False, where, f"{type(e).__name__}: {e}"
        finally:
            if ipr is not None:
                try:
                    if not made_ns:
                        for i in ipr.link_lookup(ifname=peer_a):
                            ipr.link("del", index=i)
                except Exception:
                    pass
                ipr.close()
            if made_ns:
                try:
                    netns.remove(name)
                except Exception:
                    pass

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

    def can_make_netns(self) -> bool:
        from pyroute2 import netns

        name = f"ll-probe-{os.getpid()}-n"
        try:
            netns.create(name)
        except Exception:
            return False
        try:
            netns.remove(name)
        except Exception:
            pass
        return True


def _restore(prober: Prober, body: list[str]) -> tuple[int, str]:
    text = "*filter\n" + "".join(line + "\n" for line in body) + "COMMIT\n"
    rc, _out, err = prober.run(["iptables-restore", "--noflush"], input=text)
    return rc, err.strip()


def probe(prober: Prober | None = None, *, netem: bool = True) -> Capabilities:
    """Find out what faults and captures this namespace supports. Never raises."""
    p = prober or Prober()
    c = Capabilities()
    c.root = p.euid() == 0
    c.net_admin = bool(p.cap_eff() & (1 << CAP_NET_ADMIN))
    for tool in ("iptables", "iptables-restore", "ip", "tcpdump", "tshark", "editcap", "mergecap"):
        c.tools[tool] = p.which(tool)

    if c.tools["iptables-restore"]:
        rc, out, err = p.run(["iptables", "--version"])
        if rc == 0:
            c.iptables_version = out.strip() or None
        rc, err = _restore(p, [f":{PROBE_CHAIN} - [0:0]"])
        c.iptables = rc == 0
        if not c.iptables:
            c.notes.append(f"iptables-restore failed: {err.splitlines()[0] if err else f'rc={rc}'}")
        else:
            for key, rule in IPTABLES_TRIALS.items():
                rc, err = _restore(p, [f":{PROBE_CHAIN} - [0:0]", f"-A {PROBE_CHAIN} {rule}"])
                setattr(c, key, rc == 0)
                if rc != 0 and err:
                    c.notes.append(f"{key}: {err.splitlines()[-1]}")
            _restore(p, [f":{PROBE_CHAIN} - [0:0]", f"-X {PROBE_CHAIN}"])
    if c.tools["tcpdump"]:
        rc, out, _err = p.run(["tcpdump", "-D"])
        c.tcpdump_nflog = rc == 0 and "nflog" in out

    if c.root:
        c.netns = p.can_make_netns()
    if c.root or c.net_admin:
        c.nfqueue_bind, err = p.try_nfqueue_bind()
        if err:
            c.notes.append(f"nfqueue bind: {err}")
    c.realtime, err = p.try_realtime()
    if err:
        c.notes.append(f"SCHED_FIFO refused ({err}): the delay worker and the relay watcher run as ordinary "
                       f"processes, their timing as good as the machine's load allows")
    if netem and (c.root or c.net_admin):
        ok, where, err = p.try_qdisc("netem")
        c.netem = ok
        if not ok:
            c.notes.append(f"netem probe ({where}): {err}")

    for key, text in MISSING_TEXT.items():
        if key == "iptables":
            if not c.iptables:
                c.missing.append(text if c.tools.get("iptables-restore") else "iptables-restore is not installed")
            continue
        if key in IPTABLES_TRIALS and not c.iptables:
            continue  # already said: iptables itself is unusable
        if key == "netns" and not c.root:
            continue  # already said: not root
        if key == "netem" and not (c.root or c.net_admin):
            c.missing.append("sch_netem could not be probed (needs root / CAP_NET_ADMIN)")
            continue
        if key == "nfqueue_bind" and not (c.root or c.net_admin):
            continue  # already said: no CAP_NET_ADMIN
        if not getattr(c, key):
            c.missing.append(text)
    return c
