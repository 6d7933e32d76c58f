"""FaultTable: the lab's own iptables chains in one network namespace, and the faults in them.

    with FaultTable() as table:                 # current namespace; FaultTable(netns="ll-x-c") for another
        f = build(spec).apply(table)            # one iptables-restore --noflush: atomic, ~2-5 ms
        ...
        f.clear()                               # or table.clear_all()
    # leaving the block (or an exception, SIGINT, SIGTERM, interpreter exit) removes every rule

Layout (filter table only; the nat table, where Docker keeps its DNS rules, is never touched):

    OUTPUT  -j LL_OUT    (inserted at position 1)      LL_OUT  the out-direction rules of all faults
    INPUT   -j LL_IN     (inserted at position 1)      LL_IN   the in-direction rules
                                                       LL_L_*  per-fault chains of random loss

Every change rewrites LL_OUT and LL_IN whole in one nf_tables transaction (declaring a chain under
--noflush flushes it), so the rule set is never half-applied and a change costs one process spawn.
One FaultTable owns the chains of its namespace; `clear_all()` and `close()` are idempotent.
A fault that installs something besides rules (netem.fault.InstalledFault: a qdisc, a worker)
is installed before its rules go in and uninstalled after they went.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import platform
import signal
import struct
import subprocess
import termios
import threading
import time
from typing import Callable

from netem import realtime
from netem.errors import NetemError, NoPrivilege, RuleError, ToolMissing
from netem.fault import Fault, InstalledFault, RuleFault
from netem.kernel import in_netns
from netem.iptables import IN_CHAIN, OUT_CHAIN, is_netem_chain, render_restore

HOOKS = (("OUTPUT", OUT_CHAIN), ("INPUT", IN_CHAIN))
# On a router node the faults act on what it forwards: both chains hang off FORWARD. An out rule
# matches `-d target` and an in rule `-s target`, so each sees only its own direction.
ROUTER_HOOKS = (("FORWARD", OUT_CHAIN), ("FORWARD", IN_CHAIN))
IDLE_AWAKE_ENV = "LIVELAB_IDLE_CPUS_AWAKE"   # "0": idle CPUs may halt while a table lives (FaultTable._hold_cpus_awake)

Runner = Callable[[list[str], "str | None"], "tuple[int, str, str]"]


def _run(argv: list[str], input: str | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=15)
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} is not installed (apt-get install iptables)") from None
    return p.returncode, p.stdout, p.stderr


def _first_error(err: str) -> str:
    lines = [l.strip() for l in err.splitlines() if l.strip()]
    for l in lines:
        if "line" in l.lower() or "failed" in l.lower() or "error" in l.lower() or "denied" in l.lower():
            return l
    return lines[-1] if lines else "no message"


# read(2)'s number in the architecture's syscall table, for spotting an idle iptables-restore in /proc/PID/syscall
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())


class PersistentRestore:
    """One long-lived `iptables-restore --noflush` fed through a pipe: no process spawn per change.

    iptables-restore (nf_tables backend) commits each `*filter ... COMMIT` block as it reads it and
    then waits for more input. A change is done when the pipe is empty and the process is back in
    read(0) (seen in /proc/PID/syscall); the nf_tables commit before that point is synchronous.
    On a refused block iptables-restore prints the error and exits: that error is raised and a
    new process is started for the next change. If its parent dies, it reads EOF and exits.

    Both sides of a change run under SCHED_FIFO where the kernel allows it (netem.realtime): the
    process, which sleeps in read(0) between changes, and the calling thread for the change only
    (its write and the poll for the commit; FaultTable.add holds it from the rendering to its
    stamp). As ordinary tasks on a busy machine each waited for a CPU, which was the onset's tail
    (docs/benchmarks.md). Refused: one stderr line, as before.
    """

    def __init__(self, netns: str | None):
        self.netns = netns
        self.proc: subprocess.Popen | None = None
        self.fifo = False       # the running process is under SCHED_FIFO

    @staticmethod
    def usable() -> bool:
        return _READ_SYSCALL is not None and os.path.exists("/proc/self/syscall")

    def _start(self) -> None:
        with in_netns(self.netns):
            self.proc = subprocess.Popen(["iptables-restore", "--noflush"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)
        why = realtime.fifo_for(self.proc.pid)
        self.fifo = why is None
        if why is not None:
            realtime.note_fifo_refused(why)
        self._wait_idle(10.0)

    def _pending(self) -> int:
        return struct.unpack("i", fcntl.ioctl(self.proc.stdin.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]

    def _idle(self) -> bool:
        with open(f"/proc/{self.proc.pid}/syscall") as fh:
            f = fh.read().split()
        return len(f) > 1 and f[0] == _READ_SYSCALL and f[1] == "0x0"

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        spins = 0
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                self.proc = None
                raise RuleError(f"iptables-restore refused the lab's rules: {_first_error(err)}")
            try:
                if self._pending() == 0 and self._idle():
                    return
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited between the checks: poll() reports it
            if time.monotonic() > deadline:
                self.close()
                raise RuleError(f"iptables-restore did not finish within {timeout:.0f} s")
            spins += 1
            if spins > 50:
                time.sleep(0.00005)

    def apply(self, text: str, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        with realtime.fifo_while():
            try:
                self.proc.stdin.write(text.encode())
            except BrokenPipeError:
                self.proc.wait()
                err = self.proc.stderr.read().decode(errors="replace")
                self.proc = None
                raise RuleError(f"iptables-restore refused the lab's rules: {_first_error(err)}") from None
            self._wait_idle(timeout)

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(2)
            except Exception:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


class FaultTable:
    def __init__(self, netns: str | None = None, *, handle_signals: bool = True,
                 runner: Runner | None = None, persistent: bool = True, hooks=HOOKS):
        self.netns = netns
        self.hooks = tuple(hooks)  # (hook, chain) jumps: HOOKS on a host, ROUTER_HOOKS on a router
        self.handle_signals = handle_signals
        self._runner = runner or _run
        # a long-lived iptables-restore (nf_tables backend only: the legacy one holds the xtables
        # lock for as long as it runs); off with a custom runner (tests) or persistent=False
        self._want_persistent = persistent and runner is None and PersistentRestore.usable()
        self._persistent: PersistentRestore | None = None
        self._faults: list[Fault] = []
        self._stale: list[str] = []
        self._lock = threading.RLock()
        self._ready = False
        self._armed = False
        self._prev_handlers: dict[int, object] = {}
        self.last_apply: tuple[float, float] | None = None  # (wall time before, after) the last change
        self._awake_fd: int | None = None     # the zero wake-up latency request, while it is held
        self.awake_note: str | None = None    # why it is not (None: held, or no real-time changes)

    # ------------------------------------------------------------------------------- plumbing
    def _exec(self, argv: list[str], input: str | None = None) -> tuple[int, str, str]:
        with in_netns(self.netns):
            return self._runner(argv, input)

    def restore(self, text: str) -> None:
        if self._persistent is not None:
            try:
                self._persistent.apply(text)
                return
            except PermissionError:  # /proc/PID/syscall unreadable here: spawn per change instead
                self._persistent.close()
                self._persistent = None
        rc, _out, err = self._exec(["iptables-restore", "--noflush"], text)
        if rc != 0:
            msg = _first_error(err)
            if "denied" in err.lower() or "not permitted" in err.lower():
                raise NoPrivilege(f"iptables-restore: {msg} (needs root / CAP_NET_ADMIN)")
            raise RuleError(f"iptables-restore refused the lab's rules: {msg}")

    # ------------------------------------------------------------------------------- life cycle
    def setup(self) -> "FaultTable":
        """Create the chains and hook them from OUTPUT and INPUT (once). Idempotent."""
        with self._lock:
            if self._ready:
                return self
            rc, out, err = self._exec(["iptables", "-S"])
            if rc != 0:
                if "denied" in err.lower() or "not permitted" in err.lower():
                    raise NoPrivilege(f"iptables: {_first_error(err)} (needs root / CAP_NET_ADMIN)")
                raise RuleError(f"iptables -S failed: {_first_error(err)}")
            text = ["*filter", f":{OUT_CHAIN} - [0:0]", f":{IN_CHAIN} - [0:0]"]
            for hook, chain in self.hooks:
                if f"-A {hook} -j {chain}" not in out.splitlines():
                    text.append(f"-I {hook} 1 -j {chain}")
            text.append("COMMIT")
            self.restore("\n".join(text) + "\n")
            if self._want_persistent and self._persistent is None:
                rc, ver, _ = self._exec(["iptables-restore", "--version"])
                if rc == 0 and "nf_tables" in ver:
                    self._persistent = PersistentRestore(self.netns)
                    self._start_persistent()
            self._ready = True
            self._arm()
            return self

    def _start_persistent(self) -> None:
        """Start the long-lived iptables-restore now, so the first fault does not pay its start."""
        try:
            self._persistent._start()
        except PermissionError:  # /proc/PID/syscall unreadable here: restore() spawns per change
            self._persistent.close()
            self._persistent = None
            return
        if self._persistent.fifo:
            self._hold_cpus_awake()

    def _hold_cpus_awake(self) -> None:
        """Keep idle CPUs from halting while this table lives (netem.realtime.zero_wakeup_latency).

        Why: a real-time change wakes its iptables-restore on an idle CPU, where the scheduler puts
        a woken real-time task, and on a VM a halted vCPU waits for its host to run it again. On a
        quiet machine that wake-up was the onset's tail (docs/benchmarks.md has the passes with and
        without the request). The cost: while a table lives, idle CPUs poll instead of
        halting (the host sees them busy). LIVELAB_IDLE_CPUS_AWAKE=0 lets them halt."""
        if os.environ.get(IDLE_AWAKE_ENV, "1") == "0":
            self.awake_note = f"{IDLE_AWAKE_ENV}=0: idle CPUs may halt"
            return
        self._awake_fd, self.awake_note = realtime.zero_wakeup_latency()

    def _let_cpus_halt(self) -> None:
        if self._awake_fd is not None:
            os.close(self._awake_fd)
            self._awake_fd = None

    @property
    def cpus_held_awake(self) -> bool:
        """Whether this table holds the zero wake-up latency request now."""
        return self._awake_fd is not None

    def _arm(self) -> None:
        """Clean up on SIGINT/SIGTERM and at interpreter exit (once)."""
        if not self._armed:
            self._armed = True
            self._install_handlers()
            atexit.register(self._at_exit)

    def _disarm(self) -> None:
        if self._armed:
            self._armed = False
            self._restore_handlers()
            atexit.unregister(self._at_exit)

    def add(self, fault: Fault) -> Fault:
        # SCHED_FIFO from here to the stamp that the rule is in force, where the kernel allows it:
        # the rendering, the change and the stamp do not wait for a CPU (netem.realtime.fifo_while)
        with self._lock, realtime.fifo_while():
            if fault._table is self:
                return fault
            if fault._table is not None:
                raise NetemError(f"fault {fault.name} is already active in another table")
            if any(f.name == fault.name for f in self._faults):
                raise NetemError(f"a fault named {fault.name!r} is already active; give each fault its own name")
            if isinstance(fault, RuleFault):
                self.setup()
            else:
                self._arm()
            t0 = time.time()
            if isinstance(fault, InstalledFault):
                fault.install(self.netns)
            if isinstance(fault, RuleFault):
                try:
                    self.restore(render_restore(self._rule_faults() + [fault]))
                except BaseException:
                    if isinstance(fault, InstalledFault):
                        fault.uninstall(self.netns)
                    raise
                self._stale = [c for c in self._stale if c not in fault.rules().chains]
            self.last_apply = (t0, time.time())
            self._faults.append(fault)
            fault._table = self
            return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault._table is not self:
                return
            rest = [f for f in self._faults if f is not fault]
            t0 = time.time()
            if isinstance(fault, RuleFault):
                # the fault's own chains are emptied now and deleted by clear_all()/close(): deleting
                # them here would be one more nf_tables transaction, and a transaction that follows
                # a removal within ~20 ms waits for the kernel's deferred destroy (an RCU grace period)
                stale = list(fault.rules().chains)
                self.restore(render_restore([f for f in rest if isinstance(f, RuleFault)], stale_chains=stale))
                self._stale += [c for c in stale if c not in self._stale]
            if isinstance(fault, InstalledFault):
                fault.uninstall(self.netns)
            self.last_apply = (t0, time.time())
            self._faults = rest
            fault._table = None

    def _gc(self) -> None:
        """Delete emptied per-fault chains (a separate step: nf_tables refuses it in the same batch)."""
        if not self._stale:
            return
        try:
            self.restore("*filter\n" + "".join(f"-X {c}\n" for c in self._stale) + "COMMIT\n")
            self._stale = []
        except NetemError:
            pass  # harmless: an empty, unreferenced chain; close() and lab down remove it

    @property
    def fifo_refused(self) -> str | None:
        """Why this table's changes run as ordinary tasks (None: under SCHED_FIFO, or none refused
        yet). The policy is asked once per process (netem.realtime), so it is the process's answer;
        a RemoteTable answers the same question for the router service's process."""
        return realtime.fifo_refused()

    @property
    def faults(self) -> list[Fault]:
        return list(self._faults)

    def _rule_faults(self) -> list[Fault]:
        return [f for f in self._faults if isinstance(f, RuleFault)]

    def clear_all(self) -> None:
        """Remove every fault (rules, then qdiscs and workers). Idempotent; safe before setup()."""
        with self._lock:
            errors = []
            try:
                if self._ready:
                    stale = list(dict.fromkeys(self._stale + [c for f in self._rule_faults() for c in f.rules().chains]))
                    self.restore(render_restore([], stale_chains=stale))
                    self._stale = stale
                    self._gc()
            finally:  # what is installed goes even if the rules would not
                for f in [f for f in self._faults if isinstance(f, InstalledFault)]:
                    try:
                        f.uninstall(self.netns)
                    except Exception as e:  # keep going: one qdisc that will not go must not keep the rest
                        errors.append(str(e))
            for f in self._faults:
                f._table = None
            self._faults = []
            if errors:
                raise NetemError("clear_all: " + "; ".join(errors))

    def close(self) -> None:
        """clear_all(), then unhook and delete the lab's chains. Idempotent."""
        with self._lock:
            try:
                self.clear_all()
            finally:
                self._disarm()
                if self._ready:
                    self._ready = False
                    try:
                        self._teardown_chains()
                    finally:
                        if self._persistent is not None:
                            self._persistent.close()
                            self._persistent = None
                        self._let_cpus_halt()

    def detach(self) -> None:
        """Leave the rules in place and forget them (`lab netem apply`: they outlive this process;
        `lab netem clear` or `lab down` removes them)."""
        with self._lock:
            for f in self._faults:
                f._table = None
            self._faults = []
            self._ready = False
            self._disarm()
            if self._persistent is not None:
                self._persistent.close()
                self._persistent = None
            self._let_cpus_halt()

    def _teardown_chains(self) -> None:
        rc, out, _ = self._exec(["iptables", "-S"])
        lines = out.splitlines() if rc == 0 else []
        first = ["*filter"] + [f"-D {hook} -j {chain}" for hook, chain in self.hooks
                               for l in lines if l == f"-A {hook} -j {chain}"]
        chains = [l.split()[1] for l in lines if l.startswith("-N ") and is_netem_chain(l.split()[1])]
        first += [f":{c} - [0:0]" for c in chains] + ["COMMIT"]
        self.restore("\n".join(first) + "\n")
        if chains:
            self.restore("*filter\n" + "".join(f"-X {c}\n" for c in chains) + "COMMIT\n")

    def __enter__(self) -> "FaultTable":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------- signals
    def _install_handlers(self) -> None:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._prev_handlers[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev_handlers.items():
            try:
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev)
            except (ValueError, OSError, TypeError):
                pass
        self._prev_handlers = {}

    def _on_signal(self, signum, frame) -> None:
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        try:
            self.close()
        except Exception:
            pass
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        try:
            self.close()
        except Exception:
            pass
