"""The fork server: one pre-imported Python that forks the lab's processes into network namespaces.

A netns run starts the twin, the proxy and the agent as `python -m lab ...` under `ip netns exec`:
each a fresh interpreter that imports the lab (google-genai is most of it) before it can do anything,
a second or more per process on a loaded machine (`lab bench overhead` shows it). This process pays
those imports once per `lab run` invocation (a batch, a matrix, a soak: one process, one server),
then forks a child per request. The child enters the node's namespace as `ip netns exec` would
(lab/topology/nsenter.py), takes the stdio, cwd, environment and session it was sent, and runs the
same entry point with the same argv (runpy, as `python -m lab` does), ending as that process would.

    python -m lab fork-server SOCKET              prints "ready <import seconds>" once it listens;
                                                  ends when its stdin (the orchestrator's pipe) closes

The server never runs a thread or an event loop (it checks before it says ready): a fork copies only
the calling thread, so a lock held by another thread would stay held forever in the child. It is a
select loop over the listening socket, the connections, its stdin and a SIGCHLD wake-up pipe; it
reaps its children and sends each exit code on the connection that asked for the child.
The client side is lab/forkserver/client.py; the messages are lab/forkserver/protocol.py. It sits with
the orchestration, at its top: what it pre-imports and runs is the orchestration's own entry point.
"""
from __future__ import annotations

import gc
import importlib
import io
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time

from lab.forkserver.protocol import FDS, MAX_MESSAGE, ProtocolError, Request, encode
from lab.topology import nsenter

# What the children still imported after the fork, by a module list taken at their exit (a control
# run): the twin's certificate maker and event loop, the SDK's connection stack (it
# imports it when it first connects). Each is optional: one a build lacks is simply not warmed.
PRELOAD_LAZY = ("trustme", "cryptography.x509", "uvloop", "httpcore2", "h11", "anyio.streams.tls", "truststore",
                "google.auth.aio.credentials", "concurrent.futures.thread")


def preload() -> None:
    """What the children run, imported once here: the CLI with every subcommand's module (it imports
    them when it builds its parser), the agent, the twin, the proxy, and every client's SDK (a client
    imports its SDK only when asked for by name, which the agent does before its go)."""
    # here, not at the top: the server times its own pre-import (`ready <seconds>`) from its start
    import lab.agent        # `lab agent`, in the client's namespace
    import lab.cli          # the entry point every child runs
    import lab.clients      # the clients' registry, below
    import lab.proxy        # `lab proxy serve`
    import lab.twin.cli     # `lab twin serve`
    import lab.twin.server  # noqa: F401  (the twin's shell, warmed, not called)

    lab.cli.build_parser()
    for name in lab.clients.names():
        lab.clients.get(name)
    for name in PRELOAD_LAZY:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def serve(sock_path: str, control_fd: int = 0) -> tuple[Request, list[int]] | None:
    """The loop. Returns None in the server when `control_fd` closes; in a forked child, returns its
    request and its three descriptors (the caller runs it)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    os.chmod(sock_path, 0o600)
    listener.listen(16)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)     # the wake-up pipe does the work
    conns: dict[int, socket.socket] = {}
    waiting: dict[int, socket.socket] = {}              # child pid -> the connection to tell its exit
    try:
        print(f"ready {time.monotonic() - _T0:.3f}", flush=True)
    except BrokenPipeError:
        return None                 # the orchestrator went before we were ready: nothing to serve
    while True:
        readable, _, _ = select.select([listener, control_fd, wake_r, *conns.values()], [], [])
        if control_fd in readable and not os.read(control_fd, 4096):
            return None             # the orchestrator is done, or was killed
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
            _reap(waiting)
        if listener in readable:
            conn, _ = listener.accept()
            conns[conn.fileno()] = conn
        for conn in [c for c in readable if isinstance(c, socket.socket) and c is not listener]:
            conns.pop(conn.fileno(), None)
            got = _receive(conn)
            if got is None:
                conn.close()
                continue
            req, fds = got
            pid = os.fork()
            if pid == 0:
                _leave_server(listener, [*conns.values(), *waiting.values(), conn], (wake_r, wake_w), control_fd)
                return req, fds
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
            _send(conn, {"pid": pid})
        _reap(waiting)


def _receive(conn: socket.socket) -> tuple[Request, list[int]] | None:
    """A request and its descriptors; None (after telling the client why) if it is not one."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, FDS)
    except OSError:
        return None
    if not data:
        return None
    try:
        if len(fds) != FDS:
            raise ProtocolError(f"{len(fds)} descriptors with the request, not {FDS}")
        return Request.decode(data), fds
    except ProtocolError as e:
        for fd in fds:
            os.close(fd)
        _send(conn, {"error": str(e)})
        return None


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.send(encode(msg))
    except OSError:
        pass        # the client went away; its child still runs, and is reaped


def _reap(waiting: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()


def _leave_server(listener, conns, wake, control_fd) -> None:
    """In a fresh child: drop everything of the server's (its sockets, its SIGCHLD handling)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for s in [listener, *conns]:
        s.close()
    for fd in (*wake, control_fd):
        os.close(fd)


def become(req: Request, fds: list[int]) -> None:
    """In the child: the namespace, the session, the stdio, cwd and environment it was sent."""
    if req.new_session:
        os.setsid()
    nsenter.enter(req.netns)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(req.cwd)
    os.environ.clear()
    os.environ.update(req.env)
    unbuffered = bool(req.env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), line_buffering=False)
    sys.stdout = _text_stream(1, unbuffered)
    sys.stderr = _text_stream(2, True, errors="backslashreplace")
    sys.path[0] = req.cwd          # as `python -m` puts the working directory first


def _text_stream(fd: int, unbuffered: bool, errors: str = "strict") -> io.TextIOWrapper:
    """sys.stdout / sys.stderr as a fresh interpreter builds them (PYTHONUNBUFFERED: write-through)."""
    raw = io.open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
    return io.TextIOWrapper(raw, errors=errors, write_through=unbuffered, line_buffering=os.isatty(fd))


def _remove_socket(sock_path: str) -> None:
    for remove, path in ((os.unlink, sock_path), (os.rmdir, os.path.dirname(sock_path))):
        try:
            remove(path)
        except OSError:
            pass


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python -m lab fork-server SOCKET")
    server = os.getpid()
    try:
        preload()
        if threading.active_count() != 1:    # a fork would copy a thread's held locks, not the thread
            sys.exit(f"forkserver: the pre-imports started {threading.active_count() - 1} thread(s); "
                     "cannot fork safely")
        # the pre-imported heap into the collector's permanent generation (the gc module's advice for
        # a process that forks without exec): a child's collections, its last one at exit included,
        # no longer walk it, so a child's exit does not pay for a walk over the whole pre-imported heap,
        # and pages stay shared instead of being copied when the collector touches them
        gc.freeze()
        got = serve(argv[0])
    finally:
        # however the server ends (its orchestrator gone, even before "ready" could be read; an
        # import that failed), the socket and its private folder go with it; a child returning from
        # serve() keeps them
        if os.getpid() == server:
            _remove_socket(argv[0])
    if got is None:
        return
    req, fds = got
    try:
        become(req, fds)
    except OSError as e:
        os.write(2, f"lab: cannot enter {req.netns}: {e}\n".encode())
        os._exit(126)
    sys.argv = req.module_argv()
    # what `python -m lab` does (lab/__main__.py); its SystemExit ends this child as it would end that
    # process (the request was checked to be that command line: lab.forkserver.protocol.ENTRY)
    runpy.run_module("lab", run_name="__main__", alter_sys=True)


_T0 = time.monotonic()      # imported by lab/__main__.py at the server's start: its pre-import is timed from here
