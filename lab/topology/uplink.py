"""A netns run's uplink into the root namespace (live mode), and how to remove what it leaves there.

A netns run with an uplink leaves things in the root namespace: a veth `llu-<hash>`, MASQUERADE
rules in the nat chain LL_NAT (hooked from POSTROUTING), ACCEPT rules in the filter chain LL_FWD
(hooked from FORWARD, only where its policy is DROP), /etc/netns/ll-<run>-c/resolv.conf, and maybe
net.ipv4.ip_forward switched on (its previous value kept in PID_DIR/uplink.ip_forward).
`remove_uplinks()` removes those: every rule carries the comment `livelab <run_id>`, so one run's
rules go without touching another's, and nothing outside the lab's own chains is edited, only the
one jump to each chain (removed together with the chain, once it is empty, in one transaction).

`down(run_id)` is the whole clean-up of a run: netem's (processes, namespaces, fault chains,
qdiscs), then the uplink. `lab down` and the netns topology call it.
"""
from __future__ import annotations

import fcntl
import hashlib
import shlex
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from netem import cleanup
from netem.cleanup import NS_PREFIX

UPLINK_PREFIX = "llu-"
NAT_CHAIN = "LL_NAT"          # nat table, jumped to from POSTROUTING: MASQUERADE per uplink
FWD_CHAIN = "LL_FWD"          # filter table, jumped to from FORWARD: ACCEPT per uplink (policy DROP)
UPLINK_CHAINS = (("nat", "POSTROUTING", NAT_CHAIN), ("filter", "FORWARD", FWD_CHAIN))
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
NETNS_ETC = Path("/etc/netns")


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
        cleanup.PID_DIR.mkdir(parents=True, exist_ok=True)
        fh = open(cleanup.PID_DIR / "uplink.lock", "a")
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
    return cleanup.PID_DIR / "uplink.ip_forward"


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


def _remove_resolv(run_id: str | None, spare: frozenset[str] = frozenset()) -> list[str]:
    dirs = [NETNS_ETC / f"{NS_PREFIX}{run_id}-c"] if run_id else (
        sorted(NETNS_ETC.glob(f"{NS_PREFIX}*")) if NETNS_ETC.is_dir() else [])
    dirs = [d for d in dirs if cleanup.run_of(d.name) not in spare]
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


def remove_uplinks(run_id: str | None = None, spare: frozenset[str] = frozenset()) -> dict:
    """Remove one run's uplink (or every lab uplink but the `spare` runs') from the current (root)
    namespace: the llu-* veth, its LL_NAT / LL_FWD rules, then those chains if empty, the netns
    resolv.conf, and restore ip_forward when no uplink is left. Never raises; returns {"links",
    "rules", "chains", "files", "errors"}."""
    rep: dict[str, list] = {"links": [], "rules": [], "chains": [], "files": [], "errors": []}
    kept_links = {uplink_ifname(r) for r in spare}
    kept_rules = {uplink_comment(r) for r in spare}
    try:
        with uplink_lock():
            names = [uplink_ifname(run_id)] if run_id else [n for n in uplink_links() if n not in kept_links]
            for name in names:
                if _del_link(name):
                    rep["links"].append(name)
            for table, hook, chain in UPLINK_CHAINS:
                rc, out, err = ipt(["iptables", "-t", table, "-S"])
                lines = out.splitlines() if rc == 0 else []
                if f"-N {chain}" not in lines:
                    continue
                rules = [l for l in lines if l.startswith(f"-A {chain} ")]
                mine = [l for l in rules if _comment(l) == uplink_comment(run_id)] if run_id else \
                    [l for l in rules if _comment(l) not in kept_rules]
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
            rep["files"] = _remove_resolv(run_id, spare)
            if restore_ip_forward():
                rep["files"].append("ip_forward restored")
    except Exception as e:
        rep["errors"].append(f"uplinks: {type(e).__name__}: {e}")
    return rep




def down(run_id: str | None = None, *, current_ns: bool = True, pid_dir: Path | None = None,
         owner_pids: set[int] | None = None) -> dict:
    """Remove a run's leftovers (None: those of every run whose owner is gone; `owner_pids`: of those
    whose owner was one of these pids): netem's, then the uplink's. Never raises.
    Returns netem.cleanup.down()'s report with "uplinks" (the veths removed) added."""
    tokens = cleanup.owners(pid_dir)        # read before: cleanup.down releases the dead runs' records
    report = cleanup.down(run_id, current_ns=current_ns, pid_dir=pid_dir, owner_pids=owner_pids)
    # (cleanup.down leaves LL_NAT/LL_FWD: not netem's)
    if run_id is not None:
        up = remove_uplinks(run_id)
    elif owner_pids is not None:
        up = {"links": [], "chains": [], "errors": []}
        for rid, token in sorted(tokens.items()):
            if cleanup.token_pid(token) in owner_pids and not cleanup.token_alive(token):
                for k, v in remove_uplinks(rid).items():
                    up.setdefault(k, []).extend(v)
    else:
        up = remove_uplinks(spare=frozenset(cleanup.live_runs(pid_dir)))
    report["uplinks"] = up["links"]
    report["chains"] += up["chains"]
    report["errors"] += up["errors"]
    return report
