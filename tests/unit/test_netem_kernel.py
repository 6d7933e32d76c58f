"""Capability detection with a fake Prober: what is missing is named, in one line each."""
import os
import pickle

from netem.faults import needing
from netem.kernel import FEATURES, Capabilities, Prober, probe


class FakeProber(Prober):
    def __init__(self, root=True, tools=("iptables", "iptables-restore", "ip", "tcpdump", "tshark", "editcap", "mergecap"),
                 restore_fails=(), restore_broken=False, netem=(False, "namespace ll-probe-1", "No such file or directory (errno 2)"),
                 nflog_dev=True, nfqueue_bind=(True, ""), realtime=(True, ""), wake_latency=(True, "")):
        self.root, self.tools, self.restore_fails = root, set(tools), restore_fails
        self.restore_broken, self.netem, self.nflog_dev = restore_broken, netem, nflog_dev
        self.nfqueue_bind, self.realtime, self.wake_latency = nfqueue_bind, realtime, wake_latency
        self.inputs = []

    def euid(self):
        return 0 if self.root else 1000

    def cap_eff(self):
        return (1 << 12) if self.root else 0

    def which(self, tool):
        return tool in self.tools

    def run(self, argv, input=None, timeout=10.0):
        if argv == ["iptables", "--version"]:
            return 0, "iptables v1.8.9 (nf_tables)\n", ""
        if argv[0] == "iptables-restore":
            self.inputs.append(input)
            if self.restore_broken:
                return 4, "", "iptables-restore v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\n"
            for word in self.restore_fails:
                if word in input:
                    return 2, "", f"Warning: Extension {word} revision 0 not supported, missing kernel module?\niptables-restore: line 3 failed\n"
            return 0, "", ""
        if argv == ["tcpdump", "-D"]:
            return 0, "1.eth0\n2.any\n" + ("3.nflog (Linux netfilter log (NFLOG) interface)\n" if self.nflog_dev else ""), ""
        return 127, "", "not found"

    def try_qdisc(self, kind="netem"):
        return self.netem

    def try_nfqueue_bind(self):
        return self.nfqueue_bind

    def try_realtime(self):
        return self.realtime

    def try_wake_latency(self):
        return self.wake_latency

    def can_make_netns(self):
        return self.root


def test_netem_missing_is_one_clear_line_naming_sch_netem():
    c = probe(FakeProber())
    assert isinstance(c, Capabilities)
    assert c.iptables and c.nflog and c.nfqueue and c.statistic and c.reject
    assert not c.netem
    assert len(c.missing) == 1
    assert "sch_netem" in c.missing[0] and "\n" not in c.missing[0]
    assert any("No such file or directory" in n for n in c.notes)
    assert "tc qdisc netem       NO" in c.summary()


def test_everything_present_means_nothing_missing():
    c = probe(FakeProber(netem=(True, "namespace ll-probe-1", "")))
    assert c.netem and c.missing == []


def test_a_missing_xtables_target_is_named():
    c = probe(FakeProber(restore_fails=("NFQUEUE", "statistic")))
    assert c.iptables and c.nflog and not c.nfqueue and not c.statistic
    assert any("NFQUEUE" in m for m in c.missing) and any("statistic" in m for m in c.missing)


def test_unusable_iptables_is_said_once_not_per_target():
    c = probe(FakeProber(restore_broken=True))
    assert not c.iptables and not c.features() & {"nflog", "nfqueue", "statistic", "reject"}
    assert c.missing[0] == "iptables-restore is not usable here"
    assert not any("NFLOG" in m or "NFQUEUE" in m for m in c.missing)
    assert any("Permission denied" in n for n in c.notes)


def test_not_installed_iptables():
    c = probe(FakeProber(tools=("ip", "tcpdump")))
    assert "iptables-restore is not installed" in c.missing


def test_not_root_names_root_and_does_not_try_netem():
    p = FakeProber(root=False, restore_broken=True)
    p.try_qdisc = lambda kind="netem": (_ for _ in ()).throw(AssertionError("must not probe netem"))
    c = probe(p)
    assert any(m.startswith("not root") for m in c.missing)
    assert any("sch_netem could not be probed" in m for m in c.missing)


def test_probe_chain_is_created_and_removed():
    p = FakeProber()
    probe(p)
    assert p.inputs[0] == "*filter\n:LL_PROBE - [0:0]\nCOMMIT\n"
    assert p.inputs[-1].endswith("-X LL_PROBE\nCOMMIT\n")


def test_tcpdump_without_nflog():
    c = probe(FakeProber(nflog_dev=False))
    assert not c.tcpdump_nflog and any("nflog:5" in m for m in c.missing)


def test_sched_fifo_refused_is_said_as_a_note_not_as_missing():
    c = probe(FakeProber(realtime=(False, "Operation not permitted")))
    assert not c.realtime and not any("SCHED_FIFO" in m for m in c.missing)
    assert any(n.startswith("SCHED_FIFO refused (Operation not permitted)") for n in c.notes)
    assert "SCHED_FIFO           NO" in c.summary()
    assert "SCHED_FIFO           yes" in probe(FakeProber()).summary()


def test_idle_cpus_kept_awake_is_a_fact_with_a_note_not_a_missing_feature():
    c = probe(FakeProber(wake_latency=(False, "no /dev/cpu_dma_latency (No such file or directory): idle CPUs may halt")))
    assert not c.wake_latency and c.missing == [FEATURES["netem"].missing]
    assert any(n.startswith("no /dev/cpu_dma_latency") and "wait for it" in n for n in c.notes)
    assert "idle CPUs kept awake NO  (idle CPUs may halt" in c.summary()
    assert probe(FakeProber()).wake_latency


def test_the_real_wake_latency_probe_lets_the_request_go(tmp_path, monkeypatch):
    from netem import realtime
    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    monkeypatch.setattr(realtime, "PM_QOS_DEVICE", str(dev))
    before = set(os.listdir("/proc/self/fd"))
    assert Prober().try_wake_latency() == (True, "")
    assert dev.read_bytes() == (0).to_bytes(4, "little") and set(os.listdir("/proc/self/fd")) == before


def test_the_real_sched_fifo_probe_answers_without_changing_this_process():
    before = os.sched_getscheduler(0)
    ok, err = Prober().try_realtime()
    assert os.sched_getscheduler(0) == before
    assert ok == (err == "") and (ok or err)


def test_a_missing_feature_is_its_tables_line_and_says_which_kinds_it_costs():
    c = probe(FakeProber(restore_fails=("length",), netem=(True, "namespace ll-probe-1", "")))
    assert c.missing == [FEATURES["length"].missing] and c.lacks == ["length"]
    assert f"  - {FEATURES['length'].missing} (needed by mtu_blackhole)" in c.summary(needed_by=needing)
    assert "  length match       NO" in c.summary()


def test_every_feature_of_the_table_is_printed_and_is_a_field():
    c = probe(FakeProber())
    text = c.summary()
    assert all(f.label in text for f in FEATURES.values())
    assert set(FEATURES) <= set(Capabilities.__dataclass_fields__) and set(FEATURES) <= set(c.as_dict())
    assert pickle.loads(pickle.dumps(c)) == c
