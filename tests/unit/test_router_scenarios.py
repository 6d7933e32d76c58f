"""Router scenarios: the `topology` key, a fault's `node`, the network actions, and the router's
description the agent rebuilds it from (no namespace is made here)."""
import ipaddress

import pytest
import yaml

from lab import scenario
from lab.errors import LabError, ScenarioError
from lab.topology.router import Addresses, Place, Router, parse_links
from lab.topology.services import Proxy

HEAD = """
name: t
client: recovery
duration: 30
script: ["Book me the 3pm slot tomorrow, please."]
"""


def parse(text: str):
    return scenario.parse(yaml.safe_load(HEAD + text), "t.yaml")


def test_a_router_scenario_names_its_links_and_router_faults():
    s = parse("""
topology: {router: true, links: [wifi, cell]}
timeline:
  - {at: setup_complete, plus: 0, fault: {kind: nat_reap, node: router, target: endpoint, idle_s: 20}}
  - {at: tool_call, plus: 1, action: switch_to_cell}
""")
    assert s.router_links == ["wifi", "cell"]
    assert s.timeline[0].fault.node == "router"
    s = parse("""
topology: {router: true, links: [wifi, {cell: {rtt_ms: 80, loss: 0.01}}]}
timeline:
  - {at: tool_call, plus: 1, action: switch_to_cell_overlap}
""")
    assert s.router_links == ["wifi", {"cell": {"rtt_ms": 80, "loss": 0.01}}]


def test_without_topology_nothing_changes():
    s = parse("timeline:\n  - {at: setup_complete, plus: 0, say: 0}\n")
    assert s.router_links == [] and s.topology == {}


@pytest.mark.parametrize("text, words", [
    ("topology: {router: true, links: [lte]}\ntimeline:\n  - {at: start, plus: 0, say: 0}\n", "links"),
    ("topology: {router: yes please}\ntimeline:\n  - {at: start, plus: 0, say: 0}\n", "topology.router must be true"),
    ("topology: {router: true, mtu: 1280}\ntimeline:\n  - {at: start, plus: 0, say: 0}\n", "unknown topology key"),
    ("timeline:\n  - {at: start, plus: 0, fault: {kind: mtu_blackhole, node: router, target: endpoint}}\n",
     "needs topology"),
    ("timeline:\n  - {at: start, plus: 0, fault: {kind: mtu_blackhole, node: switch, target: endpoint}}\n",
     "node must be one of"),
    ("timeline:\n  - {at: tool_call, plus: 1, action: switch_to_cell}\n", "needs topology"),
    ("topology: {router: true, links: [{wifi: {rtt_ms: 40}}]}\ntimeline:\n"
     "  - {at: start, plus: 0, fault: {kind: mtu_blackhole, node: router, target: endpoint}}\n", "cannot yet go"),
    ("endpoint: {idle_timeout_s: 20}\ntimeline:\n  - {at: start, plus: 0, say: 0}\n", "needs via: proxy"),
    ("endpoint: {via: proxy, idle_timeout_s: 0}\ntimeline:\n  - {at: start, plus: 0, say: 0}\n", "seconds > 0"),
])
def test_bad_router_scenarios_are_one_line_with_the_file(text, words):
    with pytest.raises(ScenarioError) as e:
        parse(text)
    assert words in str(e.value) and "t.yaml" in str(e.value) and "\n" not in str(e.value)


def test_the_proxy_service_passes_its_idle_timeout():
    assert Proxy(None, idle_timeout_s=20).argv()[-2:] == ["--idle-timeout", "20"]
    assert "--idle-timeout" not in Proxy(None).argv()


def test_links_parse_with_their_properties_and_refuse_the_rest():
    wifi, cell = parse_links(["wifi", {"cell": {"rtt_ms": 60}}])
    assert (wifi.slot, cell.slot, cell.rtt_ms, cell.loss) == (1, 2, 60.0, 0.0)
    for bad in ([], ["wifi", "wifi"], [{"cell": {"rtt": 5}}], [{"cell": {"loss": 1.0}}], "wifi"):
        with pytest.raises(LabError):
            parse_links(bad)


def test_addresses_give_each_link_its_own_slot_of_the_run_subnet():
    a = Addresses(ipaddress.ip_network("10.203.7.0/24"))
    wifi, cell = parse_links(["wifi", "cell"])
    assert (a.router_core, a.endpoint) == ("10.203.7.1", "10.203.7.2")
    assert (a.router_on(wifi), a.client_on(wifi), a.client_on(cell)) == ("10.203.7.17", "10.203.7.18", "10.203.7.34")


def test_the_agent_rebuilds_the_router_from_its_description():
    place = Place("r1", "ll-r1-c", "ll-r1-e", ipaddress.ip_network("10.203.7.0/24"))
    r = Router(place, parse_links(["wifi", {"cell": {"rtt_ms": 40}}]))
    again = Router.from_description(r.describe())
    assert again.ns == "ll-r1-r" and again.active.name == "wifi" and again.link("cell").rtt_ms == 40
    assert [s["kind"] for s in again.link_faults(again.link("cell"))] == ["delay"]
    with pytest.raises(LabError):
        again.link("ethernet")
