"""Twin profiles: values with sources, inheritance, overrides."""
from __future__ import annotations

import random
import socket

import pytest

from lab.cli import main
from lab.errors import LabError
from lab.twin.profile import available_profiles, bounds, is_range, load_profile
from lab.stats.quantiles import Quantiles


def test_both_profiles_load_and_every_parameter_has_a_source():
    assert {"developer-api", "vertex"} <= set(available_profiles())
    for name in ("developer-api", "vertex"):
        prof = load_profile(name)
        assert prof.name == name and len(prof.params) > 30
        for p in prof.params.values():
            assert p.source.strip(), p.name


def test_measured_values_cite_their_seed():
    prof = load_profile("developer-api")
    refuse = prof["refuse_close_s"]
    assert isinstance(refuse, Quantiles) and bounds(refuse) == (0.427, 1.818)     # the body and its tail
    assert "000" in prof.source("refuse_close_s") and "45 ms" in prof.source("refuse_close_s")
    assert prof["idle_release_s"] == 1.3 and "B2" in prof.source("idle_release_s")
    assert prof["freeze_close_s"] == 480 and prof["ping_interval"] is None
    assert bounds(prof["reissue_delay_s"]) == (0.469, 0.822) and "001" in prof.source("reissue_delay_s")
    assert prof["setup_error_close_s"] == 0.044 and "assumption" not in prof.source("freeze_close_reason")
    assert "002" in prof.source("av_resume_ok_utterances")
    assert prof["transparent_supported"] is False


def test_vertex_inherits_and_overrides():
    dev, vx = load_profile("developer-api"), load_profile("vertex")
    assert vx["transparent_supported"] is True and vx["refuse_close_s"] == dev["refuse_close_s"]
    assert set(dev.params) == set(vx.params)


def test_overrides_from_strings_and_mappings():
    prof = load_profile("developer-api", ["freeze_close_s=2", "refuse_close_s=[0.1, 0.2]", "frame_type=text",
                                          "goaway_after_s=30", "script=a | b", "speaking_release_immediate=false"])
    assert prof["freeze_close_s"] == 2 and prof["refuse_close_s"] == [0.1, 0.2]
    assert prof["frame_type"] == "text" and prof["goaway_after_s"] == 30 and prof["script"] == ["a", "b"]
    assert prof["speaking_release_immediate"] is False
    assert prof.params["freeze_close_s"].overridden and "override" in prof.source("freeze_close_s")
    assert load_profile("developer-api", {"idle_release_s": 0.2})["idle_release_s"] == 0.2
    assert load_profile("developer-api")["freeze_close_s"] == 480        # the file is untouched


@pytest.mark.parametrize("bad", ["nope=1", "freeze_close_s=soon", "noequals", "=3",
                                 "speaking_release_immediate=maybe", "script={a: 1}"])
def test_bad_overrides_raise_lab_error(bad):
    with pytest.raises(LabError):
        load_profile("developer-api", [bad])


def test_unknown_profile_and_bad_file(tmp_path):
    with pytest.raises(LabError, match="unknown twin profile"):
        load_profile("no-such-profile")
    f = tmp_path / "broken.yaml"
    f.write_text("params:\n  x: {value: 1}\n")
    with pytest.raises(LabError, match="source"):
        load_profile(str(f))


def test_custom_profile_file_extends(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nextends: developer-api\nparams:\n  idle_release_s: {value: 3, source: test}\n")
    prof = load_profile(str(f))
    assert prof.name == "mine" and prof["idle_release_s"] == 3 and prof["freeze_close_s"] == 480


def test_every_source_cites_a_record_or_says_assumption():
    cites = ("000", "001", "002", "003", "004", "records", "protocol", "fidelity", "3rd-party", "assumption")
    for name in ("developer-api", "vertex"):
        prof = load_profile(name)
        for p in prof.params.values():
            assert any(c in p.source for c in cites), (name, p.name, p.source)


def test_draw_ranges_and_tables():
    prof = load_profile("developer-api", ["new_setup_s=[0.1, 0.2]"])
    rng = random.Random(3)
    xs = [prof.draw("new_setup_s", rng) for _ in range(200)]
    assert all(0.1 <= x <= 0.2 for x in xs) and max(xs) - min(xs) > 0.05      # a range stays uniform
    ys = [prof.draw("refuse_close_s", rng) for _ in range(2000)]
    assert all(0.427 <= y <= 1.818 for y in ys) and 0.5 < sorted(ys)[1000] < 0.55   # peaked near p50 0.526
    assert prof.draw("idle_release_s", rng) == 1.3
    assert is_range([1, 2]) and not is_range([True, 2]) and not is_range("ab")


@pytest.mark.parametrize("body,fragment", [
    ("  idel_release_s: {value: 1, source: test}\n", "unknown parameter 'idel_release_s'"),
    ("  refuse_code: {value: soon, source: test}\n", "bad value for refuse_code"),
    ("  idle_release_s: {value: [1, 2], source: test}\n", "bad value for idle_release_s"),
    ("  handle_updates: {value: twice, source: test}\n", "bad value for handle_updates"),
    ("  refuse_close_s: {value: {min: 0.5, p50: 0.4, max: 0.6}, source: test}\n",
     "bad value for refuse_close_s: quantile p50 = 0.4 is below min = 0.5"),       # a malformed quantile table
    ("  new_setup_s: {value: {p50: 0.2, max: 0.3}, source: test}\n", "bad value for new_setup_s: a quantile table needs 'min'"),
])
def test_a_profile_file_is_checked_against_the_declarations(tmp_path, body, fragment):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nextends: developer-api\nparams:\n" + body)
    with pytest.raises(LabError, match=fragment) as ei:
        load_profile(str(f))
    assert str(f) in str(ei.value) and "\n" not in str(ei.value)


def test_a_profile_without_every_declared_parameter_is_refused(tmp_path):
    f = tmp_path / "partial.yaml"
    f.write_text("name: partial\nparams:\n  idle_release_s: {value: 1, source: test}\n")
    with pytest.raises(LabError, match="missing parameters .*freeze_close_s"):
        load_profile(str(f))


@pytest.mark.parametrize("bad", ["idle_release_s=[1, 2]", "refuse_code=1011.5", "frame_type=json",
                                 "goaway_time_left=soon", "new_setup_s=[0.3, 0.1]", "freeze_close_code=null"])
def test_overrides_are_checked_against_the_declared_shape(bad):
    with pytest.raises(LabError, match="bad value for"):
        load_profile("developer-api", [bad])


def test_overrides_keep_their_canonical_form():
    prof = load_profile("developer-api", ["default_tool_behavior=blocking", "freeze_close_s=null",
                                          "new_setup_s=0.01", "max_client_frame_bytes=10000"])
    assert prof["default_tool_behavior"] == "BLOCKING" and prof["freeze_close_s"] is None
    assert prof["new_setup_s"] == 0.01 and prof["max_client_frame_bytes"] == 10000


@pytest.mark.parametrize("argv,fragment", [
    (["--set", "idel_release_s=1"], "unknown twin parameter 'idel_release_s'"),
    (["--set", "freeze_close_s=soon"], "bad value for freeze_close_s"),
])
def test_twin_serve_refuses_a_bad_parameter_in_one_line_before_it_listens(capsys, argv, fragment):
    with socket.socket() as busy:       # a taken port: reaching listen() would fail differently
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rc = main(["twin", "serve", "--port", str(port), "--no-tls", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and fragment in err and "cannot listen" not in err


def test_twin_serve_list_params(capsys):
    assert main(["twin", "serve", "--profile", "vertex", "--list-params", "--set", "idle_release_s=2"]) == 0
    out = capsys.readouterr().out
    assert "idle_release_s = 2\n    source: override" in out and "transparent_supported = True" in out
    # a distribution prints as its table, in the form --set reads back
    line = next(x for x in out.splitlines() if x.startswith("new_setup_s = "))
    assert line == "new_setup_s = {min: 0.225, p10: 0.228, p25: 0.243, p50: 0.257, p75: 0.264, p90: 0.285, " \
                   "p95: 0.285, max: 0.286}"
    again = load_profile("vertex", ["new_setup_s=" + line.partition(" = ")[2]])
    assert again["new_setup_s"] == load_profile("vertex")["new_setup_s"]
