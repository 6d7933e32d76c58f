"""A listener on one NFQUEUE queue, spoken directly over a netlink socket (nfnetlink_queue).

Why not the `netfilterqueue` binding from PyPI: its 1.1.0 ships only an sdist (no cp311 manylinux
wheel), which needs gcc and libnetfilter-queue-dev on every machine and cannot go into the Compose
images' wheel-only installs. The part of the protocol the lab needs is four messages:

    config BIND queue N, PARAMS copy-meta (or copy-packet), QUEUE_MAXLEN, FLAGS fail-open (us -> kernel)
    PACKET: packet id, hook [, payload: the IP packet] [, timestamp] (one per queued packet) (kernel -> us)
    VERDICT id ACCEPT|DROP (several in one send: one system call for all that are due)      (us -> kernel)

The kernel holds each queued packet until its verdict comes, in any order. Closing the socket
unbinds the queue; with the rule's `--queue-bypass`, packets then pass as if there were no rule.

    with NfQueue(4242) as q:          # in the namespace whose rules send packets to queue 4242
        for pid in q.receive(timeout=0.1):
            q.verdict(pid, accept=True)
"""
from __future__ import annotations

import errno
import os
import select
import socket
import struct
from typing import NamedTuple

from netem.errors import FaultUnsupported, NetemError

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_META, NFQNL_COPY_PACKET = 1, 2
COPY_RANGE = 0xFFFF     # the whole packet, when payloads are asked for (the duplicate fault re-sends it)
NFQA_CFG_F_FAIL_OPEN = 1  # a full queue accepts instead of dropping: a delay fault never becomes loss
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_TIMESTAMP, NFQA_PAYLOAD = 1, 2, 4, 10
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED / NLA_F_NET_BYTEORDER
_NLMSGHDR = struct.Struct("=IHHII")


def _attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _attrs(data: bytes) -> dict[int, bytes]:
    found, off = {}, 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        found[kind & NLA_TYPE_MASK] = data[off + 4:off + length]
        off += (length + 3) & ~3
    return found


class Packet(NamedTuple):
    id: int
    payload: bytes | None   # the IP packet, when the queue asks for payloads
    stamp: float | None     # NFQA_TIMESTAMP in seconds (skb->tstamp: its clock varies, see netem/holding.py)


class NfQueue:
    """One bound queue in the calling thread's network namespace (the socket stays in it).

    `payloads`: the kernel copies each packet to us too (`receive_packets`); otherwise only its id.
    """

    def __init__(self, queue: int, maxlen: int = 4096, payloads: bool = False):
        self.queue = queue
        self.payloads = payloads
        self._seq = 0
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        except OSError as e:
            raise FaultUnsupported(f"nfqueue: no netfilter netlink socket here: {e.strerror}") from None
        try:
            try:  # room for bursts: a lost PACKET message would leave its packet held for ever
                self.sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root)
            except OSError:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            self.sock.bind((0, 0))
            self._config(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)))
            mode = (COPY_RANGE, NFQNL_COPY_PACKET) if payloads else (0, NFQNL_COPY_META)
            self._config(_attr(NFQA_CFG_PARAMS, struct.pack("!IB", *mode))
                         + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen)))
            self._config(_attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
                         + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)))
        except BaseException:
            self.sock.close()
            raise
        self._early: list[Packet] = []  # packets that came while waiting for a config ack

    # ---- wire -------------------------------------------------------------------------------
    def _message(self, msg_type: int, flags: int, body: bytes) -> bytes:
        self._seq += 1
        head = struct.pack("BB", socket.AF_UNSPEC, 0) + struct.pack("!H", self.queue)  # nfgenmsg
        payload = head + body
        return _NLMSGHDR.pack(16 + len(payload), (NFNL_SUBSYS_QUEUE << 8) | msg_type,
                              NLM_F_REQUEST | flags, self._seq, 0) + payload

    def _send(self, msg_type: int, flags: int, body: bytes) -> int:
        self.sock.send(self._message(msg_type, flags, body))
        return self._seq

    def _config(self, body: bytes) -> None:
        seq = self._send(NFQNL_MSG_CONFIG, NLM_F_ACK, body)
        while True:
            for kind, mseq, data in self._messages(self.sock.recv(65536)):
                if kind == NLMSG_ERROR and mseq == seq:
                    err = -struct.unpack_from("=i", data, 0)[0]
                    if err == 0:
                        return
                    if err == errno.EPERM:  # the kernel says EPERM for both
                        raise NetemError(f"nfqueue {self.queue}: refused (EPERM): another listener holds "
                                         f"this queue, or no CAP_NET_ADMIN here")
                    raise NetemError(f"nfqueue {self.queue}: the kernel refused the config: {os.strerror(err)}")
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    self._early += self._packet(data)

    @staticmethod
    def _messages(buf: bytes):
        off = 0
        while off + 16 <= len(buf):
            length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(buf, off)
            if length < 16:
                break
            yield kind, seq, buf[off + 16:off + length]
            off += (length + 3) & ~3

    @staticmethod
    def _packet(data: bytes) -> list["Packet"]:
        found = _attrs(data[4:])  # after the nfgenmsg
        hdr = found.get(NFQA_PACKET_HDR)
        if not hdr or len(hdr) < 4:
            return []
        ts = found.get(NFQA_TIMESTAMP)   # only when the skb has one (struct nfqnl_msg_packet_timestamp)
        stamp = None
        if ts and len(ts) >= 16:
            sec, usec = struct.unpack_from("!QQ", ts, 0)
            stamp = sec + usec / 1e6
        return [Packet(struct.unpack_from("!I", hdr, 0)[0], found.get(NFQA_PAYLOAD), stamp)]

    # ---- use --------------------------------------------------------------------------------
    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self, timeout: float | None = 0) -> list[int]:
        """Ids of packets queued since the last call; waits up to `timeout` s for the first one."""
        return [pid for pid, _ in self.receive_packets(timeout)]

    def receive_packets(self, timeout: float | None = 0) -> list[tuple[int, bytes | None]]:
        """(id, IP packet or None without `payloads`) of packets queued since the last call."""
        return [(p.id, p.payload) for p in self.receive_stamped(timeout)]

    def receive_stamped(self, timeout: float | None = 0) -> list["Packet"]:
        """The packets queued since the last call, with the kernel's stamp where it sent one."""
        ids, self._early = self._early, []
        if ids:
            timeout = 0
        if not select.select([self.sock], [], [], timeout)[0]:
            return ids
        while True:  # drain what is there without waiting again
            try:
                buf = self.sock.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return ids
            for kind, _seq, data in self._messages(buf):
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    ids += self._packet(data)

    def verdict(self, packet_id: int, accept: bool = True) -> None:
        self.verdict_many([packet_id], accept)

    def verdict_many(self, packet_ids: list[int], accept: bool = True) -> None:
        """One VERDICT message per id, all in one send (the kernel reads a buffer of messages).

        Not NFQNL_MSG_VERDICT_BATCH: that one accepts every id up to the one named, and packets
        that jump the queue (reorder) are released out of id order."""
        code = NF_ACCEPT if accept else NF_DROP
        buf = b"".join(self._message(NFQNL_MSG_VERDICT, 0, _attr(NFQA_VERDICT_HDR, struct.pack("!II", code, pid)))
                       for pid in packet_ids)
        if buf:
            self.sock.send(buf)

    def close(self) -> None:
        """Unbind and close; packets still held without a verdict are dropped by the kernel."""
        try:
            self._send(NFQNL_MSG_CONFIG, 0, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, socket.AF_INET)))
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "NfQueue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
