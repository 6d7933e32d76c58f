"""Drift for OpenAI Realtime runs: the rows the OpenAI clients' records support, against the
openai-realtime profile (synthetic run folders, as the clients write them)."""
import json
from pathlib import Path

import pytest

from lab import scenario as scenario_mod
from lab.errors import LabError
from lab.live import drift

EXPIRED = "invalid_request_error/session_expired: Your session hit the maximum duration of 60 minutes."


def ev(ms, kind, **f):
    return {"t": 1000 + ms / 1000, "ms": ms, "src": "client", "kind": kind, **f}


def session(conn, ms, created_ms=40.0, purpose="initial"):
    return [ev(ms, "conn.open", conn=conn, purpose=purpose, session=conn),
            ev(ms, "conn.setup_complete", conn=conn, purpose=purpose, setup_ms=300.0, created_ms=created_ms)]


def capped(age_s=3600.0, code=1001, created_ms=40.0):
    """One session that hits the cap after age_s, then the recovery client's new one."""
    end = 100 + age_s * 1000
    return (session(1, 100, created_ms)
            + [ev(end, "client.error", conn=1, task="server", error=EXPIRED),
               ev(end + 5, "conn.closed", conn=1, code=code, reason="Your session hit the maximum duration of 60 minutes.",
                  by="server", how="close")]
            + session(2, end + 400, created_ms, "new") + [ev(end + 9000, "run.end", status="ok")])


def folder(root: Path, name: str, events, protocol="openai", scenario="l1-session-cap") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (d / "run.json").write_text(json.dumps({"scenario": {"name": scenario}, "client": "openai-recovery",
                                            "endpoint": "live", "protocol": protocol}))
    return d


def rows(tmp_path, *runs, profile=None, overrides=None):
    for i, events in enumerate(runs):
        folder(tmp_path / "batch", f"run-{i:02d}", events)
    out, behaviours = drift.drift_dir(tmp_path / "batch", profile, overrides=overrides)
    return out, {b.name: b for b in behaviours}


def test_openai_runs_get_the_openai_profile_and_rows(tmp_path):
    out, got = rows(tmp_path, capped())
    assert set(got) == {r.name for r in drift.OPENAI_ROWS} | {"server close codes the twin never sends",
                                                              "server close reasons the twin never gives"}
    assert "`openai-realtime`" in out.read_text() and "1 runs compared with the twin profile `openai-realtime` (openai)" in out.read_text()
    assert got["session cap"].status == drift.UNCHANGED and got["session cap"].parameter == "openai_session_max_s"
    assert got["close after the session cap"].observed == "1001 \u00d71"
    assert got["server close codes the twin never sends"].status == drift.UNCHANGED
    # the cap's close carries the session_expired message as its reason: one the twin gives
    assert got["server close reasons the twin never gives"].status == drift.UNCHANGED


def test_a_moved_cap_a_new_close_code_and_a_slow_session_created_are_changes(tmp_path):
    _, got = rows(tmp_path, capped(age_s=1800.0, code=1000, created_ms=180.0))
    assert got["session cap"].status == drift.CHANGED
    assert got["close after the session cap"].status == drift.CHANGED
    # the profile's 0 s (an assumption) against a measured 180 ms: drift says so
    assert got["session.created after the upgrade"].status == drift.CHANGED
    _, got = rows(tmp_path / "b", capped(created_ms=180.0), overrides=["openai_session_created_s=[0.1, 0.2]"])
    assert got["session.created after the upgrade"].status == drift.UNCHANGED


def test_a_session_that_outlives_the_cap_without_expiry_is_a_change(tmp_path):
    long = session(1, 100) + [ev(100 + 5000 * 1000, "run.end", status="ok")]
    _, got = rows(tmp_path, long)
    assert got["session cap"].status == drift.CHANGED and "no session_expired" in got["session cap"].observed
    _, got = rows(tmp_path / "short", session(1, 100) + [ev(60_000, "run.end", status="ok")])
    assert got["session cap"].status == drift.NOT_OBSERVED


def test_closes_the_twin_never_makes_are_named(tmp_path):
    odd = session(1, 100) + [ev(9000, "conn.closed", conn=1, code=4000, reason="x", by="server", how="close"),
                             ev(9500, "conn.closed", conn=1, code=1011, reason="sdk reconnect, attempt 1",
                                by="server", how="reconnect")]
    _, got = rows(tmp_path, odd)
    assert got["server close codes the twin never sends"].status == drift.CHANGED
    assert got["server close codes the twin never sends"].observed == "4000 \u00d71"    # the SDK's own record left out


def test_runs_of_both_protocols_need_a_profile_and_each_profile_takes_its_own(tmp_path):
    folder(tmp_path / "batch", "openai-01", capped())
    folder(tmp_path / "batch", "gemini-01", [ev(0, "run.start"), ev(9000, "run.end", status="ok")],
           protocol="gemini", scenario="control")
    with pytest.raises(LabError, match="runs of gemini and openai") as e:
        drift.drift_dir(tmp_path / "batch")
    assert "\n" not in str(e.value)
    out, _ = drift.drift_dir(tmp_path / "batch", "openai-realtime")
    assert "1 runs compared with the twin profile `openai-realtime` (openai)" in out.read_text() and "1 runs of another protocol left out" in out.read_text()
    out, got = drift.drift_dir(tmp_path / "batch", "developer-api")
    assert "1 runs compared with the twin profile `developer-api` (gemini)" in out.read_text() and "refusal code" in {b.name for b in got}


def test_every_openai_row_is_observed_by_catalogue_scenarios_of_the_protocol():
    names = set(scenario_mod.names_for("openai"))
    for row in drift.OPENAI_ROWS:
        assert row.parameter and set(row.observed_by) <= names, row.name
