"""The Compose router overlay end to end: client and endpoint share no network, and a TCP flow
between them crosses the router container (its FORWARD counter counts it), with the client's own
wifi address as its source (routed, not NATed). Then router scenarios through `lab run`: the agent
in the client container applies m4's MTU black hole in the router container (the router service)
and n1's switch on its own addresses, each with a passing verdict and its mark on the wire. Image
tag of its own (LAB_IMAGE_TAG): never the shared :dev image. The lab is always taken down, even on
failure, with its host DOCKER-USER rules.
"""
import json
import os
import subprocess

import pytest

from lab.capture import count, dropped
from lab.events import read_events
from lab.topology.compose import ComposeTopology, _project_name
from tests.e2e.docker_needed import docker_or_skip

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TAG = "rcompose-e2e"
PORT = 9000

# Runs in the endpoint container: accept one connection, print its peer and what it sent.
LISTEN = r"""
import json, socket, sys
ls = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
ls.settimeout(60)
c, peer = ls.accept()
c.settimeout(10)
print(json.dumps({"peer": peer[0], "data": c.recv(100).decode()}), flush=True)
"""
# Runs in the client container: one connection to the endpoint, one message.
DIAL = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(b"through the router")
s.close()
"""


def forwarded(topo: ComposeTopology, dst: str) -> int:
    """Packets to `dst` the router forwarded: the counter of an accounting rule (no target)."""
    out = topo.compose("exec", "-T", "router", "iptables", "-L", "FORWARD", "-v", "-n", "-x", timeout=30).stdout
    return sum(int(l.split()[0]) for l in out.splitlines() if f" {dst} " in f" {l} " and "ACCEPT" not in l
               and l.split()[0].isdigit())


def test_the_client_reaches_the_endpoint_only_through_the_router_container(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the router container's faults)")
    docker_or_skip()
    topo = ComposeTopology(f"e2e-router-{os.getpid()}", captures_dir=tmp_path, setup=True,
                           links=["wifi", "cell"], env={"LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"})
    listener = None
    try:
        topo.up()
        assert set(topo.health()) == {"endpoint", "client", "capture", "router"}
        nets = {s: set(c.attrs["NetworkSettings"]["Networks"]) for s, c in topo.containers().items()}
        assert not nets["client"] & nets["endpoint"], f"client and endpoint share a network: {nets}"
        ep = topo.endpoint.ip
        topo.compose("exec", "-T", "router", "iptables", "-A", "FORWARD", "-d", ep, timeout=30)
        listener = topo.endpoint.popen(["python", "-c", LISTEN, str(PORT)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        assert listener.stdout.readline().strip() == "listening"
        dial = topo.client.popen(["python", "-c", DIAL, ep, str(PORT)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        _out, err = dial.communicate(timeout=60)
        assert dial.returncode == 0, f"the client could not reach the endpoint: {err.strip()}"
        got = json.loads(listener.stdout.readline())
        assert got == {"peer": topo.client.ip, "data": "through the router"}, got
        assert forwarded(topo, ep) >= 3, "the router container did not forward the flow"
    finally:
        if listener is not None:
            listener.kill()
            listener.wait(10)
        topo.down()
        assert not topo.containers(), "the router lab's containers outlived the test"
        rules = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True).stdout
        assert topo.project not in rules, "the router lab's DOCKER-USER rules outlived it"


def _run_router_scenario(tmp_path, monkeypatch, scenario: str, client: str):
    """One run through `lab run`'s batch in Compose: (run folder, events, twin's record); its lab gone."""
    from lab.run import run_batch

    if os.geteuid() != 0:
        pytest.skip("needs root (the router container's faults)")
    docker_or_skip()
    monkeypatch.setenv("LAB_IMAGE_TAG", TAG)
    lines: list[str] = []
    try:
        batch = run_batch([scenario], client=client, topology="compose", out_dir=tmp_path / "batch", out=lines.append)
    finally:
        for run in (tmp_path / "batch").glob("*/"):
            project = _project_name(run.name, run.resolve())
            left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                                  capture_output=True, text=True).stdout.split()
            rules = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True).stdout
            assert not left and project not in rules, f"{project} outlived its run"
    run = next(d for d in batch.iterdir() if d.is_dir())
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["met"], (verdict.get("expectations"), lines[-25:])
    return run, read_events(run / "events.jsonl"), read_events(run / "twin.jsonl")


def test_m4_the_mtu_black_hole_in_the_router_container_drops_large_packets_only(tmp_path, monkeypatch):
    run, evs, _twin = _run_router_scenario(tmp_path, monkeypatch, "m4-mtu-blackhole", "recovery")
    applied = next(e for e in evs if e.kind == "fault.apply")
    assert applied["spec"]["node"] == "router" and applied["name"] == "mtu_blackhole"
    # the drops are the router's (its nflog:5, merged into the run's pcapng), while the fault was on
    drops = [t for _n, t, prefix in dropped(run / "capture.pcapng") if prefix.startswith("ll mtu_blackhole")]
    cleared = next(e for e in evs if e.kind == "fault.clear")
    assert drops and all(applied.t <= t <= cleared.t + 0.5 for t in drops), drops
    assert (run / "raw-nflog-router.pcap").stat().st_size > 24, "nothing from the router's nflog:5"
    # on the client's link, while the fault was on: the endpoint's small packets still came through,
    # none of its large ones (a zombie session), and the client fell back once it noticed
    ep, window = applied["spec"]["target"]["dst"], f"frame.time_epoch >= {applied.t} && frame.time_epoch <= {cleared.t}"
    from_ep = f"ip.src == {ep} && tcp.srcport == 8443 && {window}"
    assert count(run / "raw-eth-wifi.pcap", f"{from_ep} && ip.len <= 1280") > 0
    assert count(run / "raw-eth-wifi.pcap", f"{from_ep} && ip.len > 1280") == 0
    assert any(e.kind == "fallback.start" for e in evs)


def test_n1_the_switch_in_compose_moves_the_client_to_its_cell_address(tmp_path, monkeypatch):
    _run, evs, twin = _run_router_scenario(tmp_path, monkeypatch, "n1-network-switch", "recovery")
    switch = next(e for e in evs if e.kind == "network.switch")
    assert (switch["from"], switch["to"]) == ("wifi", "cell") and switch["old_ip"] != switch["new_ip"]
    peers = [(e.t, e["peer"].rsplit(":", 1)[0]) for e in twin if e.get("peer")]
    assert any(ip == switch["old_ip"] for t, ip in peers if t < switch["t_broken"]), peers
    after = [ip for t, ip in peers if t > switch["t_made"]]
    # the endpoint sees the new connections from the new address, and nothing from the old one
    assert after and set(after) == {switch["new_ip"]}, peers


# Runs in the client container: connect times (s) to the endpoint across the shaped link (no
# listener there: SYN and the reset are one round trip) and, as the same run's baseline, to the
# router service on the ctl network, which no link fault touches.
RTT = r"""
import json, socket, sys, time
def once(addr):
    s = socket.socket(); t0 = time.monotonic()
    try:
        s.connect(addr)
    except ConnectionRefusedError:
        pass
    s.close(); return time.monotonic() - t0
host, port = sys.argv[2].rsplit(":", 1)
ep, ctl = (sys.argv[1], 9), (host, int(port))
print(json.dumps({"link": sorted(once(ep) for _ in range(5)), "ctl": sorted(once(ctl) for _ in range(5))}))
"""


def test_a_links_rtt_is_made_in_the_router_container(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the router container's faults)")
    docker_or_skip()
    topo = ComposeTopology(f"e2e-rtt-{os.getpid()}", captures_dir=tmp_path, setup=True,
                           links=[{"wifi": {"rtt_ms": 40}}], env={"LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"})
    try:
        topo.up()
        p = topo.client.popen(["python", "-c", RTT, topo.endpoint.ip, topo.router_part.control],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        got = json.loads(out)
        link, ctl = got["link"][2], got["ctl"][2]          # medians of 5
        print(f"connect over the 40 ms wifi link {link * 1000:.1f} ms, to the router service {ctl * 1000:.1f} ms")
        assert 0.035 <= link <= 0.5, got
        assert ctl < link, got
    finally:
        topo.down()
        assert not topo.containers(), "the router lab's containers outlived the test"
