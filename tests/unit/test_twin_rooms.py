"""The twin's rooms and their contracts: a connection's Phase, typed timers, loud failure on an id,
timer or parameter no room knows, and every parameter read in code declared."""
from __future__ import annotations

import ast
import json
from dataclasses import FrozenInstanceError, dataclass, fields
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.twin import io_actions as A
from lab.twin import params as P
from lab.twin import session as S
from lab.twin import turns as T
from lab.twin.core import FAULTS, TwinCore
from lab.twin.profile import load_profile

TWIN_DIR = Path(P.__file__).parent


def _timers(acts):
    return [a for a in acts if isinstance(a, A.Timer)]


def _setup(core: TwinCore, conn: int, now: float = 0.0) -> list:
    core.connection_opened(conn, now, "v1")
    return core.frame_received(conn, json.dumps({"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {}}}), now)


def test_a_connection_walks_its_phases():
    core = TwinCore(seed=1)
    acts = core.connection_opened(1, 0.0, "v1")
    assert core.sessions.conn(1).phase is S.Phase.OPEN
    assert [type(t.key) for t in _timers(acts)] == [S.FreezeCheck, S.CapGoAway, S.GoAwayClose]
    acts = core.frame_received(1, json.dumps({"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {}}}), 0.0)
    assert core.sessions.conn(1).phase is S.Phase.SETTING_UP
    (done,) = _timers(acts)
    assert done.key == S.SetupDone(1) and 0.225 <= done.at <= 0.286      # the profile's recorded min and max
    acts = core.timer_fired(done.key, done.at)
    assert core.sessions.conn(1).phase is S.Phase.LIVE
    assert [a.frame for a in acts if isinstance(a, A.Send)][0] == {"setupComplete": {}}
    core.frame_received(1, "{not json", 1.0)
    assert core.sessions.conn(1).phase is S.Phase.CLOSING
    assert core.frame_received(1, json.dumps({"realtimeInput": {"text": "hi"}}), 1.1) == []   # closing: ignored
    core.connection_ended(1, "close_frame", 1.2)
    assert core.sessions.find(1) is None


def test_timers_are_frozen_typed_keys_owned_by_one_room():
    core = TwinCore(seed=1, overrides={"reply_delay_s": 0.1})
    (done,) = _timers(_setup(core, 1))
    acts = core.timer_fired(done.key, done.at)
    acts = core.frame_received(1, json.dumps({"realtimeInput": {"text": "Did you book it?"}}), done.at)
    (step,) = _timers(acts)
    assert step.key == T.Step("s1", step.key.gen) and isinstance(step.key, T.SessionTimer)
    with pytest.raises(FrozenInstanceError):
        step.key.gen = 99  # type: ignore[misc]
    assert {S.FreezeCheck, S.SetupDone, S.HandleUpdate, S.GoAway, S.GoAwayClose} <= set(core.sessions._timers)
    assert set(core.turns._timers) == {T.Step, T.Chunk, T.Flush, T.VadStart, T.VadEnd}


def test_a_stale_timer_does_nothing_but_an_unknown_one_raises():
    core = TwinCore(seed=1)
    (done,) = _timers(_setup(core, 1))
    core.connection_ended(1, "eof", 0.1)
    assert core.timer_fired(done.key, done.at) == []              # its connection ended: stale
    assert core.timer_fired(S.FreezeCheck(1), 500.0) == []

    @dataclass(frozen=True)
    class Mystery(A.TimerKey):
        conn: int = 1

    with pytest.raises(A.UnknownTimer):
        core.timer_fired(Mystery(), 1.0)
    with pytest.raises(A.UnknownTimer):
        core.timer_fired(("freeze", 1), 1.0)                      # the old tuple keys are gone
    with pytest.raises(A.UnknownConnection):
        core.timer_fired(S.FreezeCheck(42), 1.0)                  # never opened
    with pytest.raises(A.UnknownSession):
        core.timer_fired(T.Step("s99", 1), 1.0)


def test_unknown_connection_ids_raise():
    core = TwinCore(seed=1)
    with pytest.raises(A.UnknownConnection):
        core.frame_received(7, "{}", 0.0)
    with pytest.raises(A.UnknownConnection):
        core.connection_ended(7, "eof", 0.0)
    core.connection_opened(7, 0.0)
    with pytest.raises(A.TwinBug):
        core.connection_opened(7, 0.0)                            # an id is opened once
    core.connection_ended(7, "eof", 0.1)
    with pytest.raises(A.UnknownConnection):
        core.connection_ended(7, "eof", 0.2)                      # and ended once


# ------------------------------------------------------------------------------------------ parameters

def test_every_profile_parameter_is_declared_and_every_declared_one_is_read():
    read = {f.name for view in (S.SessionParams, T.TurnParams) for f in fields(view)}
    read |= _subscripted_names()
    read |= set(FAULTS.values())        # the run-time fault switches' starting values
    assert read <= set(P.DECLARED)
    assert set(P.DECLARED) == read, "declared but read nowhere: " + ", ".join(sorted(set(P.DECLARED) - read))
    for name in ("developer-api", "vertex"):
        assert list(load_profile(name).params) == P.declared_for(P.GEMINI)
    # the OpenAI protocol's own names (lab.twin.openai_session reads them) and the shared ones
    assert list(load_profile("openai-realtime", protocol=P.OPENAI).params) == P.declared_for(P.OPENAI)


def _subscripted_names() -> set[str]:
    """profile["name"] reads in the twin's modules (the model's config, the shell's ping settings)."""
    names = set()
    for path in TWIN_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and isinstance(node.slice.value, str) and _is_profile(node.value)):
                names.add(node.slice.value)
    return names


def _is_profile(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "profile") or \
        (isinstance(node, ast.Attribute) and node.attr == "profile")


@pytest.mark.parametrize("module,view", [("session.py", S.SessionParams), ("turns.py", T.TurnParams)])
def test_every_parameter_read_in_a_room_is_a_field_of_its_view(module, view):
    # `self.prm.X` is how a room reads a parameter; a misspelt X fails here, not inside a timer
    tree = ast.parse((TWIN_DIR / module).read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "prm"}
    assert used and used <= {f.name for f in fields(view)}


def test_a_misspelt_parameter_in_a_view_fails_at_construction():
    @dataclass(frozen=True)
    class Misspelt:
        idel_release_s: float

    with pytest.raises(P.UnknownParameter, match="idel_release_s"):
        load_profile("developer-api").view(Misspelt)
    with pytest.raises(KeyError):                              # callers that index still see a KeyError
        load_profile("developer-api")["idel_release_s"]


@pytest.mark.parametrize("spec,good,bad", [
    (P.Number(lo=0), [0, 1.5, "2.5"], [-1, True, "soon", [1, 2], None]),
    (P.Number(lo=1000, hi=4999, integer=True), [1011, 1007.0], [1011.5, 999, 5000]),
    (P.Number(lo=0, nullable=True), [None, 3], ["x"]),
    (P.Delay(), [0, 0.3, [0.1, 0.2], (0.2, 0.2)], [[0.3, 0.1], [-1, 1], [1, 2, 3], "x", None, -0.1]),
    (P.Flag(), [True, False], ["maybe", 1, None]),
    (P.Text(), ["a", 3], [True, [1], {"a": 1}]),
    (P.Text(pattern=r"\d+(\.\d+)?s"), ["50s", "1.5s"], ["50", "soon"]),
    (P.Choice(options=("once", "per_turn")), ["once", "PER_TURN"], ["twice", 1]),
    (P.Lines(), [["a", "b"], "a | b"], [[1], {"a": 1}, 5]),
])
def test_parameter_shapes(spec, good, bad):
    for v in good:
        spec.check("p", v)
    for v in bad:
        with pytest.raises(LabError, match="bad value for p"):
            spec.check("p", v)


def test_canonical_values():
    assert P.Choice(options=("NON_BLOCKING", "BLOCKING")).check("p", "blocking") == "BLOCKING"
    assert P.Lines().check("p", "a | b") == ["a", "b"]
    assert P.Delay().check("p", (0.1, 0.2)) == [0.1, 0.2]
    assert P.Number(integer=True).check("p", 1007.0) == 1007
