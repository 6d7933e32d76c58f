"""The userspace faults beside delay (reorder, duplicate, netem's userspace path): specs, rules,
the pure Schedule, and the worker loop over a fake queue."""
import os
import random
import threading
import time

import pytest

from netem.errors import FaultSpecError
from netem.faults import REGISTRY, build, path_of, unmet
from netem.kernel import Capabilities
from netem.kinds.delay import DUP_MARK, Plan, Schedule, hold_and_release
from netem.nfqueue import Packet

FLOW = {"src": "10.203.7.1", "sport": 40000, "dst": "10.203.7.2", "dport": 8443}


def test_schedule_keeps_order_with_jitter_and_never_releases_early():
    s = Schedule(Plan(delay_ms=100, jitter_ms=50), random.Random(1))
    out = [s.place(i * 0.001)[0] for i in range(500)]
    assert out == sorted(out) and all(at - i * 0.001 >= 0.05 - 1e-9 for i, at in enumerate(out))
    spread = [at - i * 0.001 for i, at in enumerate(out)]
    assert max(spread) - min(spread) > 0.05          # the jitter is there, not flattened


def test_schedule_reorder_sends_the_drawn_share_at_once():
    s = Schedule(Plan(delay_ms=30, reorder=0.25), random.Random(2))
    at = [s.place(i * 0.001)[0] for i in range(2000)]
    ahead = sum(1 for i, t in enumerate(at) if t == i * 0.001)
    assert 0.2 * 2000 < ahead < 0.3 * 2000


def test_schedule_duplicate_and_loss_shares():
    s = Schedule(Plan(duplicate=0.1, loss=0.05), random.Random(3))
    placed = [s.place(0.0) for _ in range(4000)]
    lost = sum(1 for at, _ in placed if at is None)
    twice = sum(1 for at, two in placed if at is not None and two)
    assert 0.03 * 4000 < lost < 0.07 * 4000 and 0.08 * 3800 < twice < 0.12 * 3800


def test_reorder_and_duplicate_specs():
    r = build({"kind": "reorder", "name": "r", "delay_ms": 30, "p": 0.25, "queue": 4001, "target": FLOW})
    assert r.spec["direction"] == "out" and r.plan() == Plan(delay_ms=30, reorder=0.25)
    assert r.rules().out == ["-s 10.203.7.1/32 -d 10.203.7.2/32 -p tcp --sport 40000 --dport 8443 "
                             "-j NFQUEUE --queue-num 4001 --queue-bypass"]
    d = build({"kind": "duplicate", "name": "d", "p": 0.1, "queue": 4002, "target": FLOW})
    assert d.rules().out == ["-s 10.203.7.1/32 -d 10.203.7.2/32 -p tcp --sport 40000 --dport 8443 "
                             f"-m mark ! --mark {DUP_MARK:#x} -j NFQUEUE --queue-num 4002 --queue-bypass"]


@pytest.mark.parametrize("spec, words", [
    ({"kind": "reorder", "p": 0.2}, "delay_ms (how long the packets not drawn are held, > 0) is required"),
    ({"kind": "reorder", "delay_ms": 10}, "p (the share of packets sent ahead, 0 < p <= 1) is required"),
    ({"kind": "duplicate", "p": 1.5}, "p must be a probability 0 < p <= 1, got 1.5"),
    ({"kind": "duplicate", "p": 0.1, "direction": "in"}, "direction must be out"),
])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(FaultSpecError) as e:
        build({**spec, "target": FLOW})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_netem_runs_without_sch_netem_on_its_userspace_path():
    caps = Capabilities(iptables=True, nfqueue=True, nfqueue_bind=True, netem=False)
    assert unmet("netem", caps) == [] and path_of("netem", caps) == "userspace"
    assert path_of("netem", Capabilities(netem=True)) == "kernel"
    assert unmet("netem", Capabilities()) and path_of("netem", Capabilities()) is None
    assert path_of("delay", caps) is None
    f = build({"kind": "netem", "name": "n", "dev": "eth0", "delay_ms": 50, "jitter_ms": 10, "loss": 0.01,
               "duplicate": 0.02, "queue": 4003})
    assert f.rules().out == []                       # nothing before install chose a path
    f.path = "userspace"
    assert f.rules().out == [f"-o eth0 -m mark ! --mark {DUP_MARK:#x} -j NFQUEUE --queue-num 4003 --queue-bypass"]
    assert f.plan() == Plan(delay_ms=50, jitter_ms=10, loss=0.01, duplicate=0.02)
    assert REGISTRY["netem"].alternatives


class FakeQueue:
    def __init__(self):
        import socket
        self.r, self.w = socket.socketpair()
        self.pending, self.verdicts, self.lock = [], [], threading.Lock()

    def push(self, pid, payload):
        with self.lock:
            self.pending.append((pid, payload))
        self.w.send(b"x")

    def fileno(self):
        return self.r.fileno()

    def receive_stamped(self, timeout=0):
        self.r.recv(4096)
        with self.lock:
            got, self.pending = self.pending, []
        return [Packet(pid, payload, None) for pid, payload in got]

    def verdict_many(self, ids, accept=True):
        self.verdicts += [(pid, accept) for pid in ids]


def test_the_loop_drops_accepts_and_resends_copies():
    q, sent = FakeQueue(), []
    rd, wr = os.pipe()
    plan = Plan(duplicate=0.5, loss=0.2)
    th = threading.Thread(target=hold_and_release, args=(q, 0, 0, rd),
                          kwargs={"plan": plan, "rng": random.Random(4), "resend": sent.append})
    th.start()
    for i in range(200):
        q.push(i, b"pkt%d" % i)
        time.sleep(0.0005)
    deadline = time.monotonic() + 5
    while len(q.verdicts) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.close(wr)
    th.join(5)
    os.close(rd)
    dropped = {pid for pid, ok in q.verdicts if not ok}
    assert len(q.verdicts) == 200 and 20 < len(dropped) < 60
    assert sent and all(int(p[3:]) not in dropped for p in sent)      # a copy only of what went
    assert len(set(sent)) == len(sent)
