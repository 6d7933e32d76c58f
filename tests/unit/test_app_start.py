"""An app client's start ends at its first connection, its exit, or a limit (lab/clients/app_start.py)."""
import asyncio

from lab.clients import app_start
from lab.clients.app_start import CONNECTED, EXITED, TIMED_OUT, first_connection


def _run(coro):
    return asyncio.run(coro)


async def _later(s, fn):
    await asyncio.sleep(s)
    return fn()


def test_the_start_ends_at_the_first_connection_not_before():
    async def go():
        connected = asyncio.Event()
        never_exits = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.15, connected.set)
        return await first_connection(connected, never_exits, timeout_s=5)

    start = _run(go())
    assert start.outcome == CONNECTED and start.rc is None
    assert 0.12 <= start.waited_s < 2.0, start.waited_s
    assert start.error_line(5) is None


def test_an_app_that_exits_first_is_exited_with_its_code():
    async def go():
        return await first_connection(asyncio.Event(), _later(0.05, lambda: 3), timeout_s=5, settle_s=0.05)

    start = _run(go())
    assert (start.outcome, start.rc) == (EXITED, 3)
    assert start.error_line(5) == "the client command exited before it ever connected (exit 3)"


def test_a_connection_the_twin_logged_just_before_the_exit_counts():
    async def go():
        connected = asyncio.Event()

        def exit_then_connect():
            # the tail reads the twin's record after the exit was seen
            asyncio.get_running_loop().call_later(0.02, connected.set)
            return 0
        return await first_connection(connected, _later(0.05, exit_then_connect), timeout_s=5, settle_s=0.5)

    assert _run(go()).outcome == CONNECTED


def test_an_app_that_never_connects_times_out_with_one_line():
    async def go():
        return await first_connection(asyncio.Event(), asyncio.get_running_loop().create_future(), timeout_s=0.1)

    start = _run(go())
    assert start.outcome == TIMED_OUT and start.waited_s >= 0.1
    line = start.error_line(90)
    assert line == "the client command did not connect to the endpoint within 90 s of starting"
    assert "\n" not in line


def test_an_already_connected_app_wins_over_its_exit():
    async def go():
        connected = asyncio.Event()
        connected.set()
        done = asyncio.get_running_loop().create_future()
        done.set_result(1)
        return await first_connection(connected, done, timeout_s=5)

    assert _run(go()).outcome == CONNECTED


def test_the_limit_leaves_the_orchestrators_margin_for_the_run():
    # lab.run kills an agent that outlives its duration by 120 s: the wait must fit inside it with the stop
    assert 30 <= app_start.CONNECT_TIMEOUT_S <= 100
