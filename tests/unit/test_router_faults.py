"""The middlebox fault kinds (nat_reap, relay_age, mtu_blackhole): specs and the rules they describe.
Their behaviour on the wire is tests/integration/test_router.py."""
import pytest

from netem import faults
from netem.errors import FaultSpecError
from netem.kernel import Capabilities

EP = {"dst": "10.203.9.2", "dport": 8443}


def test_nat_reap_drops_only_invalid_packets_of_the_target():
    f = faults.build({"kind": "nat_reap", "target": EP, "idle_s": 5})
    r = f.rules()
    assert all("--ctstate INVALID" in l and "-p tcp" in l for l in r.out + r.in_)
    assert r.out[-1].endswith("-j NFQUEUE --queue-num 99") and "--dport 8443" in r.out[-1]
    assert "--sport 8443" in r.in_[-1]
    assert f.sysctls()["nf_conntrack_tcp_timeout_established"] == 5
    assert f.sysctls()["nf_conntrack_tcp_loose"] == 0  # else conntrack picks a reaped flow up again


def test_rst_mode_resets_but_never_answers_a_reset():
    r = faults.build({"kind": "relay_age", "target": EP, "age_s": 1.5, "mode": "rst"}).rules()
    assert all("REJECT --reject-with tcp-reset" in l for l in (r.out[-1], r.in_[-1]))
    assert all("! --tcp-flags RST RST" in l for l in r.out + r.in_)


def test_mtu_blackhole_drops_large_packets_and_frag_needed():
    r = faults.build({"kind": "mtu_blackhole", "target": EP, "mtu": 1000, "direction": "out"}).rules()
    assert r.in_ == []
    assert any("--length 1001:65535" in l and "NFQUEUE" in l for l in r.out)
    assert any("fragmentation-needed -j DROP" in l for l in r.out)


@pytest.mark.parametrize("spec, words", [
    ({"kind": "nat_reap", "target": EP}, "idle_s"),
    ({"kind": "nat_reap", "target": EP, "idle_s": 2.5}, "whole number"),
    ({"kind": "nat_reap", "target": EP, "idle_s": 5, "mode": "fin"}, "mode"),
    ({"kind": "relay_age", "target": {"dst": "10.0.0.1", "dport": 53, "proto": "udp"}, "age_s": 3}, "tcp"),
    ({"kind": "relay_age", "target": EP, "age_s": 0}, "age_s"),
    ({"kind": "relay_age", "target": EP, "age_s": 3, "mode": "rst", "queue": 5}, "queue"),
    ({"kind": "mtu_blackhole", "target": EP, "mtu": 40}, "mtu"),
    ({"kind": "mtu_blackhole", "target": EP, "size": 40}, "unknown field"),
])
def test_bad_specs_are_one_line(spec, words):
    with pytest.raises(FaultSpecError) as e:
        faults.check_spec(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_kinds_say_what_the_kernel_must_have():
    caps = Capabilities(iptables=True, nflog=True, nfqueue=True, reject=True)
    assert faults.unmet("nat_reap", caps) and "conntrack" in faults.unmet("nat_reap", caps)[0]
    caps.conntrack = caps.length = True
    assert faults.unmet("relay_age", caps) == [] and faults.unmet("mtu_blackhole", caps) == []


def test_relay_watcher_wakes_at_the_next_deadline_or_scan_and_cuts_due_flows_oldest_first():
    from netem.kinds.relay_age import due_and_next, scan_s
    a, b, c = ("10.0.0.2", 1, "10.0.0.1", 443), ("10.0.0.2", 2, "10.0.0.1", 443), ("10.0.0.2", 3, "10.0.0.1", 443)
    due, wake = due_and_next({a: 900, b: 800, c: 5_000}, now=1_000, next_scan=3_000)
    assert due == [b, a] and wake == 3_000        # both past their deadline, the older first; next: the scan
    due, wake = due_and_next({c: 2_000}, now=1_000, next_scan=3_000)
    assert due == [] and wake == 2_000            # a deadline before the scan wakes the watcher for it
    assert due_and_next({}, now=1_000, next_scan=3_000) == ([], 3_000)
    assert scan_s(150) == 0.25 and scan_s(0.4) == 0.1   # a short relay is scanned within a quarter of its age


def test_relay_watcher_opens_conntrack_inside_its_thread_never_through_pyroute2s_forking_netns(monkeypatch):
    # never pyroute2's netns= in the agent's process (netem.kernel.in_netns says why)
    import threading
    import pyroute2
    from netem.conntrack import ForgottenFlowFault
    from netem.kinds.relay_age import RelayAge
    made = []

    class FakeCT:
        def __init__(self, **kw):
            made.append((kw, threading.current_thread().name))
        def dump(self):
            return iter(())
        def close(self):
            pass

    monkeypatch.setattr(pyroute2, "NFCTSocket", FakeCT)
    # the conntrack sysctls and rules are the integration tests' (test_router.py): not here
    monkeypatch.setattr(ForgottenFlowFault, "install", lambda self, netns: None)
    monkeypatch.setattr(ForgottenFlowFault, "uninstall", lambda self, netns: None)
    f = RelayAge({"kind": "relay_age", "name": "r", "target": EP, "age_s": 1.5})
    f.install(None)
    f.uninstall(None)
    assert made == [({}, "relay_age r")]
