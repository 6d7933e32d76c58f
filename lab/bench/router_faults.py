"""The router part of `lab bench faults`: a `node: router` fault, anchor -> rule in force AT the router.

Per iteration, from the agent's place (t = the anchor: the moment the agent's step calls the
table's add), alternating with the in-run baseline so the machine's load falls on both alike:

  at router  t -> the router's iptables-restore of the change returned (the nf_tables commit is
             synchronous: the rule is in force). Netns: the agent's own FaultTable on the router
             namespace (what `Router.table()` makes), stamped in the agent. Compose: the router
             service's table in the router container (`RemoteTable` over the ctl network), stamped
             by the service with time.time(): CLOCK_REALTIME, which every container shares with the
             host and the agent's events, so the stamp and the anchor are on one clock.
  returned   t -> the agent's add() returned (Compose: the router's stamp plus the reply's way back).
  service    the router's own apply, its iptables-restore write -> returned (its own two stamps).
  baseline   the agent's own fault in the client (a FaultTable in its namespace): the same change
             with no hop, measured in the same run.

Reusable pieces: `measure(local, router, dst, n, gap)` (the rows; any two tables with add and
last_apply), `worker(config)` (in the compose client container), `lines(where, res)` (the report).
"""
from __future__ import annotations

import os
import time

from lab.stats.order import quantile
from lab.topology.router_service import RemoteTable
from netem.faults import build
from netem.table import FaultTable

GOAL_P99_MS = 2.0


def _spec(dst: str, i: int) -> dict:
    # a router fault as the scenarios write one (target: endpoint), its own name each round
    return {"kind": "blackhole", "name": f"bench-router-{i}", "mode": "silent", "direction": "out",
            "target": {"dst": dst}}


def _once(table, dst: str, i: int) -> tuple[float, float, float, float]:
    """(anchor, rule in force, returned, the table's own apply ms) for one add; cleared after."""
    f = build(_spec(dst, i))
    t = time.time()
    table.add(f)
    t_ret = time.time()
    before, after = table.last_apply
    table.clear_all()
    return t, after, t_ret, (after - before) * 1e3


def measure(local, router, dst: str, n: int, gap: float = 0.05) -> dict:
    """n rounds (after two warm-up rounds), each: a fault on the router, then the same on `local`;
    both tables set up first, as the agent does before its first anchor (Agent._prepare_tables).
    `fifo_refused` / `router_fifo_refused`: why each table's changes could not have SCHED_FIFO
    (None: they had it), as the table answers (`fifo_refused`)."""
    router.setup()
    local.setup()
    out: dict = {"first_ms": [], "at_router_ms": [], "returned_ms": [], "service_ms": [], "local_ms": []}
    for i in range(n + 2):
        time.sleep(gap)   # faults in a scenario are seconds apart: the kernel's deferred free is done
        t, at, ret, own = _once(router, dst, i)
        time.sleep(gap)
        lt, lat, _lret, _lown = _once(local, dst, i)
        if i == 0:   # a run's first fault: the table's first change (Compose: the connection's first add)
            out["first_ms"] = [(at - t) * 1e3, (lat - lt) * 1e3]
        if i >= 2:
            out["at_router_ms"].append((at - t) * 1e3)
            out["returned_ms"].append((ret - t) * 1e3)
            out["service_ms"].append(own)
            out["local_ms"].append((lat - lt) * 1e3)
    # each table says whose policy its changes ran under: a FaultTable this process's, a
    # RemoteTable the router service's
    out["fifo_refused"] = local.fifo_refused
    out["router_fifo_refused"] = router.fifo_refused
    out["awake"], out["router_awake"] = local.cpus_held_awake, router.cpus_held_awake
    out["awake_note"], out["router_awake_note"] = local.awake_note, router.awake_note
    return out


def worker(config: dict) -> dict:
    """In the compose client container, as the agent: its own FaultTable and the router service's."""
    local, router = FaultTable(handle_signals=False), RemoteTable(config["control"])
    try:
        return measure(local, router, config["dst"], config["n"], config.get("gap", 0.05))
    finally:
        router.close()
        local.close()


def load_average() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def lines(where: str, res: dict) -> list[str]:
    a, r, s, b = (res[k] for k in ("at_router_ms", "returned_ms", "service_ms", "local_ms"))
    a99, b99, a50, b50 = quantile(a, .99), quantile(b, .99), quantile(a, .5), quantile(b, .5)
    met = "met" if a99 <= GOAL_P99_MS else "NOT met"
    policy = "; ".join(
        f"{who}'s fault changes " + ("under SCHED_FIFO" if why is None else f"as ordinary tasks (SCHED_FIFO refused: {why})")
        + (", idle CPUs kept awake" if awake else f", idle CPUs not kept awake ({note})" if note else "")
        for who, why, awake, note in (
            ("the router", res.get("router_fifo_refused"), res.get("router_awake"), res.get("router_awake_note")),
            ("the agent", res.get("fifo_refused"), res.get("awake"), res.get("awake_note"))))
    return [
        f"router faults ({where}), n={len(a)}, {load_average()}; {policy}:",
        f"  anchor -> rule in force at the router  p50 {a50:.2f} / p99 {a99:.2f} ms   "
        f"(goal p99 <= {GOAL_P99_MS:g} ms on a quiet machine: {met})",
        f"  anchor -> the agent's add returned     p50 {quantile(r, .5):.2f} / p99 {quantile(r, .99):.2f} ms",
        f"  the router's own iptables-restore      p50 {quantile(s, .5):.2f} / p99 {quantile(s, .99):.2f} ms",
        f"  a run's first fault (its table set up before the anchor): at the router "
        f"{res['first_ms'][0]:.2f} ms, the agent's own {res['first_ms'][1]:.2f} ms",
        f"  baseline, the agent's own fault (client, same run) p50 {b50:.2f} / p99 {b99:.2f} ms"
        f"  ->  router / baseline: p50 {a50 / b50:.2f}x, p99 {a99 / b99:.2f}x",
    ]
