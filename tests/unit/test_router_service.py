"""The router service's protocol (lab/topology/router_service.py) and the Router on Docker's
addresses: requests answered from a stand-in FaultTable over a real loopback socket, no root."""
import json
import socket
import threading

import pytest

from lab.errors import LabError
from lab.topology.router import Assigned, Place, Router, parse_links
from lab.topology.router_service import RemoteTable, accept_forever, answer
from netem.errors import RuleError
from netem.faults import build

EP = {"dst": "172.30.0.2", "dport": 8443}
ROUTER_SPECS = [{"kind": "nat_reap", "name": "reap", "target": EP, "idle_s": 5},
                {"kind": "relay_age", "name": "relay", "target": EP, "age_s": 1.5, "mode": "rst"},
                {"kind": "mtu_blackhole", "name": "mtu", "target": EP, "mtu": 1000}]


class StandInTable:
    """A FaultTable's add/clear_all (and what a ping reads) as the service calls them; `refuse`
    makes add fail like iptables."""

    def __init__(self, refuse: str | None = None):
        self.added, self.cleared, self.refuse = [], 0, refuse
        self.last_apply = (1.0, 1.002)
        self.cpus_held_awake, self.awake_note = True, None

    def add(self, fault):
        if self.refuse:
            raise RuleError(self.refuse)
        fault.path = "kernel"
        self.added.append(fault.spec)
        return fault

    def clear_all(self):
        self.cleared += 1


@pytest.fixture
def served():
    """(a RemoteTable, the stand-in table behind it) over a real loopback connection."""
    table = StandInTable()
    ls = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=accept_forever, args=(ls, table), daemon=True).start()
    remote = RemoteTable(f"127.0.0.1:{ls.getsockname()[1]}")
    yield remote, table
    remote._drop()
    ls.close()


@pytest.mark.parametrize("spec", ROUTER_SPECS, ids=lambda s: s["kind"])
def test_a_fault_built_by_the_agent_is_rebuilt_the_same_by_the_service(spec):
    # the agent sends the normalised spec; the service must build the very same fault from it
    once = build(spec).spec
    assert build(once).spec == once


def test_the_service_applies_what_the_agent_adds_and_clears(served):
    remote, table = served
    fault = remote.add(build(ROUTER_SPECS[2]))
    assert fault.path == "kernel" and table.added == [build(ROUTER_SPECS[2]).spec]
    remote.clear_all()
    remote.close()
    assert table.cleared == 2        # close() clears the router's faults too (the agent's heal)


def test_a_refused_fault_is_one_line_naming_the_reason():
    reply = answer(StandInTable(refuse="iptables-restore refused the lab's rules: line 3 failed"),
                   {"op": "add", "spec": ROUTER_SPECS[0]})
    assert reply == {"ok": False, "error": "iptables-restore refused the lab's rules: line 3 failed"}
    assert answer(StandInTable(), {"op": "add", "spec": {"kind": "nat_reap", "target": EP}})["error"].count("idle_s")
    assert "unknown request" in answer(StandInTable(), {"op": "reboot"})["error"]
    assert answer(StandInTable(), {"op": "add"})["error"].startswith("bad request")


def test_the_agent_gets_the_refusal_as_one_lab_error(served):
    remote, table = served
    table.refuse = "no conntrack"
    with pytest.raises(LabError, match="router service refused add: no conntrack"):
        remote.add(build(ROUTER_SPECS[0]))


def test_a_service_error_is_one_line_and_the_connection_stays(served):
    # an unexpected error in the service answers as a refusal; it no longer drops the connection,
    # which the agent would have read as a dead router after its one reconnect
    remote, table = served
    remote.setup()
    sock = remote._sock
    table.add = lambda fault: 1 / 0
    with pytest.raises(LabError, match="router service refused add: router service error: ZeroDivisionError"):
        remote.add(build(ROUTER_SPECS[0]))
    remote.clear_all()
    assert remote._sock is sock and table.cleared == 1


def test_an_unreachable_router_service_is_one_lab_error():
    ls = socket.create_server(("127.0.0.1", 0))
    port = ls.getsockname()[1]
    ls.close()                       # nothing listens there now
    with pytest.raises(LabError, match=f"router service at 127.0.0.1:{port} unreachable"):
        RemoteTable(f"127.0.0.1:{port}").clear_all()


def test_a_compose_router_description_carries_dockers_addresses_and_the_service():
    assigned = Assigned(routed="172.30.0.0/24", client={"wifi": ("172.31.0.3", 24), "cell": ("172.32.0.3", 24)},
                        router={"wifi": "172.31.0.2", "cell": "172.32.0.2"})
    r = Router(Place("run", None, None, None), parse_links(["wifi", "cell"]), assigned=assigned,
               control="172.33.0.2:8450")
    again = Router.from_description(r.describe())
    wifi, cell = again.links
    assert again.addresses == assigned and again.addresses.links() == ("wifi", "cell")
    assert (again.addresses.client_on(cell), again.addresses.prefixlen(cell), again.addresses.router_on(wifi)) == \
        ("172.32.0.3", 24, "172.31.0.2")
    assert isinstance(again.table(), RemoteTable) and again.table().address == "172.33.0.2:8450"
    assert again.topo.ns_client is None     # the switch acts on the agent's own container


def test_a_router_scenario_is_refused_before_anything_starts_where_it_cannot_run():
    from lab.run import preflight

    with pytest.raises(LabError, match="netns and compose topologies, not pod"):
        preflight(["n1-network-switch"], "probe", "pod", "twin")


def test_the_service_puts_the_links_faults_in_before_it_listens():
    from lab.topology.services import RouterService

    spec = {"kind": "delay", "name": "link-wifi-rtt", "target": {"dst": "172.31.0.3"}, "direction": "both", "delay_ms": 20}
    argv = RouterService(object(), "172.30.0.2", "run", faults=(spec,)).argv()
    assert argv[argv.index("--fault") + 1] == json.dumps(spec) and "172.30.0.2:8450" in argv


def test_setup_connects_once_and_add_keeps_the_routers_own_stamps(served):
    # setup() is the agent's early connection; the stamps are the service's, for `lab bench faults`
    remote, table = served
    assert remote._sock is None
    remote.setup()
    sock = remote._sock
    assert sock is not None and remote.setup() is remote and remote._sock is sock and table.added == []
    assert remote.cpus_held_awake is True          # the service's table's, from the ping
    remote.add(build(ROUTER_SPECS[0]))
    assert remote.last_apply == (1.0, 1.002) and remote._sock is sock
