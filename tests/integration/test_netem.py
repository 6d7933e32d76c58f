"""Each fault's signature with real TCP/UDP between two network namespaces (root).

The client socket lives in the client namespace and the sink in the endpoint namespace, both made
from this process (the calling thread enters the namespace only to create the socket). Faults go
into the client namespace through a FaultTable. Every fixture removes what it made, pass or fail.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lab.capture import dropped
from lab.stats.order import quantile
from lab.topology.netns import NetnsTopology
from lab.topology.services import Capture
from netem import cleanup
from netem.errors import NetemError
from netem.faults import build
from netem.kernel import in_netns, list_netns, probe
from netem.table import FaultTable

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def topo():
    t = NetnsTopology(f"tn{os.getpid()}")
    try:
        t.up()
        yield t
    finally:
        t.down()
        cleanup.down(t.run_id, current_ns=False)


@pytest.fixture
def table(topo):
    t = FaultTable(netns=topo.ns_client, handle_signals=False)
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def capture(topo, tmp_path):
    cap = Capture(topo.client, tmp_path).start()
    try:
        yield cap
    finally:
        cap.stop()


class Sink:
    """A TCP server in the endpoint namespace that records (time, bytes) per accepted connection."""

    def __init__(self, topo: NetnsTopology, port: int):
        with in_netns(topo.ns_endpoint):
            self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((topo.endpoint_host, port))
        self.ls.listen()
        self.conns: list[list[tuple[float, int]]] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            rec: list[tuple[float, int]] = []
            self.conns.append(rec)
            threading.Thread(target=self._read, args=(c, rec), daemon=True).start()

    @staticmethod
    def _read(c, rec):
        with c:
            while True:
                try:
                    d = c.recv(65536)
                except OSError:
                    return
                if not d:
                    return
                rec.append((time.time(), len(d)))

    def total(self, i: int) -> int:
        return sum(n for _, n in self.conns[i]) if i < len(self.conns) else 0

    def close(self):
        self._stop = True
        self.ls.close()


@pytest.fixture
def sink(topo):
    s = Sink(topo, 0)
    try:
        yield s
    finally:
        s.close()


def connect(topo, port) -> socket.socket:
    with in_netns(topo.ns_client):
        s = socket.create_connection((topo.endpoint_host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def wait_for(pred, timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def ss_timer(topo, sock) -> str:
    _, sport = sock.getsockname()
    with in_netns(topo.ns_client):
        out = subprocess.run(["ss", "-tinoH", "state", "established", f"( sport = :{sport} )"],
                             capture_output=True, text=True).stdout
    return out


def dribble(sock, seconds: float, chunk: int = 100, every: float = 0.05) -> int:
    """Write `chunk` bytes every `every` s for `seconds`; returns bytes handed to the stack."""
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        sent += sock.send(b"x" * chunk)
        time.sleep(every)
    return sent


def flow_of(sock, port) -> dict:
    src, sport = sock.getsockname()
    dst, _ = sock.getpeername()
    return {"src": src, "sport": sport, "dst": dst, "dport": port}


# ------------------------------------------------------------------------------------ blackholes

def test_silent_blackhole_retransmits_lets_new_flows_pass_and_clear_delivers(topo, table, sink, capture):
    port = sink.ls.getsockname()[1]
    s = connect(topo, port)
    try:
        s.send(b"hello")
        assert wait_for(lambda: sink.total(0) == 5, 2)
        f = build({"kind": "blackhole", "name": "bh-silent", "mode": "silent", "target": flow_of(s, port)}).apply(table)
        sent = dribble(s, 1.2)
        assert sink.total(0) == 5, "the endpoint received data through a blackhole"
        timer = ss_timer(topo, s)
        assert "timer:(on," in timer, timer           # RTO retransmission timer: real loss

        n = connect(topo, port)                         # a new connection to the same endpoint passes
        try:
            n.send(b"new")
            assert wait_for(lambda: sink.total(1) == 3, 2), "a new connection was blackholed too"
        finally:
            n.close()

        t_clear = time.time()
        f.clear()
        assert wait_for(lambda: sink.total(0) == 5 + sent, 6), "the backlog was not delivered after clear"
        delivered_at = sink.conns[0][-1][0]
        assert delivered_at >= t_clear
    finally:
        s.close()
    raw = topology_stop(topo, capture)
    drops = [d for d in dropped(raw / "raw-nflog.pcap") if d[2] == "ll blackhole bh-silent out"]
    assert len(drops) >= 4
    retrans = tshark_count(raw / "raw-nflog.pcap", "tcp.analysis.retransmission")
    assert retrans >= 2, "nflog shows no dropped retransmissions"


def test_eperm_blackhole_runs_the_persist_timer(topo, table, sink, capture):
    port = sink.ls.getsockname()[1]
    s = connect(topo, port)
    try:
        s.send(b"hello")
        assert wait_for(lambda: sink.total(0) == 5, 2)
        f = build({"kind": "blackhole", "name": "bh-eperm", "mode": "eperm", "target": flow_of(s, port)}).apply(table)
        sent = dribble(s, 0.6)
        assert sink.total(0) == 5
        timer = ss_timer(topo, s)
        assert "timer:(persist," in timer, timer      # EPERM: a local send failure, no RTO timer
        f.clear()
        s.send(b"y")                                   # a write after the clear goes out at once
        assert wait_for(lambda: sink.total(0) == 5 + sent + 1, 3)
    finally:
        s.close()
    raw = topology_stop(topo, capture)
    assert len([d for d in dropped(raw / "raw-nflog.pcap") if d[2] == "ll blackhole bh-eperm out"]) >= 3


def test_destination_blackhole_stops_new_connections_too(topo, table, sink):
    port = sink.ls.getsockname()[1]
    build({"kind": "blackhole", "name": "bh-dst", "direction": "out",
           "target": {"dst": topo.endpoint_host, "dport": port}}).apply(table)
    with in_netns(topo.ns_client):
        c = socket.socket()
    c.settimeout(0.5)
    with pytest.raises((TimeoutError, socket.timeout)):
        c.connect((topo.endpoint_host, port))
    c.close()
    assert sink.conns == []


def test_reject_resets_the_connection_and_the_capture_shows_the_rst(topo, table, sink, capture):
    port = sink.ls.getsockname()[1]
    s = connect(topo, port)
    try:
        s.send(b"hello")
        assert wait_for(lambda: sink.total(0) == 5, 2)
        build({"kind": "reject", "name": "rst", "target": flow_of(s, port)}).apply(table)
        with pytest.raises(ConnectionResetError):
            for _ in range(20):
                s.send(b"x")
                time.sleep(0.02)
        assert sink.total(0) == 5
    finally:
        s.close()
    raw = topology_stop(topo, capture)
    prefixes = [d[2] for d in dropped(raw / "raw-nflog.pcap")]
    assert "ll reject rst out" in prefixes and "ll reject rst rst" in prefixes
    assert tshark_count(raw / "raw-nflog.pcap", 'tcp.flags.reset == 1 && nflog.prefix == "ll reject rst rst"') >= 1


# ------------------------------------------------------------------------------------ random loss

def test_random_loss_p03_over_2000_datagrams(topo, table, capture):
    """p=0.3 over N=2000: sigma = sqrt(0.21/2000) = 1.0 pp; the tolerance is +-5 pp (about 5 sigma)."""
    n, port = 2000, 9777
    with in_netns(topo.ns_endpoint):
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    r.bind((topo.endpoint_host, port))
    r.settimeout(0.5)
    got = set()

    def recv():
        while True:
            try:
                got.add(int(r.recv(64)))
            except (OSError, ValueError):
                return

    th = threading.Thread(target=recv, daemon=True)
    th.start()
    with in_netns(topo.ns_client):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        build({"kind": "loss", "name": "p03", "p": 0.3, "direction": "out",
               "target": {"dst": topo.endpoint_host, "dport": port, "proto": "udp"}}).apply(table)
        for i in range(n):
            u.sendto(str(i).encode(), (topo.endpoint_host, port))
            if i % 20 == 19:
                time.sleep(0.002)   # pace: neither the sink nor the nflog reader falls behind
        th.join(3)
    finally:
        u.close()
        r.close()
    lost = n - len(got)
    assert 0.25 <= lost / n <= 0.35, f"loss {lost / n:.3f} outside 0.30 +- 0.05"
    raw = topology_stop(topo, capture)
    logged = len([d for d in dropped(raw / "raw-nflog.pcap") if d[2] == "ll loss p03 out"])
    assert abs(logged - lost) <= n * 0.01, f"nflog logged {logged} drops, the sink missed {lost}"


# ------------------------------------------------------------------------------------ netem

CAPS = probe()


@pytest.mark.skipif(CAPS.netem, reason="this kernel has sch_netem; the missing-netem path cannot be shown")
def test_netem_missing_is_reported_and_rate_is_refused(topo, table):
    # without sch_netem the netem kind takes its userspace path, which has no rate: one line
    assert any("sch_netem" in m for m in CAPS.missing)
    f = build({"kind": "netem", "name": "slow", "dev": "eth0", "delay_ms": 50, "rate": "1mbit"})
    with pytest.raises(NetemError) as e:        # tc refuses it (this kernel: ERANGE before the qdisc kind)
        f.apply(table)
    assert "\n" not in str(e.value) and not f.active and f.worker_pid is None


@pytest.mark.skipif(not CAPS.netem, reason="this kernel has no sch_netem (CONFIG_NET_SCH_NETEM); "
                                           "the netem fault cannot be applied here")
def test_netem_delay_where_the_kernel_has_it(topo, table, sink):
    port = sink.ls.getsockname()[1]
    f = build({"kind": "netem", "name": "slow", "dev": "eth0", "delay_ms": 50}).apply(table)
    t0 = time.monotonic()
    connect(topo, port).close()
    assert time.monotonic() - t0 >= 0.045
    f.clear()
    t0 = time.monotonic()
    connect(topo, port).close()
    assert time.monotonic() - t0 < 0.045


# ------------------------------------------------------------------------------------ userspace delay

class UdpEcho:
    """A UDP echo in the endpoint namespace; `rtts()` times N request/answer pairs from the client."""

    def __init__(self, topo: NetnsTopology, port: int = 9788):
        with in_netns(topo.ns_endpoint):
            self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind((topo.endpoint_host, port))
        self.addr = (topo.endpoint_host, port)
        with in_netns(topo.ns_client):
            self.c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.c.settimeout(2)
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self):
        while True:
            try:
                d, a = self.s.recvfrom(2048)
                self.s.sendto(d, a)
            except OSError:
                return

    def rtts(self, n: int = 40, every: float = 0.01) -> list[float]:
        """Round trips in ms; a lost one (2 s) fails the test."""
        out = []
        for i in range(n):
            t0 = time.monotonic()
            self.c.sendto(str(i).encode(), self.addr)
            while int(self.c.recv(64)) != i:
                pass
            out.append((time.monotonic() - t0) * 1000)
            time.sleep(every)
        return out

    def close(self):
        self.s.close()
        self.c.close()


def rtts_around(topo, table, check, spec_for, port: int = 9788):
    """UDP round trips (ms) before, with and after the fault `spec_for(echo)`; `check(fault)` runs
    while it is in place."""
    echo = UdpEcho(topo, port=port)
    try:
        base = echo.rtts()
        f = build(spec_for(echo)).apply(table)
        check(f)
        held = echo.rtts()
        f.clear()
        return base, held, echo.rtts()
    finally:
        echo.close()


def delay_workers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "netem.kinds.delay"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


@pytest.mark.skipif(not CAPS.nfqueue_bind, reason="no NFQUEUE queue can be bound here (nfnetlink_queue)")
def test_userspace_delay_adds_what_was_asked_and_clear_goes_back_to_baseline(topo, table):
    asked = 40.0
    seen = {}

    def check(f):
        seen["worker"] = f.worker_pid
        assert f.worker_pid in delay_workers() and "--queue-bypass" in iptables_s(topo.ns_client)
    base, held, after = rtts_around(topo, table, check, lambda echo: {
        "kind": "delay", "name": "d40", "delay_ms": asked, "direction": "out",
        "target": {"dst": topo.endpoint_host, "dport": echo.addr[1], "proto": "udp"}})
    worker = seen["worker"]
    added = [h - quantile(base, 0.5) for h in held]
    err = sorted(a - asked for a in added)
    print(f"\ndelay asked {asked:.0f} ms: baseline rtt p50 {quantile(base, .5):.2f} ms; added p50 {quantile(added, .5):.2f} "
          f"ms; error p50 {quantile(err, .5):+.2f} ms, p99 {quantile(err, .99):+.2f} ms; after clear p50 {quantile(after, .5):.2f} ms")
    assert quantile(added, 0.5) >= 0.8 * asked and min(added) >= 0.8 * asked     # never early
    assert quantile(added, 0.5) < asked + 50                                      # loose: the machine is shared
    assert quantile(after, 0.5) < quantile(base, 0.5) + 0.5 * asked                    # back to baseline, not held
    assert worker not in delay_workers() and "NFQUEUE" not in iptables_s(topo.ns_client)


@pytest.mark.skipif(not CAPS.nfqueue_bind, reason="no NFQUEUE queue can be bound here (nfnetlink_queue)")
def test_a_worker_that_cannot_bind_is_one_line_and_leaves_no_rule(topo, table):
    spec = {"kind": "delay", "delay_ms": 10, "queue": 4343, "target": {"dst": topo.endpoint_host}}
    first = build({**spec, "name": "first"}).apply(table)
    with pytest.raises(NetemError) as e:
        build({**spec, "name": "second"}).apply(table)
    assert str(e.value) == ("fault delay second: the worker did not start: netem delay worker: nfqueue 4343: "
                            "refused (EPERM): another listener holds this queue, or no CAP_NET_ADMIN here")
    assert table.faults == [first] and iptables_s(topo.ns_client).count("--queue-num 4343") == 1
    first.clear()
    assert "4343" not in iptables_s(topo.ns_client)


@pytest.mark.skipif(not CAPS.nfqueue_bind, reason="no NFQUEUE queue can be bound here (nfnetlink_queue)")
def test_delay_worker_dies_with_its_owner_on_kill_9_and_down_removes_the_rule(tmp_path):
    """The owner is killed -9 (no handler, no atexit): its worker sees the end of its lifeline and
    exits by itself; the rule left behind has --queue-bypass, so traffic passes; down(run id) removes it."""
    run_id = f"td{os.getpid()}"
    piddir = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import json, pathlib, time
        from lab.topology.netns import NetnsTopology
        from netem.faults import build
        from netem.table import FaultTable
        topo = NetnsTopology({run_id!r}, pid_dir=pathlib.Path({str(piddir)!r}))
        topo.up()
        f = build({{"kind": "delay", "name": "k9", "delay_ms": 30, "direction": "out",
                   "target": {{"dst": topo.endpoint_host, "proto": "udp"}}}}).apply(FaultTable(netns=topo.ns_client))
        print(json.dumps({{"worker": f.worker_pid, "ns": topo.ns_client, "ep": topo.endpoint_host}}), flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO), "LIVELAB_PID_DIR": str(piddir)},
                         start_new_session=True)
    info = {}
    try:
        info = json.loads(p.stdout.readline())
        assert info["worker"] in delay_workers()
        assert [f.name.split(".")[1] for f in piddir.glob(f"{run_id}.*.pid")] == ["fault-delay"]
        p.kill()
        p.wait()
        assert wait_for(lambda: info["worker"] not in delay_workers(), 3.0), "the worker outlived its owner"
        assert "--queue-bypass" in iptables_s(info["ns"])          # the rule stays until down() ...
        with in_netns(info["ns"]):
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"x", (info["ep"], 9))                              # ... and passes traffic (no EPERM)
        u.close()

        report = cleanup.down(run_id, current_ns=False, pid_dir=piddir)   # this run only: nothing in the root ns

        assert report["errors"] == []
        assert not [n for n in list_netns() if n.startswith(f"ll-{run_id}-")]
        assert list(piddir.glob("*.pid")) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if info.get("worker"):
            cleanup.stop_pid(info["worker"], grace=0.2)
        cleanup.down(run_id, current_ns=False, pid_dir=piddir)


# ------------------------------------------------------------------------------------ clean-up

def test_sigterm_removes_the_rules(topo):
    script = textwrap.dedent(f"""
        import time
        from netem.faults import build
        from netem.table import FaultTable
        t = FaultTable(netns={topo.ns_client!r})
        build({{"kind": "blackhole", "target": {{"dst": {topo.endpoint_host!r}}}}}).apply(t)
        print("READY", flush=True)
        time.sleep(30)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert p.stdout.readline().strip() == "READY"
        assert "LL_OUT" in iptables_s(topo.ns_client)
        p.send_signal(signal.SIGTERM)
        assert p.wait(5) == -signal.SIGTERM
        assert "LL_" not in iptables_s(topo.ns_client)
    finally:
        p.kill()
        p.wait()
        cleanup.remove_chains(topo.ns_client)


def test_down_after_kill_9_leaves_nothing(tmp_path):
    run_id = f"tk{os.getpid()}"
    piddir = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import json, pathlib
        from lab.topology.netns import NetnsTopology
        from lab.topology.services import Capture
        from netem.faults import build
        from netem.table import FaultTable
        topo = NetnsTopology({run_id!r}, pid_dir=pathlib.Path({str(piddir)!r}))
        topo.up()
        Capture(topo.client, pathlib.Path({str(tmp_path)!r})).start()
        t = FaultTable(netns=topo.ns_client)
        build({{"kind": "blackhole", "target": {{"dst": topo.endpoint_host}}}}).apply(t)
        here = FaultTable()   # the current namespace, as in a compose client container
        build({{"kind": "loss", "name": "k9", "p": 0.5, "direction": "out",
                "target": {{"dst": topo.endpoint_host, "dport": 9, "proto": "udp"}}}}).apply(here)
        sleeper = topo.endpoint.popen(["sleep", "60"], role="twin")
        print(json.dumps([p.pid for p, _ in topo._procs]), flush=True)
        import time; time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    pids: list[int] = []
    try:
        pids = json.loads(p.stdout.readline())
        assert len(pids) == 3                              # two tcpdumps and the "twin"
        p.kill()                                           # SIGKILL: no handler, no atexit
        p.wait()
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
        assert {f"ll-{run_id}-c", f"ll-{run_id}-e"} <= set(list_netns())
        assert "LL_L_" in iptables_s(None)
        assert len(list(piddir.glob("*.pid"))) == 3

        report = cleanup.down(run_id, pid_dir=piddir)

        assert report["errors"] == []
        assert not [n for n in list_netns() if n.startswith(f"ll-{run_id}-")]
        assert not [pid for pid in pids if cleanup._alive(pid, None)]
        # netem's own chains are gone from this namespace; LL_FWD/LL_NAT are the live uplink's, and a
        # parallel test's uplink may hold them right now
        left = [ln.split()[1] for ln in iptables_s(None).splitlines() if ln.startswith("-N ")]
        assert not [c for c in left if cleanup.is_netem_chain(c)], left
        assert list(piddir.glob("*.pid")) == []
        assert (tmp_path / "raw-eth.pcap").exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in pids:
            cleanup.stop_pid(pid, grace=0.2)
        cleanup.down(run_id, pid_dir=piddir)


# ------------------------------------------------------------------------------------ helpers

def iptables_s(ns) -> str:
    with in_netns(ns):
        return subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout


def tshark_count(pcap: Path, display_filter: str) -> int:
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", display_filter, "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True).stdout
    return len(out.split())


def topology_stop(topo, capture: Capture) -> Path:
    capture.stop()
    return capture.run_dir


def test_a_refused_rule_set_is_one_line_and_the_table_keeps_working(topo, table):
    from netem.errors import RuleError

    table.setup()
    with pytest.raises(RuleError, match="iptables-restore refused the lab's rules: .*line 2"):
        table.restore("*filter\n-A LL_NO_SUCH_CHAIN -j DROP\nCOMMIT\n")
    f = build({"kind": "blackhole", "name": "after-error", "target": {"dst": topo.endpoint_host}}).apply(table)
    assert "after-error" in iptables_s(topo.ns_client)
    f.clear()
    assert "after-error" not in iptables_s(topo.ns_client)



def test_a_change_is_made_under_sched_fifo_and_the_caller_goes_back_to_its_own_policy(topo, table):
    # the onset's tail was the restore and the caller's poll waiting for a CPU (netem.realtime)
    table.setup()
    before = os.sched_getscheduler(0)
    f = build({"kind": "blackhole", "name": "fifo-change", "target": {"dst": topo.endpoint_host}}).apply(table)
    try:
        assert os.sched_getscheduler(table._persistent.proc.pid) == os.SCHED_FIFO
        assert os.sched_getscheduler(0) == before
    finally:
        f.clear()


def test_a_real_time_table_keeps_idle_cpus_awake_until_it_closes_unless_told_not_to(topo, monkeypatch):
    # a real-time change wakes its restore on an idle CPU; a halted vCPU wakes late (FaultTable._hold_cpus_awake)
    from netem import realtime
    from netem.table import IDLE_AWAKE_ENV

    if not os.path.exists(realtime.PM_QOS_DEVICE):
        pytest.skip(f"no {realtime.PM_QOS_DEVICE} here")
    t = FaultTable(netns=topo.ns_client, handle_signals=False).setup()
    try:
        if not (t._persistent and t._persistent.fifo):
            pytest.skip("the table's changes are not real-time here")
        assert t.cpus_held_awake
        assert os.readlink(f"/proc/self/fd/{t._awake_fd}") == realtime.PM_QOS_DEVICE
    finally:
        t.close()
    assert not t.cpus_held_awake
    monkeypatch.setenv(IDLE_AWAKE_ENV, "0")
    with FaultTable(netns=topo.ns_client, handle_signals=False) as t:
        assert not t.cpus_held_awake and IDLE_AWAKE_ENV in t.awake_note


# ------------------------------------------------------------------------------------ userspace reorder, duplicate

def echoes(echo: UdpEcho, n: int, every: float = 0.002, settle: float = 1.0) -> list[int]:
    """Send datagrams 0..n-1 through the echo; the sequence numbers in the order they came back."""
    for sock in (echo.c, echo.s):   # ~256 datagrams fill the default, and a loaded machine lags the echo
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    for i in range(n):
        echo.c.sendto(str(i).encode(), echo.addr)
        time.sleep(every)
    got, end = [], time.monotonic() + settle
    echo.c.settimeout(0.05)
    while time.monotonic() < end:
        try:
            got.append(int(echo.c.recv(64)))
            end = max(end, time.monotonic() + 0.2)
        except socket.timeout:
            pass
    return got


@pytest.mark.skipif(not CAPS.nfqueue_bind, reason="no NFQUEUE queue can be bound here (nfnetlink_queue)")
def test_userspace_reorder_sends_a_share_ahead_and_loses_nothing(topo, table):
    echo = UdpEcho(topo, port=9791)
    try:
        build({"kind": "reorder", "name": "ro", "delay_ms": 30, "p": 0.3,
               "target": {"dst": topo.endpoint_host, "dport": echo.addr[1], "proto": "udp"}}).apply(table)
        got = echoes(echo, 200)
    finally:
        echo.close()
    ahead = sum(1 for k, s in enumerate(got) if any(later < s for later in got[k + 1:]))
    print(f"\nreorder p=0.3 delay 30 ms: {len(got)}/200 back, {ahead} came back ahead of an earlier one")
    assert sorted(got) == list(range(200))                  # every datagram once
    assert 0.15 * 200 <= ahead <= 0.45 * 200                # about the asked share jumped the queue


@pytest.mark.skipif(not CAPS.nfqueue_bind, reason="no NFQUEUE queue can be bound here (nfnetlink_queue)")
def test_userspace_duplicate_sends_a_share_twice_and_never_a_copy_of_a_copy(topo, table):
    echo = UdpEcho(topo, port=9792)
    try:
        build({"kind": "duplicate", "name": "dup", "p": 0.5,
               "target": {"dst": topo.endpoint_host, "dport": echo.addr[1], "proto": "udp"}}).apply(table)
        got = echoes(echo, 200)
    finally:
        echo.close()
    counts = {i: got.count(i) for i in range(200)}
    twice = sum(1 for c in counts.values() if c == 2)
    print(f"\nduplicate p=0.5: {len(got)} back for 200 sent, {twice} twice")
    assert all(c in (1, 2) for c in counts.values())        # every one arrived; no copy was copied again
    assert 0.35 * 200 <= twice <= 0.65 * 200


@pytest.mark.skipif(CAPS.netem or not CAPS.nfqueue_bind, reason="the kernel has sch_netem (or no NFQUEUE): no userspace path")
def test_netem_without_sch_netem_takes_the_userspace_path_and_adds_its_delay(topo, table):
    def check(f):
        assert f.path == "userspace" and f.worker_pid in delay_workers()
        assert f"-o {topo.client.dev}" in iptables_s(topo.ns_client)
    base, held, after = rtts_around(topo, table, check, lambda echo: {
        "kind": "netem", "name": "ns40", "dev": topo.client.dev, "delay_ms": 40}, port=9793)
    added = [h - quantile(base, 0.5) for h in held]
    print(f"\nnetem (userspace path) delay 40 ms: added p50 {quantile(added, .5):.2f} ms, p99 {quantile(added, .99):.2f} ms")
    assert min(added) >= 0.8 * 40 and quantile(after, 0.5) < quantile(base, 0.5) + 20
    assert "NFQUEUE" not in iptables_s(topo.ns_client)
