"""Drift, row by row, on synthetic run folders, against the twin's own profiles (extends included)."""
import json
from pathlib import Path

import pytest

from lab import scenario as scenario_mod
from lab.cli import main
from lab.errors import LabError
from lab.live import drift
from lab.twin.profile import load_profile

REFUSED = {"ok": False, "code": 1011, "reason": "Internal error encountered.", "latency_ms": 560}
LOSS = {"kind": "loss", "src": "agent", "how": "fault:blackhole", "cuts_path": True}


def ev(ms, kind, **f):
    return {"t": 1000 + ms / 1000, "ms": ms, "src": "client", "kind": kind, **f}


def opened(conn, ms, purpose, setup_ms=None, updates=1):
    out = [ev(ms, "conn.open", conn=conn, purpose=purpose)]
    if setup_ms is not None:
        out.append(ev(ms + setup_ms, "conn.setup_complete", conn=conn, setup_ms=setup_ms))
        # the update after setupComplete: ~120 ms on a new session, 1-3 ms on a resumed one (fidelity §2)
        after = 2 if purpose == "resume" else 120
        out += [ev(ms + setup_ms + after, "handle.update", conn=conn, resumable=True)] * updates
    return out


def resume(n, conn, ms, ok=False, setup_ms=560, **res):
    out = [ev(ms, "resume.attempt", attempt=n, conn=conn)]
    if ok:
        out += opened(conn, ms, "resume", setup_ms)
        out.append(ev(ms + setup_ms, "resume.result", attempt=n, conn=conn, ok=True, latency_ms=setup_ms))
    else:
        out += opened(conn, ms, "resume")
        r = {**REFUSED, **res}
        out += [ev(ms + r["latency_ms"], "resume.result", attempt=n, conn=conn, **r),
                ev(ms + r["latency_ms"], "conn.closed", conn=conn, code=r["code"], reason=r["reason"], by="server",
                   during="setup")]
    return out


def start():
    return [ev(0, "run.start")] + opened(1, 100, "initial", 260) + [ev(2500, "tool.call", conn=1, id="fc-1", name="book_slot")]


def b1(loss=LOSS, accepted_at=None):
    evs = start() + [{**ev(3500, "loss"), **loss}]
    # refusals spread as the records' (fidelity §2: p10-p90 of the setup-frame base 472-572 ms)
    evs += [x for i in range(4) for x in resume(i + 1, i + 2, 5300 + 10_000 * i, ok=(accepted_at == i),
                                                latency_ms=(505, 530, 545, 575)[i])]
    return evs + [ev(60_000, "run.end", status="ok")]


def b2(answer_closed=False):
    evs = start() + [{**ev(3500, "loss"), **LOSS}] + resume(1, 2, 5300)
    evs += [ev(34_000, "action", src="agent", what="close"), ev(54_000, "conn.closed", conn=1, code=1000, by="client")]
    evs += resume(2, 3, 54_100, ok=True) + [ev(54_700, "tool.response", conn=3, id="fc-1", name="book_slot", status="ok")]
    if answer_closed:
        evs.append(ev(55_000, "conn.closed", conn=3, code=1007, reason="invalid argument", by="server"))
    return evs + [ev(60_000, "run.end", status="ok")]


def s2():
    evs = start() + [{**ev(3500, "loss"), **LOSS}] + resume(1, 2, 4500) + opened(3, 4500, "new", 290)
    return evs + [ev(14_000, "run.end", status="ok")]


def control(updates=1, turns=1):
    evs = [ev(0, "run.start")] + opened(1, 100, "initial", 260, updates)
    return evs + [ev(2000 + i, "model.turn_complete", conn=1) for i in range(turns)] + [ev(9000, "run.end", status="ok")]


def folder(root: Path, name: str, scenario: str, events, frames=None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (d / "run.json").write_text(json.dumps({"scenario": {"name": scenario}, "client": "probe", "endpoint": "live"}))
    if frames is not None:
        (d / "frames.jsonl").write_text("".join(json.dumps({"conn": 1, "ms": i, "dir": "in", "kind": k, "msg": {}}) + "\n"
                                                for i, k in enumerate(frames)))
    return d


def rows(tmp_path, *runs, profile="developer-api", overrides=None):
    """{row name: Behaviour} for the given (scenario, events[, frames]) runs."""
    for i, run in enumerate(runs):
        folder(tmp_path / "batch", f"{run[0]}-{i:02d}", *run)
    _, behaviours = drift.drift_dir(tmp_path / "batch", profile, overrides=overrides)
    return {b.name: b for b in behaviours}


def status(got, name):
    return got[name].status


LOCK = "resume refused while the old connection is held"
ROW_NAMES = {r.name for r in drift.ROWS}


def test_lockout_row(tmp_path):
    assert status(rows(tmp_path / "a", ("b1-silent-loss", b1())), LOCK) == "unchanged"
    assert status(rows(tmp_path / "b", ("b1-silent-loss", b1(accepted_at=2))), LOCK) == "changed"
    # after the echoed close the session is free: an accepted resume there is not a broken lockout
    assert status(rows(tmp_path / "c", ("b2-path-return", b2())), LOCK) == "unchanged"
    # a loss that does not cut the path (an abort) or an old record without cuts_path says nothing
    abort = {"how": "abort", "cuts_path": False}
    assert status(rows(tmp_path / "d", ("r1-abort-speaking", b1(loss=abort, accepted_at=0))), LOCK) == "not observed"
    old = {"how": "fault:blackhole"}
    assert status(rows(tmp_path / "e", ("b1-silent-loss", b1(loss=old, accepted_at=0))), LOCK) == "not observed"


def test_lockout_reads_the_loss_event_not_fault_names(tmp_path):
    # no fault.apply at all, a loss event of an unknown kind that cuts the path: still the loss
    got = rows(tmp_path, ("b1-silent-loss", b1(loss={"how": "fault:corrupt", "cuts_path": True}, accepted_at=1)))
    assert got[LOCK].status == "changed" and got[LOCK].numbers["attempts"] == 4


@pytest.mark.parametrize("row,param,moved", [
    ("refusal code", "refuse_code", 1013),
    ("refusal delay", "refuse_close_s", [0.1, 0.2]),
    ("resumed session setup", "resume_setup_s", [1.5, 2.0]),
    ("new session setup", "new_setup_s", [0.9, 1.2]),
])
def test_each_parameter_row_names_its_parameter_and_sees_a_change(tmp_path, row, param, moved):
    runs = [("b2-path-return", b2()), ("s2-recovery", s2())]
    same = rows(tmp_path / "same", *runs)
    assert same[row].parameter == param and same[row].status == "unchanged"
    assert same[row].source == load_profile("developer-api").source(param)
    changed = rows(tmp_path / "moved", *runs, overrides=[f"{param}={json.dumps(moved)}"])
    assert [b.name for b in changed.values() if b.status == "changed" and b.name in ROW_NAMES] == [row]


def test_range_rows_not_observed_without_such_runs(tmp_path):
    got = rows(tmp_path, ("control", control()))
    assert got["refusal code"].status == got["refusal delay"].status == "not observed"
    assert got["resumed session setup"].status == "not observed"
    assert "b2-path-return" in got["resumed session setup"].observed     # says which scenario would show it
    assert got["new session setup"].status == "unchanged"                 # every initial connection shows it


def test_goaway_row_reads_the_frames(tmp_path):
    assert status(rows(tmp_path / "a", ("control", control())), "goAway") == "not observed"   # no frames.jsonl
    got = rows(tmp_path / "b", ("control", control(), ["setupComplete", "sessionResumptionUpdate"]))
    assert got["goAway"].parameter == "goaway_after_s" and got["goAway"].status == "unchanged"
    assert status(rows(tmp_path / "c", ("control", control(), ["setupComplete", "goAway"])), "goAway") == "changed"
    short = rows(tmp_path / "d", ("control", control(), ["setupComplete"]), overrides=["goaway_after_s=600"])
    assert short["goAway"].status == "not observed"                      # runs shorter than 600 s


def test_pending_call_row(tmp_path):
    got = rows(tmp_path / "a", ("b2-path-return", b2()))
    assert got["pending call after resume"].status == "unchanged"
    assert got["pending call after resume"].parameter == "(rule)"
    assert "000 finding 1" in got["pending call after resume"].source    # not a loose match on "pending"
    assert status(rows(tmp_path / "b", ("b2-path-return", b2(answer_closed=True))), "pending call after resume") == "changed"
    assert status(rows(tmp_path / "c", ("b1-silent-loss", b1())), "pending call after resume") == "not observed"


def test_handle_updates_row_once_and_per_turn(tmp_path):
    assert status(rows(tmp_path / "a", ("control", control())), "handle updates per connection") == "unchanged"
    assert status(rows(tmp_path / "b", ("control", control(updates=2))), "handle updates per connection") == "changed"
    # vertex extends developer-api and sends one more update after each turn
    assert status(rows(tmp_path / "c", ("control", control(updates=3, turns=2)), profile="vertex"),
                  "handle updates per connection") == "unchanged"
    assert status(rows(tmp_path / "d", ("control", control(updates=1, turns=2)), profile="vertex"),
                  "handle updates per connection") == "changed"


def test_vertex_profile_sees_every_parameter_through_extends(tmp_path):
    got = rows(tmp_path, ("b2-path-return", b2()), ("s2-recovery", s2()), profile="vertex")
    assert got["refusal code"].expected == "1011" and got["refusal code"].status == "unchanged"   # inherited
    assert got["handle updates per connection"].expected == "per_turn"                         # vertex's own
    assert "transparent mode" not in got


def test_every_row_is_observed_by_catalogue_scenarios():
    names = set(scenario_mod.names())
    for row in drift.ROWS:
        assert row.observed_by and set(row.observed_by) <= names, row.name
        assert row.parameter or row.rule, row.name


def test_a_profile_missing_a_row_parameter_is_one_line(tmp_path):
    prof = load_profile("developer-api")
    del prof.params["refuse_code"]
    with pytest.raises(LabError, match="no parameter 'refuse_code'"):
        drift.compare([], prof)


def test_lab_drift_exit_code(tmp_path):
    folder(tmp_path / "batch", "b1-01", "b1-silent-loss", b1())
    assert main(["drift", str(tmp_path / "batch")]) == 0
    text = (tmp_path / "batch" / "drift.md").read_text()
    assert "| refusal code | refuse_code | 1011 | 1011 \u00d74 | unchanged |" in text
    assert "| refusal delay | refuse_close_s | 427\u20131818 ms | 505\u2013575 (p50 538) ms (n=4) | unchanged |" in text
    assert main(["drift", str(tmp_path / "batch"), "--set", "refuse_code=1008"]) == 1
    assert "**changed**" in (tmp_path / "batch" / "drift.md").read_text()
    assert main(["drift", str(tmp_path / "batch"), "--set", "refuse_cod=1008"]) == 2    # the twin's own check


def test_timed_rows_give_the_ks_distance_of_each_parameter(tmp_path):
    same = rows(tmp_path / "a", ("b1-silent-loss", b1()))
    row = next(b for b in same.values() if b.parameter == "refuse_close_s" and "distribution" in b.name)
    assert row.status == "unchanged" and "KS D" in row.observed and row.numbers["n"] == 4
    assert "setup frame" in row.source                          # says which clock it measured on
    slow = b1()
    for e in slow:          # every refusal 300 ms later than the profile's slowest but its tail
        if e["kind"] in ("conn.closed", "resume.result") and e.get("code") == 1011:
            e["ms"] += 300
    moved = rows(tmp_path / "b", ("b1-silent-loss", sorted(slow, key=lambda e: e["ms"])))
    row = next(b for b in moved.values() if b.parameter == "refuse_close_s" and "distribution" in b.name)
    assert row.status == "changed" and row.numbers["ks"] > row.numbers["ks_crit"]


def test_what_the_twin_never_does_is_named(tmp_path):
    quiet = rows(tmp_path / "a", ("control", control(), ["setupComplete", "sessionResumptionUpdate", "serverContent"]))
    never = {k: b for k, b in quiet.items() if b.parameter == "(not modelled)"}
    assert never and all(b.status == "unchanged" for b in never.values())
    evs = b1()[:-1] + [ev(59_000, "conn.closed", conn=5, code=1013, reason="Try again later.", by="server"),
                       ev(59_500, "resume.result", attempt=9, conn=6, ok=False, code=None,
                          reason="TimeoutError: ", latency_ms=10_000.0),
                       ev(60_000, "run.end", status="ok")]
    loud = rows(tmp_path / "b", ("b1-silent-loss", evs, ["setupComplete", "toolCallCancellation"]))
    assert loud["frame kinds the twin never sends"].status == "changed"
    assert "toolCallCancellation" in loud["frame kinds the twin never sends"].observed
    assert "1013" in loud["server close codes the twin never sends"].observed
    assert loud["setups never answered (neither setupComplete nor a close)"].status == "changed"
    assert loud["server close reasons the twin never gives"].status == "unchanged"     # 1011's reason is the twin's


def test_drift_takes_several_folders(tmp_path):
    folder(tmp_path / "one", "b1-01", "b1-silent-loss", b1())
    folder(tmp_path / "two", "b1-01", "b1-silent-loss", b1())
    out, behaviours = drift.drift_dir([tmp_path / "one", tmp_path / "two"])
    assert out == tmp_path / "one" / "drift.md" and "2 runs compared" in out.read_text()
    assert main(["drift", str(tmp_path / "one"), str(tmp_path / "two")]) == 0
