"""The Compose router overlay end to end: client and endpoint share no network, and a TCP flow
between them crosses the router container (its FORWARD counter counts it), with the client's own
wifi address as its source (routed, not NATed). Image tag of its own (LAB_IMAGE_TAG): never the
shared :dev image. The lab is always taken down, even on failure, with its host DOCKER-USER rules.
"""
import json
import os
import subprocess

import pytest

from lab.topology.compose import ComposeTopology, docker_ready

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
    if os.geteuid() != 0 or not docker_ready():
        pytest.skip("needs root and a running dockerd")
    topo = ComposeTopology(f"e2e-router-{os.getpid()}", captures_dir=tmp_path, setup=True,
                           links=["wifi", "cell"], env={"LAB_IMAGE_TAG": TAG, "COMPOSE_BAKE": "false"})
    listener = None
    try:
        topo.up()
        assert set(topo.health()) == {"endpoint", "client", "router"}
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
