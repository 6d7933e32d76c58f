"""The twin's error channel over loopback TLS, through the UNMODIFIED google-genai SDK (raw websockets
where the SDK cannot send the case: no key, an unknown setup field, a turn without a role). Each
close carries the real service's code and reason (fidelity §5) and surfaces as the SDK's APIError,
not a raw websockets exception. Bounds are loose: a loaded 2-core machine."""
from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from google.genai import errors, types
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

# the SDK harness of test_twin_sdk.py, shared (pytest runs with --import-mode=importlib: no sys.path entry)
sys.path.insert(0, str(Path(__file__).parent))
from test_twin_sdk import MODEL, Live, cfg, run, sdk, twin_server  # noqa: E402

WRONG_KEY = "API key not valid. Please pass a valid API key."
QUOTA = "You exceeded your current quota, please check your plan and billing details."
SETUP_CLOSE_MAX_S = 3.0     # setup_error_close_s is 0.05 s; the rest is the machine's load


async def refused(client, config, model: str = MODEL) -> tuple[errors.APIError, float]:
    t0 = time.monotonic()
    with pytest.raises(errors.APIError) as ei:
        async with client.aio.live.connect(model=model, config=config):
            pass
    return ei.value, time.monotonic() - t0


async def raw_close(twin, frames: list[dict], key: str | None = "test") -> tuple[int, str]:
    """Send frames on a raw connection; the close the twin answers with."""
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    headers = {"x-goog-api-key": key} if key else {}
    async with ws_connect(twin.ws_url, ssl=ctx, ping_interval=None, additional_headers=headers) as ws:
        for f in frames:
            await ws.send(json.dumps(f))
        with pytest.raises(ConnectionClosed) as ei:
            while True:
                await ws.recv()
    return ei.value.rcvd.code, ei.value.rcvd.reason


def test_a_wrong_key_is_an_api_error_1007_after_the_upgrade():
    async def go():
        async with twin_server(api_key="right-key") as twin:
            e, took = await refused(sdk(twin, api_key="wrong-key"), cfg())
            assert type(e) is errors.APIError and e.code == 1007 and e.details == WRONG_KEY
            assert took < SETUP_CLOSE_MAX_S
            async with Live(sdk(twin, api_key="right-key"), cfg()) as live:
                assert live.s.setup_complete is not None
    run(go())


def test_a_missing_key_closes_1008_with_the_real_wording_cut_to_a_close_frame():
    async def go():
        async with twin_server(api_key="right-key") as twin:
            code, reason = await raw_close(twin, [{"setup": {"model": f"models/{MODEL}"}}], key=None)
            assert code == 1008 and len(reason.encode()) == 123
            assert reason.startswith("Method doesn't allow unregistered callers (callers without established identity).")
    run(go())


def test_an_unknown_model_closes_1008_naming_it():
    async def go():
        async with twin_server() as twin:
            e, _ = await refused(sdk(twin), cfg(), model="gemini-nope")
            assert e.code == 1008
            assert e.details.startswith("models/gemini-nope is not found for API version v1")
            assert "bidiGenerateContent" in e.details
    run(go())


def test_an_unknown_setup_field_closes_1007_naming_it():
    async def go():
        async with twin_server() as twin:
            code, reason = await raw_close(twin, [{"setup": {"model": f"models/{MODEL}", "x": 1}}])
            assert (code, reason) == (1007, 'Invalid JSON payload received. Unknown name "x" at \'setup\': Cannot find field.')
    run(go())


def test_modalities_audio_and_text_and_text_only_close_1007():
    async def go():
        async with twin_server() as twin:
            e, _ = await refused(sdk(twin), types.LiveConnectConfig(response_modalities=["AUDIO", "TEXT"]))
            assert e.code == 1007
            e, _ = await refused(sdk(twin), types.LiveConnectConfig(response_modalities=["TEXT"]))
            # fidelity §8 F10 [records]
            assert (e.code, e.details) == (
                1007, "The requested combination of response modalities (TEXT) is not supported by the model.")
    run(go())


def test_a_turn_without_a_role_closes_1007_on_a_3x_model():
    async def go():
        async with twin_server() as twin:
            code, _ = await raw_close(twin, [
                {"setup": {"model": f"models/{MODEL}"}},
                {"clientContent": {"turns": [{"parts": [{"text": "hi"}]}], "turnComplete": True}}])
            assert code == 1007
    run(go())


def test_quota_closes_1011_with_the_real_reason_and_is_a_switch_at_run_time():
    async def go():
        async with twin_server(control=("127.0.0.1", 0)) as twin:
            async with Live(sdk(twin), cfg()) as live:
                assert live.s.setup_complete is not None
            answer = await post(twin.control.url + "/fault", {"name": "quota", "on": True})
            assert answer["faults"] == ["quota"]
            e, took = await refused(sdk(twin), cfg())
            assert (e.code, e.details) == (1011, QUOTA) and took < SETUP_CLOSE_MAX_S
    run(go())


async def post(url: str, body: dict) -> dict:
    """A control-channel call, off the event loop that serves it."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")

    def call():
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
            return json.loads(r.read())
    return await asyncio.to_thread(call)
