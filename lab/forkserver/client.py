"""The orchestrator's side of the fork server (lab/forkserver/server.py): start it, ask it for a
child, and hold the child as a Popen would.

    server = shared(log)                      the process's one server (None: LAB_FORKSERVER=0)
    proc = server.spawn(ns, argv, **popen_kw) a ForkedProcess, or None: not servable here, exec it

A ForkedProcess has what the lab uses of a Popen: pid, args, stdin/stdout/stderr (PIPE, DEVNULL,
STDOUT, a file or a descriptor, or inherited), poll(), wait(timeout) (TimeoutExpired), send_signal,
terminate, kill, returncode (-N for signal N). The child is the server's, not ours, so its exit code
comes over the request's connection; signals go through a pidfd, which names that process and no
later one with the same pid. Pidfiles, `lab down` and a namespace's pid list see it like any other.

The server starts with the first netns topology that comes up and serves every run of the
invocation. If it cannot start (or LAB_FORKSERVER=0), one line says so and every command is exec'd
with `ip netns exec`, as before.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lab.forkserver.protocol import MAX_MESSAGE, ProtocolError, Request, decode, servable

ENV_SWITCH = "LAB_FORKSERVER"      # "0": never fork; exec every process as before
READY_TIMEOUT = 60.0               # its imports, on a loaded machine (seconds; then: exec, one line)
# the Popen keywords a forked child honours; any other (preexec_fn, pass_fds, ...) is exec'd
POPEN_KW = frozenset({"stdin", "stdout", "stderr", "env", "cwd", "text", "universal_newlines",
                      "start_new_session"})


class ForkServer:
    """One fork server process; `spawn` is safe from several threads at once."""

    def __init__(self, log=print):
        self.log = log
        self._dir = Path(tempfile.mkdtemp(prefix="livelab-fork-"))
        self.socket_path = str(self._dir / "s")
        self._lock = threading.Lock()
        self._ready: bool | None = None     # None: not asked yet
        self.started = time.monotonic()
        self.import_s: float | None = None  # its own pre-import, as it reports
        self.ready_s: float | None = None   # from its start to ready, as the orchestrator saw it
        self.env = dict(os.environ)
        # its own session: a Ctrl-C to the lab is the orchestrator's to handle; stdin is our pipe,
        # whose end tells it to go
        self._proc = subprocess.Popen([sys.executable, "-m", "lab", "fork-server", self.socket_path],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    def ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """Wait (once) until the server says it is ready; False, with one logged line, if it fails."""
        with self._lock:
            if self._ready is None:
                why = self._wait_ready(timeout)
                self._ready = why is None
                if why:
                    self.log(f"  fork server: {why}; starting each process with `ip netns exec` instead")
                    self.close()
            return self._ready

    def _wait_ready(self, timeout: float) -> str | None:
        fd = self._proc.stdout.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            return f"not ready within {timeout:.0f} s"
        line = self._proc.stdout.readline().decode(errors="replace").split()
        if len(line) != 2 or line[0] != "ready":
            return f"exited ({self._proc.poll()}) before it was ready"
        self.import_s, self.ready_s = float(line[1]), time.monotonic() - self.started
        return None

    def spawn(self, netns: str, argv: list[str], **popen_kw) -> "ForkedProcess | None":
        """Fork `argv` into namespace `netns`; None if this command is not the server's to run."""
        env = dict(popen_kw.get("env") or os.environ)
        if set(popen_kw) - POPEN_KW or servable(argv, env, sys.executable, self.env) or not self.ready():
            return None
        if self._proc.poll() is not None:   # it was ready and has ended since: exec from now on
            return None
        req = Request(tuple(argv), env, os.path.abspath(popen_kw.get("cwd") or os.getcwd()), netns,
                      bool(popen_kw.get("start_new_session", False)))
        return ForkedProcess(self.socket_path, req, popen_kw)

    def close(self) -> None:
        """End the server (its children run on: each is stopped by its owner). Idempotent."""
        if self._proc.poll() is None:
            self._proc.stdin.close()       # its loop ends on this
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        try:
            self._dir.rmdir()
        except OSError:
            pass


class ForkedProcess:
    """A child of the fork server, used as the orchestrator uses a subprocess.Popen."""

    def __init__(self, socket_path: str, req: Request, popen_kw: dict):
        self.args = list(req.argv)
        self.returncode: int | None = None
        self._lock = threading.Lock()
        self._server_lost = False
        text = bool(popen_kw.get("text") or popen_kw.get("universal_newlines"))
        child_fds, self._close_after, ours = _stdio(popen_kw)
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            self._conn.connect(socket_path)
            socket.send_fds(self._conn, [req.encode()], child_fds)
            reply = decode(self._conn.recv(MAX_MESSAGE))
        except (OSError, ProtocolError) as e:
            self._conn.close()
            for fd in ours.values():
                os.close(fd)
            raise OSError(f"the fork server did not start {req.argv[3:5]}: {e}") from None
        finally:
            for fd in self._close_after:     # the child's ends, now the child's alone
                os.close(fd)
            self._close_after = []
        if "pid" not in reply:
            self._conn.close()
            for fd in ours.values():
                os.close(fd)
            raise OSError(f"the fork server refused {req.argv[3:5]}: {reply.get('error', reply)}")
        self.pid = int(reply["pid"])
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:      # already gone: its exit code is on the way
            self._pidfd = None
        mode = "" if text else "b"
        self.stdin = os.fdopen(ours["stdin"], "w" + mode) if "stdin" in ours else None
        self.stdout = os.fdopen(ours["stdout"], "r" + mode) if "stdout" in ours else None
        self.stderr = os.fdopen(ours["stderr"], "r" + mode) if "stderr" in ours else None

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} returncode={self.returncode} args={self.args[3:5]}>"

    def _collect(self, timeout: float | None) -> bool:
        """Read the exit code if it comes within `timeout` (None: wait for it); True once known."""
        if self.returncode is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._server_lost:
            if not select.select([self._conn], [], [], timeout)[0]:
                return False
            try:
                data = self._conn.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if data:
                return self._ended(int(decode(data)["exit"]))
            self._server_lost = True
        # the server went away before the child ended, and its exit code with it; the pidfd still
        # says when the process goes (255: "unknown", as ssh says it)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._pidfd is not None and not select.select([self._pidfd], [], [], left)[0]:
            return False
        return self._ended(255)

    def _ended(self, code: int) -> bool:
        self.returncode = code
        self._conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return True

    def poll(self) -> int | None:
        if not self._lock.acquire(blocking=False):   # another thread is waiting: as Popen.poll
            return None
        try:
            self._collect(0.0)
        finally:
            self._lock.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        try:
            left = None if deadline is None else deadline - time.monotonic()
            if not self._collect(left):
                raise subprocess.TimeoutExpired(self.args, timeout)
        finally:
            self._lock.release()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is not None or self._pidfd is None:
            return      # it ended: nothing to signal, and its pid may be another process's by now
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _stdio(popen_kw: dict) -> tuple[list[int], list[int], dict[str, int]]:
    """The child's (stdin, stdout, stderr) descriptors, those to close once sent, and our ends of
    the pipes asked for, as Popen reads its stdin/stdout/stderr keywords."""
    child: list[int] = []
    close_after: list[int] = []
    ours: dict[str, int] = {}
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        spec = popen_kw.get(name)
        if spec is None:
            fd = i if _valid(i) else None       # inherited, as Popen's child would
            if fd is None:
                spec = subprocess.DEVNULL
        if spec == subprocess.PIPE:
            r, w = os.pipe2(os.O_CLOEXEC)
            mine, fd = (w, r) if i == 0 else (r, w)
            ours[name] = mine
            close_after.append(fd)
        elif spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            close_after.append(fd)
        elif spec == subprocess.STDOUT:
            fd = child[1]
        elif isinstance(spec, int):
            fd = spec
        elif spec is not None:
            fd = spec.fileno()
        child.append(fd)
    return child, close_after, ours


def _valid(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


_shared: ForkServer | None = None
_shared_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def shared(log=print) -> ForkServer | None:
    """The invocation's one fork server, started on first call (None: LAB_FORKSERVER=0)."""
    global _shared
    if not enabled():
        return None
    with _shared_lock:
        if _shared is None:
            _shared = ForkServer(log)
        return _shared


def stats() -> dict | None:
    """The shared server's own cost, for `lab bench overhead` (None: none started)."""
    s = _shared
    if s is None or s.import_s is None:
        return None
    return {"import_s": s.import_s, "ready_s": s.ready_s}
