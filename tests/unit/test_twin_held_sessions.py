"""The twin's limit on sessions it still holds (held_sessions_max, an assumption: 000 did not test it)."""
from tests.unit.test_twin_core import Sim

REFUSED = "Internal error encountered."


def test_no_limit_by_default_many_held_sessions_and_a_new_one_is_accepted():
    sim = Sim()
    for conn in (1, 2, 3):
        sim.setup(conn)          # three open connections: three sessions held
    sim.after(1)
    assert sim.core.sessions.held_sessions(sim.now) == 3 and not sim.closed


def test_a_new_session_past_the_limit_is_refused_like_the_quota_while_resumes_are_judged_as_before():
    sim = Sim(held_sessions_max=2)
    sim.setup(1)
    sim.setup(2)
    sim.after(1)
    sim.setup(3)                 # a third new session while two are held: refused
    sim.after(2)
    assert sim.closed[3][1:] == (1011, REFUSED)
    assert [f["why"] for f in sim.logs_of("twin.refuse")] == ["held_sessions"]
    sim.end(1, "close_frame")    # a clean close releases that session: a new one fits again
    sim.after(0.1)
    sim.setup(4)
    sim.after(2)
    assert 4 not in sim.closed and sim.core.sessions.held_sessions(sim.now) == 2


def test_a_session_locked_after_its_tcp_gave_up_still_counts():
    sim = Sim(held_sessions_max=1)
    sim.setup(1)
    sim.after(1)
    sim.end(1, "tcp_timeout")    # 000: the session stays locked until the server's own ~480 s close
    sim.after(1)
    assert sim.core.sessions.held_sessions(sim.now) == 1
    sim.setup(2)
    sim.after(2)
    assert sim.closed[2][1] == 1011
