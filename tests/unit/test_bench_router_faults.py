"""lab.bench.router_faults: what its rows measure, from stand-in tables with known stamps (no root)."""
import math

from lab.bench import router_faults


class ClockTable:
    """A table whose change takes `took` s after `lag` s of getting there, on a fake wall clock."""

    def __init__(self, clock, lag: float, took: float):
        self.clock, self.lag, self.took = clock, lag, took
        self.set_up = self.added = self.cleared = 0
        self.last_apply = None
        self.fifo_refused = None
        self.cpus_held_awake = False
        self.awake_note = None

    def setup(self):
        self.set_up += 1
        return self

    def add(self, fault):
        before = self.clock.t + self.lag
        self.clock.t = before + self.took
        self.last_apply = (before, self.clock.t)
        self.clock.t += self.lag          # the reply's way back
        self.added += 1
        return fault

    def clear_all(self):
        self.cleared += 1


class Clock:
    t = 1000.0

    def time(self):
        return self.t


def test_rows_are_anchor_to_the_routers_stamp_beside_the_local_baseline(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(router_faults.time, "time", clock.time)
    monkeypatch.setattr(router_faults.time, "sleep", lambda s: None)
    router, local = ClockTable(clock, lag=0.0004, took=0.0005), ClockTable(clock, lag=0.0, took=0.0005)
    res = router_faults.measure(local, router, "10.0.0.1", n=5)
    assert router.set_up == local.set_up == 1 and router.added == local.added == 7 == router.cleared
    assert len(res["at_router_ms"]) == 5 and all(math.isclose(x, 0.9) for x in res["at_router_ms"])
    assert all(math.isclose(x, 1.3) for x in res["returned_ms"])
    assert all(math.isclose(x, 0.5) for x in res["service_ms"] + res["local_ms"])
    text = "\n".join(router_faults.lines("test", res))
    assert "p50 0.90 / p99 0.90 ms" in text and "met)" in text and "p50 1.80x, p99 1.80x" in text


def test_a_router_over_the_goal_says_not_met():
    res = {"first_ms": [3.0, 1.0], "at_router_ms": [2.5], "returned_ms": [2.6], "service_ms": [2.0], "local_ms": [1.0]}
    assert "NOT met" in "\n".join(router_faults.lines("test", res))


def test_the_router_services_own_policy_is_said_beside_the_agents(monkeypatch):
    # the service answers its ping with why its changes have no SCHED_FIFO; the bench says it, not
    # the agent's (a router container may have a real-time budget the client container lacks)
    from lab.topology import router_service

    table = router_service.RemoteTable("127.0.0.1:1")
    monkeypatch.setattr(table, "_ask", lambda req: {"ok": True, "fifo_refused": "Operation not permitted"})
    table.setup()
    assert table.fifo_refused == "Operation not permitted"
    monkeypatch.setattr(router_service, "fifo_refused", lambda: None)
    class Held:
        cpus_held_awake, awake_note = True, None
    assert router_service.answer(Held(), {"op": "ping"}) == {"ok": True, "fifo_refused": None, "cpus_awake": True,
                                                              "awake_note": None}
    monkeypatch.setattr(table, "_ask", lambda req: {"ok": True, "cpus_awake": False, "awake_note": "refused"})
    table._sock = None
    table.setup()
    assert (table.cpus_held_awake, table.awake_note) == (False, "refused")
    res = {"first_ms": [1.0, 1.0], "at_router_ms": [1.0], "returned_ms": [1.1], "service_ms": [0.5], "local_ms": [0.5],
           "router_fifo_refused": None, "fifo_refused": "Operation not permitted"}
    head = router_faults.lines("test", res)[0]
    assert "the router's fault changes under SCHED_FIFO" in head
    assert "the agent's fault changes as ordinary tasks (SCHED_FIFO refused: Operation not permitted)" in head


def test_each_tables_own_policy_is_what_the_rows_say(monkeypatch):
    # the bench asks each table whose policy its changes ran under, not the table's type
    from netem import realtime
    from netem.table import FaultTable

    clock = Clock()
    monkeypatch.setattr(router_faults.time, "time", clock.time)
    monkeypatch.setattr(router_faults.time, "sleep", lambda s: None)
    router, local = ClockTable(clock, lag=0.0, took=0.0005), ClockTable(clock, lag=0.0, took=0.0005)
    router.fifo_refused, local.fifo_refused = "no budget", None
    local.cpus_held_awake = True
    res = router_faults.measure(local, router, "10.0.0.1", n=1)
    assert (res["router_fifo_refused"], res["fifo_refused"]) == ("no budget", None)
    assert (res["router_awake"], res["awake"]) == (False, True)
    head = router_faults.lines("test", res)[0]
    assert "the agent's fault changes under SCHED_FIFO, idle CPUs kept awake" in head
    assert "the router's fault changes as ordinary tasks (SCHED_FIFO refused: no budget);" in head
    # a table that could not hold them awake says why, where the figure is read
    router.awake_note = "no /dev/cpu_dma_latency (Permission denied): idle CPUs may halt"
    head = router_faults.lines("test", router_faults.measure(local, router, "10.0.0.1", n=1))[0]
    assert "no budget), idle CPUs not kept awake (no /dev/cpu_dma_latency (Permission denied)" in head
    monkeypatch.setattr(realtime, "_fifo_refused", "Operation not permitted")
    assert FaultTable(handle_signals=False).fifo_refused == "Operation not permitted"
