"""The held packets' release (netem/holding.py), the queue's stamps and batched verdicts, and the
worker's real-time set-up (netem/realtime.py): the pieces that make the userspace delay on time."""
import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from netem.holding import SPIN_MIN_GAP_S, SPIN_S, STAMP_MAX_AGE_S, Releases, arrival, spin_for, wait_until
from netem.nfqueue import NfQueue, Packet


def test_releases_come_out_by_time_then_by_push_order_and_only_when_due():
    r = Releases()
    r.push(2.0, 20)
    r.push(1.0, 10, b"copy")
    r.push(2.0, 21)
    r.push(3.0, 30)
    assert r.next_at() == 1.0 and len(r) == 4
    assert r.due(0.5) == []
    assert r.due(2.0) == [(10, b"copy"), (20, None), (21, None)]     # a tie keeps the push order
    assert r.next_at() == 3.0
    assert r.all() == [(30, None)] and len(r) == 0 and r.next_at() is None


@pytest.mark.parametrize("spin", [SPIN_S, 0.0])
def test_wait_until_returns_at_the_deadline_never_before_and_soon_after(spin):
    a, b = socket.socketpair()
    try:
        lates = []
        for _ in range(20):
            deadline = time.monotonic() + 0.005
            assert wait_until([a], deadline, spin_s=spin) == []
            lates.append(time.monotonic() - deadline)
        assert min(lates) >= 0                                         # never early
        assert sorted(lates)[len(lates) // 2] < 0.005                  # not one more coarse sleep
    finally:
        a.close()
        b.close()


def test_wait_until_hands_back_a_readable_fd_before_the_deadline():
    a, b = socket.socketpair()
    try:
        b.send(b"x")
        t = time.monotonic()
        assert wait_until([a], t + 5.0) == [a]
        assert time.monotonic() - t < 1.0
        # inside the spin window too: a packet is read, not left waiting behind the spin
        assert wait_until([a], time.monotonic() + SPIN_S / 2) in ([a], [])
    finally:
        a.close()
        b.close()


def test_the_spin_is_for_releases_apart_not_for_a_dense_flow():
    assert spin_for(None, 0.0) == 0.0                               # nothing held: no deadline
    assert spin_for(10.0, float("-inf")) == SPIN_S                  # the first release
    assert spin_for(10.0, 10.0 - SPIN_MIN_GAP_S) == SPIN_S
    assert spin_for(10.0, 10.0 - SPIN_MIN_GAP_S / 2) == 0.0         # right after another one
    assert SPIN_S <= 200e-6 and SPIN_S / SPIN_MIN_GAP_S <= 0.1       # the bound: <= 10 % of a core


def test_arrival_takes_the_kernel_stamp_on_either_clock_and_ignores_an_implausible_one():
    mono_now, wall_now = 1000.0, 1.8e9
    clock, wall, mono = (lambda: mono_now), (lambda: wall_now), (lambda: mono_now)
    read_at = mono_now
    assert arrival(None, read_at, clock, wall, mono) == read_at
    assert arrival(wall_now - 0.004, read_at, clock, wall, mono) == pytest.approx(mono_now - 0.004)  # CLOCK_REALTIME
    assert arrival(mono_now - 0.002, read_at, clock, wall, mono) == pytest.approx(mono_now - 0.002)  # TCP's EDT stamp
    assert arrival(wall_now + 1, read_at, clock, wall, mono) == read_at                # in the future
    assert arrival(wall_now - STAMP_MAX_AGE_S - 1, read_at, clock, wall, mono) == read_at  # too old
    assert arrival(5.0, read_at, clock, wall, mono) == read_at                         # neither clock


def _packet_msg(packet_id: int, stamp: tuple[int, int] | None) -> bytes:
    attrs = struct.pack("=HH", 4 + 7, 1) + struct.pack("!IHB", packet_id, 0x0800, 3) + b"\0"
    if stamp:
        attrs += struct.pack("=HH", 4 + 16, 4) + struct.pack("!QQ", *stamp)
    body = bytes([2, 0]) + struct.pack("!H", 4242) + attrs
    return struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body


def test_a_packet_message_yields_its_nfqa_timestamp_when_it_has_one():
    buf = _packet_msg(7, (1_800_000_000, 250_000)) + _packet_msg(8, None)
    got = [NfQueue._packet(d) for _k, _s, d in NfQueue._messages(buf)]
    assert got == [[Packet(7, None, 1_800_000_000.25)], [Packet(8, None, None)]]


class SendSock:
    def __init__(self):
        self.sent = []

    def send(self, data):
        self.sent.append(data)


def test_verdicts_due_together_go_in_one_send_one_message_each():
    q = NfQueue.__new__(NfQueue)       # no real socket: the wire format only
    q.queue, q._seq, q.sock = 4242, 0, SendSock()
    q.verdict_many([5, 3, 9], accept=False)
    q.verdict_many([])
    assert len(q.sock.sent) == 1                                     # one system call, none for nothing
    buf = q.sock.sent[0]
    msgs = list(NfQueue._messages(buf))
    assert [(kind, seq) for kind, seq, _ in msgs] == [((3 << 8) | 1, 1), ((3 << 8) | 1, 2), ((3 << 8) | 1, 3)]
    assert [struct.unpack_from("!II", d, 8) for _k, _s, d in msgs] == [(0, 5), (0, 3), (0, 9)]  # DROP, in order


def test_become_realtime_is_fifo_where_permitted_or_says_why_not():
    # in a child: the test process itself must stay an ordinary one
    code = ("import gc, json, os; from netem.realtime import become_realtime; "
            "fifo, notes = become_realtime(lock_memory=False); "
            "print(json.dumps([fifo, notes, os.sched_getscheduler(0) == os.SCHED_FIFO, gc.isenabled()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    fifo, notes, is_fifo, gc_on = json.loads(out.stdout)
    assert fifo == is_fifo and not gc_on
    assert fifo or any("no SCHED_FIFO" in n for n in notes)


def test_a_refused_sched_fifo_is_one_note_and_the_process_runs_on_ordinary():
    code = ("import json, os\n"
            "def refuse(*a):\n    raise PermissionError(1, 'Operation not permitted')\n"
            "os.sched_setscheduler = refuse\n"
            "import netem.realtime\n"
            "netem.realtime.hold_zero_wakeup_latency = lambda: None\n"   # its own test is below
            "from netem.realtime import become_realtime\n"
            "print(json.dumps(become_realtime(lock_memory=False)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    fifo, notes = json.loads(out.stdout)
    assert fifo is False
    assert notes == ["no SCHED_FIFO (Operation not permitted): an ordinary process, wake-ups wait behind other work"]


def test_the_zero_wakeup_latency_request_is_written_once_and_held_or_said_why_not(tmp_path, monkeypatch):
    from netem import realtime
    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    monkeypatch.setattr(realtime, "PM_QOS_DEVICE", str(dev))
    monkeypatch.setattr(realtime, "_pm_qos_fd", None)
    try:
        assert realtime.hold_zero_wakeup_latency() is None
        fd = realtime._pm_qos_fd
        assert fd is not None and os.fstat(fd)                  # held open: closing would drop it
        assert realtime.hold_zero_wakeup_latency() is None and realtime._pm_qos_fd == fd   # once
        assert dev.read_bytes() == (0).to_bytes(4, "little")    # the kernel reads a 32-bit latency in us
    finally:
        if realtime._pm_qos_fd is not None:
            os.close(realtime._pm_qos_fd)
    monkeypatch.setattr(realtime, "_pm_qos_fd", None)
    monkeypatch.setattr(realtime, "PM_QOS_DEVICE", str(tmp_path / "missing"))
    note = realtime.hold_zero_wakeup_latency()
    assert note.startswith(f"no {tmp_path / 'missing'}") and realtime._pm_qos_fd is None
