"""The matrix (lab/report/conformance.py), its runner's inputs (lab/matrix.py) and shard merging
(lab/report/shards.py), on small run folders written by hand: no namespace, no run."""
import json
from pathlib import Path

import pytest

from lab import cli
from lab import matrix as runner
from lab import scenario as scenario_mod
from lab.clients.frameworks import FRAMEWORKS
from lab.report import conformance as matrix_report
from lab.report import rules, shards


def _line(kind, ms, **data):
    return json.dumps({"t": 1000 + ms / 1000, "ms": ms, "src": "twin" if kind.startswith("twin.") else "agent",
                       "kind": kind, **data})


def write_run(d: Path, scenario="control", client="probe", answered=True, versions=None) -> Path:
    """A control-shaped run folder: one call, answered (or not) on its session."""
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"scenario": {"name": scenario}, "client": client, "endpoint": "twin",
                                            "expect": {"bookings": 1}}))
    events = [_line("run.start", 0, scenario=scenario, client=client), _line("user.say", 500, text="Book it", line=0),
              _line("backend.request", 1000, business_key="3pm tomorrow", call_id="c-1"),
              _line("backend.commit", 5000, business_key="3pm tomorrow"), _line("run.end", 9000, status="ok")]
    (d / "events.jsonl").write_text("\n".join(events) + "\n")
    twin = [_line("twin.setup", 50, conn=1, resume=False), _line("twin.accept", 100, conn=1, session="s1"),
            _line("twin.user", 520, conn=1, session="s1", source="realtime"),
            _line("twin.tool_call", 1000, conn=1, session="s1", id="c-1", name="book_slot", args={"slot": "3pm"})]
    if answered:
        twin.append(_line("twin.tool_response", 5010, conn=1, session="s1", id="c-1", known=True, status="booked"))
    (d / "twin.jsonl").write_text("\n".join(twin) + "\n")
    return d


def two_shards(tmp_path):
    """Two hosts' copies of a batch folder with the same name and the same run names."""
    a = tmp_path / "hostA" / "20261201-matrix"
    b = tmp_path / "hostB" / "20261201-matrix"
    write_run(a / "control-probe-01")
    write_run(b / "control-probe-01", answered=False)
    write_run(b / "control-livekit-01", client="livekit")
    (a / matrix_report.VERSIONS_FILE).write_text(json.dumps({"clients": {"probe": {"google-genai": "3.6.1"}}}))
    (b / matrix_report.VERSIONS_FILE).write_text(json.dumps({"clients": {"livekit": {"livekit-agents": "1.8.9"}}}))
    return a, b


def test_two_shards_merge_into_one_matrix_and_same_named_runs_stay_apart(tmp_path):
    a, b = two_shards(tmp_path)
    md, js = matrix_report.write([a, b], tmp_path / "merged")
    m = json.loads(js.read_text())
    assert m["format"] == matrix_report.FORMAT and m["shards"] == ["hostA/20261201-matrix", "hostB/20261201-matrix"]
    assert [r["name"] for r in m["rules"]] == list(rules.RULES)
    cells = {(c["scenario"], c["client"]): c for c in m["cells"]}
    assert set(cells) == {("control", "probe"), ("control", "livekit")}
    probe = cells[("control", "probe")]
    assert probe["runs"] == 2 and {r["run"] for r in probe["per_run"]} == {
        "hostA/20261201-matrix/control-probe-01", "hostB/20261201-matrix/control-probe-01"}
    # host B's run never answered the call: the cell fails the rule, one run of two
    owed = probe["rules"]["owed_results_delivered"]
    assert (owed["status"], owed["pass"], owed["fail"]) == (rules.FAIL, 1, 1)
    assert cells[("control", "livekit")]["rules"]["owed_results_delivered"]["status"] == rules.PASS
    assert m["versions"] == {"probe": {"google-genai": "3.6.1"}, "livekit": {"livekit-agents": "1.8.9"}}
    # every link leads to the run's folder from the matrix's own
    for r in probe["per_run"]:
        assert (md.parent / r["dir"] / "run.json").is_file()
    text = md.read_text()
    # host B's unanswered call failed its user (owed_results_delivered): one run of two passed for the user
    assert probe["verdict"]["pass"] == 1 and "| control | probe | 1/2 |" in text and "FAIL 1/2" in text and "livekit-agents 1.8.9" in text


def test_lab_report_on_several_shards_writes_one_summary_and_the_matrix(tmp_path, capsys):
    a, b = two_shards(tmp_path)
    out = tmp_path / "merged"
    assert cli.main(["report", str(a), str(b), "--out", str(out), "--no-timeline"]) == 0
    summary = (out / "summary.md").read_text()
    assert "3 runs" in summary
    assert "hostA/20261201-matrix/control-probe-01" in summary and "hostB/20261201-matrix/control-probe-01" in summary
    assert (out / "matrix.json").is_file()
    # each shard's own folder is untouched but for the verdicts
    assert not (a / "summary.md").exists() and (a / "control-probe-01" / "verdict.json").is_file()
    # one matrix batch alone: lab report rebuilds its matrix beside its summary
    assert cli.main(["report", str(a), "--no-timeline"]) == 0
    assert (a / "summary.md").is_file() and (a / "matrix.md").is_file()


def test_lab_matrix_report_rebuilds_and_several_folders_need_out(tmp_path, capsys):
    a, b = two_shards(tmp_path)
    assert cli.main(["matrix", "--report", str(a)]) == 0
    assert (a / "matrix.md").is_file()
    assert cli.main(["matrix", "--report", str(a), str(b)]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli.main(["matrix", "--report", str(a), str(b), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "summary.md").is_file() and (tmp_path / "m" / "matrix.md").is_file()


def test_identical_shard_paths_are_told_apart():
    assert shards.shard_labels([Path("/x/a"), Path("/x/a")]) == ["a", "a#2"]
    assert shards.shard_labels([Path("/h1/b"), Path("/h2/b"), Path("/h2/c")]) == ["h1/b", "h2/b", "c"]


@pytest.mark.parametrize("argv, says", [
    (["--scenarios", "contrl", "--clients", "probe"], "unknown scenario 'contrl'"),
    (["--scenarios", "control", "--clients", "probe,nobody"], "unknown client 'nobody'"),
    (["--scenarios", "control", "--clients", "probe", "-n", "0"], "-n must be at least 1"),
    (["--scenarios", "control", "--clients", "probe", "--conversation", "no-such-talk"], "no-such-talk"),
])
def test_bad_names_are_one_line_and_exit_2_before_anything_runs(tmp_path, capsys, argv, says):
    out = tmp_path / "batch"
    assert cli.main(["matrix", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not out.exists()


def test_the_named_sets_are_catalogue_scenarios_and_expand_once():
    known = set(scenario_mod.names())
    for name, members in runner.SETS.items():
        assert set(members) <= known, name
    assert runner.expand_scenarios(["lifecycle", "l1-goaway", "control"]) == ["l1-goaway", "l2-slow-pongs",
                                                                             "l3-stall", "control"]
    assert set(runner.SETS["default"]) == set(runner.SETS["resume"] + runner.SETS["stop"] + runner.SETS["lifecycle"])
    assert runner.split_names(["probe,livekit", "adk"]) == ["probe", "livekit", "adk"]


def test_the_router_set_is_the_middlebox_scenarios_and_stays_out_of_the_default():
    for name in runner.SETS["router"]:
        scn = scenario_mod.load(name)
        # behind the router node, or (m3) behind the endpoint's CONNECT proxy: a middlebox either way
        assert scn.router_links or scn.endpoint.get("via") == "proxy", name
    assert not set(runner.SETS["router"] + runner.SETS["untested"]) & set(runner.SETS["default"])
    assert runner.expand_scenarios(["router", "untested"]) == list(runner.SETS["router"] + runner.SETS["untested"])


def test_every_framework_has_its_packages_named():
    assert set(runner.FRAMEWORK_PACKAGES) == set(FRAMEWORKS)


def test_the_duration_cap_shortens_only_scenarios_that_run_their_whole_duration():
    b1, control = scenario_mod.load("b1-silent-loss"), scenario_mod.load("control")
    assert runner._duration(b1, 30) == 30 and runner._duration(b1, None) is None
    assert runner._duration(control, 5) is None


def test_the_lab_clients_versions_come_from_the_project_venv():
    v = runner.client_versions("probe")
    assert set(v) == set(runner.SDK_PACKAGES) and v["google-genai"]


def test_the_nightly_publishes_the_matrix_after_a_clean_scan():
    import re
    import yaml
    root = Path(__file__).resolve().parents[2]
    job = yaml.safe_load((root / ".github" / "workflows" / "nightly.yml").read_text())["jobs"]["matrix"]
    runs = [s.get("run", "") for s in job["steps"]]
    make = next(r for r in runs if "make lab-matrix" in r)
    assert re.search(r"^lab-matrix:", (root / "Makefile").read_text(), re.M)
    out = re.search(r"MATRIX_OUT=(\S+)", make).group(1)
    steps = job["steps"]
    scan = next(i for i, s in enumerate(steps) if "lab scan" in s.get("run", ""))
    upload = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert scan < upload and "steps.scan.outcome == 'success'" in steps[upload]["if"]
    assert f"{out}/matrix.md" in steps[upload]["with"]["path"]
    assert not any("GEMINI_API_KEY" in (s.get("env") or {}) for s in steps)     # the twin: no key


def test_the_kubernetes_fan_in_writes_the_matrix_over_its_index_folders(tmp_path):
    from lab.deploy import fan_in
    from lab.deploy.shards import DONE_MARKER, shard_name
    for i in (0, 1):
        shard = tmp_path / shard_name(i)
        write_run(shard / "control-probe-01", answered=bool(i))     # the same run name in both indexes
        (shard / DONE_MARKER).write_text('{"exit": 0}\n')
    assert fan_in.main([str(tmp_path), "--shards", "2", "--timeout", "1", "--matrix"]) == 0
    (cell,) = json.loads((tmp_path / "matrix.json").read_text())["cells"]
    assert sorted(r["run"] for r in cell["per_run"]) == ["shard-0/control-probe-01", "shard-1/control-probe-01"]
    assert cell["rules"]["owed_results_delivered"]["fail"] == 1


def test_a_missing_framework_venv_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    import lab.run
    monkeypatch.setattr(lab.run, "REPO", tmp_path)          # a checkout where no venv was built
    out = tmp_path / "batch"
    assert cli.main(["matrix", "--scenarios", "control", "--clients", "probe,livekit", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "needs its venv .venv-livekit" in line and not out.exists()


def test_a_matrix_with_a_conversation_plays_its_lines_in_every_cell(monkeypatch, tmp_path):
    """--conversation reaches each cell as lab run's does: the scenarios come back played with the
    conversation's lines, and every cell is given it."""
    from lab import matrix, parallel
    from lab import run as run_mod
    lines = tmp_path / "lines.txt"
    lines.write_text("Please refund order A1002, it arrived broken.\nDid the refund go through?\n")
    seen = {}
    monkeypatch.setattr(matrix, "client_versions", lambda c, topology=None: {})
    monkeypatch.setattr(run_mod, "batch_cells", lambda scns, batch, **kw: seen.setdefault(scns[0].name, (scns[0], kw)) and [])

    monkeypatch.setattr(parallel, "run_cells", lambda cells, jobs, out=print, contain=(): parallel.Report(jobs=1))
    matrix.run_matrix(["control", "l1-goaway"], ["probe"], out_dir=tmp_path / "m", conversation=str(lines), out=lambda *_: None)
    assert set(seen) == {"control", "l1-goaway"}
    for scn, kw in seen.values():
        assert kw["conversation"] == str(lines)
        assert "Please refund order A1002" in scn.script[0]
