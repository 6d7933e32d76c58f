"""The stop study's semantics in the scripted model (001, fidelity.md section 4), as pure units by seed."""
from __future__ import annotations

import random

from lab.twin import model as M

BOOK, STOP = "Book me the 3pm slot tomorrow, please.", "Actually, stop. Don't book it."


def model(behavior="NON_BLOCKING", seed=1, **cfg) -> M.ScriptedModel:
    return M.ScriptedModel(M.ModelConfig(default_behavior=behavior, **cfg), random.Random(seed))


def booked(call: M.Call) -> dict:
    return {"id": call.id, "response": {"status": "booked"}}


def test_nonblocking_stop_claims_booked_within_the_recorded_delay_while_the_call_is_pending():
    for seed in range(20):
        m = model(seed=seed)
        m.user_turn(BOOK)
        m.new_call()
        plan = m.user_turn(STOP)
        assert plan.texts() == [M.ModelConfig().stop_while_pending_reply]
        assert 0.522 <= plan.steps[0].delay <= 0.937
        assert not plan.has_call()


def test_nonblocking_after_the_claim_silent_after_the_response_at_the_recorded_rate():
    silent = 0
    for seed in range(900):
        m = model(seed=seed)
        m.user_turn(BOOK)
        call = m.new_call()
        m.user_turn(STOP)
        silent += m.tool_response(booked(call))[2] is None
    assert 0.84 <= silent / 900 <= 0.94          # 8 of 9 in the records


def test_the_same_seed_draws_the_same_branch():
    def run(seed):
        m = model("BLOCKING", seed=seed)
        m.user_turn(BOOK)
        m.new_call()
        p = m.user_turn(STOP)
        return p.why, [s.delay for s in p.steps]
    assert all(run(s) == run(s) for s in range(10))
    assert {run(s)[0] for s in range(40)} == {"stop-reissue", "stop-blocking-no-reissue"}


def test_blocking_reissue_rate_delay_and_the_superseded_response_is_silent():
    reissued = 0
    for seed in range(1200):
        m = model("BLOCKING", seed=seed)
        m.user_turn(BOOK)
        first = m.new_call()
        plan = m.user_turn(STOP)
        if plan.has_call():
            reissued += 1
            assert plan.hold and 0.6 <= plan.steps[0].delay <= 0.8      # reissue_delay_s of the profile default
            second = m.new_call()
            assert second.id != first.id and second.slot == first.slot
            assert m.tool_response(booked(first))[2] is None            # superseded: no reply
            # F3: the re-issued call's answer says it was already booked (001 C text, 3/3)
            assert m.tool_response(booked(second))[2].texts() == [M.SAY_ALREADY_BOOKED]
    assert 0.53 <= reissued / 1200 <= 0.64        # 7 of 12 in the records


def test_blocking_without_reissue_contradicts_a_booked_response():
    m = model("BLOCKING", reissue_p=0.0)
    m.user_turn(BOOK)
    call = m.new_call()
    assert m.user_turn(STOP).steps == []
    _, status, plan = m.tool_response(booked(call))
    assert status == "booked" and plan.texts() == [M.ModelConfig().stop_contradict_reply]


def test_stop_after_the_commit_says_already_made():
    m = model()
    m.user_turn(BOOK)
    call = m.new_call()
    m.tool_response(booked(call))
    assert m.user_turn(STOP).texts() == ["The booking was already made."]


def test_early_stop_the_call_still_comes_at_the_recorded_rate_and_delay():
    came = 0
    for seed in range(600):
        m = model(seed=seed)
        m.user_turn(BOOK)                      # the call step is planned, not yet sent
        plan = m.user_turn(STOP)
        if plan.has_call():
            came += 1
            assert 1.047 <= plan.steps[0].delay <= 1.115
        else:
            assert plan.texts() == [M.SAY_NO_BOOKING]
    assert 0.60 <= came / 600 <= 0.73          # 2 of 3 in the records


def test_a_stop_with_nothing_planned_is_acknowledged():
    assert model().user_turn(STOP).texts() == [M.SAY_STOPPED]


def test_silent_scheduling_stays_silent_after_a_stop():
    m = model(silent_after_stop_response_p=0.0)
    m.user_turn(BOOK)
    call = m.new_call()
    m.user_turn(STOP)
    assert m.tool_response({"id": call.id, "scheduling": "SILENT", "response": {"status": "booked"}})[2] is None


def test_a_follow_up_while_the_call_is_pending_makes_the_model_speak_about_it():
    m = model()
    m.user_turn(BOOK)
    m.new_call()
    assert m.user_turn("Is there anything I should bring?").texts() == [M.SAY_PENDING_OTHER]
    assert model().user_turn("Is there anything I should bring?").texts() == [M.SAY_OTHER]


def test_a_spoken_blocking_stop_is_judged_from_when_the_user_began_speaking():
    # the response arrives between ACTIVITY_START and the end of speech (~1.2 s later): the stop is
    # still one against a pending call, and without a re-issue the model contradicts the response
    m = model("BLOCKING", reissue_p=0.0)
    m.user_turn(BOOK)
    call = m.new_call()
    m.utterance_started()
    m.tool_response(booked(call))
    assert m.user_turn(STOP).texts() == [M.ModelConfig().stop_contradict_reply]
    # a typed stop after the response is one after the commit, as before
    m = model("BLOCKING", reissue_p=0.0)
    m.user_turn(BOOK)
    call = m.new_call()
    m.tool_response(booked(call))
    assert m.user_turn(STOP).texts() == ["The booking was already made."]


def test_the_utterance_snapshot_is_used_once():
    m = model("BLOCKING", reissue_p=0.0)
    m.user_turn(BOOK)
    call = m.new_call()
    m.utterance_started()
    m.user_turn("What should I bring?")       # a spoken non-stop line consumes the snapshot
    m.tool_response(booked(call))
    assert m.user_turn(STOP).texts() == ["The booking was already made."]
