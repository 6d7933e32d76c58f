"""Make the calling process a real-time one, as packet tools that hold and release on time do.

Why: the userspace delay's worker (netem/kinds/delay.py) must wake at each packet's release time.
As an ordinary (CFS) process it waits behind whatever else runs, so on a busy machine a packet's
verdict comes milliseconds after its due time. SCHED_FIFO preempts every ordinary process at once and has no timer slack; locked
memory never waits for a page fault; a frozen, disabled garbage collector never stops the loop
(the loop's objects are tuples and ints freed by reference counting, no cycles).

Each step is best effort: what the kernel or the container refuses is named in the returned
notes (the worker logs them as one line) and the worker runs on as an ordinary process.
The kernel's real-time throttling (sched_rt_runtime_us, 95 % by default) still bounds the CPU a
runaway real-time loop could take.

A PM QoS request for zero wake-up latency (/dev/cpu_dma_latency, held open for the process's life,
as cyclictest does) keeps idle CPUs out of their halt state: on a VM a halted vCPU waits for its
host to wake it, so a quiet machine's wake-ups are the late ones (docs/benchmarks.md has the
figures). Its cost: while a worker lives, idle CPUs poll instead of halting
(the host sees them busy). The request goes with the process.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import sys
from typing import Iterator

FIFO_PRIORITY = 20     # above every ordinary process, below the kernel's own threads (50+)
MCL_CURRENT, MCL_FUTURE = 1, 2
PR_SET_TIMERSLACK = 29
TIMER_SLACK_NS = 1     # the smallest slack; 0 would mean "the default" (50 us)
PM_QOS_DEVICE = "/dev/cpu_dma_latency"
_pm_qos_fd: int | None = None   # open while the process lives: closing it would drop the request
_REALTIME_POLICIES = frozenset({os.SCHED_FIFO, os.SCHED_RR})
_fifo_refused: str | None = None   # why the kernel refused a fault change SCHED_FIFO: asked once a process


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def become_realtime(priority: int = FIFO_PRIORITY, lock_memory: bool = True) -> tuple[bool, list[str]]:
    """(whether SCHED_FIFO is in effect, notes on what was refused). Never raises for a refusal."""
    notes = []
    gc.freeze()            # what exists now is never scanned again
    gc.disable()           # and nothing new triggers a collection
    why = fifo_refusal(priority)
    fifo = why is None
    if why:
        notes.append(f"no SCHED_FIFO ({why}): an ordinary process, wake-ups wait behind other work")
    try:
        libc = _libc()
        if libc.prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) != 0:
            notes.append(f"timer slack not set: {os.strerror(ctypes.get_errno())}")
        if lock_memory and libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
            notes.append(f"memory not locked: {os.strerror(ctypes.get_errno())}")
    except (OSError, AttributeError) as e:   # no libc to load (not glibc/musl): skip both
        notes.append(f"no libc for prctl/mlockall: {e}")
    note = hold_zero_wakeup_latency()
    if note:
        notes.append(note)
    return fifo, notes


def zero_wakeup_latency() -> tuple[int | None, str | None]:
    """Ask the kernel's PM QoS for zero CPU wake-up latency (the module says why): (the descriptor
    that holds the request, None), or (None, a note on why not). The request lasts until the
    descriptor is closed; the kernel wakes the idle CPUs when it takes it, so from then on none
    halts."""
    try:
        fd = os.open(PM_QOS_DEVICE, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        return None, f"no {PM_QOS_DEVICE} ({e.strerror}): idle CPUs may halt, a release can wait for their wake-up"
    try:
        os.write(fd, (0).to_bytes(4, "little", signed=True))
    except OSError as e:
        os.close(fd)
        return None, f"{PM_QOS_DEVICE} refused the request ({e.strerror})"
    return fd, None


def hold_zero_wakeup_latency() -> str | None:
    """zero_wakeup_latency() until this process ends (a worker's: its releases are due all the
    time). None, or a note on why not."""
    global _pm_qos_fd
    if _pm_qos_fd is not None:
        return None
    fd, note = zero_wakeup_latency()
    if fd is not None:
        _pm_qos_fd = fd
    return note


def fifo_refusal(priority: int = FIFO_PRIORITY) -> str | None:
    """Put the calling thread under SCHED_FIFO (Linux schedules threads as tasks: pid 0 is this
    thread; in a single-threaded worker, the process). None, or why the kernel refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return None
    except (OSError, AttributeError) as e:
        return str(getattr(e, "strerror", None) or e)


def thread_realtime(priority: int = FIFO_PRIORITY) -> str | None:
    """Give the calling thread alone SCHED_FIFO, for a watcher thread that must act at a deadline
    inside a process that stays ordinary (no memory lock, no GC change: those are process-wide).
    None, or a note on what was refused."""
    why = fifo_refusal(priority)
    return None if why is None else f"no SCHED_FIFO for the thread ({why}): it wakes behind other work"


def fifo_for(pid: int, priority: int = FIFO_PRIORITY, policy: int = os.SCHED_FIFO) -> str | None:
    """Put another process (a helper this one drives, such as its iptables-restore), or with pid 0
    the calling thread, under SCHED_FIFO. None, or why the kernel refused."""
    try:
        os.sched_setscheduler(pid, policy, os.sched_param(priority))
        return None
    except OSError as e:
        return str(e.strerror or e)


@contextlib.contextmanager
def fifo_while(priority: int = FIFO_PRIORITY) -> Iterator[None]:
    """The calling thread under SCHED_FIFO for a short piece of work with a deadline (a fault's
    rule change: the write to its iptables-restore and the wait for the commit), and back to its
    own policy and nice value after: a thread that also runs an asyncio loop stays ordinary the
    rest of the time. What it spawns meanwhile (a fault's tc, its worker) starts ordinary
    (SCHED_RESET_ON_FORK): a worker that wants real time asks for it itself. A thread already
    real-time (`chrt`, the router service) is left as it is. A refusal is one line on stderr for
    the process, and the work runs as before."""
    boosted = False
    if _fifo_refused is None:
        policy = os.sched_getscheduler(0)
        if (policy & ~os.SCHED_RESET_ON_FORK) not in _REALTIME_POLICIES:
            why = fifo_for(0, priority, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK)
            boosted = why is None
            if why is not None:
                note_fifo_refused(why)
    try:
        yield
    finally:
        if boosted:
            os.sched_setscheduler(0, policy, os.sched_param(0))


def fifo_refused() -> str | None:
    """Why this process's fault changes run without SCHED_FIFO; None while none was refused."""
    return _fifo_refused


def note_fifo_refused(why: str) -> None:
    """One stderr line per process the first time a fault change could not have SCHED_FIFO; later
    changes do not ask again."""
    global _fifo_refused
    if _fifo_refused is None:
        _fifo_refused = why
        print(f"netem: no SCHED_FIFO for fault changes ({why}): a change waits behind other work on a busy "
              "machine", file=sys.stderr, flush=True)
