"""The twin checks what a transparent resume resends (seed 004 §5), on the simulated clock.

Each wrong replay (from index 0, a gap, a duplicate, new input first) is named in twin.replay; the
right one is `ok`; with replay_check=close the wrong one is closed 1007; an expired handle is refused.
"""
from __future__ import annotations

import base64

import pytest

from tests.unit.test_twin_core import Sim

TRANSPARENT = {"sessionResumption": {"transparent": True}}


def quiet(i: int) -> dict:
    """An audio chunk far below the VAD threshold, distinct per i (the twin compares by content)."""
    pcm = bytes([i, 0]) * 320
    return {"realtime_input": {"audio": {"data": base64.urlsafe_b64encode(pcm).decode(),
                                         "mime_type": "audio/pcm;rate=16000"}}}


def setup_transparent(sim: Sim, conn: int, handle: str | None = None) -> None:
    sim.setup(conn, extra={"sessionResumption": {"transparent": True, **({"handle": handle} if handle else {})}})


def dropped_session(sim: Sim) -> tuple[str, dict, list[dict]]:
    """A transparent session: one text turn consumed, three chunks sent after the last update, then
    the connection ends. (latest handle, the consumed message, the unconsumed ones)."""
    setup_transparent(sim, 1)
    sim.after(0.5)
    said = {"realtime_input": {"text": "hello"}}
    sim.send(1, said)
    sim.after(6)
    upd = sim.frames(1, "sessionResumptionUpdate")[-1]["sessionResumptionUpdate"]
    assert upd["lastConsumedClientMessageIndex"] == "1"
    chunks = [quiet(i) for i in (1, 2, 3)]
    for c in chunks:
        sim.send(1, c)
    sim.end(1, "close_frame")
    sim.after(3)
    return upd["newHandle"], said, chunks


def resume(sim: Sim, conn: int, handle: str) -> None:
    setup_transparent(sim, conn, handle)
    sim.after(1)
    assert conn not in sim.closed


def verdicts(sim: Sim, conn: int) -> list[str]:
    return [f["verdict"] for f in sim.logs_of("twin.replay") if f["conn"] == conn]


def test_a_resume_owes_the_unconsumed_messages_and_the_right_replay_is_ok():
    sim = Sim("vertex", reply_delay_s=0.1)
    h, _, chunks = dropped_session(sim)
    resume(sim, 2, h)
    for c in chunks + [quiet(9)]:
        sim.send(2, c)
    assert [f for f in sim.logs_of("twin.replay") if f["conn"] == 2] == [
        {"conn": 2, "session": "s1", "verdict": "owed", "owed": 3},
        {"conn": 2, "session": "s1", "verdict": "ok", "index": 3, "owed": 3}]


@pytest.mark.parametrize("name,order,verdict", [
    ("from index 0", lambda said, c: [said] + c, "resent_consumed"),
    ("a gap", lambda said, c: [c[0], c[2]], "gap"),
    ("a duplicate", lambda said, c: [c[0], c[0], c[1], c[2]], "duplicate"),
    ("new input first", lambda said, c: [quiet(9)] + c, "new_input_first"),
    ("no replay at all", lambda said, c: [c[1], c[2]], "gap"),
])
def test_each_wrong_replay_is_named(name, order, verdict):
    sim = Sim("vertex", reply_delay_s=0.1)
    h, said, chunks = dropped_session(sim)
    resume(sim, 2, h)
    for m in order(said, chunks):
        sim.send(2, m)
    assert verdicts(sim, 2) == ["owed", verdict], name
    assert 2 not in sim.closed          # replay_check: log (the profile's default) only records it


def test_a_wrong_replay_is_closed_1007_when_the_profile_says_close():
    sim = Sim("vertex", reply_delay_s=0.1, replay_check="close")
    h, _, chunks = dropped_session(sim)
    resume(sim, 2, h)
    sim.send(2, chunks[1])
    assert verdicts(sim, 2) == ["owed", "gap"]
    assert sim.closed[2][1:] == (1007, "Request contains an invalid argument.")


def test_a_replay_cut_by_another_drop_is_owed_again_in_full():
    sim = Sim("vertex", reply_delay_s=0.1, replay_check="close")
    h, _, chunks = dropped_session(sim)
    resume(sim, 2, h)
    sim.send(2, chunks[0])              # the reconnect fails half-way through the replay
    sim.end(2, "rst")
    sim.after(3)
    resume(sim, 3, h)                   # the same handle: the whole unconsumed tail again
    for c in chunks:
        sim.send(3, c)
    assert verdicts(sim, 3) == ["owed", "ok"]


def test_nothing_owed_when_every_message_was_consumed():
    sim = Sim("vertex", reply_delay_s=0.1)
    setup_transparent(sim, 1)
    sim.after(0.5)
    sim.send(1, {"realtime_input": {"text": "hello"}})
    sim.after(6)
    h = sim.handle(1)
    sim.end(1, "close_frame")
    sim.after(3)
    resume(sim, 2, h)
    sim.send(2, quiet(5))
    assert [f["owed"] for f in sim.logs_of("twin.replay")] == [0]


def test_an_expired_handle_is_refused():
    sim = Sim("vertex", handle_expiry_s=2)
    setup_transparent(sim, 1)
    sim.after(0.5)
    h = sim.handle(1)
    sim.end(1, "close_frame")
    sim.after(3)
    setup_transparent(sim, 2, h)
    sim.after(1)
    assert [f["why"] for f in sim.logs_of("twin.refuse")] == ["handle_expired"]
    assert sim.closed[2][1] == 1011
