"""Fault specs, the registry, and the exact iptables-restore text the faults produce (pure)."""
import pytest

from netem.errors import CapabilityMissing, FaultSpecError, FaultUnsupported, NetemError
from netem.fault import InstalledFault, RuleFault
from netem.faults import REGISTRY, build, kinds
from netem.kinds.blackhole import Blackhole
from netem.kinds.loss import Loss
from netem.kinds.netem import Netem
from netem.kinds.reject import Reject
from netem.iptables import render_restore

EP = "10.203.7.2"
FLOW = {"src": "10.203.7.1", "sport": 40000, "dst": EP, "dport": 8443}
NFLOG = "-j NFLOG --nflog-group 5 --nflog-threshold 1 --nflog-prefix"


def test_registry_lists_every_kind():
    assert kinds() == ["blackhole", "delay", "duplicate", "loss", "mtu_blackhole", "nat_reap", "netem", "reject",
                       "relay_age", "reorder"]
    assert REGISTRY["blackhole"] is Blackhole and REGISTRY["loss"] is Loss
    assert isinstance(build({"kind": "reject", "target": {"dst": EP}}), Reject)
    assert isinstance(build({"kind": "netem", "dev": "eth0", "delay_ms": 50}), Netem)


def test_errors_carry_the_lab_exit_codes_without_being_lab_errors():
    assert issubclass(FaultSpecError, NetemError) and NetemError.__mro__[1] is Exception
    assert issubclass(FaultUnsupported, CapabilityMissing) and FaultUnsupported("x").code == 3
    assert FaultSpecError("x").code == 2


def test_defaults_are_filled_in():
    f = build({"kind": "blackhole", "target": {"dst": EP, "dport": 8443}})
    assert f.name == "blackhole"
    assert f.spec == {"kind": "blackhole", "name": "blackhole", "target": {"dst": EP, "dport": 8443, "proto": "tcp"},
                      "direction": "both", "mode": "silent", "queue": 99}
    e = build({"kind": "blackhole", "name": "b", "mode": "eperm", "target": {"dst": EP}})
    assert "queue" not in e.spec and e.spec["target"]["proto"] == "any"   # no port: every protocol
    assert build({"kind": "reject", "target": {"dst": EP}}).spec["target"]["proto"] == "tcp"


@pytest.mark.parametrize("spec, words", [
    ("nope", "must be an object"),
    ({"kind": "freeze"}, "unknown fault kind 'freeze'; known kinds: blackhole, delay, duplicate, loss, mtu_blackhole, nat_reap, netem, reject, relay_age, reorder"),
    ({}, "unknown fault kind None"),
    ({"kind": "blackhole"}, "target is required"),
    ({"kind": "blackhole", "target": {"dst": EP}, "mode": "drop"}, "mode must be silent"),
    ({"kind": "blackhole", "target": {"dst": EP}, "direction": "up"}, "direction must be both, out or in"),
    ({"kind": "blackhole", "target": {"dst": EP}, "colour": 1}, "unknown field(s) ['colour']"),
    ({"kind": "blackhole", "target": {"dst": "example.com"}}, "target.dst must be an IPv4 address or network"),
    ({"kind": "blackhole", "target": {"dst": "fd00::1"}}, "IPv6 is not supported"),
    ({"kind": "blackhole", "target": {"dst": EP, "dport": 0}}, "target.dport must be a port number"),
    ({"kind": "blackhole", "target": {"src": "10.203.7.1", "dst": EP, "dport": 1}}, "missing ['sport']"),
    ({"kind": "blackhole", "target": {"dst": EP, "proto": "sctp"}}, "target.proto must be tcp, udp or any"),
    ({"kind": "blackhole", "target": {"dst": EP, "dport": 80, "proto": "any"}}, "dport needs proto tcp or udp"),
    ({"kind": "blackhole", "target": {"dst": EP}, "mode": "eperm", "queue": 3}, "queue only applies to mode silent"),
    ({"kind": "blackhole", "name": "has space", "target": {"dst": EP}}, "name must be 1-32 characters"),
    ({"kind": "loss", "target": {"dst": EP}}, "p (the drop probability"),
    ({"kind": "loss", "target": {"dst": EP}, "p": 1.5}, "0 < p <= 1"),
    ({"kind": "loss", "target": {"dst": EP}, "p": 0}, "0 < p <= 1"),
    ({"kind": "loss", "target": {"dst": EP}, "p": True}, "0 < p <= 1"),
    ({"kind": "netem", "delay_ms": 5}, "dev must be an interface name"),
    ({"kind": "netem", "dev": "eth0"}, "at least one of delay_ms, rate, loss"),
    ({"kind": "netem", "dev": "eth0", "jitter_ms": 5}, "jitter_ms needs delay_ms"),
    ({"kind": "netem", "dev": "eth0", "rate": "fast"}, "rate must look like 1mbit"),
    ({"kind": "netem", "dev": "eth0", "loss": 30}, "loss must be a probability 0..1"),
])
def test_bad_specs_say_what_is_wrong(spec, words):
    with pytest.raises(FaultSpecError) as e:
        build(spec)
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_silent_blackhole_of_one_flow_both_ways():
    f = build({"kind": "blackhole", "name": "b1", "target": FLOW})
    out = "-s 10.203.7.1/32 -d 10.203.7.2/32 -p tcp --sport 40000 --dport 8443"
    in_ = "-s 10.203.7.2/32 -d 10.203.7.1/32 -p tcp --sport 8443 --dport 40000"
    assert render_restore([f]) == (
        "*filter\n"
        ":LL_OUT - [0:0]\n"
        ":LL_IN - [0:0]\n"
        f'-A LL_OUT {out} {NFLOG} "ll blackhole b1 out"\n'
        f"-A LL_OUT {out} -j NFQUEUE --queue-num 99\n"
        f'-A LL_IN {in_} {NFLOG} "ll blackhole b1 in"\n'
        f"-A LL_IN {in_} -j NFQUEUE --queue-num 99\n"
        "COMMIT\n")


def test_eperm_blackhole_of_a_destination_out_only():
    f = build({"kind": "blackhole", "name": "b3", "mode": "eperm", "direction": "out",
               "target": {"dst": EP, "dport": 8443}})
    assert render_restore([f]).splitlines()[3:] == [
        f'-A LL_OUT -d 10.203.7.2/32 -p tcp --dport 8443 {NFLOG} "ll blackhole b3 out"',
        "-A LL_OUT -d 10.203.7.2/32 -p tcp --dport 8443 -j DROP",
        "COMMIT"]


def test_destination_network_and_any_protocol_in_only():
    f = build({"kind": "blackhole", "name": "n", "direction": "in", "queue": 7,
               "target": {"dst": "10.203.7.0/24", "proto": "any"}})
    assert render_restore([f]).splitlines()[3:] == [
        f'-A LL_IN -s 10.203.7.0/24 {NFLOG} "ll blackhole n in"',
        "-A LL_IN -s 10.203.7.0/24 -j NFQUEUE --queue-num 7",
        "COMMIT"]


def test_reject_logs_the_reset_the_kernel_delivers_and_never_rejects_resets():
    f = build({"kind": "reject", "name": "r", "target": FLOW})
    out = "-s 10.203.7.1/32 -d 10.203.7.2/32 -p tcp --sport 40000 --dport 8443"
    in_ = "-s 10.203.7.2/32 -d 10.203.7.1/32 -p tcp --sport 8443 --dport 40000"
    assert render_restore([f]).splitlines()[3:] == [
        f'-A LL_OUT {out} {NFLOG} "ll reject r out"',
        f"-A LL_OUT {out} -j REJECT --reject-with tcp-reset",
        f'-A LL_IN {in_} --tcp-flags RST RST {NFLOG} "ll reject r rst"',
        f'-A LL_IN {in_} ! --tcp-flags RST RST {NFLOG} "ll reject r in"',
        f"-A LL_IN {in_} ! --tcp-flags RST RST -j REJECT --reject-with tcp-reset",
        "COMMIT"]


def test_reject_udp_uses_port_unreachable():
    f = build({"kind": "reject", "name": "u", "direction": "out", "target": {"dst": EP, "dport": 53, "proto": "udp"}})
    assert render_restore([f]).splitlines()[4] == \
        "-A LL_OUT -d 10.203.7.2/32 -p udp --dport 53 -j REJECT --reject-with icmp-port-unreachable"


def test_loss_tosses_one_coin_per_packet_into_its_own_chain():
    f = build({"kind": "loss", "name": "l", "p": 0.3, "direction": "out", "target": {"dst": EP, "proto": "tcp"}})
    chain = f.chain + "_O"
    assert chain.startswith("LL_L_") and len(chain) <= 28
    assert render_restore([f]) == (
        "*filter\n:LL_OUT - [0:0]\n:LL_IN - [0:0]\n"
        f":{chain} - [0:0]\n"
        f'-A {chain} {NFLOG} "ll loss l out"\n'
        f"-A {chain} -j NFQUEUE --queue-num 99\n"
        f"-A LL_OUT -d 10.203.7.2/32 -p tcp -m statistic --mode random --probability 0.3 -j {chain}\n"
        "COMMIT\n")
    assert render_restore([], stale_chains=[chain]).splitlines() == [
        "*filter", ":LL_OUT - [0:0]", ":LL_IN - [0:0]", f":{chain} - [0:0]", "COMMIT"]


def test_several_faults_keep_their_order_and_an_empty_table_flushes():
    a = build({"kind": "blackhole", "name": "a", "direction": "out", "target": {"dst": EP}})
    b = build({"kind": "reject", "name": "b", "direction": "out", "target": {"dst": "10.203.7.3", "proto": "udp"}})
    lines = render_restore([a, b]).splitlines()
    assert [l.split('"')[1] for l in lines if "prefix" in l] == ["ll blackhole a out", "ll reject b out"]
    assert render_restore([]) == "*filter\n:LL_OUT - [0:0]\n:LL_IN - [0:0]\nCOMMIT\n"


def test_netem_parameters_for_pyroute2():
    f = build({"kind": "netem", "name": "slow", "dev": "eth0", "delay_ms": 100, "jitter_ms": 10,
               "rate": "1mbit", "loss": 0.01})
    assert f.tc_kwargs() == {"handle": "1ab0:0", "limit": 1000, "delay": 100000, "jitter": 10000,
                             "loss": 1.0, "rate": "1mbit"}
    assert isinstance(f, InstalledFault) and isinstance(f, RuleFault)   # a rule only on the userspace path
    assert f.rules().out == []


def test_clear_of_an_inactive_fault_is_a_no_op():
    f = build({"kind": "blackhole", "target": {"dst": EP}})
    assert not f.active
    f.clear()
    f.clear()


class FakeRunner:
    def __init__(self, rc=0, err=""):
        self.calls, self.rc, self.err = [], rc, err

    def __call__(self, argv, input=None):
        self.calls.append((argv, input))
        if argv[:2] == ["iptables", "-S"]:
            return 0, "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n", ""
        return self.rc, "", self.err


def test_table_applies_atomically_and_clears_idempotently():
    from netem.table import FaultTable

    r = FakeRunner()
    t = FaultTable(runner=r, handle_signals=False)
    f = build({"kind": "blackhole", "name": "b", "direction": "out", "target": {"dst": EP}}).apply(t)
    assert f.active and t.faults == [f]
    setup, apply_ = r.calls[1][1], r.calls[2][1]
    assert "-I OUTPUT 1 -j LL_OUT" in setup and "-I INPUT 1 -j LL_IN" in setup
    assert apply_ == render_restore([f]) and all(c[0] == ["iptables-restore", "--noflush"] for c in r.calls[1:])
    with pytest.raises(NetemError, match="already active"):
        build({"kind": "reject", "name": "b", "target": {"dst": EP}}).apply(t)
    n = len(r.calls)
    f.clear()
    assert r.calls[n][1] == render_restore([]) and not f.active and t.faults == []
    f.clear()
    assert len(r.calls) == n + 1
    t.clear_all()
    t.clear_all()


def test_table_turns_a_refusal_into_one_line():
    from netem.table import FaultTable

    r = FakeRunner(rc=2, err="iptables-restore v1.8.9 (nf_tables): \nline 4: RULE_APPEND failed (No such file or directory): rule in chain LL_OUT\n")
    t = FaultTable(runner=r, handle_signals=False)
    with pytest.raises(NetemError) as e:
        build({"kind": "blackhole", "target": {"dst": EP}}).apply(t)
    assert str(e.value) == ("iptables-restore refused the lab's rules: line 4: RULE_APPEND failed "
                            "(No such file or directory): rule in chain LL_OUT")


def test_cli_apply_with_a_bad_spec_is_one_line_and_exit_2():
    import subprocess
    import sys

    for spec, words in (("{bad", "spec is not valid JSON"), ('{"kind": "freeze"}', "unknown fault kind 'freeze'")):
        out = subprocess.run([sys.executable, "-m", "lab", "netem", "apply", spec], capture_output=True, text=True)
        assert out.returncode == 2
        assert out.stderr.startswith("lab: ") and words in out.stderr and out.stderr.count("\n") == 1
