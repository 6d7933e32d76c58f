"""delay: hold the packets of a target for delay_ms ± jitter_ms, then let them go (userspace, NFQUEUE).

target, direction (default out), delay_ms > 0, jitter_ms (0 <= jitter_ms <= delay_ms), queue.
For a kernel without sch_netem (this one): an iptables rule sends what matches to NFQUEUE `queue`
(`--queue-bypass`: with no listener the packet passes, so a dead worker never turns into loss), and
a worker process bound to that queue in the same namespace gives each packet its verdict ACCEPT
after its delay. Packets leave in the order they came (a release time is never before the previous
one), so jitter does not reorder a TCP stream. direction out adds delay_ms to a round trip; both, 2x.

The same worker serves the kinds beside this one (`Held` is their base): reorder (a share of the
packets jumps the queue, netem's `reorder`), duplicate (a share is sent twice) and the userspace
path of netem (delay, jitter, loss, reorder, duplicate on a device). What each packet gets is
decided by `Schedule`, a pure function of its arrival time and a seeded draw.

The worker belongs to the fault: started by install() in the fault's namespace, recorded as a
pidfile (role fault-delay) so `lab down` ends it, stopped by uninstall() after the rules went.
Its stdin is a pipe from the owner: end of file (the owner cleared it, exited or was killed -9)
makes it release every held packet and exit. It runs as a real-time process where root permits
(netem/realtime.py: SCHED_FIFO, locked memory, no GC pauses; one stderr line says what was
refused), because an ordinary process's wake-ups wait behind whatever else runs, and a held packet
released late is a delay the scenario did not ask for (`lab bench faults` compares the two);
$LIVELAB_DELAY_REALTIME=0 keeps it ordinary (the bench's comparison).
Run by hand: `python -m netem.kinds.delay --queue N --delay-ms D [--jitter-ms J] [--reorder P]
[--duplicate P] [--loss P]` prints `ready` once bound.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

from netem import cleanup
from netem import spec as S
from netem.errors import NetemError
from netem.fault import InstalledFault, MatchFault, Shape
from netem.holding import Releases, arrival, spin_for, wait_until
from netem.kernel import in_netns, netns_name
from netem.nfqueue import NfQueue
from netem.realtime import become_realtime
from netem.iptables import Rules

QUEUE_BASE, QUEUE_SPAN = 20000, 10000  # default queues, by name hash: far from blackhole's 99
READY_TIMEOUT_S = 5.0
DUP_MARK = 0x1AB0D  # the duplicate's copy carries this fwmark, so the rule lets it pass unqueued
SO_MARK = 36
REALTIME_ENV = "LIVELAB_DELAY_REALTIME"  # "0": an ordinary process (the bench's in-run comparison)


def default_queue(name: str) -> int:
    return QUEUE_BASE + int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % QUEUE_SPAN


@dataclass(frozen=True)
class Plan:
    """What the worker does to each packet (the fault's spec, in the worker's words)."""
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    reorder: float = 0.0       # share sent at once, ahead of the held ones (netem: reorder)
    duplicate: float = 0.0     # share sent twice
    loss: float = 0.0          # share dropped (the netem userspace path; the loss kind is a rule)

    def argv(self) -> list[str]:
        return ["--delay-ms", str(self.delay_ms), "--jitter-ms", str(self.jitter_ms), "--reorder",
                str(self.reorder), "--duplicate", str(self.duplicate), "--loss", str(self.loss)]


class Schedule:
    """When each packet leaves, and whether it is dropped or sent twice. Pure but for `rng`.

    A held packet leaves at arrival + delay ± jitter but never before the one held before it (order
    kept, as in the delay kind); a packet drawn for `reorder` leaves at once, ahead of those held.
    """

    def __init__(self, plan: Plan, rng: random.Random | None = None):
        self.plan = plan
        self.rng = rng or random.Random()
        self._last = 0.0

    def place(self, arrived: float) -> tuple[float | None, bool]:
        """(release time, None: dropped; whether a copy goes too)."""
        p, r = self.plan, self.rng
        if p.loss and r.random() < p.loss:
            return None, False
        twice = bool(p.duplicate) and r.random() < p.duplicate
        if p.reorder and r.random() < p.reorder:
            return arrived, twice
        if not p.delay_ms:
            return arrived, twice
        hold = (p.delay_ms + (r.uniform(-p.jitter_ms, p.jitter_ms) if p.jitter_ms else 0.0)) / 1000
        self._last = max(arrived + hold, self._last)  # never before the previous one
        return self._last, twice


class Held(MatchFault, InstalledFault):
    """A rule fault whose matching packets go to a worker of its own (the loop below)."""
    requires = frozenset({"iptables", "nfqueue", "nfqueue_bind"})
    lives_with_owner = True  # the worker exits when its owner does (see the module text)

    def __init__(self, spec: dict):
        super().__init__(spec)
        self._proc: subprocess.Popen | None = None
        self._pidfile = None
        self._last_error = ""  # the worker's last stderr line, for the error when it will not start

    def plan(self) -> Plan:
        raise NotImplementedError

    @classmethod
    def _hold_ms(cls, spec: dict, what: str) -> float:
        """The spec's delay_ms: required, > 0, <= 60000; `what` says what is held, for the error."""
        if "delay_ms" not in spec:
            raise S.fail(cls.kind, f"delay_ms ({what}, > 0) is required")
        d = S.number(cls.kind, "delay_ms", spec["delay_ms"], "a number of milliseconds > 0 (and <= 60000)",
                     high=60000)
        if d == 0:
            raise S.fail(cls.kind, "delay_ms must be a number of milliseconds > 0 (and <= 60000), got 0")
        return d

    @classmethod
    def _share(cls, spec: dict, what: str) -> float:
        """The spec's p: required, 0 < p <= 1; `what` says what share it is, for the error."""
        p = S.number(cls.kind, "p", spec.get("p", 0), "a probability 0 < p <= 1", high=1)
        if not p:
            raise S.fail(cls.kind, f"p ({what}, 0 < p <= 1) is required")
        return p

    @classmethod
    def _queue(cls, spec: dict) -> None:
        S.queue(cls.kind, spec.setdefault("queue", default_queue(spec["name"])), " for this fault's own worker")

    def skip_match(self) -> str:
        """Extra match text that keeps the worker's own copies out of the queue."""
        return f" -m mark ! --mark {DUP_MARK:#x}" if self.plan().duplicate else ""

    def rules(self) -> Rules:
        r = Rules()
        for direction, m in self.matches().items():
            (r.out if direction == "out" else r.in_).append(
                f"{m}{self.skip_match()} -j NFQUEUE --queue-num {self.spec['queue']} --queue-bypass")
        return r

    # ---- the worker --------------------------------------------------------------------------
    def install(self, netns: str | None) -> None:
        start_worker(self, netns)

    def uninstall(self, netns: str | None) -> None:
        stop_worker(self)

    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc else None


def start_worker(f, netns: str | None) -> None:
    """Start fault `f`'s worker (its `plan()`, its spec's queue) in `netns` and wait for `ready`."""
    argv = [sys.executable, "-m", "netem.kinds.delay", "--queue", str(f.spec["queue"]), *f.plan().argv()]
    with in_netns(netns):  # the child is born in the thread's namespace, and binds the queue there
        f._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True)
        ns = netns_name()
    f._pidfile = cleanup.record("fault-delay", f._proc.pid, cleanup.run_of(ns) or "netem",
                                netns=ns, queue=f.spec["queue"])
    ready = select.select([f._proc.stdout], [], [], READY_TIMEOUT_S)[0]
    line = f._proc.stdout.readline().decode().strip() if ready else ""
    if line != "ready":
        stop_worker(f)
        raise NetemError(f"fault {f.kind} {f.name}: the worker did not start: {f._last_error or line or 'no answer'}")


def stop_worker(f) -> None:
    """End of file on its stdin: the worker releases what it holds, unbinds and exits. Idempotent."""
    proc, f._proc = f._proc, None
    if proc is not None:
        try:
            proc.stdin.close()
            proc.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            cleanup.stop_pid(proc.pid, grace=0.5)
            proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip()
        f._last_error = err.splitlines()[-1] if err else ""
        proc.stdout.close()
        proc.stderr.close()
    cleanup.forget(f._pidfile)
    f._pidfile = None


class Delay(Held):
    kind = "delay"
    shape = Shape.DEGRADE
    does = "the target's packets are held delay_ms (± jitter_ms), in their order"
    fields = MatchFault.fields | {"delay_ms", "jitter_ms", "queue"}

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        spec.setdefault("direction", "out")
        spec = super()._normalise(spec)
        d = cls._hold_ms(spec, "milliseconds each packet is held")
        S.number(cls.kind, "jitter_ms", spec.setdefault("jitter_ms", 0), f"milliseconds 0..delay_ms ({d})", high=d)
        cls._queue(spec)
        return spec

    def plan(self) -> Plan:
        return Plan(delay_ms=self.spec["delay_ms"], jitter_ms=self.spec["jitter_ms"])


def hold_and_release(queue: NfQueue, delay_ms: float, jitter_ms: float, lifeline: int,
                     clock=time.monotonic, rng: random.Random | None = None, plan: Plan | None = None,
                     resend: Callable[[bytes], None] | None = None) -> int:
    """The worker's loop: every packet gets its verdict at the time `Schedule` gives it.

    `plan` (default: delay_ms ± jitter_ms) may also reorder, drop or duplicate; a duplicate's copy
    goes out through `resend(packet)` right after the original's ACCEPT (the queue must then hand
    out payloads). The hold counts from the packet's arrival (`holding.arrival`), the wake-up is on
    the deadline (`holding.wait_until`), and the verdicts due at once go in one send. Returns when
    `lifeline` (a file descriptor) reaches end of file; everything still held is released first.
    Returns the number of packets handled.
    """
    sched = Schedule(plan or Plan(delay_ms=delay_ms, jitter_ms=jitter_ms), rng)
    held = Releases()
    handled, last_release = 0, float("-inf")

    def release(items: list[tuple[int, bytes | None]]) -> None:
        if not items:
            return
        queue.verdict_many([packet_id for packet_id, _copy in items])
        for _id, copy in items:
            if copy is not None and resend is not None:
                try:
                    resend(copy)
                except OSError:
                    pass          # a copy that cannot go is one duplicate fewer, never a stall

    try:
        while True:
            now = clock()
            due = held.due(now)
            if due:
                release(due)
                last_release = now
            at = held.next_at()
            ready = wait_until([queue, lifeline], at, clock, spin_for(at, last_release))
            if lifeline in ready and not os.read(lifeline, 4096):
                return handled
            if queue in ready:
                read_at = clock()
                dropped = []
                for packet in queue.receive_stamped(0):
                    handled += 1
                    at, twice = sched.place(arrival(packet.stamp, read_at, clock))
                    if at is None:
                        dropped.append(packet.id)
                    else:
                        held.push(at, packet.id, packet.payload if twice else None)
                if dropped:
                    queue.verdict_many(dropped, accept=False)
    finally:
        release(held.all())


def raw_sender(mark: int = DUP_MARK) -> Callable[[bytes], None]:
    """Send a whole IPv4 packet again, marked so the fault's own rule lets it pass."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)

    def send(packet: bytes) -> None:
        sock.sendto(packet, (socket.inet_ntoa(packet[16:20]), 0))
    return send


def _worker_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m netem.kinds.delay", description="the userspace faults' worker")
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--reorder", type=float, default=0.0)
    p.add_argument("--duplicate", type=float, default=0.0)
    p.add_argument("--loss", type=float, default=0.0)
    a = p.parse_args(argv)
    plan = Plan(a.delay_ms, a.jitter_ms, a.reorder, a.duplicate, a.loss)
    if os.environ.get(REALTIME_ENV, "1") != "0":
        _fifo, notes = become_realtime()
        if notes:
            print(f"netem delay worker: {'; '.join(notes)}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leave through finally: release what is held
    try:
        q = NfQueue(a.queue, payloads=bool(plan.duplicate))
        resend = raw_sender() if plan.duplicate else None
    except (NetemError, OSError) as e:
        print(f"netem delay worker: {e}", file=sys.stderr)
        return getattr(e, "code", 1)
    try:
        print("ready", flush=True)
        hold_and_release(q, a.delay_ms, a.jitter_ms, sys.stdin.fileno(), plan=plan, resend=resend)
    finally:
        q.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker_main())
