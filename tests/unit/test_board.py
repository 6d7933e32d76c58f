"""lab/report/board.py on synthetic matrices: releases in order, changes flagged, links, compare."""
import json

import pytest

from lab import cli
from lab.errors import LabError
from lab.report import board as board_mod
from lab.report.rules import FAIL, NA, PASS

RULES = [{"name": "owed_results_delivered", "source": "s", "about": "a"},
         {"name": "resumes_with_handle", "source": "s", "about": "b"}]


def cell(scenario, client, outcomes):
    """A matrix.json cell: one run, each rule's status as given (missing: n/a)."""
    d = f"{scenario}-{client.replace('@', '-')}-01"
    return {"scenario": scenario, "client": client, "runs": 1, "verdict": {"pass": 1, "runs": 1},
            "rules": {r["name"]: {"status": outcomes.get(r["name"], NA), "pass": int(outcomes.get(r["name"]) == PASS),
                                  "fail": int(outcomes.get(r["name"]) == FAIL),
                                  "na": int(outcomes.get(r["name"], NA) == NA), "observed": [], "figures": []}
                      for r in RULES},
            "per_run": [{"run": d, "dir": d, "verdict_pass": True, "failed": [], "notes": [], "rules": {}}]}


def matrix(cells, versions=None):
    return {"format": 1, "rules": RULES, "cells": cells, "versions": versions or {}}


OWED, RESUME = "owed_results_delivered", "resumes_with_handle"
# livekit: owed results pass up to 1.8.8, fail from 1.8.9 on (given out of order, and as "1.8.10"
# to catch a string sort); resume fails at 1.8.7, passes from 1.8.8 (a fix), never judged on control
LK = [
    cell("k1", "livekit@1.8.10", {OWED: FAIL, RESUME: PASS}),
    cell("k1", "livekit@1.8.7", {OWED: PASS, RESUME: FAIL}),
    cell("k1", "livekit@1.8.9", {OWED: FAIL, RESUME: PASS}),
    cell("k1", "livekit@1.8.8", {OWED: PASS, RESUME: PASS}),
    cell("control", "livekit@1.8.7", {OWED: PASS}),
    cell("control", "livekit@1.8.8", {OWED: PASS}),
    cell("control", "livekit@1.8.9", {OWED: NA}),
    cell("control", "livekit@1.8.10", {OWED: PASS}),
    cell("control", "probe", {OWED: FAIL}),       # the lab's own client: not on the board
    cell("control", "pipecat", {OWED: PASS}),     # the plain name: its pinned release, as measured
    cell("control", "pipecat@1.13.0", {OWED: PASS}),
]


def row(board, fw, rule, scenario):
    (r,) = [r for r in board["frameworks"][fw]["rows"] if r["rule"] == rule and r["scenario"] == scenario]
    return r


def test_releases_in_version_order_per_framework_and_only_frameworks():
    b = board_mod.build(matrix(LK, versions={"pipecat": {"pipecat-ai": "1.14.0"}}))
    assert set(b["frameworks"]) == {"livekit", "pipecat"}
    assert b["frameworks"]["livekit"]["releases"] == ["1.8.7", "1.8.8", "1.8.9", "1.8.10"]
    assert b["frameworks"]["pipecat"]["releases"] == ["1.13.0", "1.14.0"]
    assert b["frameworks"]["pipecat"]["clients"] == {"1.13.0": "pipecat@1.13.0", "1.14.0": "pipecat"}


def test_the_first_change_of_a_row_is_a_regression_or_a_fix():
    b = board_mod.build(matrix(LK))
    owed = row(b, "livekit", OWED, "k1")
    assert owed["changes"] == [{"release": "1.8.9", "since": "1.8.8", "from": PASS, "to": FAIL, "kind": "regression"}]
    fix = row(b, "livekit", RESUME, "k1")
    assert [c["kind"] for c in fix["changes"]] == ["fix"] and fix["changes"][0]["release"] == "1.8.8"
    # n/a is no judgement: control's owed result passes at 1.8.8, n/a at 1.8.9, passes at 1.8.10: no change
    assert row(b, "livekit", OWED, "control")["changes"] == []
    # over every scenario: FAIL wherever one scenario failed it
    whole = row(b, "livekit", OWED, board_mod.ALL)
    assert [whole["cells"][r]["status"] for r in ("1.8.7", "1.8.8", "1.8.9", "1.8.10")] == [PASS, PASS, FAIL, FAIL]
    assert whole["changes"][0]["release"] == "1.8.9"
    assert whole["cells"]["1.8.9"]["runs"] == ["k1-livekit-1.8.9-01"]    # the failing run, not the n/a one
    # a rule no scenario judged at any release has no per-scenario row
    assert not [r for r in b["frameworks"]["livekit"]["rows"] if r["rule"] == RESUME and r["scenario"] == "control"]


def test_render_flags_the_change_and_links_each_cell(tmp_path):
    (tmp_path / "matrix.json").write_text(json.dumps(matrix(LK)))
    md, js = board_mod.write(tmp_path)
    text = md.read_text()
    assert "| owed_results_delivered | k1 | [pass](k1-livekit-1.8.7-01) | [pass](k1-livekit-1.8.8-01) | " \
           "[FAIL ▼](k1-livekit-1.8.9-01) | [FAIL](k1-livekit-1.8.10-01) |" in text
    assert "- regression at livekit 1.8.9 (since 1.8.8: pass -> FAIL): owed_results_delivered on k1" in text
    assert "- fix at livekit 1.8.8 (since 1.8.7: FAIL -> pass): resumes_with_handle on k1" in text
    assert json.loads(js.read_text())["frameworks"]["livekit"]["releases"][-1] == "1.8.10"


def _nightly(status_by_scenario, release):
    return board_mod.build(matrix([cell(s, f"livekit@{release}", {OWED: st}) for s, st in status_by_scenario.items()]))


def test_compare_fails_only_on_pass_to_fail_at_the_newest_releases():
    old = _nightly({"k1": PASS, "control": FAIL, "l1": PASS}, "1.8.9")
    same = _nightly({"k1": PASS, "control": FAIL, "l1": PASS}, "1.8.10")
    assert board_mod.compare(old, same) == []
    fixed = _nightly({"k1": PASS, "control": PASS, "l1": NA, "m1": FAIL}, "1.8.10")
    assert board_mod.compare(old, fixed) == []       # a fix, a row no longer judged, a row new to the board
    worse = _nightly({"k1": FAIL, "control": FAIL, "l1": PASS}, "1.8.10")
    found = board_mod.compare(old, worse)
    assert found == [
        "livekit: owed_results_delivered on k1: pass at 1.8.9 (before), FAIL at 1.8.10 (now); see k1-livekit-1.8.10-01"]
    # the rule over every scenario was FAIL already (control): no second line for it
    assert board_mod.compare(worse, old) == []


def test_lab_board_compare_exit_status(tmp_path, capsys):
    for name, b in (("old", _nightly({"k1": PASS}, "1.8.9")), ("new", _nightly({"k1": FAIL}, "1.8.9"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "board.json").write_text(json.dumps(b))
    assert cli.main(["board", "compare", str(tmp_path / "old"), str(tmp_path / "old")]) == 0
    assert cli.main(["board", "compare", str(tmp_path / "old"), str(tmp_path / "new" / "board.json")]) == 1
    assert "regression: livekit: owed_results_delivered on k1" in capsys.readouterr().out


def test_a_missing_or_foreign_board_is_one_line(tmp_path, capsys):
    with pytest.raises(LabError, match="no such board"):
        board_mod.load(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text(json.dumps({"cells": []}))
    with pytest.raises(LabError, match="not a board"):
        board_mod.load(tmp_path / "x.json")
    assert cli.main(["board", "compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_release_run_is_its_own_matrix_client_the_pinned_one_keeps_the_plain_name():
    from lab.report.conformance import client_label
    v = {"client": "livekit"}
    assert client_label(v, {"framework": {"framework": "livekit", "version": "1.8.8", "build": None,
                                          "venv": ".venv-livekit-1.8.8"}}) == "livekit@1.8.8"
    assert client_label(v, {"framework": {"framework": "livekit", "version": "1.8.0", "build": "pr003",
                                          "venv": ".venv-livekit-1.8.0-pr003"}}) == "livekit@1.8.0+pr003"
    assert client_label(v, {"framework": {"framework": "livekit", "version": "1.8.9", "build": None,
                                          "venv": ".venv-livekit"}}) == "livekit"
    assert client_label({"client": "probe"}, {}) == "probe"


def test_a_release_whose_app_did_not_start_is_a_column_that_says_why(tmp_path):
    (tmp_path / "matrix.json").write_text(json.dumps(matrix(LK)))
    (tmp_path / board_mod.NOT_RUN_FILE).write_text(json.dumps({"cells": [
        {"scenario": None, "client": "pipecat@1.12.0", "why": "the client command exited at once (exit 1)"},
        {"scenario": "m3", "client": "livekit@1.8.7", "why": "not sent through the proxy"},
        {"scenario": "m3", "client": "probe", "why": "not a framework"}]}))
    md, js = board_mod.write(tmp_path)
    b = json.loads(js.read_text())
    assert b["frameworks"]["pipecat"]["releases"] == ["1.12.0", "1.13.0", "1.14.0"]
    assert b["frameworks"]["pipecat"]["not_run"] == {"1.12.0": "the client command exited at once (exit 1)"}
    assert "pipecat 1.12.0: not run: the client command exited at once (exit 1)" in md.read_text()
    assert b["frameworks"]["livekit"]["not_run"] == {"1.8.7": "m3: not sent through the proxy"}
    # the release that did not run has no cells: no change is read across it
    (row,) = [r for r in b["frameworks"]["pipecat"]["rows"] if r["scenario"] == board_mod.ALL]
    assert row["changes"] == [] and "1.12.0" not in row["cells"]


def test_a_rule_no_scenario_judged_at_any_release_has_no_row():
    b = board_mod.build(matrix(LK))
    assert {r["rule"] for r in b["frameworks"]["pipecat"]["rows"]} == {OWED}


def test_a_framework_run_on_both_protocols_is_a_group_per_protocol():
    # livekit's app speaks both (its Google and its OpenAI realtime plugin): its cells stay apart, each
    # listed under the protocol it ran; pipecat ran on one, so it keeps its plain name
    both = [{**cell("b1", "livekit", {OWED: PASS}), "protocol": "gemini"},
            {**cell("b1", "livekit", {OWED: FAIL}), "protocol": "openai"},
            {**cell("b1", "pipecat", {OWED: PASS}), "protocol": "openai"},
            {**cell("b1", "openai", {OWED: FAIL}), "protocol": "openai"}]
    b = board_mod.build({**matrix(both, versions={"livekit": {"livekit-plugins-google": "1.8.9"},
                                                  "pipecat": {"pipecat-ai": "1.14.0"}}),
                         "protocols": ["gemini", "openai"]})
    assert set(b["frameworks"]) == {"livekit on gemini", "livekit on openai", "pipecat"}
    assert row(b, "livekit on gemini", OWED, "b1")["cells"]["1.8.9"]["status"] == PASS
    assert row(b, "livekit on openai", OWED, "b1")["cells"]["1.8.9"]["status"] == FAIL
    assert b["protocols"] == {"gemini": {"frameworks": ["livekit on gemini"], "lab_clients": []},
                              "openai": {"frameworks": ["livekit on openai", "pipecat"], "lab_clients": ["openai"]}}
    md = board_mod.render(b)
    assert "## livekit (gemini)" in md and "## livekit (openai)" in md and "## pipecat (openai)" in md
