"""The twin's error channel, on the pure core: each refusal closes with the real service's code and
reason (fidelity §5), in the order the service checks them, and lab.live.errors reads each the way
it reads the real one."""
from __future__ import annotations

import json

import pytest

from lab.live import errors as live_errors
from lab.twin import io_actions as A
from lab.twin import wire
from lab.twin.core import TwinCore

MODEL = "models/gemini-3.8-live"
WRONG_KEY = "API key not valid. Please pass a valid API key."
MISSING_KEY = ("Method doesn't allow unregistered callers (callers without established identity). "
               "Please use API Key or other form of API consumer identity to call this API.")
QUOTA = "You exceeded your current quota, please check your plan and billing details."


def closes(acts) -> list[tuple[int, str]]:
    return [(a.code, a.reason) for a in acts if isinstance(a, A.Close)]


def setup(core: TwinCore, body: dict, key: str = "", route: str = "v1beta", conn: int = 1, raw: str | None = None):
    core.connection_opened(conn, 0.0, route, None, key)
    return core.frame_received(conn, raw or json.dumps({"setup": body}), 0.0)


def test_keys_are_refused_after_the_upgrade_with_the_real_strings():
    core = TwinCore(api_key="right")
    assert core.check_upgrade("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
                              {"x-goog-api-key": "wrong"}).status is None
    up = core.check_upgrade("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
                            {"x-goog-api-key": "wrong"})
    assert up.key == wire.KEY_WRONG
    assert closes(setup(core, {"model": MODEL}, up.key)) == [(1007, WRONG_KEY)]
    up = core.check_upgrade("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", {})
    assert up.key == wire.KEY_MISSING
    (code, reason), = closes(setup(core, {"model": MODEL}, up.key, conn=2))
    assert code == 1008 and reason == wire.fit_close_reason(MISSING_KEY) and len(reason.encode()) == 123
    up = core.check_upgrade("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
                            {"x-goog-api-key": "right"})
    assert up.key == wire.KEY_OK and closes(setup(core, {"model": MODEL}, up.key, conn=3)) == []


def test_http_refusal_stays_an_option():
    core = TwinCore(api_key="right", overrides={"key_refusal": "http"})
    path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    assert core.check_upgrade(path, {"x-goog-api-key": "wrong"}).status == 403
    assert core.check_upgrade(path, {}).status == 401


@pytest.mark.parametrize("route,version", [("v1beta", "v1beta"), ("v1alpha-constrained", "v1alpha"),
                                           ("v1", "v1"), ("vertex", "v1beta1")])
def test_an_unknown_model_closes_1008_naming_it_and_the_version(route, version):
    (code, reason), = closes(setup(TwinCore(), {"model": "models/gemini-nope"}, route=route))
    assert code == 1008
    assert reason == wire.fit_close_reason(
        f"models/gemini-nope is not found for API version {version}, or is not supported for "
        "bidiGenerateContent. Call ListModels to see the list of available models and their supported methods.")


def test_the_served_models_include_the_labs_and_the_peers_defaults():
    for model in ("models/gemini-3.8-live", "gemini-2.5-flash-native-audio-preview-12-2025",
                  "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio"):
        assert closes(setup(TwinCore(), {"model": model})) == []


def test_an_unknown_setup_field_is_named_as_sent():
    raw = json.dumps({"setup": {"model": MODEL, "no_such_field": 1}})
    assert closes(setup(TwinCore(), {}, raw=raw)) == [
        (1007, 'Invalid JSON payload received. Unknown name "no_such_field" at \'setup\': Cannot find field.')]
    # both spellings of a real field are fine
    raw = json.dumps({"setup": {"model": MODEL, "generation_config": {}, "realtimeInputConfig": {}}})
    assert closes(setup(TwinCore(), {}, raw=raw)) == []


def test_modalities():
    both = {"model": MODEL, "generationConfig": {"responseModalities": ["AUDIO", "TEXT"]}}
    assert closes(setup(TwinCore(), both)) == [(1007, wire.INVALID_ARGUMENT)]
    text = {"model": MODEL, "generationConfig": {"responseModalities": ["TEXT"]}}
    # fidelity §8 F10 [records]: the TEXT-only reason the studies' harnesses recorded
    assert closes(setup(TwinCore(), text)) == [
        (1007, "The requested combination of response modalities (TEXT) is not supported by the model.")]
    # a model outside native_audio_models may answer in text
    core = TwinCore(overrides={"served_models": ["gemini-3.8-live", "gemini-text"]})
    assert closes(setup(core, {**text, "model": "models/gemini-text"})) == []


def test_a_client_turn_without_a_role_closes_1007_on_3x_models_only():
    core = TwinCore(seed=1)
    acts = setup(core, {"model": MODEL})
    (done,) = [a for a in acts if isinstance(a, A.Timer)]
    core.timer_fired(done.key, done.at)
    turn = {"clientContent": {"turns": [{"parts": [{"text": "hi"}]}], "turnComplete": True}}
    assert closes(core.frame_received(1, json.dumps(turn), 1.0)) == [(1007, wire.INVALID_ARGUMENT)]
    core = TwinCore(seed=1, overrides={"role_required_models": "gemini-4.*"})
    acts = setup(core, {"model": MODEL})
    (done,) = [a for a in acts if isinstance(a, A.Timer)]
    core.timer_fired(done.key, done.at)
    assert closes(core.frame_received(1, json.dumps(turn), 1.0)) == []


def test_quota_is_a_switch_at_start_and_at_run_time():
    assert closes(setup(TwinCore(overrides={"quota_exhausted": True}), {"model": MODEL})) == [(1011, QUOTA)]
    core = TwinCore()
    assert closes(setup(core, {"model": MODEL})) == []
    core.set_fault("quota", True, 1.0)
    assert closes(setup(core, {"model": MODEL}, conn=2)) == [(1011, QUOTA)]
    core.set_fault("quota", False, 2.0)
    assert closes(setup(core, {"model": MODEL}, conn=3)) == []


def test_a_wrong_key_is_told_before_an_unknown_model():
    core = TwinCore(api_key="k")
    assert closes(setup(core, {"model": "models/nope"}, wire.KEY_WRONG)) == [(1007, WRONG_KEY)]


@pytest.mark.parametrize("code,reason,kind", [
    (1007, WRONG_KEY, live_errors.AUTH), (1008, wire.fit_close_reason(MISSING_KEY), live_errors.AUTH),
    (1011, QUOTA, live_errors.QUOTA), (1011, "Internal error encountered.", live_errors.OTHER),
    (1011, "Deadline expired before operation could complete.", live_errors.OTHER)])
def test_the_live_classifier_reads_the_twins_closes_like_the_real_ones(code, reason, kind):
    assert live_errors.classify(code=code, reason=reason) == kind


def test_every_close_reason_fits_a_close_frame_without_splitting_a_character():
    reason = "é" * 100                   # 200 bytes, two per character
    out = wire.fit_close_reason(reason)
    assert len(out.encode()) <= 123 and out == "é" * 61
