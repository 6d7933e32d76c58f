"""The delay kind without a kernel: its spec, its exact rules, the worker's hold-and-release loop
(over a fake queue on a socketpair), and the nfnetlink_queue messages it speaks."""
import errno
import os
import random
import socket
import struct
import threading
import time

import pytest

from netem.errors import FaultSpecError, NetemError
from netem.faults import build
from netem.kinds.delay import QUEUE_BASE, QUEUE_SPAN, Delay, hold_and_release
from netem.nfqueue import NfQueue, Packet

FLOW = {"src": "10.203.7.1", "sport": 40000, "dst": "10.203.7.2", "dport": 8443}
OUT = "-s 10.203.7.1/32 -d 10.203.7.2/32 -p tcp --sport 40000 --dport 8443"
IN = "-s 10.203.7.2/32 -d 10.203.7.1/32 -p tcp --sport 8443 --dport 40000"


def test_defaults_out_only_no_jitter_and_a_queue_of_its_own_by_name():
    f = build({"kind": "delay", "name": "d1", "delay_ms": 80, "target": FLOW})
    assert f.spec["direction"] == "out" and f.spec["jitter_ms"] == 0
    q = f.spec["queue"]
    assert QUEUE_BASE <= q < QUEUE_BASE + QUEUE_SPAN
    assert build({"kind": "delay", "name": "d1", "delay_ms": 5, "target": FLOW}).spec["queue"] == q
    assert build({"kind": "delay", "name": "d2", "delay_ms": 5, "target": FLOW}).spec["queue"] != q
    assert f.lives_with_owner and not f.cuts_path


def test_rules_send_the_target_to_its_queue_with_bypass_and_log_nothing():
    f = build({"kind": "delay", "name": "d", "delay_ms": 50, "queue": 4242, "direction": "both", "target": FLOW})
    r = f.rules()
    assert r.out == [f"{OUT} -j NFQUEUE --queue-num 4242 --queue-bypass"]
    assert r.in_ == [f"{IN} -j NFQUEUE --queue-num 4242 --queue-bypass"]
    assert r.chains == {}


@pytest.mark.parametrize("extra, words", [
    ({}, "delay_ms (milliseconds each packet is held, > 0) is required"),
    ({"delay_ms": 0}, "delay_ms must be a number of milliseconds > 0"),
    ({"delay_ms": -5}, "delay_ms must be a number of milliseconds > 0"),
    ({"delay_ms": 90000}, "(and <= 60000), got 90000"),
    ({"delay_ms": "50"}, "delay_ms must be a number"),
    ({"delay_ms": 50, "jitter_ms": 60}, "jitter_ms must be milliseconds 0..delay_ms (50), got 60"),
    ({"delay_ms": 50, "queue": 70000}, "queue must be an NFQUEUE number 0..65535 for this fault's own worker"),
    ({"delay_ms": 50, "rate": "1mbit"}, "unknown field(s) ['rate']"),
])
def test_bad_delay_specs_name_the_key(extra, words):
    with pytest.raises(FaultSpecError) as e:
        build({"kind": "delay", "target": FLOW, **extra})
    assert words in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ the worker's loop

class FakeQueue:
    """receive() hands out the ids pushed since; the socketpair makes select() see them."""

    def __init__(self):
        self.r, self.w = socket.socketpair()
        self.pending, self.verdicts = [], []
        self.lock = threading.Lock()

    def push(self, *ids):
        with self.lock:
            self.pending += ids
        self.w.send(b"x")

    def fileno(self):
        return self.r.fileno()

    def receive(self, timeout=0):
        self.r.recv(4096)
        with self.lock:
            ids, self.pending = self.pending, []
        return ids

    def receive_stamped(self, timeout=0):
        return [Packet(pid, None, None) for pid in self.receive(timeout)]

    def verdict_many(self, ids, accept=True):
        for pid in ids:
            self.verdict(pid, accept)

    def verdict(self, packet_id, accept=True):
        self.verdicts.append((time.monotonic(), packet_id))


def _run(q, delay_ms, jitter_ms=0.0, rng=None):
    rd, wr = os.pipe()
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("n", hold_and_release(q, delay_ms, jitter_ms, rd, rng=rng)))
    th.start()
    return th, wr, rd, out


def test_each_packet_is_held_at_least_its_delay_and_leaves_in_arrival_order():
    q = FakeQueue()
    th, wr, rd, out = _run(q, 30, 20, rng=random.Random(7))
    sent = {}
    for i in range(1, 21):
        sent[i] = time.monotonic()
        q.push(i)
        time.sleep(0.002)
    deadline = time.monotonic() + 10
    while len(q.verdicts) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.close(wr)
    th.join(5)
    os.close(rd)
    assert [pid for _, pid in q.verdicts] == list(range(1, 21))         # never reordered, even with jitter
    assert all(t - sent[pid] >= 0.010 for t, pid in q.verdicts)         # >= delay - jitter, never early
    assert out["n"] == 20


def test_end_of_the_lifeline_releases_everything_still_held_at_once():
    q = FakeQueue()
    th, wr, rd, out = _run(q, 10_000)
    q.push(1, 2, 3)
    time.sleep(0.05)
    assert q.verdicts == []
    t0 = time.monotonic()
    os.close(wr)
    th.join(5)
    os.close(rd)
    assert not th.is_alive() and time.monotonic() - t0 < 2
    assert [pid for _, pid in q.verdicts] == [1, 2, 3] and out["n"] == 3


# ------------------------------------------------------------------------------ nfnetlink_queue wire

class FakeSock:
    def __init__(self, replies=()):
        self.sent, self.replies = [], list(replies)

    def send(self, data):
        self.sent.append(data)

    def recv(self, n, flags=0):
        return self.replies.pop(0)

    def close(self):
        pass


def _queue(sock, queue=4242) -> NfQueue:
    q = NfQueue.__new__(NfQueue)   # no real socket: the wire format only
    q.queue, q._seq, q.sock, q._early = queue, 0, sock, []
    return q


def test_a_verdict_is_one_nfqueue_message_for_that_queue_and_id():
    s = FakeSock()
    _queue(s).verdict(0x01020304)
    msg = s.sent[0]
    length, kind, flags, seq, pid = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq, pid) == (len(msg), (3 << 8) | 1, 1, 1, 0)
    assert msg[16:20] == bytes([socket.AF_UNSPEC, 0]) + struct.pack("!H", 4242)
    assert msg[20:] == struct.pack("=HH", 12, 2) + struct.pack("!II", 1, 0x01020304)


def _packet_msg(packet_id: int) -> bytes:
    hdr = struct.pack("!IHB", packet_id, 0x0800, 3) + b"\0"      # NFQA_PACKET_HDR, padded
    body = bytes([2, 0]) + struct.pack("!H", 4242) + struct.pack("=HH", 4 + 7, 1) + hdr
    return struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body


def _error_msg(seq: int, err: int) -> bytes:
    body = struct.pack("=i", -err) + b"\0" * 16
    return struct.pack("=IHHII", 16 + len(body), 2, 0, seq, 0) + body


def test_packet_ids_are_read_from_a_buffer_of_several_messages():
    buf = _packet_msg(7) + _packet_msg(8)
    assert [NfQueue._packet(d) for _k, _s, d in NfQueue._messages(buf)] == [[(7, None, None)], [(8, None, None)]]


def test_config_waits_for_its_ack_keeps_early_packets_and_names_a_refusal():
    s = FakeSock([_packet_msg(5) + _error_msg(1, 0)])
    q = _queue(s)
    q._config(b"")
    assert q._early == [(5, None, None)]
    with pytest.raises(NetemError, match=r"^nfqueue 4242: refused \(EPERM\): another listener holds this queue, "
                                         r"or no CAP_NET_ADMIN here$"):
        _queue(FakeSock([_error_msg(1, errno.EPERM)]))._config(b"")
    with pytest.raises(NetemError, match="the kernel refused the config: Invalid argument"):
        _queue(FakeSock([_error_msg(1, errno.EINVAL)]))._config(b"")


def test_uninstall_before_install_is_quiet():
    f = Delay({"kind": "delay", "delay_ms": 5, "target": FLOW})
    assert f.worker_pid is None
    f.uninstall(None)   # nothing installed: quiet
