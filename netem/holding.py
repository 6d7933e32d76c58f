"""The held packets: a deadline heap, a wake-up on time, and each packet's arrival time.

The userspace worker (netem/kinds/delay.py) gives every queued packet its verdict at a release
time. Three things decide how close to that time the verdict goes, and each has its piece here:

  * `Releases`: a heap on the monotonic release time (ties: arrival order), so the next due
    packet is always known and a release never waits behind a later one.
  * `wait_until`: a select() with a timeout that ends SPIN_S before the deadline, then a bounded
    busy wait to the deadline itself. select() alone wakes late by the timer slack and the
    scheduler's wake-up latency (tens of us for a real-time process, ms for an ordinary one under
    load); the spin takes out the part that is left, at a cost of at most SPIN_S of CPU a release.
  * `arrival`: the hold is measured from the time the kernel stamped the packet (NFQA_TIMESTAMP,
    when the message carries one), not from the time the worker got round to reading it.
"""
from __future__ import annotations

import heapq
import itertools
import select
import time

SPIN_S = 150e-6         # the busy wait before a deadline: a sleep's overshoot, bounded so it costs little CPU
SPIN_MIN_GAP_S = 2e-3   # no spin for a release this close after the previous one: see spin_for
IDLE_S = 1.0            # the wait when nothing is held: only new packets or the lifeline wake us
STAMP_MAX_AGE_S = 1.0   # a kernel stamp older than this (or in the future) is not an arrival time


class Releases:
    """Held packets by release time (monotonic seconds); among equal times, the first pushed first."""

    def __init__(self):
        self._heap: list[tuple[float, int, int, bytes | None]] = []
        self._order = itertools.count()

    def push(self, at: float, packet_id: int, copy: bytes | None = None) -> None:
        heapq.heappush(self._heap, (at, next(self._order), packet_id, copy))

    def next_at(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[int, bytes | None]]:
        """(id, copy) of every packet due by `now`, in release order, taken off the heap."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _at, _n, packet_id, copy = heapq.heappop(self._heap)
            out.append((packet_id, copy))
        return out

    def all(self) -> list[tuple[int, bytes | None]]:
        """Everything still held, in release order (the worker's exit: nothing stays held)."""
        return self.due(float("inf"))

    def __len__(self) -> int:
        return len(self._heap)


def spin_for(next_at: float | None, last_release: float) -> float:
    """The spin before the release at `next_at`: SPIN_S, or none when it comes within SPIN_MIN_GAP_S
    of the previous release. A dense flow (a bulk transfer on a delayed link: thousands of packets a
    second) would otherwise keep a real-time process spinning on a core of a shared machine; so a
    spin costs at most SPIN_S / SPIN_MIN_GAP_S (7.5 %) of one, and the packets that go without it
    are those of a flow dense enough that tens of us do not matter to it (assumption)."""
    if next_at is None or next_at - last_release < SPIN_MIN_GAP_S:
        return 0.0
    return SPIN_S


def wait_until(fds: list, deadline: float | None, clock=time.monotonic, spin_s: float = SPIN_S) -> list:
    """The fds that are readable, or [] once `deadline` (None: IDLE_S from now) is reached.

    Returns at the deadline, never before it: select() until spin_s before it, then a busy wait.
    A packet that arrives during the spin waits for it (at most spin_s) before it is read."""
    if deadline is None:
        return select.select(fds, [], [], IDLE_S)[0]
    left = deadline - clock() - spin_s
    if left > 0:
        ready = select.select(fds, [], [], left)[0]
        if ready:
            return ready
    else:
        ready = select.select(fds, [], [], 0)[0]   # a due release never starves the reading
        if ready and deadline - clock() > 0:
            return ready
    while clock() < deadline:
        pass
    return []


def arrival(stamp: float | None, read_at: float, clock=time.monotonic, wall=time.time,
            mono=lambda: time.clock_gettime(time.CLOCK_MONOTONIC)) -> float:
    """A packet's arrival on `clock`, from the kernel's stamp if it is a plausible one, else `read_at`.

    The stamp is skb->tstamp as the kernel sends it: CLOCK_REALTIME for a packet the stack stamped
    on receipt, but CLOCK_MONOTONIC for a locally sent TCP segment (its departure time, Linux >=
    4.20 "EDT"). So the clock is recognised by which one the stamp is close to; a stamp that is
    neither recent nor past is not used."""
    if stamp is None:
        return read_at
    for now in (wall(), mono()):
        age = now - stamp
        if 0 <= age <= STAMP_MAX_AGE_S:
            return min(read_at, clock() - age)
    return read_at
