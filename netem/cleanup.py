"""Remove whatever a killed run left behind: processes, lab namespaces, lab chains, netem qdiscs.

A run records every process it starts (tcpdump, twin, agent) as a pidfile under /run/livelab/
(`record()`); `down()` ends those processes, then every process still inside a lab namespace,
then removes the lab's iptables chains and netem qdiscs in every lab namespace (`ll-*`) and in
the current one, and finally deletes the lab namespaces. It never raises: it returns what it did
and what it could not do. `down(run_id=X)` limits itself to one run's namespaces and pidfiles.

A netns run with an uplink (live mode) also leaves things in the root namespace: a veth `llu-<hash>`,
MASQUERADE rules in the nat chain LL_NAT (hooked from POSTROUTING), ACCEPT rules in the filter chain
LL_FWD (hooked from FORWARD, only where its policy is DROP), /etc/netns/ll-<run>-c/resolv.conf, and
maybe net.ipv4.ip_forward switched on (its previous value kept in PID_DIR/uplink.ip_forward).
`remove_uplinks()` removes those: every rule carries the comment `livelab <run_id>`, so one run's
rules go without touching another's, and nothing outside the lab's own chains is edited, only the
one jump to each chain (removed together with the chain, once it is empty, in one transaction).

A pidfile (`<run>.<role>.<pid>.pid`) holds JSON with the pid and the process's start time (field
22 of /proc/PID/stat), so a pid that the kernel has since given to an unrelated process is never
signalled. A pidfile holding just a number is accepted too (no start-time check then).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from netem.kernel import in_netns, list_netns

PID_DIR = Path(os.environ.get("LIVELAB_PID_DIR", "/run/livelab"))
NS_PREFIX = "ll-"
UPLINK_PREFIX = "llu-"
NAT_CHAIN = "LL_NAT"          # nat table, jumped to from POSTROUTING: MASQUERADE per uplink
FWD_CHAIN = "LL_FWD"          # filter table, jumped to from FORWARD: ACCEPT per uplink (policy DROP)
UPLINK_CHAINS = (("nat", "POSTROUTING", NAT_CHAIN), ("filter", "FORWARD", FWD_CHAIN))
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
NETNS_ETC = Path("/etc/netns")


# ------------------------------------------------------------------------------------- pidfiles

def _starttime(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 counted after "pid (comm)"


def record(role: str, pid: int, run_id: str, pid_dir: Path | None = None, **extra) -> Path:
    """Write a pidfile for a process this run started; returns its path (pass it to forget())."""
    d = Path(pid_dir or PID_DIR)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{run_id}.{role}.{pid}.pid"
    path.write_text(json.dumps({"pid": pid, "start": _starttime(pid), "role": role, "run_id": run_id, **extra}))
    return path


def forget(path: Path | None) -> None:
    if path:
        try:
            Path(path).unlink()
        except FileNotFoundError:
            pass


def _alive(pid: int, start: str | None) -> bool:
    now = _starttime(pid)
    if now is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False  # a zombie: dead, waiting for its parent
    except OSError:
        return False
    return start is None or now == start


def stop_pid(pid: int, start: str | None = None, first: int = signal.SIGTERM, grace: float = 2.0) -> bool:
    """Signal `first`, wait up to `grace` s, then SIGKILL. True if the process is gone."""
    if not _alive(pid, start):
        return True
    try:
        os.kill(pid, first)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid, start):
            return True
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if not _alive(pid, start):
            return True
        time.sleep(0.02)
    return False


# ---------------------------------------------------------------------------------------- rules

def remove_chains(netns: str | None = None, keep: tuple[str, ...] = ()) -> list[str]:
    """Unhook and delete every LL_* chain (filter table) in a namespace (None: the current one),
    except those named in `keep`. Returns the names."""
    def run(argv, input=None):
        with in_netns(netns):
            try:
                p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=15)
            except FileNotFoundError:
                return 127, "", ""
        return p.returncode, p.stdout, p.stderr

    rc, out, _ = run(["iptables", "-S"])
    if rc != 0:
        return []
    lines = out.splitlines()
    chains = [l.split()[1] for l in lines if l.startswith("-N LL_") and l.split()[1] not in keep]
    jumps = [l for l in lines if l.startswith("-A ") and any(l.endswith(f"-j {c}") for c in chains)
             and not l.split()[1].startswith("LL_")]
    if not chains:
        return []
    text = ["*filter"] + ["-D" + j[2:] for j in jumps] + [f":{c} - [0:0]" for c in chains] + ["COMMIT"]
    run(["iptables-restore", "--noflush"], "\n".join(text) + "\n")
    run(["iptables-restore", "--noflush"], "*filter\n" + "".join(f"-X {c}\n" for c in chains) + "COMMIT\n")
    return chains


# ------------------------------------------------------------------------------------- uplinks

def uplink_ifname(run_id: str) -> str:
    """The root-namespace end of a run's uplink veth: `llu-` and 10 hex digits (14 <= IFNAMSIZ-1)."""
    return UPLINK_PREFIX + hashlib.sha1(run_id.encode()).hexdigest()[:10]


def uplink_comment(run_id: str) -> str:
    return f"livelab {run_id}"


@contextmanager
def uplink_lock() -> Iterator[None]:
    """Serialise uplink set-up and removal between processes (shared chains, ip_forward, /30 pick)."""
    fh = None
    try:
        PID_DIR.mkdir(parents=True, exist_ok=True)
        fh = open(PID_DIR / "uplink.lock", "a")
        fcntl.flock(fh, fcntl.LOCK_EX)
    except OSError:
        if fh:
            fh.close()
        fh = None  # not root: nothing here can change anything anyway
    try:
        yield
    finally:
        if fh:
            fh.close()


def ipt(argv: list[str], input: str | None = None) -> tuple[int, str, str]:
    """Run iptables(-restore) in the calling thread's namespace; (127, "", msg) if it is missing."""
    try:
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=15)
    except FileNotFoundError:
        return 127, "", f"{argv[0]} is not installed"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} timed out"
    return p.returncode, p.stdout, p.stderr


def _comment(rule: str) -> str | None:
    try:
        words = shlex.split(rule)
    except ValueError:
        return None
    for i, w in enumerate(words[:-1]):
        if w == "--comment":
            return words[i + 1]
    return None


def uplink_rules(run_id: str | None = None) -> list[tuple[str, str]]:
    """(table, `-A ...` line) of the rules in LL_NAT / LL_FWD (of one run, or all)."""
    found = []
    for table, _hook, chain in UPLINK_CHAINS:
        rc, out, _ = ipt(["iptables", "-t", table, "-S", chain])
        if rc != 0:
            continue
        for line in out.splitlines():
            if line.startswith(f"-A {chain} ") and (run_id is None or _comment(line) == uplink_comment(run_id)):
                found.append((table, line))
    return found


def uplink_links() -> list[str]:
    """Names of the `llu-*` links in the current namespace."""
    try:
        from pyroute2 import IPRoute
        with IPRoute() as ipr:
            names = [l.get_attr("IFLA_IFNAME") for l in ipr.get_links()]
    except Exception:
        p = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
        names = [l.split(":")[1].strip().split("@")[0] for l in p.stdout.splitlines() if l.count(":") >= 2]
    return [n for n in names if n and n.startswith(UPLINK_PREFIX)]


def _del_link(name: str) -> bool:
    try:
        from pyroute2 import IPRoute
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=name)
            if not idx:
                return False
            ipr.link("del", index=idx[0])
            return True
    except Exception:
        p = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True)
        return p.returncode == 0


def _forward_state() -> Path:
    return PID_DIR / "uplink.ip_forward"


def enable_ip_forward() -> None:
    """Switch net.ipv4.ip_forward on; if it was off, keep the old value for restore_ip_forward().
    Call with uplink_lock() held."""
    with open(IP_FORWARD) as fh:
        now = fh.read().strip()
    if now == "1":
        return
    state = _forward_state()
    if not state.exists():
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(now + "\n")
    with open(IP_FORWARD, "w") as fh:
        fh.write("1")


def restore_ip_forward() -> bool:
    """Put net.ipv4.ip_forward back if the lab changed it and no lab uplink remains. True if done.
    Call with uplink_lock() held."""
    state = _forward_state()
    if not state.exists() or uplink_links():
        return False
    prev = state.read_text().strip()
    if prev in ("0", "1"):
        with open(IP_FORWARD, "w") as fh:
            fh.write(prev)
    state.unlink()
    return True


def _remove_resolv(run_id: str | None) -> list[str]:
    dirs = [NETNS_ETC / f"{NS_PREFIX}{run_id}-c"] if run_id else (
        sorted(NETNS_ETC.glob(f"{NS_PREFIX}*")) if NETNS_ETC.is_dir() else [])
    gone = []
    for d in dirs:
        f = d / "resolv.conf"
        try:
            f.unlink()
            gone.append(str(f))
        except FileNotFoundError:
            pass
        try:
            d.rmdir()  # only if empty: never remove what someone else put there
        except OSError:
            pass
    return gone


def remove_uplinks(run_id: str | None = None) -> dict:
    """Remove one run's uplink (or every lab uplink) from the current (root) namespace: the llu-*
    veth, its LL_NAT / LL_FWD rules, then those chains if empty, the netns resolv.conf, and restore
    ip_forward when no uplink is left. Never raises; returns {"links", "rules", "chains", "files", "errors"}."""
    rep: dict[str, list] = {"links": [], "rules": [], "chains": [], "files": [], "errors": []}
    try:
        with uplink_lock():
            names = [uplink_ifname(run_id)] if run_id else uplink_links()
            for name in names:
                if _del_link(name):
                    rep["links"].append(name)
            for table, hook, chain in UPLINK_CHAINS:
                rc, out, err = ipt(["iptables", "-t", table, "-S"])
                lines = out.splitlines() if rc == 0 else []
                if f"-N {chain}" not in lines:
                    continue
                rules = [l for l in lines if l.startswith(f"-A {chain} ")]
                mine = [l for l in rules if run_id is None or _comment(l) == uplink_comment(run_id)]
                text = [f"*{table}"] + ["-D" + l[2:] for l in mine]
                if len(mine) == len(rules):  # empty afterwards: unhook and delete it in the same commit
                    text += ["-D" + l[2:] for l in lines if l.startswith("-A ") and l.endswith(f"-j {chain}")
                             and not l.split()[1].startswith("LL_")] + [f"-X {chain}"]
                if len(text) == 1:
                    continue  # other runs' rules only
                rc, _, err = ipt(["iptables-restore", "--noflush"], "\n".join(text + ["COMMIT"]) + "\n")
                if rc != 0:
                    rep["errors"].append(f"could not remove the uplink rules in {table}/{chain}: {err.strip()[-200:]}")
                    continue
                rep["rules"] += [f"{table}:{l}" for l in mine]
                if len(mine) == len(rules):
                    rep["chains"].append(f"{table}:{chain}")
            rep["files"] = _remove_resolv(run_id)
            if restore_ip_forward():
                rep["files"].append("ip_forward restored")
    except Exception as e:
        rep["errors"].append(f"uplinks: {type(e).__name__}: {e}")
    return rep


def _ns_pids(name: str) -> list[int]:
    try:
        p = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in p.stdout.split() if x.isdigit()]


# ----------------------------------------------------------------------------------------- down

def down(run_id: str | None = None, *, current_ns: bool = True, pid_dir: Path | None = None) -> dict:
    """Remove lab leftovers; never raises.
    Returns {"processes", "chains", "qdiscs", "namespaces", "uplinks", "errors"}."""
    from netem.faults import remove_netem

    report: dict[str, list] = {"processes": [], "chains": [], "qdiscs": [], "namespaces": [], "uplinks": [],
                               "errors": []}
    d = Path(pid_dir or PID_DIR)

    # 1. processes the lab recorded (tcpdump gets SIGINT first so it closes its file cleanly)
    pattern = f"{run_id}.*.pid" if run_id else "*.pid"
    for path in sorted(d.glob(pattern)) if d.is_dir() else []:
        try:
            text = path.read_text().strip()
            if text.isdigit():  # a plain pidfile written by someone else: no start time to check
                pid, start, role = int(text), None, path.name.split(".")[-3] if path.name.count(".") >= 2 else "?"
            else:
                info = json.loads(text)
                pid, start, role = int(info["pid"]), info.get("start"), info.get("role", "?")
        except (OSError, ValueError, KeyError, TypeError):
            forget(path)
            continue
        if _alive(pid, start):
            first = signal.SIGINT if role.startswith("tcpdump") else signal.SIGTERM
            if stop_pid(pid, start, first=first, grace=1.0):
                report["processes"].append(f"{role}:{pid}")
            else:
                report["errors"].append(f"could not stop {role} pid {pid}")
                continue
        forget(path)

    # 2. lab namespaces: whatever still runs inside, then rules, qdiscs, the namespace itself
    prefix = f"{NS_PREFIX}{run_id}-" if run_id else NS_PREFIX
    for ns in [n for n in list_netns() if n.startswith(prefix)]:
        for pid in _ns_pids(ns):
            if pid != os.getpid():
                if stop_pid(pid, first=signal.SIGTERM, grace=1.0):
                    report["processes"].append(f"{ns}:{pid}")
                else:
                    report["errors"].append(f"could not stop pid {pid} in {ns}")
        try:
            report["chains"] += [f"{ns}:{c}" for c in remove_chains(ns)]
            report["qdiscs"] += [f"{ns}:{q}" for q in remove_netem(None, ns)]
        except Exception as e:
            report["errors"].append(f"{ns}: {e}")
        try:
            from pyroute2 import netns as _netns
            _netns.remove(ns)
            report["namespaces"].append(ns)
        except Exception as e:
            rc = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if rc.returncode == 0:
                report["namespaces"].append(ns)
            else:
                report["errors"].append(f"could not delete namespace {ns}: {e}")

    # 3. uplinks into the current (root) namespace: veth, LL_NAT / LL_FWD rules, resolv.conf, ip_forward
    up = remove_uplinks(run_id)
    report["uplinks"] += up["links"]
    report["chains"] += up["chains"]
    report["errors"] += up["errors"]

    # 4. the current namespace (a compose client container, or the host); with a run id, LL_FWD
    #    stays: it holds other runs' uplink rules, and this run's went in step 3
    if current_ns:
        try:
            report["chains"] += remove_chains(None, keep=(FWD_CHAIN,) if run_id else ())
            report["qdiscs"] += remove_netem(None, None)
        except Exception as e:
            report["errors"].append(f"current namespace: {e}")
    return report


def describe(report: dict) -> str:
    parts = [f"{len(report.get(k, []))} {k}" for k in ("processes", "chains", "qdiscs", "namespaces", "uplinks")]
    s = "removed " + ", ".join(parts)
    if report["errors"]:
        s += "; could not: " + "; ".join(report["errors"])
    return s
