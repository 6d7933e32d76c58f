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

Every run has an owner: the process that brought its topology up (`claim()` writes `<run>.owner`
beside the pidfiles before the first namespace exists; `release()` removes it once the run is down).
A machine-wide `down()` (no run id) spares every run whose owner still lives, so typing `lab down`
beside a running `lab run` ends only what a dead run left; `owners=` narrows it to the runs of
some owner pids (what a test may remove: only its own). `down(run_id=X)` is the run's own teardown
and takes X whoever owns it.
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
from netem.iptables import is_netem_chain

PID_DIR = Path(os.environ.get("LIVELAB_PID_DIR", "/run/livelab"))
NS_PREFIX = "ll-"
_RUN_NS_RE = re.compile(rf"^{NS_PREFIX}(.+)-[cer]$")  # ll-<run>-c (client), -e (endpoint), -r (router)
OWNER_SUFFIX = ".owner"


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
    """The run id of a lab namespace name (`ll-<run>-c` client, `-e` endpoint, `-r` router -> `<run>`);
    None for any other name."""
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


# ---------------------------------------------------------------------------------------- owners

def _owner_path(run_id: str, pid_dir: Path | None = None) -> Path:
    return Path(pid_dir or PID_DIR) / f"{run_id}{OWNER_SUFFIX}"


def owner_token(pid: int | None = None) -> str:
    """`<pid>:<start time>` of a process (default: this one): names it and no later one with its pid.
    Compose projects carry it as a container label (lab.topology.compose)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_starttime(pid) or ''}"


def token_alive(token: str | None) -> bool:
    """Whether the process an owner_token() names still runs; False for an empty or malformed one."""
    pid, _, start = (token or "").partition(":")
    return pid.isdigit() and _alive(int(pid), start or None)


def token_pid(token: str | None) -> int | None:
    pid = (token or "").partition(":")[0]
    return int(pid) if pid.isdigit() else None


def claim(run_id: str, pid_dir: Path | None = None) -> Path:
    """Record this process as the owner of run `run_id`, before the run makes anything. Raises
    RuntimeError if another live process owns that run id."""
    path = _owner_path(run_id, pid_dir)
    held = owner_of(run_id, pid_dir)
    if held and held != owner_token() and token_alive(held):
        raise RuntimeError(f"run id {run_id!r} belongs to the live process {token_pid(held)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"owner": owner_token(), "run_id": run_id}))
    os.replace(tmp, path)      # a concurrent `lab down` reads the whole record or none
    return path


def release(run_id: str, pid_dir: Path | None = None) -> None:
    forget(_owner_path(run_id, pid_dir))


def owner_of(run_id: str, pid_dir: Path | None = None) -> str | None:
    """The owner token recorded for a run, or None (no record, or one that does not parse)."""
    try:
        return str(json.loads(_owner_path(run_id, pid_dir).read_text())["owner"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def owners(pid_dir: Path | None = None) -> dict[str, str]:
    """run id -> owner token, for every owner record."""
    d = Path(pid_dir or PID_DIR)
    found = {}
    for path in sorted(d.glob(f"*{OWNER_SUFFIX}")) if d.is_dir() else []:
        run_id = path.name[: -len(OWNER_SUFFIX)]
        token = owner_of(run_id, d)
        if token is not None:
            found[run_id] = token
    return found


def live_runs(pid_dir: Path | None = None) -> dict[str, int]:
    """run id -> owner pid, for every run whose owner still runs."""
    return {r: token_pid(t) for r, t in owners(pid_dir).items() if token_alive(t)}


def _pidfile_run(path: Path) -> str | None:
    """The run id of a pidfile (`<run>.<role>.<pid>.pid`; the run id may itself hold dots)."""
    parts = path.name.split(".")
    return ".".join(parts[:-3]) if len(parts) >= 4 else None


def known_runs(pid_dir: Path | None = None) -> set[str]:
    """Every run id something of the lab's names: an owner record, a pidfile, a lab namespace."""
    d = Path(pid_dir or PID_DIR)
    runs = set(owners(d))
    runs |= {r for r in (_pidfile_run(p) for p in (d.glob("*.pid") if d.is_dir() else [])) if r}
    runs |= {r for r in (run_of(n) for n in list_netns()) if r}
    return runs


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

_PID_NS_RE = re.compile(rf"^{NS_PREFIX}[a-z]+-(\d+)(-[a-z])?$")   # ll-probe-<pid>[-n]: a throw-away's, by pid
REPORT_KEYS = ("processes", "chains", "qdiscs", "namespaces", "errors")


def _empty() -> dict[str, list]:
    return {k: [] for k in REPORT_KEYS}


def merge(into: dict, part: dict) -> dict:
    """Add one report's lists to another's (key by key)."""
    for k, v in part.items():
        into.setdefault(k, [])
        into[k] += v
    return into


def down(run_id: str | None = None, *, current_ns: bool = True, pid_dir: Path | None = None,
         owner_pids: set[int] | None = None) -> dict:
    """Remove lab leftovers; never raises. Returns {"processes", "chains", "qdiscs", "namespaces",
    "errors"}, and for a machine-wide down "spared": the live runs left alone, as "<run> (pid N)".

    run_id: that run's, whoever owns it. None: every run whose owner is gone, and what no run names
    (a pidfile or namespace of an older lab); `owner_pids`: only the runs whose owner record names
    one of these pids, nothing else (then the current namespace is not touched either)."""
    d = Path(pid_dir or PID_DIR)
    if run_id is not None:
        return _down_run(run_id, d, current_ns)
    report = _empty()
    report["spared"] = []
    tokens, live = owners(d), live_runs(d)
    for rid in sorted(known_runs(d)):
        if owner_pids is not None and token_pid(tokens.get(rid)) not in owner_pids:
            continue
        if rid in live:
            report["spared"].append(f"{rid} (pid {live[rid]})")
            continue
        merge(report, _down_run(rid, d, current_ns=False))
    if owner_pids is None:
        # what names no run: plain pidfiles, a throw-away namespace whose pid is in its name
        for path in sorted(d.glob("*.pid")) if d.is_dir() else []:
            if _pidfile_run(path) is None:
                _stop_recorded(path, report)
        for ns in list_netns():
            m = _PID_NS_RE.match(ns)
            if ns.startswith(NS_PREFIX) and run_of(ns) is None and not (m and _alive(int(m.group(1)), None)):
                _remove_ns(ns, report)
        if current_ns:
            _clear_current(report)
    return report


def _down_run(run_id: str, d: Path, current_ns: bool) -> dict:
    """One run's pidfiles, namespaces and owner record (and the current namespace's netem state)."""
    report = _empty()
    # 1. processes the lab recorded (tcpdump gets SIGINT first so it closes its file cleanly)
    for path in sorted(d.glob(f"{run_id}.*.pid")) if d.is_dir() else []:
        if _pidfile_run(path) == run_id:     # not run `<run_id>.x`'s, whose pidfiles match the glob too
            _stop_recorded(path, report)
    # 2. lab namespaces: whatever still runs inside, then rules, qdiscs, the namespace itself
    for ns in [n for n in list_netns() if run_of(n) == run_id]:
        _remove_ns(ns, report)
    # 3. the current namespace (a compose client container, or the host)
    if current_ns:
        _clear_current(report)
    if not report["errors"]:
        release(run_id, d)
    return report


def _stop_recorded(path: Path, report: dict) -> None:
    try:
        text = path.read_text().strip()
        if text.isdigit():  # a plain pidfile written by someone else: no start time to check
            pid, start, role = int(text), None, path.name.split(".")[-3] if path.name.count(".") >= 2 else "?"
        else:
            info = json.loads(text)
            pid, start, role = int(info["pid"]), info.get("start"), info.get("role", "?")
    except (OSError, ValueError, KeyError, TypeError):
        forget(path)
        return
    if _alive(pid, start):
        first = signal.SIGINT if role.startswith("tcpdump") else signal.SIGTERM
        if stop_pid(pid, start, first=first, grace=1.0):
            report["processes"].append(f"{role}:{pid}")
        else:
            report["errors"].append(f"could not stop {role} pid {pid}")
            return
    forget(path)


def _remove_ns(ns: str, report: dict) -> None:
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
    # namespaces come and go through `ip netns` only (netem.kernel.in_netns says why not pyroute2)
    rc = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
    if rc.returncode == 0:
        report["namespaces"].append(ns)
    else:
        report["errors"].append(f"could not delete namespace {ns}: {rc.stderr.strip() or f'ip exited {rc.returncode}'}")


def _clear_current(report: dict) -> None:
    """netem's chains and qdiscs in the current namespace: no run's (a run's faults live in its own
    namespace or container), so whoever is live, they go."""
    try:
        report["chains"] += remove_chains(None)
        report["qdiscs"] += remove_netem(None, None)
    except Exception as e:
        report["errors"].append(f"current namespace: {e}")


def describe(report: dict) -> str:
    """One line: how many of each thing went (every list in the report), the live runs left alone,
    and what could not go."""
    parts = [f"{len(v)} {k}" for k, v in report.items() if k not in ("errors", "spared")]
    s = "removed " + ", ".join(parts)
    if report.get("spared"):
        s += f"; left {len(report['spared'])} live runs alone: " + ", ".join(report["spared"])
    if report["errors"]:
        s += "; could not: " + "; ".join(report["errors"])
    return s
