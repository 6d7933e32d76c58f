"""`lab matrix --protocol gemini,openai`: each protocol's cells (its clients x the scenarios that apply
to it), and matrix.md/json and the board naming each cell's protocol. Pure: no namespace, no run."""
import json

import pytest

from lab import cli
from lab import matrix as runner
from lab import scenario as scenario_mod
from lab.errors import LabError
from lab.protocols import parse_protocols
from lab.report import board as board_mod
from lab.report import conformance as matrix_report
from lab.report import rules
from tests.unit.test_matrix import write_run

BOTH = ("gemini", "openai")


def test_protocols_parse_each_once_in_order_and_an_unknown_one_names_the_known():
    assert parse_protocols("gemini,openai") == BOTH
    assert parse_protocols("openai, gemini,openai") == ("openai", "gemini")
    assert parse_protocols("openai") == ("openai",)
    for bad in ("gemini,grpc", "", ","):
        with pytest.raises(ValueError, match="known: gemini, openai"):
            parse_protocols(bad)


def test_without_clients_each_protocol_gets_its_defaults_and_a_set_its_own_scenarios():
    (g, gs, gc), (o, os_, oc) = runner.per_protocol(["resume"], None, BOTH)
    assert (g, o) == BOTH
    assert gs == list(runner.SETS["resume"]) and gc == list(runner.DEFAULT_CLIENTS)
    assert os_ == [s for s in runner.SETS["resume"] if "openai" in scenario_mod.load(s).protocols]
    assert "r1-idle-abort-delayed" not in os_ and "r2-freeze" in os_ and "control" in os_ and oc == ["openai", "openai-recovery", "livekit", "pipecat"]


def test_named_scenarios_and_clients_go_to_the_protocol_they_belong_to():
    parts = runner.per_protocol(["control", "l1-goaway", "l1-session-cap"], ["probe", "openai-recovery", "naive"], BOTH)
    assert parts == [("gemini", ["control", "l1-goaway"], ["probe", "naive"]),
                     ("openai", ["control", "l1-session-cap"], ["openai-recovery"])]
    # a framework speaks both: it runs in each protocol's part, its cells under the protocol they ran
    assert runner.per_protocol(["control"], ["livekit", "adk", "openai"], BOTH) == [
        ("gemini", ["control"], ["livekit", "adk"]), ("openai", ["control"], ["livekit", "openai"])]
    # the order of --protocol is the order of the parts
    assert [p for p, _, _ in runner.per_protocol(["control"], None, ("openai", "gemini"))] == ["openai", "gemini"]


def test_one_protocol_keeps_every_name_for_lab_runs_preflight_to_judge():
    assert runner.per_protocol(["control", "t4-handle-expiry"], ["probe", "openai"], ("openai",)) == [
        ("openai", ["control", "t4-handle-expiry"], ["probe", "openai"])]


@pytest.mark.parametrize("scenarios, clients, says", [
    (["control"], ["probe"], "no client of --clients speaks openai: add one of openai, openai-recovery, livekit, pipecat"),
    (["l1-goaway"], None, "no scenario of --scenarios l1-goaway applies to openai"),
    (["control"], ["probe", "openai", "nobody"], "unknown client 'nobody'"),
    (["contrl"], None, "unknown scenario 'contrl'"),
])
def test_a_protocol_left_with_nothing_or_a_bad_name_is_one_line(scenarios, clients, says):
    with pytest.raises(LabError) as ei:
        runner.per_protocol(scenarios, clients, BOTH)
    assert says in str(ei.value) and "\n" not in str(ei.value)


def test_a_client_of_a_protocol_not_asked_for_is_refused():
    with pytest.raises(LabError, match="client openai speaks openai, none of gemini"):
        runner.per_protocol(["control"], ["probe", "openai"], ("gemini",) * 2)


def test_the_cli_refuses_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "batch"
    with pytest.raises(SystemExit) as ei:          # argparse's own: usage, then one line
        cli.main(["matrix", "--protocol", "gemini,grpc", "--out", str(out)])
    assert ei.value.code == 2 and "unknown protocol grpc; known: gemini, openai" in capsys.readouterr().err
    assert cli.main(["matrix", "--protocol", "gemini,openai", "--scenarios", "control", "--clients", "probe",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no client of --clients speaks openai" in err[0]
    assert not out.exists()


def test_an_openai_client_measures_the_openai_sdk():
    v = runner.client_versions("openai")
    assert set(v) == set(runner.SDK_PACKAGES_OF["openai"]) and v["openai"]


def two_protocols(tmp_path):
    batch = tmp_path / "batch"
    write_run(batch / "control-probe-01")
    openai = write_run(batch / "control-openai-01", client="openai", answered=False)
    meta = json.loads((openai / "run.json").read_text())
    (openai / "run.json").write_text(json.dumps({**meta, "protocol": "openai"}))
    return batch


def test_the_matrix_names_each_cells_protocol_and_a_rule_of_the_other_protocol_is_marked(tmp_path):
    batch = two_protocols(tmp_path)
    md, js = matrix_report.write([batch], batch)
    m = json.loads(js.read_text())
    assert m["protocols"] == ["gemini", "openai"]
    cells = {(c["protocol"], c["scenario"], c["client"]): c for c in m["cells"]}
    assert set(cells) == {("gemini", "control", "probe"), ("openai", "control", "openai")}
    ledger = "ledger_old_id_after_resume"
    assert rules.RULES[ledger].protocols == ("gemini",)
    assert cells[("openai", "control", "openai")]["rules"][ledger]["applies"] is False
    assert cells[("gemini", "control", "probe")]["rules"][ledger]["applies"] is True
    assert {r["name"]: r["protocols"] for r in m["rules"]}[ledger] == ["gemini"]
    # the unanswered call fails the OpenAI cell's user; the Gemini one passed
    assert cells[("openai", "control", "openai")]["rules"]["owed_results_delivered"]["status"] == rules.FAIL
    text = md.read_text()
    assert "| protocol | scenario | client | for the user |" in text
    assert "protocols gemini, openai" in text
    rows = {ln.split(" | ")[0].strip("| "): ln for ln in text.splitlines() if ln.startswith("| gemini |")
            or ln.startswith("| openai |")}
    assert rows["gemini"].startswith("| gemini | control | probe | 1/1 |")
    assert rows["openai"].startswith("| openai | control | openai | 0/1 |")
    # R1 (the resume ledger) is n/a in both, but only the OpenAI row says it is not its protocol's
    r1 = [r["name"] for r in m["rules"]].index(ledger) + 5
    assert rows["openai"].split(" | ")[r1].strip() == "n/a (gemini only)"
    assert rows["gemini"].split(" | ")[r1].strip() == "n/a"
    assert "### control x openai (openai)" in text and "### control x probe (gemini)" in text
    assert f"**R1 `{ledger}`** (000 §What a client must do, 1; gemini only)" in text


def test_an_old_matrix_json_without_protocols_renders_as_gemini():
    batch_cells = [{"scenario": "control", "client": "probe", "runs": 1, "verdict": {"pass": 1, "runs": 1},
                    "rules": {"r": {"status": rules.NA, "pass": 0, "fail": 0, "na": 1, "observed": ["x"]}},
                    "per_run": [{"run": "a", "dir": "a", "failed": [], "rules": {}}]}]
    text = matrix_report.render({"rules": [{"name": "r", "source": "s", "about": "a"}], "cells": batch_cells,
                                 "scenarios": ["control"], "clients": ["probe"], "generated": "now", "shards": ["b"],
                                 "versions": {}})
    assert "| gemini | control | probe | 1/1 | - | n/a |" in text and "protocol gemini" in text


def test_the_board_names_each_protocol_and_a_protocol_without_a_framework_says_so(tmp_path):
    batch = two_protocols(tmp_path)
    write_run(batch / "control-livekit-01", client="livekit")
    matrix_report.write([batch], batch)
    md, js = board_mod.write(batch)
    b = json.loads(js.read_text())
    assert b["frameworks"]["livekit"]["protocol"] == "gemini"
    assert b["frameworks"]["livekit"]["other_protocols_rules"] == []
    assert b["protocols"] == {"gemini": {"frameworks": ["livekit"], "lab_clients": ["probe"]},
                              "openai": {"frameworks": [], "lab_clients": ["openai"]}}
    text = md.read_text()
    assert "## livekit (gemini)" in text
    assert "## openai" in text and "No framework ran on openai in this matrix; its clients here (openai)" in text


def test_a_framework_on_a_protocol_without_some_rules_names_them():
    cell = {"protocol": "openai", "scenario": "control", "client": "livekit", "runs": 1,
            "rules": {"owed_results_delivered": {"status": rules.PASS, "pass": 1, "fail": 0, "na": 0},
                      "retry_refused_resume": {"status": rules.NA, "pass": 0, "fail": 0, "na": 1}},
            "per_run": [{"dir": "d"}]}
    m = {"rules": [{"name": "owed_results_delivered", "protocols": list(BOTH)},
                   {"name": "retry_refused_resume", "protocols": ["gemini"]}], "cells": [cell], "versions": {}}
    b = board_mod.build(m)
    assert b["frameworks"]["livekit"]["protocol"] == "openai"
    assert b["frameworks"]["livekit"]["other_protocols_rules"] == ["retry_refused_resume"]
    text = board_mod.render(b)
    assert "## livekit (openai)" in text and "n/a on openai, rules of another protocol: retry_refused_resume." in text
