"""The SessionManager's buffer and backoff (seed 004 §3-5), without sockets."""
import random

from lab.clients.session_manager import Backoff, _Buffer


def test_indices_count_from_1_per_connection_and_an_update_prunes_up_to_its_index():
    b = _Buffer()
    b.new_connection()
    b.items += [("send", {"n": i}) for i in (1, 2, 3)]
    assert b.unwritten() == b.items
    b.sent = 3                              # indices 1..3 went out
    assert b.consumed(2) == 2 and [kw["n"] for _, kw in b.items] == [3]
    assert b.consumed(2) == 0               # the same index again changes nothing
    b.new_connection()                      # a reconnect: message 3 is index 1 of the new connection
    assert [kw["n"] for _, kw in b.unwritten()] == [3]
    b.sent = 1
    assert b.consumed(0) == 0 and len(b.items) == 1
    assert b.consumed(5) == 1 and b.items == []     # never past what was written


def test_a_reconnect_that_fails_mid_replay_replays_everything_again():
    b = _Buffer()
    b.items += [("send", {"n": i}) for i in (1, 2)]
    b.new_connection()
    b.sent = 1                              # the replay got one message out, then the socket died
    b.new_connection()
    assert [kw["n"] for _, kw in b.unwritten()] == [1, 2]


def test_backoff_doubles_up_to_its_cap():
    bo = Backoff(first_s=0.5, max_s=4.0, jitter=0.0)
    rng = random.Random(1)
    assert [bo.delay(a, rng) for a in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
