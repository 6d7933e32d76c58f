"""The run's start-up handshake: services start together, the early agent waits for its go."""
import threading

import pytest

from lab.agent import wait_for_go
from lab.errors import LabError
from lab.run import _start_together


def test_starts_run_at_once():
    # each start waits for the other at a barrier: called one after the other, the first would time out
    barrier = threading.Barrier(2, timeout=10)
    done = []
    _start_together([lambda: done.append(barrier.wait()), lambda: done.append(barrier.wait())])
    assert sorted(done) == [0, 1]


def test_a_failed_start_is_raised_after_the_others_finish():
    finished = threading.Event()

    def slow_ok():
        finished.set()

    def broken():
        raise LabError("the twin did not start")
    with pytest.raises(LabError, match="the twin did not start"):
        _start_together([broken, slow_ok])
    assert finished.is_set()


def test_go_returns_once_the_file_exists(tmp_path):
    go = tmp_path / ".agent-go"
    threading.Timer(0.05, go.write_text, args=("1.0\n",)).start()
    wait_for_go(go, timeout_s=10)
    assert go.exists()


def test_no_go_is_one_clear_error(tmp_path):
    with pytest.raises(LabError, match="no go from the orchestrator"):
        wait_for_go(tmp_path / ".agent-go", timeout_s=0.02)
