"""`lab bench router`: what the router node adds to a round trip. Figures and ratios, never asserts.

Two topologies up at once in the same run: `direct` (client and endpoint joined by one veth, the
lab's default) and `router` (the same two behind a router namespace over the access link wifi with
no RTT or loss of its own: FORWARD chains hooked, conntrack on, rp_filter strict). On each, a
client socket in the client namespace sends 64 bytes and waits for the echo from a server in the
endpoint namespace (TCP_NODELAY); rounds of --batch round trips alternate between the two paths so
the machine's load falls on both alike. Printed: median and p99 round trip per path, the router's
added median (the goal: <= 0.1 ms on loopback-speed links) and the ratio router/direct.

    lab bench router [-- --samples 4000 --batch 200]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading
import time

from lab.stats.order import quantile
from lab.topology.netns import NetnsTopology
from lab.topology.uplink import down
from netem.kernel import in_netns

PORT = 9009
FLOOR_MS = 0.1
MESSAGE = b"r" * 64


class EchoPath:
    """One topology with an echo server on the endpoint and a connected client socket."""

    def __init__(self, name: str, topo: NetnsTopology):
        self.name, self.topo = name, topo
        self.rtts: list[float] = []

    def __enter__(self):
        self.topo.up()
        with in_netns(self.topo.ns_endpoint):
            self.ls = socket.socket()
        self.ls.bind((self.topo.endpoint.ip, PORT))
        self.ls.listen()
        threading.Thread(target=self._echo, daemon=True).start()
        with in_netns(self.topo.ns_client):
            self.cli = socket.socket()
        self.cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cli.connect((self.topo.endpoint.ip, PORT))
        return self

    def _echo(self) -> None:
        conn, _ = self.ls.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(4096):
            conn.sendall(data)

    def round_trips(self, n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            self.cli.sendall(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                got += len(self.cli.recv(4096))
            self.rtts.append((time.perf_counter() - t0) * 1000)

    def __exit__(self, *exc):
        for s in (getattr(self, "cli", None), getattr(self, "ls", None)):
            if s is not None:
                s.close()
        self.topo.down()
        down(self.topo.run_id, current_ns=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lab bench router", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=4000, help="round trips per path (default 4000)")
    p.add_argument("--batch", type=int, default=200, help="round trips per alternating round (default 200)")
    a = p.parse_args(argv)
    if a.samples < 1 or a.batch < 1:
        p.error("--samples and --batch must be >= 1")
    tag = os.getpid() % 10**6
    with EchoPath("direct", NetnsTopology(f"bd{tag}")) as direct, \
            EchoPath("router", NetnsTopology(f"br{tag}", links=["wifi"])) as router:
        for path in (direct, router):  # warm up: caches, ARP, conntrack entry
            path.round_trips(50)
            path.rtts.clear()
        done = 0
        while done < a.samples:
            n = min(a.batch, a.samples - done)
            direct.round_trips(n)
            router.round_trips(n)
            done += n
            print(f"  {done}/{a.samples} round trips per path", flush=True)
        rows = [(path.name, statistics.median(path.rtts), quantile(path.rtts, 0.99)) for path in (direct, router)]
    print(f"{'path':8} {'median ms':>10} {'p99 ms':>8}   ({a.samples} round trips of {len(MESSAGE)} B each)")
    for name, med, p99 in rows:
        print(f"{name:8} {med:10.4f} {p99:8.4f}")
    added = rows[1][1] - rows[0][1]
    print(f"router adds {added:+.4f} ms median round trip (floor <= {FLOOR_MS} ms: "
          f"{'within' if added <= FLOOR_MS else 'ABOVE'}), ratio router/direct {rows[1][1] / rows[0][1]:.2f}, "
          f"p99 ratio {rows[1][2] / rows[0][2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
