"""The conformance rules (lab/report/rules.py) on records shaped like the catalogue's runs.

Each record is what the twin and the agent write (twin.jsonl kinds, the agent's loss and heal, the
backend's commits), built small by hand; each rule is shown passing, failing and not applicable.
"""
import pytest

from lab.events import Event
from lab.report import rules
from lab.report.rules import FAIL, NA, PASS, Record

SLOT = "3pm tomorrow"


def ev(kind, ms, **data):
    return Event(kind=kind, t=1000.0 + ms / 1000, ms=float(ms), src="twin" if kind.startswith("twin.") else "agent",
                 data=data)


def conn(c, setup, accept=None, session=None, resume=False, refuse=None, end=None, how=None, why="old_connection_open"):
    out = [ev("twin.setup", setup, conn=c, resume=resume)]
    if accept is not None:
        out.append(ev("twin.accept", accept, conn=c, session=session, resume=resume))
    if refuse is not None:
        out.append(ev("twin.refuse", refuse, conn=c, code=1011, why=why))
        out.append(ev("twin.conn.end", refuse + 50, conn=c, how="server_refuse", session=None))
    if end is not None:
        out.append(ev("twin.conn.end", end, conn=c, how=how, session=session))
    return out


def call(ms, cid="c-1", session="s1", slot=SLOT):
    return ev("twin.tool_call", ms, conn=1, session=session, id=cid, name="book_slot", args={"slot": slot})


def response(ms, cid="c-1", session="s1", known=True):
    return ev("twin.tool_response", ms, conn=1, session=session, id=cid, name="book_slot", known=known, status="booked")


LOSS = {"loss_ms": 2000.0, "loss_cuts_path": True, "loss_kind": "fault:blackhole", "detection_ms": None,
        "transparent_requested": False}


def record(twin, events=(), metrics=None, meta=None, end=30000):
    evs = [ev("user.say", 500, text="Book me the 3pm slot tomorrow, please.", line=0),
           ev("backend.request", 1000, business_key=SLOT, call_id="c-1"), ev("backend.commit", 5000, business_key=SLOT),
           *events, ev("run.end", end, status="ok")]
    tw = [ev("twin.user", 520, conn=1, session="s1", source="realtime")] + list(twin)
    return Record(evs, tw, meta or {}, dict(LOSS if metrics is None else metrics))


def judge(rec):
    return {n: o.status for n, o in rules.judge_all(rec).items()}


def b1_probe():
    """B1: the call pending at the loss, every resume refused, no new session."""
    return [*conn(1, 50, 100, "s1"), call(1000), *conn(2, 4000, resume=True, refuse=4500),
            *conn(3, 14000, resume=True, refuse=14500)]


def test_b1_probe_detects_but_never_falls_back():
    got = judge(record(b1_probe()))
    assert got["retry_refused_resume"] == NA           # the server held the old connection: no retry helps
    assert got["own_loss_detection"] == PASS
    assert got["resume_cutoff_fallback"] == FAIL
    # nothing it could have done about the old call: its session never came back
    assert got["ledger_old_id_after_resume"] == NA and got["owed_results_delivered"] == NA
    assert got["close_reaches_server"] == NA          # the path never came back
    assert got["status_from_backend"] == NA           # no new session
    assert got["no_transparent_mode"] == PASS and got["no_spurious_reply"] == PASS
    assert rules.RULES["own_loss_detection"].judge(record(b1_probe())).figure == 2000.0


def test_a_black_box_that_never_reconnects_fails_detection():
    out = rules.RULES["own_loss_detection"].judge(record([*conn(1, 50, 100, "s1"), call(1000)]))
    assert out.status == FAIL and "no new connection" in out.observed


def test_a_loss_the_client_caused_needs_no_detection():
    m = dict(LOSS, loss_kind="action:abort")
    assert rules.RULES["own_loss_detection"].judge(record(b1_probe(), metrics=m)).status == NA


def r1_idle_drop(retry: bool):
    """R1: the client aborted while idle; the immediate resume is refused for the idle release."""
    twin = [*conn(1, 50, 100, "s1", end=2000, how="rst"), call(1000),
            *conn(2, 2010, resume=True, refuse=2500, why="idle_release")]
    twin += conn(3, 3600, 4100, "s1", resume=True) if retry else conn(3, 2700, 2900, "s2")
    return record(twin, metrics=dict(LOSS, loss_kind="action:abort"))


def test_r1_a_refusal_right_after_an_idle_drop_must_be_retried():
    ok = rules.RULES["retry_refused_resume"].judge(r1_idle_drop(retry=True))
    assert ok.status == PASS and ok.figure == 1050.0 and "accepted" in ok.observed
    assert rules.RULES["retry_refused_resume"].judge(r1_idle_drop(retry=False)).status == FAIL


@pytest.mark.parametrize("note, want", [("booked", PASS), (None, FAIL)])
def test_recovery_falls_back_and_the_new_session_needs_the_backend_status(note, want):
    twin = [*b1_probe()[:-3], *conn(3, 6000, 6300, "s2"),
            ev("twin.restore", 6400, conn=3, session="s2", turns=3, note=note)]
    got = rules.judge_all(record(twin))
    assert got["resume_cutoff_fallback"].status == PASS and got["resume_cutoff_fallback"].figure == 4300.0
    assert got["status_from_backend"].status == want


def test_a_note_after_the_model_reissued_the_call_is_late():
    twin = [*b1_probe()[:-3], *conn(3, 6000, 6300, "s2"), call(6500, cid="c-2", session="s2"),
            ev("twin.restore", 8000, conn=3, session="s2", turns=1, note="booked")]
    out = rules.RULES["status_from_backend"].judge(record(twin))
    assert out.status == FAIL and "after the model had re-issued" in out.observed


def test_a_new_session_left_for_an_accepted_resume_needs_no_status_note():
    """R1 recovery: the new session opened in parallel is dropped once the retry resumes the old one."""
    twin = [*conn(1, 50, 100, "s1", end=2000, how="rst"), call(1000),
            *conn(2, 2010, resume=True, refuse=2500, why="idle_release"), *conn(3, 2020, 2300, "s2"),
            *conn(4, 3600, 4100, "s1", resume=True)]
    assert rules.RULES["status_from_backend"].judge(record(twin)).status == NA


def test_a_fallback_later_than_the_cutoff_fails():
    twin = [*b1_probe(), *conn(4, 20000, 20300, "s2")]
    assert rules.RULES["resume_cutoff_fallback"].judge(record(twin)).status == FAIL


def test_a_run_shorter_than_the_cutoff_cannot_judge_the_fallback():
    assert rules.RULES["resume_cutoff_fallback"].judge(record(b1_probe(), end=9000)).status == NA


def b2(close_at=45000, how="close_frame", answered=True):
    twin = [*conn(1, 50, 100, "s1", end=close_at, how=how), call(1000),
            *conn(2, 4000, resume=True, refuse=4500), *conn(5, 45100, 45600, "s1", resume=True)]
    if answered:
        twin.append(response(45700))
    return record(twin, events=[ev("fault.clear", 32000, name="f1")], end=70000)


def test_b2_the_close_after_the_path_returns_unlocks_and_the_old_id_is_answered():
    got = rules.judge_all(b2())
    assert got["close_reaches_server"].status == PASS and got["close_reaches_server"].figure == 13000.0
    assert got["ledger_old_id_after_resume"].status == PASS and got["ledger_old_id_after_resume"].figure == 100.0
    assert got["owed_results_delivered"].status == PASS
    assert got["resume_cutoff_fallback"].status == NA        # a resume was accepted


def test_b2_the_old_connection_left_open_fails_the_close_rule():
    assert rules.RULES["close_reaches_server"].judge(b2(close_at=None)).status == FAIL
    assert rules.RULES["close_reaches_server"].judge(b2(how="server_timeout")).status == FAIL


def test_b2_an_app_the_lab_stopped_did_not_close_the_old_connection_itself():
    """A black-box app in B2 that never reacts: its socket ends only when the agent stops it at exit."""
    twin = [*conn(1, 50, 100, "s1", end=33150, how="eof"), call(1000)]
    teardown = [ev("fault.clear", 32000, name="all"), ev("fault.clear", 33000, name="all", at_exit=True)]
    out = rules.RULES["close_reaches_server"].judge(record(twin, events=teardown, end=70000))
    assert out.status == FAIL and "still open" in out.observed
    # a run the lab ended 1 s after the heal gave the client no time to close: nothing to judge
    cut = rules.RULES["close_reaches_server"].judge(record(twin, events=teardown, end=33200))
    assert cut.status == NA and "ended 1 s after" in cut.observed


def test_b2_the_old_id_never_answered_after_the_resume_fails_ledger_and_owed():
    got = judge(b2(answered=False))
    assert got["ledger_old_id_after_resume"] == FAIL and got["owed_results_delivered"] == FAIL


def test_b3_the_servers_own_close_before_the_path_returned_leaves_the_client_nothing_to_close():
    rec = b2(close_at=33000, how="server_timeout")
    assert rules.RULES["close_reaches_server"].judge(rec).status == FAIL       # its end came after the heal
    rec.twin.append(ev("twin.freeze_close", 22000, conn=1, session="s1"))      # ... but it was decided before
    out = rules.RULES["close_reaches_server"].judge(rec)
    assert out.status == NA and "twin.freeze_close" in out.observed, out.observed


def test_a_heal_at_exit_is_not_the_path_coming_back():
    rec = record([*conn(1, 50, 100, "s1"), call(1000)], events=[ev("fault.clear", 29000, name="f1", at_exit=True)])
    assert rules.RULES["close_reaches_server"].judge(rec).status == NA


def test_control_the_result_lands_on_its_session():
    no_loss = dict(LOSS, loss_ms=None, loss_cuts_path=None, loss_kind=None)
    rec = record([*conn(1, 50, 100, "s1"), call(1000), response(5010)], metrics=no_loss)
    got = judge(rec)
    assert got["owed_results_delivered"] == PASS
    assert {got[n] for n in ("ledger_old_id_after_resume", "retry_refused_resume", "own_loss_detection",
                             "close_reaches_server", "resume_cutoff_fallback", "status_from_backend",
                             "dedupe_by_business_key", "no_reliance_on_goaway")} == {NA}


def test_seed_003_a_restart_without_the_result_and_a_replay_to_the_new_session_both_fail():
    no_loss = dict(LOSS, loss_ms=None, loss_cuts_path=None, loss_kind=None)
    restart = [*conn(1, 50, 100, "s1", end=1500, how="close_frame"), call(1000), *conn(2, 1600, 1800, "s2")]
    hung = rules.RULES["owed_results_delivered"].judge(record(restart, metrics=no_loss))
    assert hung.status == FAIL and hung.observed.startswith("0 of 1")
    replayed = record(restart + [response(5100, session="s2", known=False)], metrics=no_loss)
    out = rules.RULES["owed_results_delivered"].judge(replayed)
    assert out.status == FAIL and "never issued" in out.observed


def test_a_nudge_the_user_never_said_is_a_spurious_turn():
    rec = record([*conn(1, 50, 100, "s1"), call(1000), response(5010),
                  ev("twin.user", 5020, conn=1, session="s1", source="client_content")])
    out = rules.RULES["no_spurious_reply"].judge(rec)
    assert out.status == FAIL and out.figure == 1.0


@pytest.mark.parametrize("heard_before, want", [(False, PASS), (True, FAIL)])
def test_a_line_asked_again_in_a_new_session_is_the_users_unless_its_reply_was_heard(heard_before, want):
    # m4 (OpenAI): the status question's reply went down with the zombie socket; the recovery client
    # asks it again in the new session (user.replay how restore). Heard before, asking again is a nudge
    question = [ev("user.say", 6000, text="Did you book it?", line=1),
                *([ev("model.text", 6600, conn=2, text="Yes, booked.")] if heard_before else []),
                ev("user.replay", 12000, conn=3, line=1, how="restore")]
    rec = record([*conn(1, 50, 100, "s1"), call(1000), ev("twin.user", 6010, conn=2, session="s2", source="text"),
                  ev("twin.user", 12010, conn=3, session="s3", source="text")], events=question)
    out = rules.RULES["no_spurious_reply"].judge(rec)
    assert out.status == want, out.observed
    assert ("1 asked again" in out.observed) is (not heard_before)


def test_transparent_mode_refused_1007_fails():
    twin = [ev("twin.setup", 50, conn=1, resume=False), ev("twin.refuse", 60, conn=1, code=1007, why="transparent")]
    assert rules.RULES["no_transparent_mode"].judge(record(twin)).status == FAIL


@pytest.mark.parametrize("back, want", [(True, PASS), (False, FAIL)])
def test_after_the_goaway_close_the_client_must_be_on_a_session_again(back, want):
    twin = [*conn(1, 50, 100, "s1", end=61000, how="server_goaway"), call(1000), response(5010),
            ev("twin.goaway", 1000, conn=1, time_left="60s")]
    if back:
        twin += conn(2, 61100, 61200, "s1", resume=True)
    out = rules.RULES["no_reliance_on_goaway"].judge(record(twin, end=100000))
    assert out.status == want
    if back:
        assert out.figure == 60200.0


def test_a_session_the_client_had_already_moved_to_survives_the_servers_close():
    """B1, long: the recovery client is on a new session when the server closes the frozen one at 480 s."""
    twin = [*conn(1, 50, 100, "s1", end=480000, how="server_timeout"), call(1000), *conn(3, 3000, 3300, "s2")]
    out = rules.RULES["no_reliance_on_goaway"].judge(record(twin, end=600000))
    assert out.status == PASS and out.figure == 0.0
    # the server's TCP giving up on the dead path is the loss's doing, not the server's own close
    gave_up = [*conn(1, 50, 100, "s1", end=119000, how="tcp_timeout"), call(1000)]
    assert rules.RULES["no_reliance_on_goaway"].judge(record(gave_up, end=200000)).status == NA


@pytest.mark.parametrize("dedup, commits, want", [(False, 2, FAIL), (False, 1, PASS), (True, 1, NA)])
def test_a_reissued_booking_must_commit_once(dedup, commits, want):
    twin = [*conn(1, 50, 100, "s1"), call(1000), call(3000, cid="c-2", slot="tomorrow at 3 p.m.")]
    extra = [ev("backend.commit", 6000 + i, business_key=SLOT) for i in range(commits - 1)]
    if dedup:
        extra.append(ev("tool.dedup", 3010, id="c-2", business_key=SLOT))
    meta = {"scenario": {"backend": {"dedup": dedup}}}
    assert rules.RULES["dedupe_by_business_key"].judge(record(twin, events=extra, meta=meta)).status == want


def test_a_live_run_without_a_twin_record_is_not_observable():
    rec = Record([ev("run.end", 100, status="ok")], None, {}, dict(LOSS))
    outs = rules.judge_all(rec)
    assert {o.status for o in outs.values()} == {NA}
    assert all("not observable" in o.observed for o in outs.values())


def test_every_rule_cites_a_seed_section():
    for r in rules.RULES.values():
        assert r.source[:3] in ("000", "001", "003") and "§" in r.source or "review" in r.source, r.name


# ---- issue 15's middleboxes: the zombie path (m4) and the armed NAT / relay (m1, m2) ---------------
ZOMBIE = {**LOSS, "loss_cuts_path": False, "loss_kind": "fault:mtu_blackhole"}


def m4(left_at=None, how=None, new_at=None, heal=22000):
    """M4: the MTU black hole 1 s after the call; the client ends the old connection and/or opens a new one."""
    twin = [*conn(1, 50, 100, "s1", end=left_at, how=how), call(1000)]
    if new_at is not None:
        twin += conn(2, new_at, resume=True, refuse=new_at + 5)
    return record(twin, [ev("fault.clear", heal, name="all")], metrics=ZOMBIE)


@pytest.mark.parametrize("kw, want, figure", [
    ({"new_at": 6600}, PASS, 4600.0),                                   # the recovery client: a resume 4.6 s in
    ({"left_at": 5000, "how": "close_frame", "new_at": 6600}, PASS, 3000.0),   # its close passes first
    ({"new_at": 25000}, FAIL, None),                                    # only once the path had healed
    ({"left_at": 8000, "how": "server_tcp_timeout"}, FAIL, None),       # the server's end is not the client's
    ({}, FAIL, None),                                                   # held it to the heal
])
def test_m4_the_client_must_leave_the_zombie_connection_before_the_path_heals(kw, want, figure):
    out = rules.RULES["leaves_zombie_connection"].judge(m4(**kw))
    assert (out.status, out.figure) == (want, figure), out.observed
    if want == FAIL:
        assert "until the path healed" in out.observed


def test_a_zombie_is_not_a_cut_the_detection_and_fallback_rules_time():
    outs = rules.judge_all(m4(new_at=6600))
    for name in ("own_loss_detection", "resume_cutoff_fallback"):
        assert outs[name].status == NA and "leaves_zombie_connection" in outs[name].observed, name


def test_a_cut_path_is_no_zombie():
    rec = record(b1_probe())
    assert rules.RULES["leaves_zombie_connection"].judge(rec).status == NA


@pytest.mark.parametrize("kind", ["fault:nat_reap", "fault:relay_age"])
def test_an_armed_middlebox_has_no_moment_of_loss_in_the_record(kind):
    # the agent's loss is when the NAT / relay was armed (setup, start), not when it cut the flow
    rec = record(b1_probe(), metrics={**LOSS, "loss_cuts_path": False, "loss_kind": kind})
    outs = rules.judge_all(rec)
    for name in ("ledger_old_id_after_resume", "own_loss_detection", "resume_cutoff_fallback", "status_from_backend"):
        assert outs[name].status == NA and "router's capture" in outs[name].observed, name


# ---- h1: a healthy poor path must not be taken for a loss -------------------------------------------
DEGRADED = {**LOSS, "loss_cuts_path": False, "loss_kind": "fault:delay"}


@pytest.mark.parametrize("twin, want", [
    ([*conn(1, 50, 100, "s1")], PASS),                                                  # stayed on it
    ([*conn(1, 50, 100, "s1"), *conn(2, 9000, 9200, "s2")], FAIL),                      # a fallback for nothing
    ([*conn(1, 50, 100, "s1", end=8000, how="rst"), *conn(2, 9000, resume=True, refuse=9100)], FAIL),  # its own abort
    ([*conn(1, 50, 100, "s1", end=8000, how="server_goaway"), *conn(2, 9000, 9200, "s2")], NA),  # the server ended it
])
def test_h1_a_degraded_path_is_no_reason_to_reconnect(twin, want):
    out = rules.RULES["no_false_alarm"].judge(record(twin, metrics=DEGRADED))
    assert out.status == want, out.observed


# an old record (no cuts_path) of a kind this lab no longer has: nothing says what it did
@pytest.mark.parametrize("metrics", [LOSS, ZOMBIE, {**DEGRADED, "loss_kind": "fault:gone_kind", "loss_cuts_path": None}])
def test_a_cut_a_zombie_or_an_unknown_old_record_is_not_a_degraded_path(metrics):
    rec = record([*conn(1, 50, 100, "s1"), *conn(2, 9000, 9200, "s2")], metrics=metrics)
    assert rules.RULES["no_false_alarm"].judge(rec).status == NA


def test_a_protocol_without_a_setup_message_is_judged_from_its_accepts():
    """OpenAI's twin writes no twin.setup (the session starts with the socket): its connections are
    known from twin.accept, so the same rules judge a new session after the loss."""
    def accepted(c, at, session, end=None, how=None):
        return [ev("twin.accept", at, conn=c, session=session, resume=False),
                *([ev("twin.conn.end", end, conn=c, how=how, session=session)] if end is not None else [])]
    fell_back = [*accepted(1, 100, "s1"), call(1000), *accepted(2, 3200, "s2"),
                 ev("twin.restore", 3400, conn=2, session="s2", turns=3, note="pending")]
    got = rules.judge_all(record(fell_back))
    assert got["own_loss_detection"].status == PASS and got["resume_cutoff_fallback"].status == PASS
    assert got["status_from_backend"].status == PASS
    never = rules.judge_all(record([*accepted(1, 100, "s1"), call(1000)]))
    assert never["own_loss_detection"].status == FAIL and never["resume_cutoff_fallback"].status == FAIL


def test_the_resume_rules_say_they_are_the_live_apis_in_an_openai_run():
    gemini = r1_idle_drop(retry=False)
    assert rules.judge_all(gemini)["retry_refused_resume"].status == FAIL
    gemini.meta["protocol"] = "openai"
    openai = rules.judge_all(gemini)
    for name in ("retry_refused_resume", "ledger_old_id_after_resume", "no_transparent_mode"):
        assert openai[name].status == NA and "gemini protocol" in openai[name].observed, (name, openai[name])
    assert openai["own_loss_detection"] == rules.judge_all(r1_idle_drop(retry=False))["own_loss_detection"]
