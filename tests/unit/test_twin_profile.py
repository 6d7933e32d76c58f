"""Twin profiles: values with sources, inheritance, overrides."""
from __future__ import annotations

import random

import pytest

from lab.errors import LabError
from lab.twin.profile import available_profiles, is_range, load_profile


def test_both_profiles_load_and_every_parameter_has_a_source():
    assert {"developer-api", "vertex"} <= set(available_profiles())
    for name in ("developer-api", "vertex"):
        prof = load_profile(name)
        assert prof.name == name and len(prof.params) > 30
        for p in prof.params.values():
            assert p.source.strip(), p.name


def test_measured_values_cite_their_seed():
    prof = load_profile("developer-api")
    assert prof["refuse_close_s"] == [0.472, 0.704] and "000" in prof.source("refuse_close_s")
    assert prof["idle_release_s"] == 1.3 and "B2" in prof.source("idle_release_s")
    assert prof["freeze_close_s"] == 480 and prof["ping_interval"] is None
    assert prof["reissue_delay_s"] == [0.6, 0.8] and "001" in prof.source("reissue_delay_s")
    assert "002" in prof.source("av_resume_fail")
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


def test_draw_ranges():
    prof = load_profile("developer-api")
    rng = random.Random(3)
    xs = [prof.draw("refuse_close_s", rng) for _ in range(200)]
    assert all(0.472 <= x <= 0.704 for x in xs) and max(xs) - min(xs) > 0.1
    assert prof.draw("idle_release_s", rng) == 1.3
    assert is_range([1, 2]) and not is_range([True, 2]) and not is_range("ab")
