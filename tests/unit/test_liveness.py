"""The reference client's loss detector (lab.clients.liveness): pure, no sockets but one."""
import dataclasses
import socket
import struct

from lab.clients.liveness import LOST, OK, SUSPECT, Detector, TcpView, parse_tcp_info, read_tcp, unanswered

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
    raw[1] = 4                                              # ca_state: TCP_CA_Loss
    raw[4] = 2                                              # backoff
    struct.pack_into("=I", raw, 8, 800_000)                 # rto with backoff 2: 4 x 200 ms
    struct.pack_into("=I", raw, 24, 3)                      # unacked
    struct.pack_into("=I", raw, 56, 1234)                   # last ack, ms ago
    struct.pack_into("=II", raw, 68, 50, 10)                # rtt, rttvar (us)
    v = parse_tcp_info(bytes(raw))
    assert v == TcpView(unacked=3, ack_silent_s=1.234, rto_s=0.2, backoff=2, rtt_s=50e-6, rttvar_s=10e-6,
                        backing_off=True)
    assert abs(v.path_rto_s - 90e-6) < 1e-12
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


# ---- the pings as probes (`pings`: ages of the client's recent pings TCP sent at once) -----------
PROBING = Detector(suspect_after_s=0.1, lost_after_s=0.8, stall_after_s=4.0, suspect_rtos=2.0, lost_rtos=4.0,
                   lost_probes=3, probed_lost_after_s=0.35)


def fast(ack_silent, unacked, rtt=0.004, rttvar=0.002):
    """The lab's namespaces: a round trip of a few ms, TCP's RTO on the kernel's 200 ms floor."""
    return TcpView(unacked=unacked, ack_silent_s=ack_silent, rto_s=0.2, backoff=0, rtt_s=rtt, rttvar_s=rttvar)


def test_a_ping_unanswered_a_moment_asks_for_probes():
    # the last ack came with the previous pong 0.25 s ago (answered: not counted); the ping since waits
    assert not PROBING.wants_probes(fast(0.29, 1), [0.29 + 0.25, 0.04])
    assert PROBING.wants_probes(fast(0.31, 1), [0.31 + 0.25, 0.06])
    assert not PROBING.wants_probes(None, [0.06])
    # on a jittery path the wait scales with the path's own RTO (0.3 + 4 x 0.15 s)
    slow = TcpView(unacked=1, ack_silent_s=1.0, rto_s=JITTERY, backoff=0, rtt_s=0.3, rttvar_s=0.15)
    assert not PROBING.wants_probes(slow, [0.6])


def test_two_unanswered_pings_are_suspected_long_before_the_silence_rule():
    # the ping has waited 0.09 s, then 0.11 s; a probe followed it 0.05 s later
    assert PROBING.judge(0.34, fast(0.34, 2), pings=[0.34 + 0.25, 0.09, 0.04]) == OK
    assert PROBING.judge(0.36, fast(0.36, 2), pings=[0.36 + 0.25, 0.11, 0.06]) == SUSPECT
    assert PROBING.judge(0.36, fast(0.36, 2)) == OK              # without the pings: the old rule's 0.4 s
    # the probe only just sent: its answer (a delayed ACK at most) may still come
    assert PROBING.judge(0.36, fast(0.36, 2), pings=[0.36 + 0.25, 0.11, 0.03]) == OK


def test_a_single_lost_ping_is_not_suspected_the_probe_after_it_is_acknowledged():
    # a fast path loses one ping: it stays unanswered until TCP's 200 ms RTO, but the probe sent
    # 0.05 s after it arrives and is SACKed at once, so nothing is waiting since that ACK
    assert PROBING.judge(0.15, fast(0.09, 2), pings=[0.4, 0.15, 0.1]) == OK
    # alone (no probe out yet), it is only waited on
    assert PROBING.judge(0.15, fast(0.15, 1), pings=[0.4, 0.15]) == OK


SPARE_UP = 0.25      # the spare session, begun at the suspicion 0.25 s ago, is set up


def test_three_probes_past_tcps_rto_are_a_loss_two_are_not():
    # ping at 0, probes at 0.125 and 0.15 (every 0.025 s once suspected); now is 0.36 after the first
    pings = [0.36, 0.235, 0.21]
    assert PROBING.judge(0.6, fast(0.6, 3), pings=pings, answered_since_s=SPARE_UP) == LOST
    assert PROBING.judge(0.6, fast(0.6, 3), pings=pings[:2], answered_since_s=SPARE_UP) == SUSPECT
    # the newest not yet past TCP's own RTO: its answer may still come
    assert PROBING.judge(0.6, fast(0.6, 3), pings=[0.36, 0.235, 0.19], answered_since_s=SPARE_UP) == SUSPECT


def test_the_oldest_probe_must_have_waited_the_floor():
    # three probes past the RTO but the oldest only 0.3 s
    assert PROBING.judge(0.55, fast(0.55, 3), pings=[0.3, 0.25, 0.21], answered_since_s=0.2) == SUSPECT
    assert PROBING.judge(0.6, fast(0.6, 3), pings=[0.35, 0.3, 0.26], answered_since_s=0.2) == LOST


def test_a_delay_step_is_no_loss_until_the_path_carries_a_later_round_trip():
    # the path's delay jumps from 5 ms to up to 600 ms: three probes unanswered past the old RTO
    pings = [0.37, 0.25, 0.225]
    assert PROBING.judge(0.6, fast(0.6, 3), pings=pings) == SUSPECT                          # no spare up
    assert PROBING.judge(0.6, fast(0.6, 3), pings=pings, answered_since_s=0.5) == SUSPECT    # begun before them
    # a spare begun after the oldest probe has been answered: the path is not what holds them
    assert PROBING.judge(0.6, fast(0.6, 3), pings=pings, answered_since_s=0.3) == LOST


def test_a_live_path_acknowledges_a_later_probe_so_the_lost_ping_counts_no_more():
    # the first ping was lost; the second got through and was SACKed 0.02 s ago: only the third waits
    assert PROBING.judge(0.5, fast(0.02, 2), pings=[0.4, 0.2, 0.01]) == OK


def test_probes_count_after_tcp_merged_them_into_one_segment():
    # TCP's timeout retransmitted the four pings as one segment (unacked 1): still four unanswered
    assert PROBING.judge(0.6, fast(0.6, 1), pings=[0.45, 0.3, 0.25, 0.22], answered_since_s=SPARE_UP) == LOST


def test_on_a_jittery_path_the_limits_scale_with_its_own_rto():
    slow = TcpView(unacked=3, ack_silent_s=1.2, rto_s=JITTERY, backoff=0, rtt_s=0.3, rttvar_s=0.15)
    # a ping held 0.6 s is not even suspected: 2 x (srtt + 4 rttvar) = 1.8 s
    assert PROBING.judge(0.7, slow, pings=[0.6, 0.35, 0.1]) == OK
    # three pings each unanswered past the 0.9 s RTO: lost or their acknowledgements lost, all three
    assert PROBING.judge(1.6, dataclasses.replace(slow, ack_silent_s=1.6), pings=[1.45, 1.2, 0.95],
                         answered_since_s=1.0) == LOST


def test_without_lost_probes_the_pings_only_make_the_suspicion_earlier():
    det = Detector(suspect_after_s=0.1, lost_after_s=0.8, lost_rtos=4.0)     # lost_probes 0: off
    assert det.judge(0.6, fast(0.6, 3), pings=[0.5, 0.4, 0.3], answered_since_s=0.35) == SUSPECT
    assert det.judge(0.9, fast(0.9, 3), pings=[0.85, 0.6, 0.3]) == LOST      # the old rule's 0.8 s


def test_unanswered_keeps_the_pings_since_the_last_ack_oldest_first():
    assert unanswered([0.1, 0.5, 0.3, 0.9], fast(0.6, 1)) == [0.5, 0.3, 0.1]
    assert unanswered([0.1, 0.5], fast(0.6, 0)) == []
    assert unanswered([], fast(0.6, 4)) == []


def test_a_ping_answered_within_a_tick_of_the_ack_clock_is_not_unanswered():
    # the previous ping (0.262 s ago) was answered 3 ms later, but tcpi_last_ack_recv reads in 4 ms
    # ticks and says 0.264 s: that ping is not one sent after the last ACK, only the new one is
    assert unanswered([0.262, 0.012], fast(0.264, 1)) == [0.012]
    assert PROBING.judge(0.264, fast(0.264, 1), pings=[0.262, 0.012]) == OK
