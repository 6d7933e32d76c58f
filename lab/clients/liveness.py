"""Is a silent connection dead? A loss detector that asks the kernel's TCP as a witness.

Why: application silence alone cannot tell a dead path from a slow one. On a healthy path with
300 ms of jitter and 1 % loss every lost segment stalls the stream for a retransmission timeout
(RTO, about srtt + 4 rttvar: near 1 s there), so a fixed "1 s without a frame" rule fires dozens
of times in ten minutes; and a server whose pongs come late (l2-slow-pongs) is silent while its TCP
acknowledges every ping. The kernel knows which it is (`TCP_INFO`): on a dead path the ping stays
unacknowledged (`tcpi_unacked`) and nothing is acked for several RTOs (`tcpi_last_ack_recv`); on
a healthy lossy path the retransmission is acknowledged about one RTO after the loss.

The limits scale with the connection's own RTO, so they are short where the path is fast (the
lab's namespaces: RTO is the kernel's 200 ms floor) and long where it is slow:

    ok       heard within `suspect_after`, or TCP has acknowledged something recently
    suspect  silent, and nothing acked for max(suspect_after_s, suspect_rtos x RTO) with data
             outstanding. A single lost segment stalls about RTO + RTT (< 2 RTO), so a healthy
             lossy path rarely gets here; the client may prepare (a spare session, a resume
             attempt) but keeps the session it has.
    lost     the same for max(lost_after_s, lost_rtos x RTO). A segment lost twice in a row
             stalls about 3 RTO + RTT (< 4 RTO + one ping interval): 5 RTOs leave room for it, so
             only three losses of one segment in a row (1e-6 per segment at 1 %) can fool it.
             Or silent for max(stall_after_s, 2 x that limit) whatever TCP says: a server that
             stopped answering on a live socket (l3-stall) is still a loss.

The client's own pings, when it gives their send times, make both verdicts sooner where the path
is fast (the lab's namespaces, where the limits above sit on the kernel's 200 ms floor):

    probe    the oldest ping sent since TCP's last ACK has waited max(probe_after_s, the path's
             own RTO: srtt + 4 rttvar, without the kernel's 200 ms floor): the client pings
             every `probe_interval_s` until it is answered (`wants_probes`).
    suspect  that ping has waited max(suspect_after_s, suspect_rtos x the path's own RTO), and a
             later one has waited max(the path's own RTO, a delayed ACK: 40 ms, Linux's
             TCP_DELACK_MIN) too. On a live path a later ping that arrives is acknowledged at once
             (a SACK, the earlier one missing), so a single lost ping, which on a fast path stays
             unanswered for TCP's whole 200 ms RTO, is not suspected: two in a row must be lost.
             A false suspicion costs a spare session and a resume attempt, not the session.
    lost     `lost_probes` pings sent since the last ACK, each unanswered for longer than TCP's own
             RTO, the oldest for at least `probed_lost_after_s`, AND another connection to the
             same endpoint, begun after the oldest of them was sent, has been answered (the
             spare session the suspicion opened). Each ping is a segment of its own, and on a
             live path any one of them that gets through is acknowledged (a SACK when an earlier
             one is missing), so three unanswered are three losses (or three lost
             acknowledgements) in a row, as the rule above, but side by side rather than at TCP's
             doubling retransmission timeouts. That alone cannot tell a dead path from one whose
             delay just jumped past TCP's RTO (a 600 ms step on a 5 ms path: seen in `lab bench
             false-alarms`); the other connection can: the path carried a round trip begun after
             the probes, so its delay is not what keeps them unanswered. Only pings sent while
             TCP was not backing off count (after a retransmission timeout the kernel holds new
             segments back: the caller leaves those out). The probes are out before TCP's own
             timeout.

Without TCP_INFO (another OS, a socket not yet there) the rule is the old one: silent for
`lost_after_s` is a loss. `judge` and `unanswered` are pure; `read_tcp(sock)` is the one system call.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Sequence

OK, SUSPECT, LOST = "ok", "suspect", "lost"

# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s; the ones read here and their offsets
_TCP_INFO_LEN = 104
_CA_STATE_AT = 1         # tcpi_ca_state (u8): TCP_CA_Loss while recovering from a retransmission timeout
_TCP_CA_LOSS = 4
_BACKOFF_AT = 4          # tcpi_backoff (u8)
_RTO_AT = 8              # tcpi_rto, microseconds (includes the current backoff)
_UNACKED_AT = 24         # tcpi_unacked, segments
_LAST_ACK_RECV_AT = 56   # tcpi_last_ack_recv, milliseconds since the last ACK came in
_RTT_AT, _RTTVAR_AT = 68, 72   # tcpi_rtt, tcpi_rttvar, microseconds
TCP_RTO_MIN_S = 0.2      # Linux's floor on the RTO (TCP_RTO_MIN)
# tcpi_last_ack_recv counts kernel ticks (4 ms at HZ=250, 10 ms at HZ=100), so it may read a tick
# long: a ping answered within a tick would look sent after its own ACK without this margin
ACK_CLOCK_S = 0.01
DELAYED_ACK_S = 0.04     # Linux's TCP_DELACK_MIN: how long a peer on a fast path may hold an ACK


@dataclass(frozen=True)
class TcpView:
    """What the kernel says about one TCP connection, at one moment."""
    unacked: int             # segments sent and not yet acknowledged
    ack_silent_s: float      # since the last ACK arrived
    rto_s: float             # the RTO without backoff: what one retransmission round costs now
    backoff: int             # retransmission timeouts in a row for the head segment
    rtt_s: float = 0.0       # the smoothed RTT (tcpi_rtt): what the path itself costs a round trip
    rttvar_s: float = 0.0    # its mean deviation (tcpi_rttvar)
    backing_off: bool = False  # in TCP_CA_Loss: after a retransmission timeout, new segments wait

    @property
    def path_rto_s(self) -> float:
        """srtt + 4 rttvar (RFC 6298) without the kernel's 200 ms floor: how long a live path takes
        to answer, delayed ACKs aside."""
        return self.rtt_s + 4 * self.rttvar_s


def parse_tcp_info(raw: bytes) -> TcpView | None:
    """A TcpView from the bytes of getsockopt(TCP_INFO); None when they are too short."""
    if len(raw) < _RTTVAR_AT + 4:
        return None
    backoff = raw[_BACKOFF_AT]
    rto_us, = struct.unpack_from("=I", raw, _RTO_AT)
    unacked, = struct.unpack_from("=I", raw, _UNACKED_AT)
    last_ack_ms, = struct.unpack_from("=I", raw, _LAST_ACK_RECV_AT)
    rtt_us, rttvar_us = struct.unpack_from("=II", raw, _RTT_AT)
    # tcpi_rto doubles at each backoff; the RTO the path itself earns is srtt + 4 rttvar (RFC 6298)
    base = max(TCP_RTO_MIN_S, (rtt_us + 4 * rttvar_us) / 1e6, (rto_us >> min(backoff, 16)) / 1e6)
    return TcpView(unacked=unacked, ack_silent_s=last_ack_ms / 1000.0, rto_s=base, backoff=backoff,
                   rtt_s=rtt_us / 1e6, rttvar_s=rttvar_us / 1e6, backing_off=raw[_CA_STATE_AT] == _TCP_CA_LOSS)


def read_tcp(sock: object) -> TcpView | None:
    """The kernel's view of `sock` (a socket or asyncio's TransportSocket); None where there is none."""
    if sock is None or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN))
    except (OSError, AttributeError, ValueError):
        return None


@dataclass(frozen=True)
class Detector:
    """The limits (client parameters of the same names)."""
    suspect_after_s: float = 0.4
    lost_after_s: float = 1.0
    stall_after_s: float = 4.0
    suspect_rtos: float = 2.0
    lost_rtos: float = 5.0
    lost_probes: int = 0                 # 0: the pings' own rule for a loss is off
    probed_lost_after_s: float = 0.35
    probe_after_s: float = 0.05

    def wants_probes(self, tcp: TcpView | None, pings: Sequence[float]) -> bool:
        """A ping has waited long enough for an answer that more should follow it (pure)."""
        if tcp is None:
            return False
        waiting = unanswered(pings, tcp)
        return bool(waiting) and waiting[0] >= max(self.probe_after_s, tcp.path_rto_s)

    def limits(self, tcp: TcpView | None) -> tuple[float, float, float]:
        """(suspect, lost, stall) limits in seconds for this connection now."""
        rto = tcp.rto_s if tcp is not None else 0.0
        lost = max(self.lost_after_s, self.lost_rtos * rto)
        return max(self.suspect_after_s, self.suspect_rtos * rto), lost, max(self.stall_after_s, 2 * lost)

    def judge(self, silent_s: float, tcp: TcpView | None, outstanding_s: float | None = None,
              ping_interval_s: float = 0.0, pings: Sequence[float] | None = None,
              answered_since_s: float | None = None) -> str:
        """OK, SUSPECT or LOST for a connection silent `silent_s` (no frame, no pong).

        `outstanding_s`: how long TCP has had data unacknowledged (the caller watches `unacked`).
        The time since the last ACK alone overstates it when nothing was sent for a while (the
        client's loop busy, no ping out): a ping is at most one `ping_interval_s` behind the last
        ack, so the witness is min(time since the last ack, outstanding + one interval).
        `pings`: how long ago the client sent each of its recent pings that TCP sent at once (not
        backing off); None when the caller does not track them (the rules above alone).
        `answered_since_s`: another connection to the same endpoint, begun this long ago, has
        been answered since (None: none has).
        """
        if tcp is None:
            return LOST if silent_s >= self.lost_after_s else OK
        suspect, lost, stall = self.limits(tcp)
        if silent_s >= stall:
            return LOST
        # TCP's verdict: data outstanding and nothing acknowledged for that long
        dead_for = tcp.ack_silent_s if tcp.unacked > 0 else 0.0
        if outstanding_s is not None:
            dead_for = min(dead_for, outstanding_s + ping_interval_s)
        if silent_s >= lost and dead_for >= lost:
            return LOST
        if pings is not None:
            waiting = unanswered(pings, tcp)
            oldest = waiting[0] if waiting else 0.0
            timed_out = sum(1 for a in waiting if a >= tcp.rto_s)
            path_carries = answered_since_s is not None and answered_since_s < oldest
            if (self.lost_probes > 0 and timed_out >= self.lost_probes and path_carries
                    and min(oldest, silent_s) >= self.probed_lost_after_s):
                return LOST
            early = max(self.suspect_after_s, self.suspect_rtos * tcp.path_rto_s)
            answer = max(DELAYED_ACK_S, tcp.path_rto_s)
            if min(oldest, silent_s) >= early and sum(1 for a in waiting if a >= answer) >= 2:
                return SUSPECT
        if silent_s >= suspect and dead_for >= suspect:
            return SUSPECT
        return OK


def unanswered(pings: Sequence[float], tcp: TcpView) -> list[float]:
    """The ages of the pings sent since TCP's last ACK (by more than the ACK clock's tick), oldest
    first: each went out as a segment the peer has not answered; none when TCP has nothing
    unacknowledged. `tcp.unacked` is no count of them: a retransmission merges small segments
    (tcp_retrans_collapse), so four unanswered pings may be one segment after TCP's timeout."""
    if tcp.unacked <= 0:
        return []
    return sorted((a for a in pings if 0 <= a < tcp.ack_silent_s - ACK_CLOCK_S), reverse=True)
