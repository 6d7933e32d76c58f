"""Every scenario of the catalogue, run for real in network namespaces against the twin.

Real sockets, real packets dropped by the client namespace's own kernel, real TCP timers on both
sides. Long scenarios are shortened with --duration; what each must show is in the scenario's own
`expect` block, which the report evaluates from the run's events. A few findings are also checked
here directly from the record, so a broken report cannot hide a broken run.
"""
import json
import subprocess

import pytest

from lab.run import topology_id  # a run's namespaces carry its folder's hash: another test's same-named run is not ours

from lab.events import read_events
from lab.scenario import names_for

pytestmark = pytest.mark.netns

SHORT = {"b1-silent-loss": 25, "h1-healthy-jitter-loss": 45}
# scenarios run by a test module of their own, with record checks of their own (so not twice here):
# the stop study's text set (probe and guard; the spoken set is `make lab-stop SPEECH=1`, outside CI's
# time budget), the 004 set on the session-manager client, and the framework findings of 003 and
# pipecat#5465, whose verdicts are what a framework build does (k1 fails on livekit 1.8.9, p1 on
# pipecat 1.14.0: findings, not lab failures) and whose builds test_lk003.py picks; and the OpenAI
# Realtime scenarios, which run with --protocol openai
OWN_MODULE = {"stop-": "test_stop.py", "t1-": "test_transparent.py", "t2-": "test_transparent.py",
              "t3-": "test_transparent.py", "t4-": "test_transparent.py", "k1-": "test_lk003.py",
              "k2-": "test_lk003.py", "k3-": "test_lk003.py", "p1-": "test_lk003.py",
              "l1-session-cap": "test_openai_runs.py"}
# the Gemini catalogue: scenarios for OpenAI alone run in test_openai_catalogue.py with its clients
CATALOGUE = [n for n in names_for("gemini") if not n.startswith(tuple(OWN_MODULE))]


def _run(tmp_path, scenario, client=None):
    from lab.run import run_batch

    lines = []
    batch = run_batch([scenario], n=1, client=client, topology="netns", out_dir=tmp_path / "batch",
                      duration=SHORT.get(scenario), out=lines.append)
    runs = [d for d in batch.iterdir() if d.is_dir()]
    assert len(runs) == 1, lines
    run = runs[0]
    verdict = json.loads((run / "verdict.json").read_text())
    return run, verdict, lines


def _no_leftovers(run):
    # only this run's namespaces: other runs on the machine may hold theirs right now
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ll-{topology_id(run)}-" not in ns, f"namespaces left behind: {ns}"


@pytest.mark.parametrize("scenario", CATALOGUE)
def test_scenario_holds_its_expectations(tmp_path, scenario):
    run, verdict, lines = _run(tmp_path, scenario)
    failed = [c for c in verdict["expectations"] if not c["held"]]
    assert verdict["met"], f"{scenario}: {failed}\n" + "\n".join(lines[-30:])
    assert (run / "capture.pcapng").exists() and (run / "timeline.png").exists()
    _twin_on_the_run_clock(run)
    _no_leftovers(run)
    if scenario in RECORD_CHECKS:      # the study's own findings, read from the same run's record
        RECORD_CHECKS[scenario](run, lines)


def _twin_on_the_run_clock(run):
    """The twin got the run's --t0: its `ms` counts from the same instant as the client's, so its
    marks on timeline.png sit where they happened (a refusal after the detection it answers)."""
    evs, twin = read_events(run / "events.jsonl"), read_events(run / "twin.jsonl")
    t0 = evs[0].t - evs[0].ms / 1000.0
    assert twin and all(abs(e.t - e.ms / 1000.0 - t0) < 0.002 for e in twin), "twin.jsonl is on another clock"
    # the recovery client's first attempt answers its suspicion, which comes before the detection
    alarm = [e for e in evs if e.kind in ("loss.suspected", "loss.detected")]
    refused = [e for e in twin if e.kind == "twin.refuse"]
    if run.name.startswith(("s2-recovery-", "r2-freeze-")):      # resumes answer a suspected or detected loss
        assert alarm and refused and refused[0].ms > alarm[0].ms, (refused[:1], alarm[:1])


def _b1_every_resume_refused_while_the_booking_commits(run, lines):
    evs = read_events(run / "events.jsonl")
    results = [e for e in evs if e.kind == "resume.result"]
    assert len(results) >= 2, lines[-20:]
    assert all(not e["ok"] and e["code"] == 1011 for e in results)
    assert len([e for e in evs if e.kind == "backend.commit"]) == 1
    loss = next(e for e in evs if e.kind == "loss")
    commit = next(e for e in evs if e.kind == "backend.commit")
    assert commit.ms > loss.ms, "the booking commits during the outage"


def test_b1_recovery_client_tells_the_truth(tmp_path):
    run, verdict, lines = _run(tmp_path, "b1-silent-loss", client="recovery")
    assert verdict["met"], verdict["expectations"]


def _b2_resume_works_just_after_the_close(run, lines):
    evs = read_events(run / "events.jsonl")
    # from the server's echo of the client's close (it waits behind TCP's backoff after the outage)
    close = [e for e in evs if e.kind == "conn.closed" and e.get("conn") == 1 and e.get("code") == 1000][-1]
    ok = next(e for e in evs if e.kind == "conn.setup_complete" and e.get("purpose") == "resume")
    refused_after_heal = [e for e in evs if e.kind == "resume.result" and not e["ok"]
                          and e.ms > next(x for x in evs if x.kind == "fault.clear").ms]
    assert refused_after_heal, "the path coming back alone must not unlock the session"
    assert 300 <= ok.ms - close.ms <= 1000, ok.ms - close.ms


RECORD_CHECKS = {"b1-silent-loss": _b1_every_resume_refused_while_the_booking_commits,
                 "b2-path-return": _b2_resume_works_just_after_the_close}
