"""netem.realtime.fifo_while: a fault change's thread real-time for the change only, a refusal one line."""
from __future__ import annotations

import os
import threading

import pytest

from netem import realtime


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(realtime, "_fifo_refused", None)


def in_thread(fn):
    # a thread of its own: whatever happens, pytest's own thread keeps its policy
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join()
    return out["r"]


def test_the_thread_is_fifo_inside_and_ordinary_after():
    def body():
        before = os.sched_getscheduler(0)
        with realtime.fifo_while():
            inside = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
        return before, inside, os.sched_getscheduler(0), realtime.fifo_refused()

    before, inside, after, refused = in_thread(body)
    if refused is not None:
        pytest.skip(f"this machine refuses SCHED_FIFO: {refused}")
    assert before == os.SCHED_OTHER and after == os.SCHED_OTHER
    # and what it spawns meanwhile starts ordinary
    assert inside == (os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, realtime.FIFO_PRIORITY)


def test_a_refusal_is_one_line_the_work_runs_and_later_changes_do_not_ask(monkeypatch, capsys):
    asked = []

    def refuse(pid, policy, param):
        asked.append(policy)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(realtime.os, "sched_setscheduler", refuse)
    ran = []
    for _ in range(3):
        with realtime.fifo_while():
            ran.append(1)
    assert ran == [1, 1, 1] and asked == [os.SCHED_FIFO | os.SCHED_RESET_ON_FORK]
    err = capsys.readouterr().err.splitlines()
    assert err == ["netem: no SCHED_FIFO for fault changes (Operation not permitted): a change waits behind "
                   "other work on a busy machine"]
    assert realtime.fifo_refused() == "Operation not permitted"


def test_a_thread_already_real_time_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(realtime.os, "sched_getscheduler", lambda pid: os.SCHED_FIFO)
    monkeypatch.setattr(realtime.os, "sched_setscheduler", lambda *a: pytest.fail("asked again"))
    with realtime.fifo_while():
        pass


def test_an_error_inside_still_restores_the_policy():
    def body():
        try:
            with realtime.fifo_while():
                raise KeyError("inside")
        except KeyError:
            pass
        return os.sched_getscheduler(0)

    assert in_thread(body) == os.SCHED_OTHER
