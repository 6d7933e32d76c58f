"""The netns topology's uplink (live mode) with real packets, never leaving the machine (root).

The "outside world" is a TCP server bound on the uplink's host-side address in the root namespace,
so the client namespace reaches it over up0 exactly as it would reach the real endpoint through the
host. Nothing here sends a packet anywhere else. Every test removes what it made, pass or fail.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lab.topology import uplink
from lab.topology.netns import NetnsTopology
from netem.faults import build
from netem.kernel import in_netns, list_netns
from netem.table import FaultTable

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[2]


def ip_forward() -> str:
    return Path(uplink.IP_FORWARD).read_text().strip()


@pytest.fixture
def topo():
    before = ip_forward()
    t = NetnsTopology(f"tu{os.getpid()}", uplink=True)
    try:
        t.up()
        yield t
    finally:
        t.down()
        uplink.down(t.run_id, current_ns=False)
        assert ip_forward() == before


class Server:
    """A TCP server that records what each accepted connection sent (and echoes it back)."""

    def __init__(self, host: str, netns: str | None = None):
        with in_netns(netns):
            self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((host, 0))
        self.ls.listen()
        self.port = self.ls.getsockname()[1]
        self.peers: list[str] = []
        self.data: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, addr = self.ls.accept()
            except OSError:
                return
            self.peers.append(addr[0])
            buf = bytearray()
            self.data.append(buf)
            threading.Thread(target=self._serve, args=(c, buf), daemon=True).start()

    @staticmethod
    def _serve(c, buf):
        with c:
            while True:
                try:
                    b = c.recv(65536)
                except OSError:
                    return
                if not b:
                    return
                buf += b
                try:
                    c.sendall(b)
                except OSError:
                    return

    def total(self, i: int) -> int:
        return len(self.data[i]) if i < len(self.data) else -1

    def close(self):
        self.ls.close()


@pytest.fixture
def host_server(topo):
    s = Server(topo.uplink_host_ip)              # the root namespace: the "outside" end of up0
    yield s
    s.close()


@pytest.fixture
def endpoint_server(topo):
    s = Server(topo.endpoint_host, topo.ns_endpoint)
    yield s
    s.close()


def wait_for(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def iptables_s(table: str = "filter") -> str:
    return subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout


def ours(run_id: str) -> list[tuple[str, str]]:
    return uplink.uplink_rules(run_id)


# ------------------------------------------------------------------------------- reachability

def test_client_reaches_the_host_side_server_and_still_the_endpoint(topo, host_server, endpoint_server):
    script = textwrap.dedent("""
        import socket, sys
        for host, port in zip(sys.argv[1::2], sys.argv[2::2]):
            s = socket.create_connection((host, int(port)), timeout=3)
            s.sendall(b"ping")
            assert s.recv(4) == b"ping"
            s.close()
        print("ok", flush=True)
    """)
    p = topo.client.popen([sys.executable, "-c", script, topo.uplink_host_ip, str(host_server.port),
                          topo.endpoint_host, str(endpoint_server.port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0 and out.strip() == "ok", err
    assert host_server.peers == [topo.uplink_client_ip]      # over up0, from 10.204.M.2
    assert endpoint_server.peers == [topo.client_host]       # over eth0, untouched
    routes = subprocess.run(["ip", "netns", "exec", topo.ns_client, "ip", "-4", "route"],
                            capture_output=True, text=True).stdout
    assert f"default via {topo.uplink_host_ip} dev up0" in routes
    assert f"{topo.subnet} dev eth0" in routes
    assert len(topo.uplink_ifname) <= 15 and topo.uplink_ifname.startswith("llu-")
    assert topo.uplink_subnet.prefixlen == 30 and topo.uplink_host_ip.startswith("10.204.")
    resolv = Path(f"/etc/netns/{topo.ns_client}/resolv.conf")
    assert resolv.exists() and "nameserver" in resolv.read_text()


# ------------------------------------------------------------------------------- rules and down

def test_masquerade_while_up_gone_after_down_and_ip_forward_restored():
    before = ip_forward()
    t = NetnsTopology(f"tv{os.getpid()}", uplink=True)
    try:
        t.up()
        assert ip_forward() == "1"
        nat = [l for tb, l in ours(t.run_id) if tb == "nat"]
        assert len(nat) == 1 and f"-s {t.uplink_subnet}" in nat[0] and "-j MASQUERADE" in nat[0]
        assert f"! -o {t.uplink_ifname}" in nat[0]
        assert "-A POSTROUTING -j LL_NAT" in iptables_s("nat").splitlines()
        fwd = [l for tb, l in ours(t.run_id) if tb == "filter"]
        policy_drop = "-P FORWARD DROP" in iptables_s().splitlines()
        assert t.uplink_forward_rules == policy_drop
        assert len(fwd) == (2 if policy_drop else 0)
        assert t.uplink_ifname in uplink.uplink_links()
    finally:
        t.down()
        t.down()                                             # idempotent
    assert ours(t.run_id) == []
    assert t.uplink_ifname not in uplink.uplink_links()
    assert not Path(f"/etc/netns/{t.ns_client}").exists()
    assert ip_forward() == before
    if not uplink.uplink_rules():                           # no other lab uplink: the chains went too
        assert "LL_NAT" not in iptables_s("nat") and "LL_FWD" not in iptables_s()


def _spawn_and_kill(run_id: str, piddir: Path) -> dict:
    """Build an uplink topology in a child, SIGKILL it, return what it reported."""
    script = textwrap.dedent(f"""
        import json, pathlib, time
        from lab.topology.netns import NetnsTopology
        t = NetnsTopology({run_id!r}, pid_dir=pathlib.Path({str(piddir)!r}), uplink=True)
        t.up()
        t.client.popen(["sleep", "60"], role="agent")
        print(json.dumps({{"ifname": t.uplink_ifname, "ns": t.ns_client}}), flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        info = json.loads(p.stdout.readline())
    finally:
        p.kill()                                             # SIGKILL: no handler, no atexit
        p.wait()
    assert info["ifname"] in uplink.uplink_links()
    assert info["ns"] in list_netns()
    assert {tb for tb, _ in ours(run_id)} >= {"nat"}
    assert Path(f"/etc/netns/{info['ns']}/resolv.conf").exists()
    return info


def _assert_gone(run_id: str, info: dict, report: dict) -> None:
    assert report["errors"] == []
    assert info["ifname"] not in uplink.uplink_links()
    assert ours(run_id) == []
    assert not [n for n in list_netns() if n.startswith(f"ll-{run_id}-")]
    assert not Path(f"/etc/netns/{info['ns']}").exists()


def test_down_for_the_run_after_kill_9_leaves_no_uplink(tmp_path):
    run_id = f"tw{os.getpid()}"
    before = ip_forward()
    try:
        info = _spawn_and_kill(run_id, tmp_path)
        report = uplink.down(run_id, pid_dir=tmp_path)
        _assert_gone(run_id, info, report)
        assert ip_forward() == before
    finally:
        uplink.down(run_id, pid_dir=tmp_path)


@pytest.mark.serial
def test_global_down_after_kill_9_leaves_nothing(tmp_path):
    """`netem.uplink.down()` with no run id: everything. It would also end other lab runs live on
    this machine, so it only runs when there are none."""
    others = [n for n in list_netns() if n.startswith("ll-")] + uplink.uplink_links()
    if others:
        pytest.skip(f"other lab runs are live here ({', '.join(others[:3])}); a global down would end them")
    run_id = f"tx{os.getpid()}"
    try:
        info = _spawn_and_kill(run_id, tmp_path)
        report = uplink.down(pid_dir=tmp_path)
        _assert_gone(run_id, info, report)
        assert uplink.uplink_links() == []
        assert uplink.uplink_rules() == []
        assert "LL_NAT" not in iptables_s("nat") and "LL_FWD" not in iptables_s()
        assert not [n for n in list_netns() if n.startswith("ll-")]
    finally:
        uplink.down(run_id, pid_dir=tmp_path)


SANDBOXED = textwrap.dedent("""
    import json, os, pathlib, subprocess, sys, time
    # a private "host": this process's own network namespace, /run/netns, /etc/netns and PID_DIR
    for d in ("/run/netns", "/etc/netns"):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["iptables", "-P", "FORWARD", "DROP"], check=True)   # as under dockerd
    pathlib.Path("/proc/sys/net/ipv4/ip_forward").write_text("0")
    from lab.topology import uplink
    from netem import cleanup
    from netem.kernel import list_netns
    sys.path.insert(0, os.environ["TEST_DIR"])
    import test_netns_uplink as T
    run_id = "sbx"
    info = T._spawn_and_kill(run_id, cleanup.PID_DIR)
    during = {"ip_forward": T.ip_forward(), "rules": uplink.uplink_rules()}
    report = uplink.down()
    ipt = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    nat = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True).stdout
    print(json.dumps({"during": during, "report": report, "links": uplink.uplink_links(),
                      "rules": uplink.uplink_rules(), "ns": list_netns(), "ip_forward": T.ip_forward(),
                      "etc": os.listdir("/etc/netns"), "pids": os.listdir(cleanup.PID_DIR),
                      "lab_chains": [l for l in (ipt + nat).splitlines() if "LL_" in l]}))
""")


def test_global_down_after_kill_9_in_a_private_namespace(tmp_path):
    """The same with `netem.uplink.down()` (no run id), inside `unshare --net --mount`: there the
    "host" is a fresh namespace (ip_forward 0, FORWARD policy DROP) and no other run can be hit."""
    Path("/etc/netns").mkdir(exist_ok=True)                  # the mount point of the private tmpfs
    env = {**os.environ, "PYTHONPATH": f"{REPO}", "LIVELAB_PID_DIR": str(tmp_path / "run"),
           "TEST_DIR": str(Path(__file__).parent)}
    p = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private", "--",
                        sys.executable, "-c", SANDBOXED], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=30)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["during"]["ip_forward"] == "1"
    assert {tb for tb, _ in r["during"]["rules"]} == {"nat", "filter"}   # MASQUERADE and LL_FWD
    assert r["report"]["errors"] == []
    assert r["links"] == [] and r["rules"] == [] and r["ns"] == []
    assert r["lab_chains"] == []                              # no LL_NAT / LL_FWD, no jump to them
    assert r["ip_forward"] == "0"                             # restored: the lab had switched it on
    assert r["etc"] == [] and [f for f in r["pids"] if f.endswith((".pid", ".ip_forward"))] == []


# ------------------------------------------------------------------------------- faults

def test_flow_blackhole_in_the_client_namespace_blocks_the_uplink_flow_like_eth0(topo, host_server,
                                                                                 endpoint_server):
    def connect(host, port):
        with in_netns(topo.ns_client):
            s = socket.socket()
        s.settimeout(3)
        s.connect((host, port))
        return s

    def flow(s, port):
        src, sport = s.getsockname()
        return {"src": src, "sport": sport, "dst": s.getpeername()[0], "dport": port}

    up = connect(topo.uplink_host_ip, host_server.port)
    eth = connect(topo.endpoint_host, endpoint_server.port)
    table = FaultTable(netns=topo.ns_client, handle_signals=False)
    try:
        assert up.getsockname()[0] == topo.uplink_client_ip
        for s in (up, eth):
            s.sendall(b"hello")
        assert wait_for(lambda: host_server.total(0) == 5 and endpoint_server.total(0) == 5, 2)
        faults = [build({"kind": "blackhole", "name": f"bh-{n}", "target": flow(s, srv.port)}).apply(table)
                  for n, s, srv in (("up", up, host_server), ("eth", eth, endpoint_server))]
        for s in (up, eth):
            s.sendall(b"lost?")
        time.sleep(0.8)
        assert host_server.total(0) == 5, "the uplink flow got through a blackhole"
        assert endpoint_server.total(0) == 5, "the eth0 flow got through a blackhole"

        fresh = connect(topo.uplink_host_ip, host_server.port)  # the flow target spares a new connection
        try:
            fresh.sendall(b"new")
            assert wait_for(lambda: host_server.total(1) == 3, 2)
        finally:
            fresh.close()

        for f in faults:
            f.clear()
        assert wait_for(lambda: host_server.total(0) == 10 and endpoint_server.total(0) == 10, 4), \
            "the retransmissions were not delivered after the blackhole was lifted"
    finally:
        table.close()
        up.close()
        eth.close()
