"""The Compose lab end to end, the way CI runs it on a fresh machine.

scripts/docker-setup.sh installs and starts everything (docker.io, dockerd, compose v2, the
mmdebstrap base image, the wheelhouse); then the lab's two containers come up, the services
start on them (the twin and the proxy on the endpoint node, the capture in its sidecar in the client's
network namespace), a
client in the client container opens a TLS connection to the twin, a ~3 s NFQUEUE blackhole (with
NFLOG group 5) drops its packets, and the capture must show them: the packets to endpoint:8443 in
raw-eth.pcap, the dropped ones in raw-nflog.pcap. The lab is always taken down, even on failure.
"""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lab.topology.compose import REPO, SETUP_SCRIPT, ComposeTopology
from lab.topology.services import Capture, Proxy, Twin

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Runs inside the client container: TLS to the twin, a partial HTTP request, then more header lines
# every 0.2 s while a blackhole drops this flow for BLACKHOLE_S, then the rules are cleared.
CLIENT_SCRIPT = r"""
import json, socket, ssl, subprocess, sys, time
BLACKHOLE_S = float(sys.argv[1])
ep = socket.gethostbyname("endpoint")
ctx = ssl.create_default_context(cafile="/certs/ca.pem")
s = ctx.wrap_socket(socket.create_connection((ep, 8443), timeout=5), server_hostname="endpoint")
lport = s.getsockname()[1]
s.sendall(b"GET / HTTP/1.1\r\nHost: endpoint\r\n")
match = f"-p tcp -d {ep}/32 --dport 8443 --sport {lport}"
rules = ("*filter\n:LAB_E2E - [0:0]\n-I OUTPUT -j LAB_E2E\n"
         f"-A LAB_E2E {match} -j NFLOG --nflog-group 5 --nflog-threshold 1 --nflog-prefix e2e\n"
         f"-A LAB_E2E {match} -j NFQUEUE --queue-num 99\nCOMMIT\n")
t_apply = time.time()
subprocess.run(["iptables-restore", "--noflush"], input=rules.encode(), check=True)
sent = 0
s.settimeout(0.5)
while time.time() - t_apply < BLACKHOLE_S:
    s.sendall(b"X-Lab: %d\r\n" % sent)        # each write is a TLS record the blackhole drops
    sent += 1
    time.sleep(0.2)
t_clear = time.time()
subprocess.run(["iptables", "-F", "LAB_E2E"], check=True)
subprocess.run(["iptables", "-D", "OUTPUT", "-j", "LAB_E2E"], check=True)
subprocess.run(["iptables", "-X", "LAB_E2E"], check=True)
left = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
s.close()
print(json.dumps({"ep": ep, "lport": lport, "sent": sent, "t_apply": t_apply, "t_clear": t_clear,
                  "clean": "LAB_E2E" not in left}))
"""


# Runs inside the client container: websockets reaches the twin through the proxy because
# HTTPS_PROXY is set (proxy=True is its default); the proxy's control API (argv[1]) lists the tunnel.
PROXY_SCRIPT = r"""
import asyncio, json, ssl, sys, urllib.request
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
async def main():
    ctx = ssl.create_default_context(cafile="/certs/ca.pem")
    try:
        async with connect("wss://endpoint:8443/", ssl=ctx, open_timeout=10) as ws:
            status = 101
    except InvalidStatus as e:           # the twin answers a bare path with an HTTP error: the TLS tunnel worked
        status = e.response.status_code
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    state = json.loads(opener.open(sys.argv[1] + "/state", timeout=5).read())
    print(json.dumps({"status": status, "tunnels": [t["target"] for t in state["tunnels"]]}))
asyncio.run(main())
"""


def tshark_fields(pcap: Path, display_filter: str, *fields: str) -> list[list[str]]:
    argv = ["tshark", "-n", "-r", str(pcap), "-Y", display_filter, "-T", "fields"]
    for f in fields:
        argv += ["-e", f]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"tshark failed on {pcap}: {r.stderr.strip()}"
    return [line.split("\t") for line in r.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def docker_setup():
    if os.geteuid() != 0:
        pytest.skip("the Compose lab's setup needs root (apt, dockerd, mmdebstrap)")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, timeout=900, cwd=REPO)
    print(r.stdout)
    assert r.returncode == 0, f"docker-setup.sh failed: {(r.stderr or r.stdout).strip()}"
    return time.monotonic() - t0


def test_compose_lab_blackhole_is_captured(docker_setup, tmp_path):
    if not shutil.which("tshark"):
        pytest.skip("tshark is missing (scripts/setup.sh installs it)")
    run_id = f"e2e-compose-{os.getpid()}"
    topo = ComposeTopology(run_id, captures_dir=tmp_path, setup=False)
    try:
        t0 = time.monotonic()
        topo.up()
        t_up = time.monotonic() - t0
        Twin(topo.endpoint, cert_dir=topo.cert_dir, api_key="e2e-key", log_path=topo.run_dir / "twin.jsonl",
             t0=time.time(), seed=1).start()
        proxy = Proxy(topo.endpoint).start()
        capture = Capture(topo.client, topo.run_dir).start()
        health = topo.health()
        assert health == {"endpoint": "running", "client": "running", "capture": "running"}, health

        p = topo.client.popen(["python", "-c", CLIENT_SCRIPT, "3"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, f"client script failed: {err.strip()}"
        info = json.loads(out.strip().splitlines()[-1])
        assert info["clean"] and info["sent"] >= 10

        p = topo.client.popen(["python", "-c", PROXY_SCRIPT, proxy.control_url], env={"HTTPS_PROXY": proxy.url},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, f"proxy script failed: {err.strip()}"
        via = json.loads(out.strip().splitlines()[-1])
        assert via["tunnels"] == ["endpoint:8443"] and 100 <= via["status"] < 500, via

        files = capture.stop()
        eth, nflog = topo.run_dir / "raw-eth.pcap", topo.run_dir / "raw-nflog.pcap"
        assert set(files) == {eth, nflog}

        flow = f"ip.dst=={info['ep']} && tcp.dstport==8443 && tcp.srcport=={info['lport']}"
        on_wire = tshark_fields(eth, flow, "frame.time_epoch")
        dropped = tshark_fields(nflog, flow, "frame.time_epoch", "nflog.prefix")
        assert on_wire, "no packets to endpoint:8443 in raw-eth.pcap"
        # the first write and its RTO retransmissions (Nagle holds the later writes back while data
        # is unacknowledged): a real blackhole, not a local send error
        assert len(dropped) >= 3, f"only {len(dropped)} dropped packets logged"
        assert all(prefix == "e2e" for _, prefix in dropped)
        # the drops happened during the blackhole (NFLOG stamps are read-time: allow some slack)
        times = [float(t) for t, _ in dropped]
        assert info["t_apply"] - 0.5 <= min(times) and max(times) <= info["t_clear"] + 1.0
        # nothing of the flow reached the wire while the blackhole was on
        during = [float(t) for (t,) in on_wire if info["t_apply"] + 0.05 < float(t) < info["t_clear"] - 0.05]
        assert during == []
        print(f"\nsetup {docker_setup:.1f} s, up --wait {t_up:.1f} s, {len(on_wire)} packets on eth0, "
              f"{len(dropped)} dropped and logged; via proxy: {via}")
    finally:
        t0 = time.monotonic()
        topo.down()
        t_down = time.monotonic() - t0
    assert topo.containers() == {}, "down left containers behind"
    assert t_down < 15


def test_a_signal_reaches_the_process_inside_the_container(docker_setup, tmp_path):
    """docker exec forwards no signals without a TTY: the node's Popen must stop the process itself."""
    topo = ComposeTopology(f"e2e-signal-{os.getpid()}", captures_dir=tmp_path, setup=False)
    try:
        topo.up()
        p = topo.client.popen(["sleep", "120"], role="sleeper")
        time.sleep(1.0)                     # the wrapper has written its pid
        t0 = time.monotonic()
        p.terminate()
        p.wait(timeout=20)
        assert time.monotonic() - t0 < 20
        # no ps in the minbase image: every process's command line from /proc
        left = topo.compose("exec", "-T", "client", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
                            check=False).stdout
        assert "sleep 120" not in left and "sh -c" in left, left
    finally:
        topo.down()


# Runs inside the client container: numbered UDP datagrams to the endpoint every 10 ms, each number
# printed once its datagram is sent, until the container is killed
NUMBERED = r"""
import socket, time
ep = socket.gethostbyname("endpoint")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
while True:
    s.sendto(b"livelab-seq %06d" % n, (ep, 9999))
    print(n, flush=True)
    n += 1
    time.sleep(0.01)
"""


def test_a_client_container_killed_mid_run_leaves_a_complete_capture(docker_setup, tmp_path):
    """The capture runs in its own container sharing the client's network namespace: `docker kill`
    of the client (a crash, an OOM kill) leaves it running, and its stop writes every packet the
    client sent before it died. (With tcpdump inside the client container, the kill took tcpdump
    with it: no clean stop, and what its ring still held was lost.)"""
    if not shutil.which("tshark"):
        pytest.skip("tshark is missing (scripts/setup.sh installs it)")
    topo = ComposeTopology(f"e2e-kill-{os.getpid()}", captures_dir=tmp_path, setup=False)
    try:
        topo.up()
        capture = Capture.of(topo, topo.run_dir).start()
        p = topo.client.popen(["python", "-c", NUMBERED], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
        last = -1
        for line in p.stdout:
            last = int(line)
            if last >= 150:
                break
        subprocess.run(["docker", "kill", topo.container_id("client")], check=True, capture_output=True, timeout=60)
        p.wait(timeout=30)
        health = topo.health()
        assert health["client"] != "running" and health["capture"] == "running", health
        files = capture.stop()
        eth = topo.run_dir / "raw-eth.pcap"
        assert eth in files
        got = tshark_fields(eth, "udp.dstport==9999", "data.data")
        seqs = {int(bytes.fromhex(d).decode().split()[1]) for (d,) in got}
        assert set(range(last + 1)) <= seqs, f"missing datagrams: {sorted(set(range(last + 1)) - seqs)[:10]}"
        # each tcpdump ended on the capture's own stop and said what it wrote: not killed with the client
        for log in ("tcpdump-eth.log", "tcpdump-nflog.log"):
            assert "packets captured" in (topo.run_dir / log).read_text(), log
    finally:
        topo.down()
    assert topo.containers() == {}
