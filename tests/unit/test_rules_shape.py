"""The report judges a fault by what its kind declares it does to the path (its shape), never by
its name: a kind registered with a shape is judged by the rules that read that shape, with no
change to lab/report; and nothing in lab/report spells a fault kind's name."""
import ast
from pathlib import Path

import pytest

from lab.events import EVENT_KINDS
from lab.report import loss_shape, metrics, rules
from lab.report.rules import FAIL, NA, PASS, Record
from netem import faults
from netem.fault import MatchFault, Shape
from tests.unit.test_rules import b1_probe, conn, ev

LAB = Path(__file__).resolve().parents[2] / "lab"
# what reads a run's record to judge it: the report's rules and metrics, the metric names, the expectations
READERS = sorted((LAB / "report").rglob("*.py")) + [LAB / "metric_names.py", LAB / "expectations.py"]


def _kind(name, shape, does="a test middlebox"):
    """A fault kind as a new module would declare it; registered by the test alone."""
    return type(name.title(), (MatchFault,), {"kind": name, "shape": shape, "does": does,
                                              "requires": frozenset({"iptables", "nfqueue"})})


@pytest.fixture
def register(monkeypatch):
    def add(name, shape, does="a test middlebox"):
        cls = faults.declared(_kind(name, shape, does))
        monkeypatch.setitem(faults.REGISTRY, name, cls)
        return cls
    return add


def _record(twin, how, cuts_path, heal=22000, end=30000):
    """A run's record with the agent's loss at 2 s, its metrics computed as the report does."""
    events = [ev("run.start", 0), ev("conn.open", 50, conn=1, purpose="initial"),
              ev("conn.setup_complete", 100, conn=1), ev("loss", 2000, how=how, cuts_path=cuts_path),
              ev("fault.clear", heal, name="all"), ev("run.end", end, status="ok")]
    return Record(events, twin, {}, metrics.compute(events, {}, twin))


def test_a_new_zombie_kind_is_judged_as_a_zombie_path_without_naming_it(register):
    register("tarpit", Shape.ZOMBIE)
    twin = [*conn(1, 50, 100, "s1"), *conn(2, 6600, resume=True, refuse=6605)]
    rec = _record(twin, "fault:tarpit", False)
    assert rec.metrics["loss_shape"] == "zombie"
    out = rules.judge_all(rec)
    assert (out["leaves_zombie_connection"].status, out["leaves_zombie_connection"].figure) == (PASS, 4600.0)
    for name in ("own_loss_detection", "resume_cutoff_fallback"):
        assert out[name].status == NA and "zombie path (fault:tarpit)" in out[name].observed, name
    assert out["no_false_alarm"].status == NA
    held = rules.RULES["leaves_zombie_connection"].judge(_record([*conn(1, 50, 100, "s1")], "fault:tarpit", False))
    assert held.status == FAIL


def test_a_new_armed_kind_says_what_it_does_in_its_own_words(register):
    register("conveyor", Shape.ARMED, "a load balancer that ends every flow at its maximum lifetime")
    out = rules.judge_all(_record(b1_probe(), "fault:conveyor", False))
    for name in ("ledger_old_id_after_resume", "own_loss_detection", "resume_cutoff_fallback", "status_from_backend"):
        assert out[name].status == NA and out[name].observed.startswith(
            "a load balancer that ends every flow at its maximum lifetime (fault:conveyor)"), name


def test_a_new_degrading_kind_and_a_new_cutting_kind(register):
    register("bitflip", Shape.DEGRADE)
    register("unplug", Shape.CUT)
    twin = [*conn(1, 50, 100, "s1"), *conn(2, 9000, 9200, "s2")]
    assert rules.RULES["no_false_alarm"].judge(_record(twin, "fault:bitflip", False)).status == FAIL
    cut = rules.judge_all(_record(twin, "fault:unplug", True))
    assert cut["own_loss_detection"].status == PASS and cut["no_false_alarm"].status == NA


def test_the_registry_not_the_records_flag_says_what_a_known_kind_did():
    # a verdict kept from before loss_shape: its shape is worked out from the kind
    old = {"loss_ms": 2000.0, "loss_kind": "fault:delay", "loss_cuts_path": None}
    assert loss_shape.of_metrics(old) == "degrade"
    assert loss_shape.shape("fault:mtu_blackhole", False) == "zombie"
    assert loss_shape.shape("action:freeze", None) == "cut"          # lab.actions: freeze cuts the path
    assert loss_shape.shape("fault:gone_kind", True) == "cut"        # an unknown kind: the agent said so
    assert loss_shape.shape("fault:gone_kind", False) is None         # ... or nothing can be said
    assert loss_shape.of_metrics({"loss_ms": None}) is None


def test_every_kinds_shape_is_the_one_the_report_reads():
    for name, cls in faults.REGISTRY.items():
        assert loss_shape.shape(f"fault:{name}", None) == str(cls.shape)
        assert loss_shape.does(f"fault:{name}") == cls.does


def _constants(tree):
    """String constants of a module that are not docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _kind_names(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string in `source` that names a fault kind, alone or as fault:<kind>.
    "loss" is an event kind too (the agent's loss event): that spelling is the event's, not the fault's."""
    alone = set(faults.REGISTRY) - set(EVENT_KINDS)
    return [(c.lineno, c.value) for c in _constants(ast.parse(source))
            if c.value in alone or any(f"{loss_shape.FAULT}{k}" in c.value for k in faults.REGISTRY)]


def test_nothing_in_the_report_spells_a_fault_kinds_name():
    bad = [f"{f.relative_to(LAB.parent)}:{line}: {text!r}" for f in READERS for line, text in _kind_names(f.read_text())]
    assert not bad, "ask the loss's shape (lab.report.loss_shape), not its name:\n" + "\n".join(bad)


def test_the_name_check_sees_a_rule_that_matches_by_name():
    source = ('"""a docstring may say fault:mtu_blackhole"""\nZOMBIE = ("fault:mtu_blackhole",)\n'
              'def f(kind, e):\n    return kind == "nat_reap" or e.kind == "loss"\n')
    assert _kind_names(source) == [(2, "fault:mtu_blackhole"), (4, "nat_reap")]
