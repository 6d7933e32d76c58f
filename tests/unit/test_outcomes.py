"""The user outcomes (lab/report/outcomes.py) on small recorded event streams, shaped as the lab's
clients, the twin and the backend write them: each outcome passing, failing and not applicable.

What these pin: a claim is judged against the backend at the moment it was said (its turn's first
audio), not at the run's end nor when its transcript arrived; side effects are counted by business
key, so a re-issued call that books once is once; the conversation is back when a model reply
comes on a live connection after the path allowed one; a read-only conversation has no effect to
count and is judged on its answers.
"""
import pytest

from lab.events import Event
from lab.report import outcomes
from lab.report.rules import FAIL, NA, PASS, Record

SLOT = "3pm tomorrow"
BOOK = "Book me the 3pm slot tomorrow, please."
ASK = "Did you book it?"
FLOW_CUT = {"loss_ms": 2000.0, "loss_cuts_path": True, "loss_kind": "fault:blackhole", "detection_ms": 2500.0,
            "transparent_requested": False, "lost_conn": 1}
NO_LOSS = {"loss_ms": None, "loss_cuts_path": False, "loss_kind": None, "detection_ms": None,
           "transparent_requested": False}
WEATHER = {"tools": [{"name": "get_weather", "side_effect": False}]}


def ev(kind, ms, **data):
    return Event(kind=kind, t=1000.0 + ms / 1000, ms=float(ms), src="twin" if kind.startswith("twin.") else "agent",
                 data=data)


def reply(ms, text, conn=1, audio_ms=None):
    """A model turn as a client logs it: its first audio chunk, then its transcript at the turn's end."""
    start = ms if audio_ms is None else audio_ms
    return [ev("model.audio", start, conn=conn, first=True), ev("model.text", ms, conn=conn, text=text),
            ev("model.turn_complete", ms + 1, conn=conn)]


def booking(commits=(4000,), keys=None):
    keys = keys or [SLOT] * len(commits)
    return [ev("backend.request", 1000, business_key=SLOT, call_id="c-1"),
            *(ev("backend.commit", ms, business_key=k) for ms, k in zip(commits, keys))]


def record(events, metrics=None, end=40000, conversation=None, fault=None):
    evs = [ev("run.start", 0), ev("user.say", 500, text=BOOK, line=0), *events, ev("run.end", end, status="ok")]
    if fault is not None:
        evs.append(fault)
    twin = [ev("twin.setup", 50, conn=1), ev("twin.accept", 100, conn=1, session="s1")]
    return Record(evs, twin, {}, dict(NO_LOSS if metrics is None else metrics), conversation=conversation)


def judge(name, rec):
    return outcomes.OUTCOMES[name].judge(rec)


def flow_fault():
    return ev("fault.apply", 2000, spec={"kind": "blackhole", "target": {"sport": 40000}})


# ---- each side effect once, counted by business key ----------------------------------------------
def test_one_commit_of_the_asked_booking_is_once():
    o = judge("effects_once", record(booking()))
    assert o.status == PASS and "1 asked, 1 done" in o.observed


def test_a_reissued_call_that_commits_the_same_key_twice_is_done_twice():
    o = judge("effects_once", record(booking(commits=(4000, 9000))))
    assert o.status == FAIL and "done twice: '3pm tomorrow'" in o.observed and o.figure == 1.0


def test_two_different_keys_each_once_is_not_a_duplicate():
    evs = booking(commits=(4000,)) + [ev("backend.request", 6000, business_key="4pm tomorrow", call_id="c-2"),
                                      ev("backend.commit", 8000, business_key="4pm tomorrow")]
    o = judge("effects_once", record(evs))
    assert o.status == PASS and "2 asked, 2 done" in o.observed


def test_an_asked_booking_never_done_is_lost():
    evs = [ev("backend.request", 1000, business_key=SLOT, call_id="c-1"),
           ev("backend.cancel", 3000, business_key=SLOT, call_id="c-1")]
    o = judge("effects_once", record(evs))
    assert o.status == FAIL and "never done" in o.observed


def test_a_booking_still_under_way_at_the_end_is_not_yet_lost():
    o = judge("effects_once", record([ev("backend.request", 1000, business_key=SLOT, call_id="c-1")]))
    assert o.status == NA and "still under way" in o.observed


def test_a_read_only_conversation_has_no_effect_to_do_once_nor_to_be_told_about():
    rec = record(reply(3000, "It is sunny in Paris."), conversation=WEATHER)
    assert judge("effects_once", rec).status == NA and "get_weather only read" in judge("effects_once", rec).observed
    assert judge("truthful_claims", rec).status == NA


# ---- what the user was told, at the moment it was said --------------------------------------------
@pytest.mark.parametrize("audio_ms, commit_ms, text, want", [
    # "in progress" begun 0.5 s before the commit, its transcript after: true when it was said
    (6500, 7000, "Your booking is in progress.", PASS),
    # "booked" begun before the commit: a promise the backend had not kept yet
    (6500, 7000, "Your 3pm slot is booked.", FAIL),
    # "booked" begun after the commit: true
    (7500, 7000, "Your 3pm slot is booked.", PASS),
    # "in progress" composed while it was, its audio 100 ms after the commit: true when it was said
    (7100, 7000, "Your booking is in progress.", PASS),
    # "in progress" begun long after the commit, the question asked after it too: stale, false
    (9000, 5000, "Your booking is in progress.", FAIL),
])
def test_a_status_answer_is_judged_at_its_first_audio(audio_ms, commit_ms, text, want):
    evs = booking(commits=(commit_ms,)) + [ev("user.say", 6000, text=ASK, line=1),
                                           *reply(9300, text, audio_ms=audio_ms)]
    o = judge("truthful_claims", record(evs))
    assert o.status == want, o.observed


def test_a_passing_remark_nobody_asked_about_is_not_judged():
    # the twin's "I'm booking it" right after the tool response, with no status question: no claim
    evs = booking(commits=(1500,)) + reply(1800, "I'm booking the 3 pm slot tomorrow for you.")
    assert judge("truthful_claims", record(evs)).status == NA


def test_the_clients_own_status_line_is_judged_at_its_time():
    evs = booking(commits=(7000,))
    said_early = record(evs + [ev("user.status", 5000, status="booked", text="Booked.")])
    said_late = record(evs + [ev("user.status", 8000, status="booked", text="Booked.")])
    assert judge("truthful_claims", said_early).status == FAIL
    assert judge("truthful_claims", said_late).status == PASS


# ---- a working conversation again ------------------------------------------------------------------
def test_a_reply_on_a_new_connection_after_a_flow_loss_is_back():
    evs = booking() + [ev("loss", 2000), *reply(8800, "Welcome back.", conn=2, audio_ms=8000)]
    o = judge("conversation_back", record(evs, metrics=FLOW_CUT, fault=flow_fault()))
    assert o.status == PASS and o.figure == 6000.0 and "at the loss" in o.observed


def test_no_reply_for_the_rest_of_a_long_run_is_not_back():
    evs = booking() + [ev("loss", 2000)]
    o = judge("conversation_back", record(evs, metrics=FLOW_CUT, fault=flow_fault(), end=40000))
    assert o.status == FAIL and "no model reply in the 38 s" in o.observed


def test_a_reply_on_the_dead_connection_before_the_heal_does_not_count():
    evs = booking() + [ev("loss", 2000), *reply(5000, "Still here?", conn=1)]
    assert judge("conversation_back", record(evs, metrics=FLOW_CUT, fault=flow_fault())).status == FAIL


def test_a_run_that_ends_inside_the_bound_cannot_say():
    evs = booking() + [ev("loss", 2000)]
    o = judge("conversation_back", record(evs, metrics=FLOW_CUT, fault=flow_fault(), end=12000))
    assert o.status == NA


def test_an_endpoint_fault_allows_a_new_connection_only_when_it_heals():
    fault = ev("fault.apply", 2000, spec={"kind": "blackhole", "target": "endpoint"})
    evs = booking() + [ev("loss", 2000), ev("fault.clear", 20000), *reply(23000, "Back.", conn=2)]
    o = judge("conversation_back", record(evs, metrics=FLOW_CUT, fault=fault))
    assert o.status == PASS and o.figure == 3000.0 and "healed" in o.observed


def test_no_loss_gives_nothing_to_come_back_from():
    assert judge("conversation_back", record(booking())).status == NA


# ---- the last line answered -------------------------------------------------------------------------
def test_the_last_line_answered_and_unanswered():
    asked = booking() + [ev("user.say", 6000, text=ASK, line=1)]
    assert judge("last_line_answered", record(asked + reply(7000, "It's booked."))).status == PASS
    o = judge("last_line_answered", record(asked, end=30000))
    assert o.status == FAIL and "got no reply in the 24 s left" in o.observed
    assert judge("last_line_answered", record(asked, end=9000)).status == NA


def test_a_reply_begun_before_the_line_was_heard_does_not_answer_it():
    # the answer to line 0 still playing when line 1 was said
    evs = booking() + [ev("user.say", 6000, text=ASK, line=1), *reply(6500, "Booking it now.", audio_ms=5500)]
    assert judge("last_line_answered", record(evs)).status == FAIL


# ---- all of them, and the rules behind them --------------------------------------------------------
def test_every_outcome_names_its_rules_and_judge_all_keeps_the_order():
    assert set(outcomes.BEHIND) == set(outcomes.OUTCOMES)
    from lab.report.rules import RULES
    assert all(r in RULES for rs in outcomes.BEHIND.values() for r in rs)
    rec = record(booking() + [ev("user.say", 6000, text=ASK, line=1), *reply(7000, "It's booked.")])
    judged = outcomes.judge_all(rec)
    assert list(judged) == list(outcomes.OUTCOMES)
    assert outcomes.tally(judged)[FAIL] == 0
