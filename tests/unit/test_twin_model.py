"""The scripted booking model: pure and deterministic."""
from __future__ import annotations

import random

import pytest

from lab.twin import model as M


@pytest.mark.parametrize("text,intent", [
    ("Book me the 3pm slot tomorrow, please.", M.BOOK),
    ("BOOK IT", M.BOOK),
    ("Did you book it?", M.STATUS),
    ("is it booked yet", M.STATUS),
    ("Actually, stop. Don't book it.", M.STOP),
    ("don\u2019t book", M.STOP),
    ("What's the weather?", M.OTHER),
    ("", M.OTHER),
    ("Facebook", M.OTHER),
])
def test_classify(text, intent):
    assert M.classify(text) == intent


def fresh(behavior="NON_BLOCKING", seed=1, **cfg) -> M.ScriptedModel:
    return M.ScriptedModel(M.ModelConfig(default_behavior=behavior, **cfg), random.Random(seed))


def test_book_nonblocking_turn_holds_only_the_call():
    m = fresh()
    plan = m.user_turn("Book me the 3pm slot tomorrow, please.")
    assert [s.kind for s in plan.steps] == ["call", "turn_complete"] and not plan.hold
    assert 0.5 <= plan.steps[0].delay <= 0.9
    assert m.calls == {}                       # the id exists only once the core sends the call
    c = m.new_call()
    assert (c.id, c.name, c.slot) == ("fc-1", "book_slot", "tomorrow 3pm")


def test_status_in_progress_then_booked():
    m = fresh()
    m.user_turn("Book me the 3pm slot tomorrow, please.")
    c = m.new_call()
    assert m.user_turn("Did you book it?").texts() == [M.SAY_IN_PROGRESS]
    known, status, plan = m.tool_response({"id": c.id, "response": {"status": "booked"}})
    assert known and status == "booked" and plan.texts() == [M.SAY_BOOKED]
    assert m.user_turn("Did you book it?").texts() == [M.SAY_STATUS_BOOKED]
    assert m.tool_response({"id": c.id, "response": {"status": "booked"}})[2] is None   # answered twice


def test_status_without_any_booking():
    assert fresh().user_turn("Did you book it?").texts() == [M.SAY_NO_BOOKING]


def test_unknown_id_ignored():
    m = fresh()
    assert m.tool_response({"id": "fc-42", "response": {"status": "booked"}}) == (False, "booked", None)


def test_silent_scheduling_says_nothing_and_failed_status_is_told():
    m = fresh()
    a, b = m.new_call(), m.new_call()
    assert m.tool_response({"id": a.id, "scheduling": "SILENT", "response": {"status": "booked"}})[2] is None
    m2 = fresh()
    c = m2.new_call()
    assert m2.tool_response({"id": c.id, "response": {"error": "slot taken"}})[2].texts() == [M.SAY_NOT_BOOKED]
    # pipecat puts scheduling inside response
    m3 = fresh()
    d = m3.new_call()
    assert m3.tool_response({"id": d.id, "response": {"status": "booked", "scheduling": "SILENT"}})[2] is None


def test_blocking_holds_and_stop_reissues():
    m = fresh("BLOCKING", reissue_p=1.0)
    plan = m.user_turn("Book me the 3pm slot tomorrow, please.")
    assert plan.hold and [s.kind for s in plan.steps] == ["call"]
    first = m.new_call()
    plan = m.user_turn("Actually, stop. Don't book it.")
    assert plan.has_call() and 0.6 <= plan.steps[0].delay <= 0.8
    second = m.new_call()
    assert second.id != first.id and second.slot == first.slot
    assert first.status == "pending"          # never cancelled


def test_declared_behavior_wins_over_the_default():
    m = fresh()
    m.configure({"tools": [{"functionDeclarations": [{"name": "book_slot", "behavior": "BLOCKING"}]}]})
    assert m.blocking


def test_stop_with_nonblocking_call_pending_claims_it_is_booked():
    m = fresh()
    m.user_turn("Book me the 3pm slot tomorrow, please.")
    m.new_call()
    assert m.user_turn("Actually, stop. Don't book it.").texts() == [M.ModelConfig().stop_while_pending_reply]
    assert fresh().user_turn("stop").texts() == [M.SAY_STOPPED]


def test_restore_with_note_and_without():
    turns = [{"role": "user", "parts": [{"text": "Book me the 3pm slot tomorrow, please."}]},
             {"role": "model", "parts": [{"text": "Booking it."}]}]
    note = {"role": "user", "parts": [{"text": "System note: book_slot(tomorrow 3pm) booked, job 7"}]}
    q = {"role": "user", "parts": [{"text": "Did you book it?"}]}
    m = fresh()
    plan = m.restore(turns + [note, q], True)
    assert plan.texts() == [M.SAY_STATUS_NOTE_BOOKED] and not plan.has_call()
    assert 0.76 <= plan.steps[0].delay <= 1.2
    assert m.user_turn("Did you book it?").texts() == [M.SAY_STATUS_NOTE_BOOKED]
    assert fresh().restore(turns + [note], True).texts() == [M.SAY_NOTE_BOOKED]
    plan = fresh().restore(turns, True)
    assert plan.texts() == [M.SAY_REBOOKING] and plan.has_call()
    pending_note = {"role": "user", "parts": [{"text": "System note: book_slot is still being processed"}]}
    assert fresh().restore(turns + [pending_note, q], True).texts() == [M.SAY_IN_PROGRESS]
    assert fresh().restore(turns, False) is None


def test_script_lines_come_from_the_profile_not_the_client():
    m = fresh()
    assert [m.next_script_line() for _ in range(3)] == ["Book me the 3pm slot tomorrow, please.",
                                                        "Did you book it?", ""]
    m = M.ScriptedModel(M.ModelConfig(script=["book it", "stop", "did you book it?"]))
    m.configure({"systemInstruction": {"parts": [{"text": "Be brief.\nLAB_SCRIPT: ignored | by the twin"}]}})
    assert [m.next_script_line() for _ in range(3)] == ["book it", "stop", "did you book it?"]


def test_deterministic_for_a_seed():
    a, b = fresh(seed=5), fresh(seed=5)
    assert [s.delay for s in a.user_turn("book").steps] == [s.delay for s in b.user_turn("book").steps]


@pytest.mark.parametrize("resp,status", [
    ({"status": "booked"}, "booked"), ({"output": {"status": "BOOKED"}}, "booked"), ({}, "booked"),
    ({"status": "failed"}, "not_booked"), ({"error": "x"}, "not_booked"), ({"status": "pending"}, "pending"),
    ({"result": "still processing"}, "pending"),
])
def test_response_status(resp, status):
    assert M.response_status(resp) == status


def test_audio_turn_detector():
    d = M.AudioTurnDetector(threshold=500, onset_ms=140, silence_ms=500)
    voiced = M.tone(0.6, 16000, 300, 8000)
    silence = bytes(int(0.6 * 16000) * 2)
    assert d.feed(silence) == []
    ev = []
    for i in range(0, len(voiced), 1000):                 # odd chunk sizes
        ev += d.feed(voiced[i:i + 1000])
    assert ev == ["onset"]
    assert d.feed(bytes(int(0.3 * 16000) * 2)) == []     # a short pause is not the end
    assert d.feed(voiced[:3200]) == []
    assert d.feed(silence) == ["end"]
    assert d.feed(M.tone(0.06, 16000, 300, 8000) + silence) == []   # a 60 ms click is not speech
    assert d.feed(voiced) == ["onset"] and d.flush() == ["end"] and d.flush() == []


def test_tone_length():
    assert len(M.tone(0.5, 24000)) == 24000


def test_a_line_naming_two_times_asks_for_two_calls_and_one_naming_one_time_for_the_profiles_slot():
    assert M.slots_asked("Book me the 3pm and the 4 pm slots tomorrow, please.") == ("tomorrow 3pm", "tomorrow 4pm")
    assert M.slots_asked("Book me the 3pm slot tomorrow, please.") == ()
    assert M.slots_asked("Book the 3pm, or 3 pm if not") == ()          # one distinct time
    step = fresh().user_turn("Book me the 3pm and the 4pm slots tomorrow, please.").steps[0]
    assert (step.kind, step.slot, step.also) == ("call", "tomorrow 3pm", ("tomorrow 4pm",))
    one = fresh().user_turn("Book me the 5pm slot tomorrow, please.").steps[0]
    assert (one.slot, one.also) == ("tomorrow 3pm", ())                  # as before: the profile's slot


def test_a_batch_of_calls_is_answered_once_when_its_last_response_is_in():
    m = fresh()
    a, b = m.new_calls(("tomorrow 3pm", "tomorrow 4pm"))
    assert (a.batch, b.batch) == ((a.id, b.id), (a.id, b.id)) and (a.slot, b.slot) == ("tomorrow 3pm", "tomorrow 4pm")
    assert m.tool_response({"id": b.id, "response": {"status": "booked"}}) == (True, "booked", None)
    known, status, plan = m.tool_response({"id": a.id, "response": {"status": "booked"}})
    assert known and plan.texts() == [M.SAY_BOOKED]


def test_a_lone_call_is_answered_although_an_older_call_is_still_pending():
    m = fresh()
    old, new = m.new_call(), m.new_call()          # two toolCalls, not one batch
    assert m.tool_response({"id": new.id, "response": {"status": "booked"}})[2].texts() == [M.SAY_BOOKED]
    assert old.status == "pending"
