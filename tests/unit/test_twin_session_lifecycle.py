"""Session lifecycle on the pure core: the connection cap and its goAway, the resume after the twin's
own goAway, the session caps and context compression, the lock after the server's TCP gave up,
the server's own faults, and the control channel's requests."""
from __future__ import annotations

import json
import math

import pytest

from lab.twin import io_actions as A
from lab.twin import control
from lab.twin import session as S
from lab.twin.core import TwinCore, UnknownFault

MODEL = "models/gemini-3.8-live"
DEADLINE = "Deadline expired before operation could complete."


class Clock:
    """Drives a core: fires every timer due up to `t`, in time order, collecting what was sent."""

    def __init__(self, core: TwinCore):
        self.core, self.timers, self.sent, self.closed = core, [], [], []

    def take(self, acts) -> list:
        for a in acts:
            if isinstance(a, A.Timer):
                self.timers.append(a)
            elif isinstance(a, A.Send):
                self.sent.append((a.at, a.conn, a.frame))
            elif isinstance(a, A.Close):
                self.closed.append((a.at, a.conn, a.code, a.reason))
        return acts

    def until(self, t: float) -> None:
        while True:
            due = sorted((x for x in self.timers if x.at <= t), key=lambda x: x.at)
            if not due:
                return
            self.timers.remove(due[0])
            self.take(self.core.timer_fired(due[0].key, due[0].at))

    def open(self, conn: int, at: float, handle: str | None = None, **setup) -> None:
        self.take(self.core.connection_opened(conn, at, "v1beta"))
        body = {"model": MODEL, "sessionResumption": {"handle": handle} if handle else {}, **setup}
        self.take(self.core.frame_received(conn, json.dumps({"setup": body}), at))

    def frames(self, conn: int, key: str) -> list:
        return [(at, f) for at, c, f in self.sent if c == conn and key in f]

    def handle(self, conn: int) -> str:
        return [f for _, f in self.frames(conn, "sessionResumptionUpdate")][-1]["sessionResumptionUpdate"]["newHandle"]


def test_the_connection_cap_comes_after_a_goaway_with_time_left():
    clk = Clock(TwinCore(seed=1, overrides={"connection_max_s": 10, "goaway_lead_s": 3}))
    clk.open(1, 0.0)
    clk.until(9.9)
    ((at, frame),) = clk.frames(1, "goAway")
    assert at == pytest.approx(7.0) and frame == {"goAway": {"timeLeft": "3s"}}
    assert clk.closed == []
    clk.until(10.0)
    assert clk.closed == [(10.0, 1, 1011, DEADLINE)]


def test_vertex_ends_its_capped_connection_with_1000_cancelled():
    clk = Clock(TwinCore("vertex", seed=1, overrides={"connection_max_s": 4, "goaway_lead_s": 1}))
    clk.open(1, 0.0)
    clk.until(5)
    assert clk.closed == [(4.0, 1, 1000, "The operation was cancelled.")]


def test_no_cap_without_connection_max():
    clk = Clock(TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": None,
                                            "freeze_close_s": None}))
    clk.open(1, 0.0)
    clk.until(5000)
    assert clk.closed == [] and clk.frames(1, "goAway") == []


def _resume_after_close(overrides: dict, goaway: bool) -> list:
    core = TwinCore(seed=1, overrides={"connection_max_s": None, **overrides})
    clk = Clock(core)
    clk.open(1, 0.0)
    clk.until(1.0)
    if goaway:
        clk.take(core.go_away(1.0, 30))
        assert clk.frames(1, "goAway")[0][1] == {"goAway": {"timeLeft": "30s"}}
    core.connection_ended(1, "close_frame", 1.01)       # the client leaves at once (LiveKit)
    clk.open(2, 1.02, handle=clk.handle(1))
    clk.until(3.0)
    return clk.closed


def test_a_resume_after_the_twins_own_goaway_is_accepted_at_once():
    assert _resume_after_close({}, goaway=True) == []
    # without the goAway, the same immediate resume meets the idle-drop release (refused 1011)
    assert [c[2] for c in _resume_after_close({}, goaway=False)] == [1011]
    # and the goAway's own release is a parameter
    assert [c[2] for c in _resume_after_close({"goaway_resume_release_s": 5}, goaway=True)] == [1011]


def test_audio_only_session_is_capped_unless_context_compression_is_on():
    clk = Clock(TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": 20}))
    clk.open(1, 0.0)
    clk.until(19.0)
    assert clk.closed == []
    clk.until(21.0)
    assert [(c[2], c[3]) for c in clk.closed] == [(1011, DEADLINE)]
    assert clk.core.sessions.session("s1").dead          # the context is full: no resume either

    clk = Clock(TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": 20}))
    clk.open(1, 0.0, contextWindowCompression={"slidingWindow": {}})
    clk.until(100.0)
    assert clk.closed == []


def test_the_cap_counts_the_session_across_resumes():
    clk = Clock(TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": 20,
                                            "idle_release_s": 0}))
    clk.open(1, 0.0)
    clk.until(10.0)
    clk.core.connection_ended(1, "close_frame", 10.0)
    clk.open(2, 11.0, handle=clk.handle(1))
    clk.until(19.5)
    assert clk.closed == []
    clk.until(21.0)
    assert [c[1] for c in clk.closed] == [2]


def test_audio_and_video_session_has_the_shorter_cap():
    core = TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": 900, "session_max_av_s": 5})
    clk = Clock(core)
    clk.open(1, 0.0)
    clk.until(1.0)
    pcm = "AAAA" * 10
    clk.take(core.frame_received(1, json.dumps({"realtimeInput": {"audio": {"data": pcm, "mimeType": "audio/pcm"}}}), 1.0))
    clk.until(6.9)
    assert clk.closed == []            # audio only until 7 s
    clk.take(core.frame_received(1, json.dumps({"realtimeInput": {"video": {"data": pcm, "mimeType": "image/jpeg"}}}), 7.0))
    clk.until(9.0)
    assert [c[2] for c in clk.closed] == [1011] and 7.0 <= clk.closed[0][0] <= 8.1


def test_the_session_stays_locked_after_the_servers_tcp_gave_up_until_the_480s_close():
    core = TwinCore(seed=1, overrides={"connection_max_s": None, "session_max_audio_s": None})
    clk = Clock(core)
    clk.open(1, 0.0)
    clk.until(1.0)
    handle = clk.handle(1)
    core.connection_ended(1, "tcp_timeout", 120.0)      # ~2 min of retransmissions, then ETIMEDOUT
    for conn, at in ((2, 121.0), (3, 470.0)):
        clk.open(conn, at, handle=handle)
        clk.until(at + 2)
    assert [c[2] for c in clk.closed] == [1011, 1011]
    clk.open(4, 481.0, handle=handle)                   # past the server's own close: the session is dead
    clk.until(483.0)
    assert [c[2] for c in clk.closed] == [1011, 1011, 1011] and core.sessions.session("s1").dead


def test_why_the_locked_session_was_refused_is_logged():
    core = TwinCore(seed=1, overrides={"connection_max_s": None})
    clk = Clock(core)
    clk.open(1, 0.0)
    clk.until(1.0)
    core.connection_ended(1, "tcp_timeout", 120.0)
    core.connection_opened(2, 121.0, "v1beta")
    acts = core.frame_received(2, json.dumps({"setup": {"model": MODEL, "sessionResumption": {"handle": clk.handle(1)}}}), 121.0)
    (log,) = [a for a in acts if isinstance(a, A.Log) and a.kind == "twin.refuse"]
    assert log.fields["why"] == "tcp_gave_up"


def test_unresumable_updates_switched_on_reach_the_live_connections_at_once():
    core = TwinCore(seed=1)
    clk = Clock(core)
    clk.open(1, 0.0)
    clk.until(1.0)
    clk.take(core.set_fault("unresumable", True, 2.0))
    assert clk.frames(1, "sessionResumptionUpdate")[-1] == (2.0, {"sessionResumptionUpdate": {"resumable": False}})
    clk.open(2, 3.0)
    clk.until(4.0)
    assert [f for _, f in clk.frames(2, "sessionResumptionUpdate")] == [{"sessionResumptionUpdate": {"resumable": False}}]


def test_stall_sends_no_frame_and_holds_pongs_for_ever():
    core = TwinCore(seed=1)
    clk = Clock(core)
    clk.take(core.set_fault("stall", True, 0.0))
    clk.open(1, 0.0)
    clk.until(5.0)
    assert clk.sent == [] and clk.closed == []
    assert math.isinf(core.pong_delay())
    clk.take(core.set_fault("stall", False, 5.0))
    assert core.pong_delay() == 0.0


def test_slow_pongs_are_drawn_from_the_measured_range():
    core = TwinCore(seed=3, overrides={"slow_pongs": True})
    delays = [core.pong_delay() for _ in range(200)]
    assert all(8 <= d <= 30 for d in delays) and max(delays) - min(delays) > 10


def test_an_unknown_fault_is_one_clear_error():
    with pytest.raises(UnknownFault, match="known: quota, slow_pongs, stall, unresumable"):
        TwinCore().set_fault("meteor", True, 0.0)


# ---- the control channel's requests --------------------------------------------------------------

class FakeTwin:
    def __init__(self):
        self.core = TwinCore()
        self.calls = []

    def set_fault(self, name, on):
        self.calls.append(("fault", name, on))
        self.core.set_fault(name, on, 0.0)

    def go_away(self, time_left_s=None):
        self.calls.append(("goaway", time_left_s))

    def open_connections(self):
        return 0


def test_control_requests_route_and_answer():
    assert control.parse_request(b"POST /fault HTTP/1.1\r\nContent-Length: 30\r\n\r\n") == ("POST", "/fault", 30)
    twin = FakeTwin()
    assert control.perform(twin, "/fault", {"name": "stall", "on": True}) == {"faults": ["stall"], "connections": 0}
    control.perform(twin, "/goaway", {"time_left_s": 5})
    control.perform(twin, "/goaway", {})
    assert twin.calls == [("fault", "stall", True), ("goaway", 5.0), ("goaway", None)]


@pytest.mark.parametrize("head,status", [
    (b"GET /fault HTTP/1.1\r\n\r\n", 405), (b"POST /nope HTTP/1.1\r\n\r\n", 404),
    (b"POST\r\n\r\n", 400), (b"POST /fault HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 400)])
def test_bad_control_requests_are_refused(head, status):
    with pytest.raises(control.BadRequest) as ei:
        control.parse_request(head)
    assert ei.value.status == status


@pytest.mark.parametrize("path,body,status", [
    ("/fault", {"name": "meteor"}, 404), ("/fault", {"name": "stall", "on": "yes"}, 400),
    ("/goaway", {"time_left_s": -1}, 400)])
def test_bad_control_bodies_are_refused(path, body, status):
    with pytest.raises(control.BadRequest) as ei:
        control.perform(FakeTwin(), path, body)
    assert ei.value.status == status
    with pytest.raises(control.BadRequest):
        control.parse_body(b"[1]")


def test_timers_of_the_lifecycle_are_owned_by_the_session_room():
    assert {S.CapGoAway, S.SessionCap} <= set(TwinCore().sessions._timers)


def test_the_shell_tells_a_tcp_give_up_from_a_reset_and_an_eof():
    import errno
    from types import SimpleNamespace

    from lab.twin.server import _how_closed    # here: the only test in this file that needs websockets

    def ws(exc):
        return SimpleNamespace(protocol=SimpleNamespace(close_rcvd=None), connection_exc=exc)

    assert _how_closed(ws(TimeoutError(errno.ETIMEDOUT, "timed out")), None) == "tcp_timeout"
    assert _how_closed(ws(OSError(errno.ETIMEDOUT, "timed out")), None) == "tcp_timeout"
    assert _how_closed(ws(ConnectionResetError()), None) == "rst"
    assert _how_closed(ws(None), None) == "eof"
