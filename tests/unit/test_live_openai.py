"""Live mode for the OpenAI Realtime protocol: its key, how its refusals stop a batch, the scanner
finding its keys, and the orchestrator's checks, without a socket."""
import base64
import json
import subprocess
import sys

import pytest

from lab.errors import BudgetError, LabError
from lab.live import errors as live_errors
from lab.live.key import KEY_VAR, key_var, load_key, load_keys, mask
from lab.live.scanner import scan

SK = "sk-proj-FAKE_livelab-Test-0123456789abcdefghijklmnopqrstuvwxyz-AbCdEfGh"
SK_PLAIN = "sk-FAKElivelabtest0123456789abcdefghijklmnopqrstuv"


def test_the_openai_key_comes_from_its_own_variable_env_first_then_dotenv(tmp_path, monkeypatch):
    assert key_var("openai") == KEY_VAR["openai"] == "OPENAI_API_KEY" and key_var("gemini") == "GEMINI_API_KEY"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={SK}\nGEMINI_API_KEY=AIzaSy-other-protocol-key-0123456789\n")
    assert load_key(env={}, dotenv_path=tmp_path / ".env", protocol="openai") == SK
    assert load_key(env={"OPENAI_API_KEY": SK_PLAIN}, dotenv_path=tmp_path / ".env", protocol="openai") == SK_PLAIN
    # read from .env, nothing is exported to the environment children inherit
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_key(protocol="openai") == SK
    import os
    assert "OPENAI_API_KEY" not in os.environ
    assert set(load_keys()) == {SK, "AIzaSy-other-protocol-key-0123456789"}
    assert mask(SK) == f"<key: {len(SK)} chars>" and "sk-" not in mask(SK)


def test_a_missing_openai_key_is_one_line_naming_its_variable(tmp_path):
    with pytest.raises(LabError) as e:
        load_key(env={"GEMINI_API_KEY": "AIzaSy-the-other-one-0123456789"}, dotenv_path=tmp_path / ".env",
                 protocol="openai")
    assert str(e.value) == "no OPENAI_API_KEY in the environment or .env; live mode needs a key"
    with pytest.raises(LabError, match="unknown protocol 'grpc'"):
        key_var("grpc")


@pytest.mark.parametrize("record,kind", [
    # the client's own line when the socket answered an error instead of session.created (the twin's and,
    # by the records, the service's way to refuse a key)
    ({"kind": "run.end", "error": "SessionRefused: openai client: the server answered error "
      "invalid_request_error/invalid_api_key (Incorrect API key provided.) instead of session.created"}, "auth"),
    ({"kind": "fallback.new_failed", "error": "SessionRefused: openai client: the server answered error "
      "invalid_request_error/account_deactivated (x) instead of session.created"}, "auth"),
    # an error event mid-session, as the OpenAI clients record one
    ({"kind": "client.error", "task": "server", "error": "insufficient_quota/insufficient_quota: You exceeded "
      "your current quota, please check your plan and billing details."}, "quota"),
    ({"kind": "client.error", "task": "server", "error": "invalid_request_error/billing_hard_limit_reached: x"},
     "quota"),
    ({"kind": "client.error", "task": "server", "error": "requests/rate_limit_exceeded: Rate limit reached"}, "quota"),
    # the service's close after such an error: 3000 with "<type>.<code>"
    ({"kind": "conn.closed", "code": 3000, "reason": "invalid_request_error.invalid_api_key"}, "auth"),
    ({"kind": "conn.closed", "code": 3000, "reason": "insufficient_quota.insufficient_quota"}, "quota"),
    # an upgrade refused with HTTP 401 / 429 (websockets' InvalidStatus, as recorded)
    ({"kind": "run.end", "error": "InvalidStatus: server rejected WebSocket connection: HTTP 401"}, "auth"),
    ({"kind": "fallback.new_failed", "error": "InvalidStatus: server rejected WebSocket connection: HTTP 429"},
     "quota"),
    # what is not a stop: the session cap, a recoverable error, the routine rate report
    ({"kind": "client.error", "task": "server", "error": "invalid_request_error/session_expired: Your session "
      "hit the maximum duration of 60 minutes."}, None),
    ({"kind": "conn.closed", "code": 1001, "reason": "Your session hit the maximum duration of 60 minutes."}, None),
    ({"kind": "client.error", "task": "server", "error": "invalid_request_error/conversation_already_has_active_"
      "response: x"}, None),
    ({"kind": "client.error", "task": "server", "error": "saw rate_limits.updated late"}, None),
    # the budget refusing the SDK's own reconnect, as the OpenAI client records it
    ({"kind": "client.error", "task": "reconnect", "error": "not opened (BudgetError): session budget for run r "
      "is spent (1 of 1 opened); the new connection was not opened"}, "budget"),
])
def test_openai_refusals_stop_the_batch_and_nothing_else_does(record, kind):
    assert live_errors.classify_event(record) == kind


def test_the_stop_line_names_the_openai_key_variable_and_never_the_key(tmp_path):
    rec = {"kind": "client.error", "task": "server",
           "error": f"invalid_request_error/invalid_api_key: Incorrect API key provided: {SK}."}
    stop = live_errors.live_stop(rec, "openai")
    assert stop.kind == "auth" and "check OPENAI_API_KEY (env or .env)" in str(stop)
    assert SK not in str(stop) and "\n" not in str(stop)
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text(json.dumps({"t": 1, "ms": 1, "src": "client", **rec}) + "\n")
    (run / "run.json").write_text(json.dumps({"protocol": "openai", "endpoint": "live"}))
    assert "OPENAI_API_KEY" in live_errors.stop_reason(run)


@pytest.mark.parametrize("key", [SK, SK_PLAIN])
def test_the_scanner_finds_an_openai_key_in_every_form(tmp_path, key):
    def planted(name, data):
        d = tmp_path / name
        d.mkdir()
        (d / "blob.bin").write_bytes(data)
        return {f.kind for f in scan(d, [key])}
    raw = key.encode()
    assert "plain" in planted("plain", b'{"authorization": "Bearer ' + raw + b'"}')
    assert "hex" in planted("hex", b"x" + raw.hex().encode() + b"y")
    assert "hex" in planted("HEX", raw.hex().upper().encode())
    for pad in range(3):        # each byte alignment inside a larger base64 blob
        blob = b"head" + b"x" * pad + raw + b"tail"
        assert "base64" in planted(f"b64-{pad}", base64.b64encode(blob))
        assert {"base64", "base64url"} & planted(f"b64url-{pad}", base64.urlsafe_b64encode(blob))
    assert planted("clean", b"nothing here but sk- and a proj") == set()


def test_lab_scan_looks_for_the_openai_key(tmp_path):
    run = tmp_path / "batch" / "run-01"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text(json.dumps({"kind": "oops", "note": base64.b64encode(SK.encode()).decode()}))
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SK}
    out = subprocess.run([sys.executable, "-m", "lab", "scan", str(tmp_path / "batch")], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert out.returncode == 1 and "base64 (secret #0)" in out.stdout and SK not in out.stdout + out.stderr
    clean = subprocess.run([sys.executable, "-m", "lab", "scan", str(tmp_path / "batch")], capture_output=True,
                           text=True, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert clean.returncode == 0 and "no GEMINI_API_KEY or OPENAI_API_KEY to look for" in clean.stdout


def test_openai_live_goes_to_the_real_endpoint_unless_told_otherwise():
    from lab.protocols import LIVE_BASE_URL, endpoint_url
    from lab.clients.openai_realtime import websocket_base_url

    assert LIVE_BASE_URL["openai"] == "wss://api.openai.com/v1" and LIVE_BASE_URL["gemini"] is None
    assert websocket_base_url(LIVE_BASE_URL["openai"]) == "wss://api.openai.com/v1"
    assert endpoint_url("openai", "https://10.0.0.1:8443") == "wss://10.0.0.1:8443/v1"


class _Log:
    def __init__(self):
        self.records = []

    def write(self, kind, **f):
        self.records.append({"kind": kind, **f})


def _client(before_connect):
    from lab.clients.base import ClientContext, Endpoint
    from lab.clients.openai_recovery import OpenAIRecoveryClient

    ctx = ClientContext(endpoint=Endpoint(base_url="wss://127.0.0.1:9/v1", api_key=SK), log=_Log(), backend=None,
                        before_connect=before_connect)
    return OpenAIRecoveryClient(ctx)


def test_a_budget_refusal_opens_nothing_and_is_recorded_where_the_agent_reads_it():
    import asyncio

    def refuse(purpose):
        raise BudgetError(f"session budget for run r is spent (1 of 1 opened); the {purpose} connection was not opened")
    c = _client(refuse)
    with pytest.raises(BudgetError):
        asyncio.run(c._open("initial"))
    with pytest.raises(BudgetError):
        asyncio.run(c._open("new"))
    kinds = [(r["kind"], live_errors.classify_event(r)) for r in c.ctx.log.records]
    assert kinds == [("client.error", "budget"), ("fallback.new_failed", "budget")]
    # the SDK's own reconnect: charged per attempt, a refusal aborts it (ReconnectingOverrides)
    event = type("E", (), {"close_code": 1011, "attempt": 1})()
    assert c._reconnecting(event) == {"abort": True}
    assert live_errors.classify_event(c.ctx.log.records[-1]) == "budget"
    charged = []
    assert _client(charged.append)._reconnecting(event) is None and charged == ["new"]


def test_check_protocol_lets_openai_run_live():
    from lab import run as run_mod
    from lab import scenario

    run_mod.check_protocol("openai", [scenario.load("control")], "openai-recovery", endpoint="live")
