"""The fault registry as other rooms use it: declarations, check_spec, unmet, and the table's use
of the two interfaces (rules go in after what a fault installs, and come out before it goes)."""
import pytest

from netem.cli import kinds_summary
from netem.errors import FaultSpecError
from netem.cli import kinds_table
from netem.fault import InstalledFault, MatchFault, RuleFault, Shape
from netem.faults import PLACEHOLDER_TARGET, REGISTRY, build, check_spec, declared, kinds, needing, unmet
from netem.kernel import FEATURES, KIND_FEATURES, Capabilities
from netem.kinds.delay import Delay
from netem.iptables import is_netem_chain, render_restore
from netem.table import FaultTable

# the least each kind needs besides kind (and target, for kinds with needs_target)
MINIMAL = {"blackhole": {}, "reject": {}, "loss": {"p": 0.5}, "netem": {"dev": "eth0", "delay_ms": 5},
           "delay": {"delay_ms": 40}, "nat_reap": {"idle_s": 30}, "relay_age": {"age_s": 150},
           "mtu_blackhole": {}, "reorder": {"delay_ms": 30, "p": 0.25}, "duplicate": {"p": 0.1}}


def test_every_kind_declares_what_it_needs_and_does():
    assert sorted(MINIMAL) == kinds()
    for name, cls in REGISTRY.items():
        assert cls.kind == name
        assert isinstance(cls.requires, frozenset) and cls.requires and cls.requires <= KIND_FEATURES, name
        assert isinstance(cls.needs_target, bool) and cls.cuts_path is (cls.shape is Shape.CUT)
        assert isinstance(cls.shape, Shape) and cls.does, name
        assert issubclass(cls, (RuleFault, InstalledFault)), name
    assert {k: str(c.shape) for k, c in REGISTRY.items()} == {
        "blackhole": "cut", "reject": "cut", "loss": "degrade", "netem": "degrade", "delay": "degrade",
        "reorder": "degrade", "duplicate": "degrade", "nat_reap": "armed", "relay_age": "armed",
        "mtu_blackhole": "zombie"}
    assert {k for k, c in REGISTRY.items() if c.needs_target} == {"blackhole", "reject", "loss", "delay", "reorder",
                                                                  "duplicate", "nat_reap", "relay_age", "mtu_blackhole"}
    assert issubclass(Delay, RuleFault) and issubclass(Delay, InstalledFault)
    # netem is both: a qdisc on the kernel path, a rule and a worker on the userspace one
    assert issubclass(REGISTRY["netem"], RuleFault) and not issubclass(REGISTRY["loss"], InstalledFault)


@pytest.mark.parametrize("kind", sorted(MINIMAL))
def test_check_spec_accepts_each_kind_with_the_placeholder_target(kind):
    spec = {"kind": kind, **MINIMAL[kind]}
    if REGISTRY[kind].needs_target:
        spec["target"] = dict(PLACEHOLDER_TARGET)
    assert check_spec(spec) is None
    assert spec == {"kind": kind, **MINIMAL[kind], **({"target": PLACEHOLDER_TARGET} if "target" in spec else {})}


@pytest.mark.parametrize("spec, words", [
    ({"kind": "delay", "target": PLACEHOLDER_TARGET, "delay_ms": 5, "jiter_ms": 1},
     "fault delay: unknown field(s) ['jiter_ms']; allowed: ['delay_ms', 'direction', 'jitter_ms', 'kind', "
     "'name', 'queue', 'target']"),
    ({"kind": "netem", "dev": "eth0", "delay_ms": 5, "target": PLACEHOLDER_TARGET}, "unknown field(s) ['target']"),
    ({"kind": "blackhole"}, "fault blackhole: target is required"),
    ({"kind": "dealy"}, "unknown fault kind 'dealy'; known kinds: blackhole, delay, duplicate, loss, mtu_blackhole, nat_reap, netem, reject, relay_age, reorder"),
    (["kind", "delay"], "a fault spec must be an object, got list"),
])
def test_check_spec_names_the_bad_key_in_one_line(spec, words):
    with pytest.raises(FaultSpecError) as e:
        check_spec(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_check_builds_nothing_and_a_class_refuses_another_kind():
    REGISTRY["delay"].check({"target": PLACEHOLDER_TARGET, "delay_ms": 5})   # kind filled in
    with pytest.raises(FaultSpecError, match="kind is 'loss', not 'delay'"):
        REGISTRY["delay"].check({"kind": "loss", "target": PLACEHOLDER_TARGET, "delay_ms": 5})


def test_a_kind_says_what_it_does_or_is_not_registered():
    class Shapeless(MatchFault):
        kind = "shapeless"
    with pytest.raises(TypeError, match="shapeless: declares no shape"):
        declared(Shapeless)
    with pytest.raises(TypeError, match=r"requires \['conntrak'\]: not features"):
        type("Typo", (MatchFault,), {"kind": "typo", "requires": frozenset({"iptables", "conntrak"})})


def test_which_kinds_need_a_feature_comes_from_their_requires():
    assert needing("length") == ["mtu_blackhole"] and needing("reject") == ["nat_reap", "reject", "relay_age"]
    assert needing("netem") == []      # the netem kind has a userspace path without it
    assert needing("root") == []
    lines = kinds_table().splitlines()
    assert lines[0].split() == ["kind", "shape", "needs", "does"] and len(lines) == 1 + len(REGISTRY)
    assert any(l.split()[:2] == ["mtu_blackhole", "zombie"] for l in lines)


def _caps(**missing) -> Capabilities:
    c = Capabilities(**{f: True for f in FEATURES})
    for f in missing:
        setattr(c, f, False)
    return c


def test_unmet_names_what_each_kind_lacks_from_its_requires():
    caps = _caps(netem=False, nfqueue_bind=False)   # this machine: no sch_netem
    assert unmet("blackhole", caps) == [] and unmet("loss", caps) == []
    assert len(unmet("netem", caps)) == 1 and unmet("netem", caps)[0].startswith("netem: sch_netem")
    assert unmet("delay", caps) == ["nfqueue_bind: nfnetlink_queue: no NFQUEUE queue can be bound here, "
                                    "so no worker can hold packets"]
    assert unmet("reject", _caps(reject=False, nflog=False))[0].startswith("nflog: the xtables NFLOG")


def test_probe_summary_lists_every_kind_with_yes_or_what_is_missing():
    lines = kinds_summary(_caps(netem=False)).splitlines()
    assert lines[0] == "fault kinds:" and len(lines) == 1 + len(kinds())
    assert "  delay         yes" in lines and "  blackhole     yes" in lines and "  mtu_blackhole yes" in lines
    assert [l for l in lines if l.startswith("  netem")] == ["  netem         yes (userspace path)"]   # no sch_netem
    lines = kinds_summary(_caps(netem=False, nfqueue_bind=False)).splitlines()
    assert [l for l in lines if l.startswith("  netem")][0].startswith("  netem         NO   needs netem: sch_netem")


def test_only_netems_own_chains_are_netems_to_remove():
    assert all(is_netem_chain(c) for c in ("LL_OUT", "LL_IN", "LL_PROBE", "LL_L_0123456789_O"))
    assert not any(is_netem_chain(c) for c in ("LL_FWD", "LL_NAT", "DOCKER", "OUTPUT"))


# ------------------------------------------------------------------------------ table and interfaces

class Runner:
    def __init__(self, journal, rc=0):
        self.journal, self.rc = journal, rc

    def __call__(self, argv, input=None):
        if argv[:2] == ["iptables", "-S"]:
            return 0, "-P OUTPUT ACCEPT\n-N LL_FWD\n-A FORWARD -j LL_FWD\n", ""
        self.journal.append(("restore", input))
        return self.rc, "", "line 2: RULE_APPEND failed"


class RecordedDelay(Delay):
    """The delay kind with its worker replaced by a note in the journal."""
    journal: list

    def install(self, netns):
        self.journal.append(("install", self.name))

    def uninstall(self, netns):
        self.journal.append(("uninstall", self.name))


def _delay(journal, name="d"):
    RecordedDelay.journal = journal
    return RecordedDelay({"kind": "delay", "name": name, "delay_ms": 30, "target": PLACEHOLDER_TARGET})


def test_the_table_installs_before_the_rules_and_uninstalls_after_them():
    journal = []
    t = FaultTable(runner=Runner(journal), handle_signals=False)
    d = _delay(journal).apply(t)
    assert journal[-2:] == [("install", "d"), ("restore", render_restore([d]))]
    d.clear()
    assert journal[-2:] == [("restore", render_restore([])), ("uninstall", "d")]
    _delay(journal, "e").apply(t)
    t.clear_all()
    assert journal[-2:] == [("restore", render_restore([])), ("uninstall", "e")] and t.faults == []
    t.close()
    assert not any("LL_FWD" in (j[1] or "") for j in journal if j[0] == "restore")   # not netem's chain


def test_rules_refused_means_the_installed_part_goes_too():
    journal = []
    t = FaultTable(runner=Runner(journal), handle_signals=False)
    t.setup()
    t._runner = Runner(journal, rc=2)
    d = _delay(journal)
    with pytest.raises(Exception, match="refused"):
        d.apply(t)
    assert journal[-1] == ("uninstall", "d") and not d.active and t.faults == []


def test_build_gives_the_registered_class():
    assert type(build({"kind": "delay", "delay_ms": 5, "target": PLACEHOLDER_TARGET})) is Delay


def test_the_internals_doc_lists_every_kind_with_its_shape():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "internals.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows.setdefault(cells[0].split()[0].strip("`"), set()).add(cells[1])
    assert {k: {str(c.shape)} for k, c in REGISTRY.items()} == {k: rows.get(k) for k in REGISTRY}
