"""The router node and its middlebox faults with real packets in three namespaces (root).

Client and endpoint sockets are opened inside their namespaces by this process (a socket stays in
the namespace it was made in), so every byte crosses the client's access link, the router's FORWARD
chains and conntrack, and the core link. Each test proves one fault's signature as the ends see it
and as the router's NFLOG rules count it; the switch test watches the endpoint's wire with tcpdump;
the capture test reads a router run's capture.pcapng.
Every namespace, rule and worker goes with the topology's run id, pass or fail.
"""
from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import subprocess
import threading
import time

import pytest

from lab.capture import count, dropped
from lab.topology import uplink
from lab.topology.netns import NetnsTopology
from lab.topology.router_service import RemoteTable
from lab.topology.services import Capture, RouterService
from netem.faults import build
from netem.kernel import in_netns, list_netns

pytestmark = pytest.mark.netns
PORT = 8443


@pytest.fixture
def topo():
    t = NetnsTopology(f"rt{os.getpid()}", links=["wifi", "cell"])
    try:
        t.up()
        yield t
    finally:
        t.down()
        uplink.down(t.run_id, current_ns=False)
        assert not [n for n in list_netns() if n.startswith(f"ll-{t.run_id}-")]


class Pair:
    """One TCP connection from the client namespace to a listener in the endpoint namespace."""

    def __init__(self, topo: NetnsTopology, listener: socket.socket):
        with in_netns(topo.ns_client):
            self.cli = socket.socket()
        self.cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.t_connect = time.time()
        self.cli.connect((topo.endpoint.ip, PORT))
        self.srv, self.peer = listener.accept()
        self.srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        for s in (self.cli, self.srv):
            s.close()


@pytest.fixture
def listener(topo):
    with in_netns(topo.ns_endpoint):
        ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((topo.endpoint.ip, PORT))
    ls.listen()
    ls.settimeout(5)
    yield ls
    ls.close()


def arrives(sock: socket.socket, n: int, within: float) -> bool:
    """Whether n bytes arrive on sock within `within` seconds."""
    got, deadline = 0, time.monotonic() + within
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            return False
        chunk = sock.recv(65536)
        if not chunk:
            return False
        got += len(chunk)
    return True


def counted(topo: NetnsTopology, prefix: str) -> int:
    """Packets that went through the router's NFLOG rules with this prefix (rule counters)."""
    with in_netns(topo.router_part.ns):
        out = subprocess.run(["iptables", "-L", "-v", "-n", "-x"], capture_output=True, text=True).stdout
    return sum(int(l.split()[0]) for l in out.splitlines() if "NFLOG" in l and f'"{prefix}' in l)


def apply(topo, spec):
    spec = {**spec, "target": {"dst": topo.endpoint.ip, "dport": PORT}}
    return build(spec).apply(topo.router_part.table())


@pytest.mark.parametrize("mode", ["silent", "rst"])
def test_nat_reap_forgets_an_idle_flow_and_keeps_a_talking_one(topo, listener, mode):
    apply(topo, {"kind": "nat_reap", "name": "nat", "idle_s": 2, "mode": mode})
    idle, talking = Pair(topo, listener), Pair(topo, listener)
    try:
        for p in (idle, talking):  # a packet each way re-arms the entries with the 2 s timeout
            p.cli.sendall(b"a")
            assert arrives(p.srv, 1, 2)
        t_end = time.monotonic() + 3.5
        while time.monotonic() < t_end:  # the talking flow's own pings, every 0.5 s
            talking.cli.sendall(b"p")
            assert arrives(talking.srv, 1, 1), "a flow that keeps talking must keep its NAT entry"
            time.sleep(0.5)
        idle.cli.sendall(b"x")
        if mode == "silent":
            assert not arrives(idle.srv, 1, 1.5), "a reaped flow's packet must not reach the endpoint"
            idle.cli.setblocking(False)
            with pytest.raises(BlockingIOError):  # nothing comes back either: no reset, no data
                idle.cli.recv(1)
        else:
            idle.cli.settimeout(2)
            with pytest.raises(ConnectionResetError):
                idle.cli.recv(1)
        assert counted(topo, "ll nat_reap nat out") >= 1
    finally:
        idle.close()
        talking.close()


@pytest.mark.parametrize("mode", ["silent", "rst"])
def test_relay_cuts_a_busy_flow_at_its_age(topo, listener, mode):
    age = 1.5
    apply(topo, {"kind": "relay_age", "name": "relay", "age_s": age, "mode": mode})
    p = Pair(topo, listener)
    last_seen, reset_at = [0.0], [None]

    def read():
        p.srv.settimeout(4)
        try:
            while p.srv.recv(4096):
                last_seen[0] = time.time()
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        t_end = time.time() + age + 1.5
        # a send that blocks (the buffer full of unacknowledged frames on a silent cut) must not wait
        # for TCP to give up (15 min): after 0.5 s it counts as silence
        p.cli.settimeout(0.5)
        while time.time() < t_end:  # a frame every 10 ms, like audio
            try:
                p.cli.send(b"f" * 100)
            except socket.timeout:
                break
            except OSError as e:
                assert e.errno in (errno.ECONNRESET, errno.EPIPE)
                reset_at[0] = time.time()
                break
            time.sleep(0.01)
        cut = last_seen[0] - p.t_connect
        assert age - 0.1 <= cut <= age + 0.1, f"the last byte reached the endpoint at age {cut:.3f} s, not {age} ± 0.1"
        if mode == "rst":
            assert reset_at[0] is not None and reset_at[0] - p.t_connect <= age + 0.2
        else:
            assert reset_at[0] is None, "a silent relay cut sends no reset"
        assert counted(topo, "ll relay_age relay out") >= 1
    finally:
        p.close()
        reader.join(5)


@contextlib.contextmanager
def router_service(topo: NetnsTopology):
    """The router service (Compose's way to the router's chains) in the router namespace, and a
    RemoteTable to it from the client namespace, as the agent in a client container has one."""
    service = RouterService(topo.router, topo.addresses.router_core, topo.run_id)
    remote = RemoteTable(service.address)
    try:
        service.start()
        with in_netns(topo.ns_client):
            remote._connect()                  # the socket stays in the client namespace
        yield remote
    finally:
        remote._drop()
        service.stop()


@pytest.mark.parametrize("via", ["table", "service"])
def test_mtu_blackhole_passes_small_packets_and_drops_large_ones(topo, listener, via):
    spec = {"kind": "mtu_blackhole", "name": "mtu", "mtu": 1000}
    with contextlib.ExitStack() as stack:
        if via == "table":
            apply(topo, spec)
        else:      # the same fault through the router service: the same FaultTable, the same wire
            stack.enter_context(router_service(topo)).add(build({**spec, "target": {"dst": topo.endpoint.ip, "dport": PORT}}))
        mtu_signature(topo, listener)


def mtu_signature(topo, listener):
    small, large = Pair(topo, listener), Pair(topo, listener)
    try:
        for _ in range(5):
            small.cli.sendall(b"s" * 200)           # a ping, a text frame
            assert arrives(small.srv, 200, 1)
            small.srv.sendall(b"S" * 200)
            assert arrives(small.cli, 200, 1)
        large.cli.sendall(b"L" * 1400)              # one segment: 1452 bytes of IP packet
        assert not arrives(large.srv, 1, 1.5), "a packet above the MTU must vanish"
        large.srv.sendall(b"A" * 1400)              # audio towards the client: the same
        assert not arrives(large.cli, 1, 1.5)
        assert counted(topo, "ll mtu_blackhole mtu out") >= 1 and counted(topo, "ll mtu_blackhole mtu in") >= 1
        small.cli.sendall(b"s" * 200)               # meanwhile the small flow still lives
        assert arrives(small.srv, 200, 1)
    finally:
        small.close()
        large.close()


class Tcpdump:
    """The source addresses of the TCP packets to the endpoint's port on its eth0 (tcpdump)."""

    def __init__(self, topo: NetnsTopology):
        self.proc = topo.endpoint.popen(["tcpdump", "-i", "eth0", "-n", "-l", "-q", "--immediate-mode", f"tcp dst port {PORT}"],
                                        role="tcpdump-test", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = select.select([self.proc.stderr], [], [], 10)[0]  # "listening on eth0 ..." once attached
        while ready and b"listening on" not in self.proc.stderr.readline():
            pass
        time.sleep(0.1)

    def stop(self) -> set[str]:
        self.proc.terminate()
        out, _ = self.proc.communicate(5)
        # "12:00:00.000000 IP 10.203.7.34.40000 > 10.203.7.2.8443: tcp 1"
        return {l.split()[2].rsplit(".", 1)[0] for l in out.decode().splitlines() if " IP " in l}


@pytest.mark.parametrize("overlap_s", [0.0, 1.0])
def test_switch_withdraws_the_old_address_and_new_flows_come_from_the_new_one(topo, listener, overlap_s):
    wifi, cell = topo.client.ip, topo.addresses.client_on(topo.router_part.link("cell"))
    old = Pair(topo, listener)
    assert old.peer[0] == wifi and topo.client.dev == "wifi"
    done = {}
    mover = threading.Thread(target=lambda: done.update(topo.router_part.switch("cell", overlap_s=overlap_s)))
    mover.start()
    try:
        if overlap_s:
            time.sleep(overlap_s / 3)
            new = Pair(topo, listener)         # made before the break: from the new address already
            old.cli.sendall(b"o")              # and the old flow still lives on its own link
            assert arrives(old.srv, 1, overlap_s / 2)
        mover.join(5)
        assert done["old_ip"] == wifi and topo.client.ip == cell and topo.client.dev == "cell"
        if not overlap_s:
            new = Pair(topo, listener)
        assert new.peer[0] == cell
        dump = Tcpdump(topo)
        old.cli.sendall(b"x")                  # the phone's old flow tries again
        assert not arrives(old.srv, 1, 2), "after the switch the old flow must die"
        new.cli.sendall(b"n")
        assert arrives(new.srv, 1, 1)
        assert dump.stop() == {cell}, "after the switch only the new address reaches the endpoint"
        new.close()
    finally:
        mover.join(5)
        old.close()


def test_link_rtt_is_made_on_the_router():
    """An access link's rtt_ms is made on the router (the delay kind, half each way)."""
    t = NetnsTopology(f"rs{os.getpid()}", links=[{"wifi": {"rtt_ms": 40}}])
    try:
        t.up()
        with in_netns(t.ns_endpoint):
            ls = socket.socket()
        ls.bind((t.endpoint.ip, PORT))
        ls.listen()
        with in_netns(t.ns_client):
            c = socket.socket()
        t0 = time.monotonic()
        c.connect((t.endpoint.ip, PORT))   # one round trip: SYN, SYN-ACK
        rtt = time.monotonic() - t0
        assert 0.035 <= rtt <= 0.5, f"connect took {rtt * 1000:.1f} ms over a 40 ms link"
        c.close()
        ls.close()
    finally:
        t.down()
        uplink.down(t.run_id, current_ns=False)


def test_the_capture_holds_the_routers_drops_and_the_cell_traffic_after_a_switch(topo, listener, tmp_path):
    """capture.pcapng of a router run: a middlebox drop (the router's nflog:5) and, after a switch,
    the packets of the new flow from the client's cell address (the router's end of the cell link)."""
    cell = topo.addresses.client_on(topo.router_part.link("cell"))
    apply(topo, {"kind": "mtu_blackhole", "name": "mtu", "mtu": 1000})
    cap = Capture.of(topo, tmp_path).start()
    old = new = None
    try:
        old = Pair(topo, listener)
        old.cli.sendall(b"L" * 1400)                # one segment above the MTU: the router drops it
        assert not arrives(old.srv, 1, 1)
        topo.router_part.switch("cell")
        new = Pair(topo, listener)
        new.cli.sendall(b"n" * 100)
        assert arrives(new.srv, 100, 2)
    finally:
        for p in (old, new):
            if p:
                p.close()
        raw = cap.stop()
    assert {p.name for p in raw} == {"raw-eth-wifi.pcap", "raw-eth-cell.pcap", "raw-nflog.pcap", "raw-nflog-router.pcap"}
    out = cap.finish()
    assert any(prefix == "ll mtu_blackhole mtu out" for _n, _t, prefix in dropped(out)), "no router drop in the pcapng"
    assert count(out, f"ip.src == {cell} && tcp.dstport == {PORT} && tcp.len == 100"), f"the new flow's data from {cell} (after the switch) is not in the pcapng"
