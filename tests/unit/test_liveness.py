"""The reference client's loss detector (lab.clients.liveness): pure, no sockets but one."""
import socket
import struct

from lab.clients.liveness import LOST, OK, SUSPECT, Detector, TcpView, parse_tcp_info, read_tcp

DET = Detector(suspect_after_s=0.4, lost_after_s=1.0, stall_after_s=4.0, suspect_rtos=2.0, lost_rtos=5.0)
LOOPBACK = 0.2       # the kernel's RTO floor: the lab's namespaces
JITTERY = 0.9        # srtt + 4 rttvar on a path with 300 ms of jitter


def dead(rto, ack_silent):
    return TcpView(unacked=1, ack_silent_s=ack_silent, rto_s=rto, backoff=2)


def test_dead_loopback_path_is_suspected_then_lost_on_the_floors():
    assert DET.judge(0.3, dead(LOOPBACK, 0.3)) == OK
    assert DET.judge(0.45, dead(LOOPBACK, 0.45)) == SUSPECT
    assert DET.judge(1.0, dead(LOOPBACK, 1.0)) == LOST


def test_a_segment_lost_twice_on_a_jittery_path_is_not_a_loss():
    # a double loss stalls about 3 RTO + one round trip + a ping interval: below 5 RTO
    stall = 3 * JITTERY + 0.6 + 0.25
    assert DET.judge(stall, dead(JITTERY, stall)) == SUSPECT
    assert DET.judge(5 * JITTERY, dead(JITTERY, 5 * JITTERY)) == LOST


def test_a_single_loss_on_a_jittery_path_is_not_even_suspected():
    stall = JITTERY + 0.6 + 0.25           # RTO, then the retransmission's round trip
    assert DET.judge(stall, dead(JITTERY, stall)) == OK


def test_silence_with_tcp_acking_is_a_loss_only_after_the_stall_limit():
    acking = TcpView(unacked=0, ack_silent_s=0.1, rto_s=LOOPBACK, backoff=0)
    assert DET.judge(3.9, acking) == OK     # slow pongs: the path is fine
    assert DET.judge(4.0, acking) == LOST   # a server stalled on a live socket


def test_without_tcp_info_the_silence_rule_stands():
    assert DET.judge(0.99, None) == OK
    assert DET.judge(1.0, None) == LOST


def test_parse_tcp_info_takes_the_rto_without_backoff():
    raw = bytearray(104)
    raw[4] = 2                                              # backoff
    struct.pack_into("=I", raw, 8, 800_000)                 # rto with backoff 2: 4 x 200 ms
    struct.pack_into("=I", raw, 24, 3)                      # unacked
    struct.pack_into("=I", raw, 56, 1234)                   # last ack, ms ago
    struct.pack_into("=II", raw, 68, 50, 10)                # rtt, rttvar (us)
    v = parse_tcp_info(bytes(raw))
    assert v == TcpView(unacked=3, ack_silent_s=1.234, rto_s=0.2, backoff=2, rtt_s=50e-6)
    assert parse_tcp_info(b"\0" * 20) is None


def test_read_tcp_on_a_real_socket_and_on_none():
    assert read_tcp(None) is None
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        v = read_tcp(cli)
        assert v is not None and v.unacked == 0 and v.rto_s >= 0.2
    finally:
        for s in (cli, peer, srv):
            s.close()


def test_a_long_gap_since_the_last_ack_with_a_fresh_ping_is_not_a_loss():
    # the client's loop was busy 0.7 s (no ping out), then a ping went into a 600 ms delay
    tcp = dead(LOOPBACK, 1.05)
    assert DET.judge(1.05, tcp) == LOST                                        # the last ack alone
    assert DET.judge(1.05, tcp, outstanding_s=0.35, ping_interval_s=0.25) == SUSPECT
    assert DET.judge(1.05, tcp, outstanding_s=0.8, ping_interval_s=0.25) == LOST  # a dead path
