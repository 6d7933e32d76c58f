"""Nodes and services without root or Docker: the services' command lines, the same on every node;
the capture's start/stop on a node whose popen runs a stand-in for tcpdump; preflight's questions."""
import signal
import subprocess
import sys

import pytest

from lab import run as run_mod
from lab.errors import CapabilityError, LabError
from lab.topology import get
from lab.topology.base import Node, require_tools
from lab.topology.compose import ComposeNode, ComposeTopology
from lab.topology.netns import NetnsTopology
from lab.topology.services import Capture, Proxy, Twin


class LocalNode(Node):
    """A node whose processes run right here; `fake` replaces the command (a stand-in tool)."""

    def __init__(self, name="client", host="10.0.0.2", fake=None):
        super().__init__(name)
        self._host, self.fake, self.started = host, fake, []

    host = property(lambda self: self._host)
    ip = property(lambda self: self._host)
    dev = property(lambda self: "eth0")

    def popen(self, argv, role="proc", **kw):
        self.started.append((role, argv))
        return subprocess.Popen(self.fake(argv) if self.fake else argv, **kw)


def test_twin_and_proxy_command_lines_are_the_same_on_every_node():
    netns = NetnsTopology("svc1", secrets_dir="/tmp/s", subnet=7)
    compose = ComposeTopology("svc1", setup=False)
    for topo in (netns, compose):
        twin = Twin(topo.endpoint, cert_dir=topo.cert_dir, api_key="k", log_path="/r/twin.jsonl", t0=1234.5678,
                    seed=42)
        argv = twin.argv()
        assert argv[argv.index("--t0") + 1] == "1234.5678" and argv[argv.index("--seed") + 1] == "42"
        assert argv[argv.index("--san") + 1] == topo.endpoint.host
        assert twin.base_url == f"https://{topo.endpoint.host}:8443"
        proxy = Proxy(topo.endpoint)
        assert proxy.argv()[-2:] == ["--freeze-first", "1"]
        assert proxy.url == f"http://{topo.endpoint.host}:8080"
    assert Proxy(netns.endpoint).argv() == Proxy(compose.endpoint).argv()
    assert netns.cert_dir.as_posix() == "/tmp/s/certs" and compose.ca_path.as_posix() == "/certs/ca.pem"
    assert netns.endpoint.host == "10.203.7.2" and netns.client.ip == "10.203.7.1"


def test_a_compose_node_runs_through_exec_with_a_pidfile_and_container_paths(tmp_path):
    run_dir = tmp_path / "batch" / "r2-freeze-probe-01"
    topo = ComposeTopology("x", run_dir=run_dir, setup=False)
    argv, pidfile = topo.client.exec_argv([sys.executable, "-m", "lab", "agent", "--run-dir", str(run_dir.resolve())],
                                          role="agent", env={"LAB_API_KEY": "k"})
    i = argv.index("exec")
    assert argv[i:i + 4] == ["exec", "-T", "-e", "LAB_API_KEY=k"] and argv[i + 4] == "client"
    assert argv[i + 5:i + 9] == ["sh", "-c", topo.client.WRAP, pidfile] and pidfile.startswith("/tmp/livelab-agent-")
    assert argv[i + 9:] == ["python", "-m", "lab", "agent", "--run-dir", "/captures/r2-freeze-probe-01"]
    assert topo.endpoint.host == "endpoint" and topo.client.dev == "eth0"


def test_a_compose_node_that_is_up_execs_by_container_id_not_through_the_compose_cli(tmp_path):
    topo = ComposeTopology("x", run_dir=tmp_path / "r1", setup=False)
    topo._ids = {"client": "c0ffee"}           # what up() reads once the containers are there
    argv, pidfile = topo.client.exec_argv(["tcpdump", "-i", "eth0"], role="tcpdump", env={"A": "b"})
    assert argv[:6] == ["docker", "exec", "-i", "-e", "A=b", "c0ffee"]
    assert argv[6:10] == ["sh", "-c", topo.client.WRAP, pidfile] and argv[10:] == ["tcpdump", "-i", "eth0"]
    assert topo.endpoint.exec_argv(["true"])[0][:3] == ["docker", "compose", "-p"]   # no id: compose exec


def test_the_wrapper_writes_the_pid_of_the_process_it_becomes(tmp_path):
    pidfile = tmp_path / "p.pid"
    p = subprocess.Popen(["sh", "-c", ComposeNode.WRAP, str(pidfile), "sleep", "30"])
    try:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            subprocess.run(["sleep", "0.01"])
        assert int(pidfile.read_text()) == p.pid
    finally:
        p.kill()
        p.wait()


_FAKE_TCPDUMP = """
import signal, sys, time
out = sys.argv[1]
open(out, "w").close()
def counts(*_):
    print("tcpdump: 3 packets captured, 3 packets received by filter", file=sys.stderr, flush=True)
def flush(*_):
    with open(out, "a") as f:
        f.write("done\\n")
    sys.exit(0)
signal.signal(signal.SIGUSR1, counts)
signal.signal(signal.SIGINT, flush)
print("listening on x", file=sys.stderr, flush=True)
while True:
    time.sleep(0.05)
"""


def _fake_tcpdump(argv):
    # says what tcpdump says once it listens, writes its file, prints its counts on SIGUSR1 (as
    # tcpdump does: the stop's drain asks for them) and flushes its file on SIGINT. A Python
    # process, not sh: sh runs a trap only after the command it waits on, and a trap that runs
    # late is a fake's timing, not the capture's
    return [sys.executable, "-c", _FAKE_TCPDUMP, argv[argv.index("-w") + 1]]


def test_capture_starts_two_tcpdumps_on_its_node_and_stops_them_with_sigint(tmp_path):
    node = LocalNode(fake=_fake_tcpdump)
    cap = Capture(node, tmp_path).start()
    assert [r for r, _ in node.started] == ["tcpdump-eth", "tcpdump-nflog"]
    eth_argv = node.started[0][1]
    assert eth_argv[:5] == ["tcpdump", "--immediate-mode", "-U", "-Z", "root"]
    assert eth_argv[eth_argv.index("-i") + 1] == "eth0"
    raw = cap.stop()
    assert [p.name for p in raw] == ["raw-eth.pcap", "raw-nflog.pcap"]
    assert all(p.read_text() == "done\n" for p in raw), "SIGINT let each one flush"
    assert cap.stop() == []


def test_a_router_capture_listens_on_the_routers_end_of_each_link_and_on_both_nflogs(tmp_path):
    client, router = LocalNode(fake=_fake_tcpdump), LocalNode(name="router", fake=_fake_tcpdump)
    cap = Capture(client, tmp_path, router=router, links=("wifi", "cell")).start()
    assert [r for r, _ in router.started] == ["tcpdump-wifi", "tcpdump-cell", "tcpdump-nflog-router"]
    assert [r for r, _ in client.started] == ["tcpdump-nflog"]
    assert [a[a.index("-i") + 1] for _, a in router.started] == ["wifi", "cell", "nflog:5"]
    raw = cap.stop()
    assert sorted(p.name for p in raw) == ["raw-eth-cell.pcap", "raw-eth-wifi.pcap", "raw-nflog-router.pcap",
                                           "raw-nflog.pcap"]


def test_the_capture_of_a_topology_has_its_router_only_when_it_has_one():
    direct = Capture.of(NetnsTopology("svc2", secrets_dir="/tmp/s", subnet=7), "/r")
    routed = Capture.of(NetnsTopology("svc3", secrets_dir="/tmp/s", subnet=8, links=["wifi", "cell"]), "/r")
    assert direct.router is None and [r for _n, r, *_ in direct.plan()] == ["tcpdump-eth", "tcpdump-nflog"]
    assert routed.router.name == "router" and routed.links == ("wifi", "cell")
    with pytest.raises(CapabilityError, match="needs its access links"):
        Capture(direct.node, "/r", router=routed.router)


def test_a_capture_that_never_listens_is_one_clear_error(tmp_path):
    node = LocalNode(fake=lambda argv: ["sh", "-c", "echo 'tcpdump: nflog: permission denied' >&2; exit 1"])
    with pytest.raises(CapabilityError, match="tcpdump on client exited.*permission denied"):
        Capture(node, tmp_path).start()


def test_a_service_that_prints_nothing_fails_by_its_deadline():
    node = LocalNode(name="endpoint", fake=lambda argv: ["sh", "-c", "echo starting; sleep 30"])
    with pytest.raises(CapabilityError, match="the twin did not start within 1 s: starting"):
        Twin(node, cert_dir="/c", api_key="k", log_path="/l", t0=0.0, seed=1).start(timeout=1)


def test_a_service_is_ready_when_it_prints_its_address_and_stops_on_sigterm():
    node = LocalNode(name="endpoint", fake=lambda argv: ["sh", "-c", "echo 'proxy: CONNECT on 0.0.0.0:8080'; "
                                                               "exec sleep 30"])
    proxy = Proxy(node).start(timeout=5)
    proxy.stop()
    assert proxy.proc.returncode == -signal.SIGTERM


def test_preflight_asks_the_topology_for_espeak_ng_when_a_scenario_speaks(monkeypatch):
    asked = []
    monkeypatch.setattr(ComposeTopology, "preflight", classmethod(lambda cls, **kw: asked.append(kw)))
    run_mod.preflight(["control-speech"], None, "compose", "twin")
    run_mod.preflight(["control"], None, "compose", "twin")
    assert asked == [{"client_tools": frozenset({"espeak-ng"}), "uplink": False},
                     {"client_tools": frozenset(), "uplink": False}]


def test_a_tool_missing_on_the_client_node_is_named():
    with pytest.raises(CapabilityError, match="^the client image x lacks espeak-ng: install espeak-ng in Dockerfile"):
        require_tools("the client image x", {"espeak-ng", "tcpdump"}, lambda t: t == "tcpdump",
                      "install {} in Dockerfile.client")


def test_compose_has_no_uplink_for_live_mode():
    with pytest.raises(CapabilityError, match="live mode runs in --topology netns"):
        ComposeTopology.preflight(uplink=True)


def test_registry_and_netns_nodes():
    assert get("netns") is NetnsTopology and get("compose") is ComposeTopology
    with pytest.raises(LabError, match="unknown topology 'k8s'; known: compose, netns"):
        get("k8s")
    topo = NetnsTopology("svc2")
    assert (topo.client.name, topo.client.ns, topo.endpoint.ns) == ("client", "ll-svc2-c", "ll-svc2-e")
    with pytest.raises(LabError, match="not up"):
        topo.client.popen(["true"])


def test_tcpdump_counts_read_the_last_statistics_in_either_form(tmp_path):
    from lab.topology.services import _tcpdump_counts
    log = tmp_path / "tcpdump-cell.log"
    log.write_text("tcpdump: listening on cell, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n")
    assert _tcpdump_counts(log) is None                       # nothing said yet: not waited for past 0.1 s
    log.write_text(log.read_text() + "tcpdump: 1 packet captured, 10 packets received by filter, 0 packets dropped by kernel\n")
    assert _tcpdump_counts(log) == (1, 10)                     # behind: the stop waits
    log.write_text(log.read_text() + "10 packets captured\n10 packets received by filter\n0 packets dropped by kernel\n")
    assert _tcpdump_counts(log) == (10, 10)                    # the last counts, the exit's form
    assert _tcpdump_counts(tmp_path / "missing.log") is None
