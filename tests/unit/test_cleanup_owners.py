"""Run owners (netem.cleanup): a machine-wide down() spares the runs whose owner lives, without a
kernel (the namespace list and their removal are faked; pidfiles and owner records are real files)."""
from __future__ import annotations

import json
import os

import pytest

from netem import cleanup

GONE = "4999999:1"      # above any pid_max: a process that cannot be running


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake machine: its namespaces, what down() removed, the pid folder."""
    state = {"netns": [], "removed": []}
    monkeypatch.setattr(cleanup, "list_netns", lambda: list(state["netns"]))

    def remove(ns, report):
        state["netns"].remove(ns)
        state["removed"].append(ns)
        report["namespaces"].append(ns)
    monkeypatch.setattr(cleanup, "_remove_ns", remove)
    state["dir"] = tmp_path
    return state


def _owner(d, run_id, token):
    (d / f"{run_id}.owner").write_text(json.dumps({"owner": token, "run_id": run_id}))


def _pidfile(d, run_id, role, pid, start="1"):
    p = d / f"{run_id}.{role}.{pid}.pid"
    p.write_text(json.dumps({"pid": pid, "start": start, "role": role, "run_id": run_id}))
    return p


def test_claim_names_this_process_and_refuses_a_live_other_owner(tmp_path):
    cleanup.claim("r1", tmp_path)
    assert cleanup.live_runs(tmp_path) == {"r1": os.getpid()}
    cleanup.claim("r1", tmp_path)                       # the same owner again: fine
    _owner(tmp_path, "r2", cleanup.owner_token(1))     # pid 1 lives
    with pytest.raises(RuntimeError, match="live process 1"):
        cleanup.claim("r2", tmp_path)
    _owner(tmp_path, "r3", GONE)
    cleanup.claim("r3", tmp_path)                       # a dead owner's run id is free
    cleanup.release("r1", tmp_path)
    assert set(cleanup.live_runs(tmp_path)) == {"r2", "r3"}


def test_tokens_name_one_process():
    assert cleanup.token_alive(cleanup.owner_token())
    assert not cleanup.token_alive(GONE)
    assert not cleanup.token_alive(f"{os.getpid()}:0")  # this pid, another start time: a later process
    assert not cleanup.token_alive("") and not cleanup.token_alive("x:1")
    assert cleanup.token_pid(f"{os.getpid()}:5") == os.getpid() and cleanup.token_pid("") is None


def test_run_of_takes_the_longest_run_id_and_the_router():
    assert cleanup.run_of("ll-a-b-c") == "a-b"
    assert cleanup.run_of("ll-a-r") == "a"
    assert cleanup.run_of("ll-probe-12") is None


def test_machine_wide_down_spares_live_owners_and_takes_the_dead(machine):
    d = machine["dir"]
    me = cleanup.owner_token()
    _owner(d, "live", me)
    _owner(d, "dead", GONE)
    machine["netns"] = ["ll-live-c", "ll-live-e", "ll-dead-c", "ll-dead-e", "ll-old-c",
                        f"ll-probe-{os.getpid()}", "ll-probe-4999999-n"]
    live_pid = _pidfile(d, "live", "agent", os.getpid(), start=cleanup._starttime(os.getpid()))
    dead_pid = _pidfile(d, "dead", "agent", 4999999)
    rep = cleanup.down(pid_dir=d, current_ns=False)
    # the live run: its namespaces, pidfile and owner record stay, and the report names it
    assert rep["spared"] == [f"live (pid {os.getpid()})"]
    assert {"ll-live-c", "ll-live-e", f"ll-probe-{os.getpid()}"} == set(machine["netns"])
    assert live_pid.exists() and (d / "live.owner").exists()
    # the dead owner's run, a run with no owner record (an older lab's), a dead throw-away: gone
    assert sorted(machine["removed"]) == ["ll-dead-c", "ll-dead-e", "ll-old-c", "ll-probe-4999999-n"]
    assert not dead_pid.exists() and not (d / "dead.owner").exists()
    assert rep["errors"] == []


def test_an_owner_filter_touches_only_that_owners_runs(machine):
    d = machine["dir"]
    _owner(d, "mine", "4999998:1")
    _owner(d, "theirs", GONE)
    machine["netns"] = ["ll-mine-c", "ll-theirs-c", "ll-old-c", "ll-probe-4999999"]
    rep = cleanup.down(pid_dir=d, owner_pids={4999998})
    assert machine["removed"] == ["ll-mine-c"] and rep["chains"] == [] and rep["spared"] == []
    assert (d / "theirs.owner").exists() and not (d / "mine.owner").exists()


def test_down_of_one_run_is_exact(machine):
    d = machine["dir"]
    machine["netns"] = ["ll-a-c", "ll-a-b-c", "ll-a-r"]
    _pidfile(d, "a.b", "agent", 4999999)
    a = _pidfile(d, "a", "agent", 4999999)
    cleanup.down("a", pid_dir=d, current_ns=False)
    assert machine["netns"] == ["ll-a-b-c"]             # run "a-b" is not run "a"'s
    assert not a.exists() and (d / "a.b.agent.4999999.pid").exists()


def test_describe_lists_the_live_runs():
    rep = {"processes": [], "chains": [], "qdiscs": [], "namespaces": ["ll-x-c"], "errors": [],
           "spared": ["y (pid 7)"]}
    assert cleanup.describe(rep) == ("removed 0 processes, 0 chains, 0 qdiscs, 1 namespaces; "
                                     "left 1 live runs alone: y (pid 7)")


def test_lab_down_owner_takes_pids_and_refuses_anything_else():
    from lab.errors import LabError
    from lab.topology.down import _owner_pids

    assert _owner_pids(None) is None                      # no filter: every run whose owner is gone
    assert _owner_pids(["12,13", "14"]) == {12, 13, 14}
    with pytest.raises(LabError, match="process ids"):
        _owner_pids(["twelve"])
