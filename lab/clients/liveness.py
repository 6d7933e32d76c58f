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

Without TCP_INFO (another OS, a socket not yet there) the rule is the old one: silent for
`lost_after_s` is a loss. `judge` is pure; `read_tcp(sock)` is the one system call.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

OK, SUSPECT, LOST = "ok", "suspect", "lost"

# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s; the ones read here and their offsets
_TCP_INFO_LEN = 104
_BACKOFF_AT = 4          # tcpi_backoff (u8)
_RTO_AT = 8              # tcpi_rto, microseconds (includes the current backoff)
_UNACKED_AT = 24         # tcpi_unacked, segments
_LAST_ACK_RECV_AT = 56   # tcpi_last_ack_recv, milliseconds since the last ACK came in
_RTT_AT, _RTTVAR_AT = 68, 72   # tcpi_rtt, tcpi_rttvar, microseconds
TCP_RTO_MIN_S = 0.2      # Linux's floor on the RTO (TCP_RTO_MIN)


@dataclass(frozen=True)
class TcpView:
    """What the kernel says about one TCP connection, at one moment."""
    unacked: int             # segments sent and not yet acknowledged
    ack_silent_s: float      # since the last ACK arrived
    rto_s: float             # the RTO without backoff: what one retransmission round costs now
    backoff: int             # retransmission timeouts in a row for the head segment
    rtt_s: float = 0.0       # the smoothed RTT (tcpi_rtt): what the path itself costs a round trip


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
                   rtt_s=rtt_us / 1e6)


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

    def limits(self, tcp: TcpView | None) -> tuple[float, float, float]:
        """(suspect, lost, stall) limits in seconds for this connection now."""
        rto = tcp.rto_s if tcp is not None else 0.0
        lost = max(self.lost_after_s, self.lost_rtos * rto)
        return max(self.suspect_after_s, self.suspect_rtos * rto), lost, max(self.stall_after_s, 2 * lost)

    def judge(self, silent_s: float, tcp: TcpView | None, outstanding_s: float | None = None,
              ping_interval_s: float = 0.0) -> str:
        """OK, SUSPECT or LOST for a connection silent `silent_s` (no frame, no pong).

        `outstanding_s`: how long TCP has had data unacknowledged (the caller watches `unacked`).
        The time since the last ACK alone overstates it when nothing was sent for a while (the
        client's loop busy, no ping out): a ping is at most one `ping_interval_s` behind the last
        ack, so the witness is min(time since the last ack, outstanding + one interval).
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
        if silent_s >= suspect and dead_for >= suspect:
            return SUSPECT
        return OK
