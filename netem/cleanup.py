"""Remove whatever a killed run left behind: processes, lab namespaces, lab chains, netem qdiscs.

A run records every process it starts (tcpdump, twin, agent, a fault's worker) as a pidfile under
/run/livelab/ (`record()`); `down()` ends those processes, then every process still inside a lab
namespace, then removes the lab's iptables chains and netem qdiscs in every lab namespace (`ll-*`)
and in the current one, and finally deletes the lab namespaces. It never raises: it returns what it
did and what it could not do. `down(run_id=X)` limits itself to one run's namespaces and pidfiles.
What a topology adds outside the namespaces (a live-mode uplink) is the topology's to remove
(lab.topology.uplink, whose `down()` calls this one first).

A pidfile (`<run>.<role>.<pid>.pid`) holds JSON with the pid and the process's start time (field
22 of /proc/PID/stat), so a pid that the kernel has since given to an unrelated process is never
signalled. A pidfile holding just a number is accepted too (no start-time check then).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from netem.kernel import in_netns, list_netns
from netem.qdisc import remove_netem
from netem.rules import is_netem_chain

PID_DIR = Path(os.environ.get("LIVELAB_PID_DIR", "/run/livelab"))
NS_PREFIX = "ll-"
_RUN_NS_RE = re.compile(rf"^{NS_PREFIX}(.+)-[ce]$")  # ll-<run>-c (client), ll-<run>-e (endpoint)


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


def run_of(netns: str | None) -> str | None:
    """The run id of a lab namespace name (`ll-<run>-c` -> `<run>`); None for any other name."""
    m = _RUN_NS_RE.match(netns or "")
    return m.group(1) if m else None


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

def remove_chains(netns: str | None = None) -> list[str]:
    """Unhook and delete every chain netem makes (filter table: LL_OUT, LL_IN, LL_L_*, LL_PROBE) in a
    namespace (None: the current one). Returns the names. Other LL_ chains are not netem's."""
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
    chains = [l.split()[1] for l in lines if l.startswith("-N ") and is_netem_chain(l.split()[1])]
    jumps = [l for l in lines if l.startswith("-A ") and any(l.endswith(f"-j {c}") for c in chains)
             and not l.split()[1].startswith("LL_")]
    if not chains:
        return []
    text = ["*filter"] + ["-D" + j[2:] for j in jumps] + [f":{c} - [0:0]" for c in chains] + ["COMMIT"]
    run(["iptables-restore", "--noflush"], "\n".join(text) + "\n")
    run(["iptables-restore", "--noflush"], "*filter\n" + "".join(f"-X {c}\n" for c in chains) + "COMMIT\n")
    return chains


def _ns_pids(name: str) -> list[int]:
    try:
        p = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in p.stdout.split() if x.isdigit()]


# ----------------------------------------------------------------------------------------- down

def down(run_id: str | None = None, *, current_ns: bool = True, pid_dir: Path | None = None) -> dict:
    """Remove lab leftovers; never raises.
    Returns {"processes", "chains", "qdiscs", "namespaces", "errors"}."""
    report: dict[str, list] = {"processes": [], "chains": [], "qdiscs": [], "namespaces": [], "errors": []}
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

    # 3. the current namespace (a compose client container, or the host)
    if current_ns:
        try:
            report["chains"] += remove_chains(None)
            report["qdiscs"] += remove_netem(None, None)
        except Exception as e:
            report["errors"].append(f"current namespace: {e}")
    return report


def describe(report: dict) -> str:
    """One line: how many of each thing went (every list in the report), and what could not."""
    parts = [f"{len(v)} {k}" for k, v in report.items() if k != "errors"]
    s = "removed " + ", ".join(parts)
    if report["errors"]:
        s += "; could not: " + "; ".join(report["errors"])
    return s
