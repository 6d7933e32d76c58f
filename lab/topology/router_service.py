"""The router's FaultTable, and the service that lets the agent use it from another container.

In network namespaces the agent enters the router namespace itself (`Router.table()` is a local
FaultTable on `ll-<run>-r`). In Compose the router is a container of its own, whose chains the agent
in the client container cannot reach; there `python -m lab.topology.router_service` runs in the
router container (started with the router node's `popen`, like the twin on the endpoint) and holds
the same FaultTable, made by the same `forwarding_table()`. The agent reaches it through
`RemoteTable`, which has the FaultTable methods the agent calls (`add`, `clear_all`, `close`).

    agent (client container) ── ctl network (client and router only) ──> router service
        {"op": "add", "spec": {...}}   ->  {"ok": true, "name": ..., "path": ..., "t": [before, after]}
        {"op": "clear"}                ->  {"ok": true}
        {"op": "ping"}                 ->  {"ok": true, "fifo_refused": null | "<why>", "cpus_awake": bool}
                                           (RemoteTable.setup: the connection made early; whether
                                            the service's changes run under SCHED_FIFO, and whether
                                            its table keeps idle CPUs from halting)
        anything refused               ->  {"ok": false, "error": "<one line>"}

One JSON object a line over one TCP connection the agent keeps open (a request costs a round trip
on a bridge, well under a millisecond, plus the rule change itself, as in netns). The service
listens only on the router's address on the lab's internal `ctl` network, which carries no
scenario traffic: the faults and the switch never touch it.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import threading

from lab.errors import LabError
from netem.errors import NetemError
from netem.faults import build
from netem.kernel import write_sysctl
from netem.realtime import fifo_refusal, fifo_refused, note_fifo_refused
from netem.table import ROUTER_HOOKS, FaultTable

PORT = 8450
READY_LINE = "router service on"
TIMEOUT_S = 10.0     # a request the service has not answered by then is a dead router
# what every router namespace or container forwards with: forwarding on, a strict reverse-path
# filter (a packet from an address that does not belong behind the link it came by is dropped, as an
# access network does with a phone's old address), and conntrack start stamps (relay_age's ages)
FORWARDING_SYSCTLS = (("net.ipv4.ip_forward", 1), ("net.ipv4.conf.all.rp_filter", 1),
                      ("net.ipv4.conf.default.rp_filter", 1), ("net.netfilter.nf_conntrack_timestamp", 1))


def forwarding_table(ns: str | None, run_id: str, handle_signals: bool = False) -> FaultTable:
    """The router's sysctls set and its FaultTable ready, chains hooked from FORWARD (ROUTER_HOOKS),
    in namespace `ns` (None: this one, a router container's)."""
    for key, value in FORWARDING_SYSCTLS:
        write_sysctl(ns, key, value)
    table = FaultTable(ns, hooks=ROUTER_HOOKS, handle_signals=handle_signals)
    table.setup()
    # conntrack tracks every forwarded flow from its first packet, as on a NAT box: a middlebox
    # fault started mid-flow (nf_conntrack_tcp_loose 0) must find the flow's entry there
    table.restore('*filter\n-A FORWARD -m conntrack --ctstate NEW,ESTABLISHED,RELATED,INVALID '
                  f'-m comment --comment "livelab {run_id} conntrack on"\nCOMMIT\n')
    return table


# ---- the service (in the router container) ---------------------------------------------------------
def answer(table: FaultTable, request: dict) -> dict:
    """One request's reply; a refused fault or a bad request is {"ok": false, "error": one line}."""
    op = request.get("op")
    try:
        if op == "add":
            fault = table.add(build(request["spec"]))
            return {"ok": True, "name": fault.name, "path": fault.path, "t": list(table.last_apply or ())}
        if op == "clear":
            table.clear_all()
            return {"ok": True}
        if op == "ping":
            return {"ok": True, "fifo_refused": fifo_refused(), "cpus_awake": table.cpus_held_awake,
                    "awake_note": table.awake_note}
        return {"ok": False, "error": f"unknown request {op!r} (add, clear, ping)"}
    except (NetemError, LabError) as e:
        return {"ok": False, "error": str(e)}
    except (KeyError, TypeError, ValueError) as e:     # a malformed request, not a refused fault
        return {"ok": False, "error": f"bad request: {type(e).__name__}: {e}"}
    except Exception as e:     # the service's own bug: the agent gets it as one line, and the connection lives
        return {"ok": False, "error": f"router service error: {type(e).__name__}: {e}"}


def _serve_connection(table: FaultTable, conn: socket.socket) -> None:
    with conn, conn.makefile("rwb") as f:
        for line in f:
            try:
                request = json.loads(line)
            except json.JSONDecodeError as e:
                reply = {"ok": False, "error": f"not JSON: {e}"}
            else:
                reply = answer(table, request)
            f.write(json.dumps(reply).encode() + b"\n")
            f.flush()


def accept_forever(ls: socket.socket, table) -> None:
    """Serve every connection to `ls` with `table`, each in a thread, until `ls` is closed."""
    while True:
        try:
            conn, _ = ls.accept()
        except OSError:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_connection, args=(table, conn), daemon=True).start()


def serve(host: str, port: int, run_id: str, start_faults: tuple[dict, ...] = ()) -> None:
    """Serve the router's table on host:port; `start_faults` (the access links' RTT and loss:
    Router.link_faults) go in first, so the links' faults and the agent's share one table.

    The service runs under SCHED_FIFO where the container allows it (CAP_SYS_NICE): a fault's
    onset is this thread woken by the request and the iptables-restore it spawns (which inherits
    the policy, as the request threads do) getting a CPU, and as ordinary processes on a busy
    machine both waited milliseconds (lab bench faults, docs/benchmarks.md). Refused: a note on
    stderr, and the service runs as an ordinary process. The container asks for no real-time
    budget of its own: where cgroup v1 group scheduling needs one, a budget small enough to share
    throttled the service in the middle of a change (tails of 75-175 ms, docs/benchmarks.md "Router
    faults in Compose"), and would throttle the link's delay workers beside it the same way."""
    why = fifo_refusal()
    if why is not None:   # the one line for the process: its table's changes will not ask again
        note_fifo_refused(why)
    table = forwarding_table(None, run_id, handle_signals=True)   # SIGTERM at down: the table heals
    for spec in start_faults:
        table.add(build(spec))
    ls = socket.create_server((host, port))
    print(f"{READY_LINE} {host}:{port}", flush=True)
    try:
        accept_forever(ls, table)
    finally:
        table.close()


# ---- the agent's side --------------------------------------------------------------------------------
class RemoteTable:
    """The router service's FaultTable as the agent uses one: `setup()`, `add(fault)`, `clear_all()`, `close()`.
    Any failure (no answer, a refused fault) is one LabError line, which ends the run."""

    def __init__(self, address: str):
        self.address = address
        self._sock: socket.socket | None = None
        self._file = None
        self._lock = threading.Lock()
        # the service's (wall time before, after) its iptables-restore of the last change: the
        # router's own clock is the host's (containers share CLOCK_REALTIME), as FaultTable.last_apply
        self.last_apply: tuple[float, float] | None = None
        # why the service's fault changes run as ordinary tasks (None: under SCHED_FIFO), and whether
        # its table holds idle CPUs awake (FaultTable.cpus_held_awake) and if not why, from setup()
        self.fifo_refused: str | None = None
        self.cpus_held_awake = False
        self.awake_note: str | None = None

    def _connect(self) -> None:
        host, port = self.address.rsplit(":", 1)
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        except OSError as e:
            raise LabError(f"router service at {self.address} unreachable: {e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self._sock.makefile("rwb")

    def _ask(self, request: dict) -> dict:
        with self._lock:
            for attempt in (1, 2):      # one reconnect: a connection the service dropped is not a dead router
                if self._sock is None:
                    self._connect()
                try:
                    self._file.write(json.dumps(request).encode() + b"\n")
                    self._file.flush()
                    line = self._file.readline()
                    if line:
                        break
                    raise ConnectionError("the service closed the connection")
                except OSError as e:
                    self._drop()
                    if attempt == 2:
                        raise LabError(f"router service at {self.address}: {e}") from None
        reply = json.loads(line)
        if not reply.get("ok"):
            raise LabError(f"router service refused {request.get('op')}: {reply.get('error')}")
        return reply

    def setup(self) -> "RemoteTable":
        """Connect and ask once (idempotent): the service's chains are set up already, so what a first
        fault would otherwise pay is the connection and the service's first request."""
        if self._sock is None:
            reply = self._ask({"op": "ping"})
            self.fifo_refused, self.cpus_held_awake = reply.get("fifo_refused"), bool(reply.get("cpus_awake"))
            self.awake_note = reply.get("awake_note")
        return self

    def add(self, fault):
        """Apply `fault` (built here from the scenario's spec, so it was checked here) on the router."""
        reply = self._ask({"op": "add", "spec": fault.spec})
        fault.path = reply.get("path")
        self.last_apply = tuple(reply["t"]) if reply.get("t") else None
        return fault

    def clear_all(self) -> None:
        self._ask({"op": "clear"})

    def close(self) -> None:
        """Clear the router's faults (its chains stay until the service ends with the topology)."""
        try:
            self.clear_all()
        finally:
            self._drop()

    def _drop(self) -> None:
        for thing in (self._file, self._sock):
            try:
                if thing is not None:
                    thing.close()
            except OSError:
                pass
        self._sock = self._file = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.topology.router_service",
                                description="the router's faults for an agent in another container")
    p.add_argument("--listen", required=True, help="ADDRESS:PORT (the router's address on the ctl network)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--fault", action="append", default=[], metavar="SPEC_JSON",
                   help="a fault applied before the service listens (an access link's RTT or loss)")
    a = p.parse_args(argv)
    host, port = a.listen.rsplit(":", 1)
    try:
        serve(host, int(port), a.run_id, tuple(json.loads(f) for f in a.fault))
    except (NetemError, LabError, OSError) as e:
        print(f"router service: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
