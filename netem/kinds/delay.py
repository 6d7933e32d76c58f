"""delay: hold the packets of a target for delay_ms ± jitter_ms, then let them go (userspace, NFQUEUE).

target, direction (default out), delay_ms > 0, jitter_ms (0 <= jitter_ms <= delay_ms), queue.
For a kernel without sch_netem (this one): an iptables rule sends what matches to NFQUEUE `queue`
(`--queue-bypass`: with no listener the packet passes, so a dead worker never turns into loss), and
a worker process bound to that queue in the same namespace gives each packet its verdict ACCEPT
after its delay. Packets leave in the order they came (a release time is never before the previous
one), so jitter does not reorder a TCP stream. direction out adds delay_ms to a round trip; both, 2x.

The worker belongs to the fault: started by install() in the fault's namespace, recorded as a
pidfile (role fault-delay) so `lab down` ends it, stopped by uninstall() after the rules went.
Its stdin is a pipe from the owner: end of file (the owner cleared it, exited or was killed -9)
makes it release every held packet and exit. Run by hand: `python -m netem.kinds.delay --queue N
--delay-ms D [--jitter-ms J]` prints `ready` once bound.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import os
import random
import select
import signal
import subprocess
import sys
import time

from netem import cleanup
from netem import spec as S
from netem.errors import NetemError
from netem.fault import InstalledFault, MatchFault
from netem.kernel import in_netns, netns_name
from netem.nfqueue import NfQueue
from netem.rules import Rules

QUEUE_BASE, QUEUE_SPAN = 20000, 10000  # default queues, by name hash: far from blackhole's 99
READY_TIMEOUT_S = 5.0


class Delay(MatchFault, InstalledFault):
    kind = "delay"
    requires = frozenset({"iptables", "nfqueue", "nfqueue_bind"})
    lives_with_owner = True  # the worker exits when its owner does (see the module text)
    fields = MatchFault.fields | {"delay_ms", "jitter_ms", "queue"}

    def __init__(self, spec: dict):
        super().__init__(spec)
        self._proc: subprocess.Popen | None = None
        self._pidfile = None
        self._last_error = ""  # the worker's last stderr line, for the error when it will not start

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec.setdefault("direction", "out")
        spec = super()._normalise(spec)
        if "delay_ms" not in spec:
            raise S.fail(cls.kind, "delay_ms (milliseconds each packet is held, > 0) is required")
        d = S.number(cls.kind, "delay_ms", spec["delay_ms"], "a number of milliseconds > 0 (and <= 60000)",
                     high=60000)
        if d == 0:
            raise S.fail(cls.kind, "delay_ms must be a number of milliseconds > 0 (and <= 60000), got 0")
        S.number(cls.kind, "jitter_ms", spec.setdefault("jitter_ms", 0), f"milliseconds 0..delay_ms ({d})", high=d)
        default_q = QUEUE_BASE + int(hashlib.sha1(spec["name"].encode()).hexdigest()[:8], 16) % QUEUE_SPAN
        S.queue(cls.kind, spec.setdefault("queue", default_q), " for this fault's own worker")
        return spec

    def rules(self) -> Rules:
        r = Rules()
        for direction, m in self.matches().items():
            (r.out if direction == "out" else r.in_).append(
                f"{m} -j NFQUEUE --queue-num {self.spec['queue']} --queue-bypass")
        return r

    # ---- the worker --------------------------------------------------------------------------
    def install(self, netns: str | None) -> None:
        argv = [sys.executable, "-m", "netem.kinds.delay", "--queue", str(self.spec["queue"]),
                "--delay-ms", str(self.spec["delay_ms"]), "--jitter-ms", str(self.spec["jitter_ms"])]
        with in_netns(netns):  # the child is born in the thread's namespace, and binds the queue there
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
            ns = netns_name()
        self._pidfile = cleanup.record("fault-delay", self._proc.pid, cleanup.run_of(ns) or "netem",
                                       netns=ns, queue=self.spec["queue"])
        ready = select.select([self._proc.stdout], [], [], READY_TIMEOUT_S)[0]
        line = self._proc.stdout.readline().decode().strip() if ready else ""
        if line != "ready":
            self.uninstall(netns)
            raise NetemError(f"fault delay {self.name}: the worker did not start: {self._last_error or line or 'no answer'}")

    def uninstall(self, netns: str | None) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # end of file: release what is held, unbind, exit
                proc.wait(2.0)
            except (OSError, subprocess.TimeoutExpired):
                cleanup.stop_pid(proc.pid, grace=0.5)
                proc.wait()
            err = proc.stderr.read().decode(errors="replace").strip()
            self._last_error = err.splitlines()[-1] if err else ""
            proc.stdout.close()
            proc.stderr.close()
        cleanup.forget(self._pidfile)
        self._pidfile = None

    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc else None


def hold_and_release(queue: NfQueue, delay_ms: float, jitter_ms: float, lifeline: int,
                     clock=time.monotonic, rng: random.Random | None = None) -> int:
    """The worker's loop: every packet id gets ACCEPT at arrival + delay ± jitter, in arrival order.

    Returns when `lifeline` (a file descriptor) reaches end of file; everything still held is
    released first. Returns the number of packets handled.
    """
    rng = rng or random.Random()
    held: collections.deque[tuple[float, int]] = collections.deque()
    last_release, handled = 0.0, 0
    try:
        while True:
            now = clock()
            while held and held[0][0] <= now:
                queue.verdict(held.popleft()[1])
            wait = max(0.0, held[0][0] - now) if held else 1.0
            ready = select.select([queue, lifeline], [], [], wait)[0]
            if lifeline in ready and not os.read(lifeline, 4096):
                return handled
            if queue in ready:
                arrived = clock()
                for packet_id in queue.receive(0):
                    hold = (delay_ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0.0)) / 1000
                    last_release = max(arrived + hold, last_release)  # never before the previous one
                    held.append((last_release, packet_id))
                    handled += 1
    finally:
        while held:
            queue.verdict(held.popleft()[1])


def _worker_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m netem.kinds.delay", description="the delay fault's worker")
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leave through finally: release what is held
    try:
        q = NfQueue(a.queue)
    except NetemError as e:
        print(f"netem delay worker: {e}", file=sys.stderr)
        return e.code
    try:
        print("ready", flush=True)
        hold_and_release(q, a.delay_ms, a.jitter_ms, sys.stdin.fileno())
    finally:
        q.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker_main())
