"""Uplink bookkeeping (lab.topology.uplink) without a kernel: names, per-run rule selection,
ip_forward restore, /30 pick, and the whole down() of a run."""
from __future__ import annotations

import ipaddress

import pytest

from lab.errors import LabError
from lab.topology import netns as topo_mod
from lab.topology.netns import NetnsTopology
from lab.topology import uplink
from netem import cleanup


def test_uplink_ifname_fits_ifnamsiz_and_is_stable():
    names = {uplink.uplink_ifname(f"run-{i}") for i in range(500)}
    assert len(names) == 500
    for n in names:
        assert n.startswith("llu-") and len(n) <= 15
    assert uplink.uplink_ifname("x" * 64) == uplink.uplink_ifname("x" * 64)


def test_comment_matches_exactly():
    line = '-A LL_NAT -s 10.204.0.4/30 ! -o llu-0 -m comment --comment "livelab tn10" -j MASQUERADE'
    assert uplink._comment(line) == "livelab tn10"
    assert uplink._comment(line) != uplink.uplink_comment("tn1")
    assert uplink._comment("-A LL_NAT -j MASQUERADE") is None


class FakeTables:
    """iptables -S / iptables-restore over an in-memory rule list (one table each)."""

    def __init__(self, tables: dict[str, list[str]]):
        self.tables = tables
        self.restores: list[str] = []

    def __call__(self, argv, input=None):
        if argv[0] == "iptables-restore":
            self.restores.append(input)
            lines = input.splitlines()
            table = lines[0][1:]
            for l in lines[1:-1]:
                if l.startswith("-D "):
                    self.tables[table].remove("-A " + l[3:])
                elif l.startswith("-X "):
                    self.tables[table].remove(f"-N {l[3:]}")
            return 0, "", ""
        table = argv[argv.index("-t") + 1] if "-t" in argv else "filter"
        lines = self.tables[table]
        if argv[-1] != "-S":
            chain = argv[-1]
            if f"-N {chain}" not in lines:
                return 1, "", "No chain/target/match by that name."
            lines = [f"-N {chain}"] + [l for l in lines if l.startswith(f"-A {chain} ")]
        return 0, "\n".join(lines) + "\n", ""


def _rules(run_id, host):
    c = f'-m comment --comment "livelab {run_id}"'
    return ([f"-A LL_NAT -s 10.204.0.0/30 ! -o {host} {c} -j MASQUERADE"],
            [f"-A LL_FWD -i {host} {c} -j ACCEPT",
             f"-A LL_FWD -o {host} -m conntrack --ctstate RELATED,ESTABLISHED {c} -j ACCEPT"])


@pytest.fixture
def fake(monkeypatch, tmp_path):
    la, lb = uplink.uplink_ifname("a"), uplink.uplink_ifname("b")
    nat_a, fwd_a = _rules("a", la)
    nat_b, fwd_b = _rules("b", lb)
    t = FakeTables({
        "nat": ["-P POSTROUTING ACCEPT", "-N DOCKER", "-N LL_NAT", "-A POSTROUTING -j LL_NAT",
                "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE", *nat_a, *nat_b],
        "filter": ["-P FORWARD DROP", "-N DOCKER-USER", "-N LL_FWD", "-A FORWARD -j LL_FWD",
                   "-A FORWARD -j DOCKER-USER", *fwd_a, *fwd_b]})
    monkeypatch.setattr(uplink, "ipt", t)
    monkeypatch.setattr(cleanup, "PID_DIR", tmp_path / "run")
    monkeypatch.setattr(uplink, "NETNS_ETC", tmp_path / "etc-netns")
    monkeypatch.setattr(uplink, "IP_FORWARD", str(tmp_path / "ip_forward"))
    (tmp_path / "ip_forward").write_text("1\n")
    links = {la, lb}
    monkeypatch.setattr(uplink, "uplink_links", lambda: sorted(links))
    monkeypatch.setattr(uplink, "_del_link", lambda n: (n in links, links.discard(n))[0])
    t.links = links
    return t


def test_one_run_leaves_the_others_rules_and_the_chains(fake, tmp_path):
    d = tmp_path / "etc-netns" / "ll-a-c"
    d.mkdir(parents=True)
    (d / "resolv.conf").write_text("nameserver 192.0.2.1\n")
    rep = uplink.remove_uplinks("a")
    assert rep["errors"] == [] and rep["chains"] == [] and rep["links"] == [uplink.uplink_ifname("a")]
    assert len(rep["rules"]) == 3
    assert not d.exists()
    assert [tb for tb, _ in uplink.uplink_rules("b")] == ["nat", "filter", "filter"]
    assert uplink.uplink_rules("a") == []
    assert "-A POSTROUTING -j LL_NAT" in fake.tables["nat"]
    assert "-A FORWARD -j LL_FWD" in fake.tables["filter"]


def test_the_last_run_unhooks_and_deletes_the_chain_in_one_commit(fake):
    uplink.remove_uplinks("a")
    rep = uplink.remove_uplinks("b")
    assert sorted(rep["chains"]) == ["filter:LL_FWD", "nat:LL_NAT"]
    last_nat = [r for r in fake.restores if r.startswith("*nat")][-1].splitlines()
    assert last_nat[-3:] == ["-D POSTROUTING -j LL_NAT", "-X LL_NAT", "COMMIT"]
    assert fake.tables["nat"] == ["-P POSTROUTING ACCEPT", "-N DOCKER",
                                  "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE"]
    assert fake.tables["filter"] == ["-P FORWARD DROP", "-N DOCKER-USER", "-A FORWARD -j DOCKER-USER"]
    assert uplink.remove_uplinks("b")["chains"] == []      # idempotent: nothing left to do


def test_no_run_id_removes_every_uplink(fake):
    rep = uplink.remove_uplinks()
    assert sorted(rep["links"]) == sorted([uplink.uplink_ifname("a"), uplink.uplink_ifname("b")])
    assert len(rep["rules"]) == 6 and len(rep["chains"]) == 2
    assert not any("LL_" in l for tb in fake.tables.values() for l in tb)


def test_ip_forward_is_restored_only_when_the_lab_changed_it_and_the_last_uplink_went(fake, tmp_path):
    fwd = tmp_path / "ip_forward"
    fwd.write_text("0\n")
    uplink.enable_ip_forward()
    assert fwd.read_text() == "1"
    uplink.enable_ip_forward()                                # a second run: the first value stays
    assert (cleanup.PID_DIR / "uplink.ip_forward").read_text().strip() == "0"
    uplink.remove_uplinks("a")
    assert fwd.read_text() == "1"                              # b's uplink is still there
    rep = uplink.remove_uplinks("b")
    assert rep["errors"] == []
    assert fwd.read_text() == "0"
    assert not (cleanup.PID_DIR / "uplink.ip_forward").exists()


def test_ip_forward_already_on_is_left_alone(fake, tmp_path):
    uplink.enable_ip_forward()
    assert not (cleanup.PID_DIR / "uplink.ip_forward").exists()
    uplink.remove_uplinks()
    assert (tmp_path / "ip_forward").read_text().strip() == "1"


def test_uplink_addresses_need_uplink_and_up():
    with pytest.raises(LabError):
        NetnsTopology("u1").uplink_host_ip
    with pytest.raises(LabError):
        NetnsTopology("u1", uplink=True).uplink_client_ip


def test_pick_uplink_skips_used_slashes_30(monkeypatch):
    t = NetnsTopology("u2", uplink=True)
    monkeypatch.setattr(topo_mod, "_used_uplinks", lambda: set())
    first = t._pick_uplink()
    monkeypatch.setattr(topo_mod, "_used_uplinks", lambda: {first})
    t._uplink = t._pick_uplink()
    assert t._uplink == (first + 1) % topo_mod.UPLINK_SLOTS
    net = t.uplink_subnet
    assert net.prefixlen == 30 and net.subnet_of(ipaddress.ip_network("10.204.0.0/16"))
    assert t.uplink_host_ip == str(net.network_address + 1)
    assert t.uplink_client_ip == str(net.network_address + 2)


def test_down_is_netems_then_the_uplinks(fake, monkeypatch):
    calls = []

    def netem_down(run_id, **kw):
        calls.append(("netem", run_id, kw))
        return {"processes": ["agent:1"], "chains": ["ll-a-c:LL_OUT"], "qdiscs": [], "namespaces": ["ll-a-c"],
                "errors": []}
    monkeypatch.setattr(cleanup, "down", netem_down)
    rep = uplink.down("a", current_ns=False)
    assert calls == [("netem", "a", {"current_ns": False, "pid_dir": None, "owner_pids": None})]
    assert rep["uplinks"] == [uplink.uplink_ifname("a")] and rep["chains"] == ["ll-a-c:LL_OUT"]
    assert uplink.uplink_rules("a") == [] and len(uplink.uplink_rules("b")) == 3
    assert cleanup.describe(rep) == "removed 1 processes, 1 chains, 0 qdiscs, 1 namespaces, 1 uplinks"
