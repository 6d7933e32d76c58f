"""Which live errors stop a batch: auth and quota, not the 1011 refusal the lab studies."""
import json

import pytest

from lab.events import EventLog
from lab.live.errors import AUTH, OTHER, QUOTA, classify, classify_event, live_stop, stop_reason


class APIError(Exception):           # the shape of google.genai.errors.APIError
    def __init__(self, code, message, status=None):
        super().__init__(f"{code} {status or ''}. {message}")
        self.code, self.message, self.status = code, message, status


class Resp:
    def __init__(self, status_code):
        self.status_code = status_code


class InvalidStatus(Exception):      # the shape of websockets.exceptions.InvalidStatus
    def __init__(self, status):
        super().__init__(f"server rejected WebSocket connection: HTTP {status}")
        self.response = Resp(status)


@pytest.mark.parametrize("err,kind", [
    (APIError(1008, "API key not valid. Please pass a valid API key."), AUTH),
    (APIError(1007, "API key not valid"), AUTH),
    (InvalidStatus(401), AUTH),
    (InvalidStatus(403), AUTH),
    (APIError(1011, "You exceeded your current quota, please check your plan.", "RESOURCE_EXHAUSTED"), QUOTA),
    (APIError(1013, "RESOURCE_EXHAUSTED: quota"), QUOTA),
    (InvalidStatus(429), QUOTA),
    (APIError(1011, "Internal error encountered."), OTHER),
    (APIError(1007, "Request contains an invalid argument."), OTHER),
    (APIError(1006, ""), OTHER),
    (InvalidStatus(502), OTHER),
])
def test_classify(err, kind):
    assert classify(err) == kind


def test_classify_from_code_and_reason():
    assert classify(code=1008, reason="Method doesn't allow unregistered callers") == AUTH
    assert classify(code=1011, reason="Internal error encountered.") == OTHER
    assert classify(status=429) == QUOTA


KEY = "AIzaSyTEST-not-a-real-key-0123456789abc"


@pytest.mark.parametrize("record,kind", [
    ({"kind": "conn.closed", "conn": 1, "code": 1008, "reason": f"API key not valid: {KEY}", "by": "server"}, AUTH),
    ({"kind": "resume.result", "attempt": 1, "ok": False, "code": 1011,
      "reason": "You exceeded your current quota, please check your plan."}, QUOTA),
    ({"kind": "client.error", "error": "InvalidStatus: server rejected WebSocket connection: HTTP 403"}, AUTH),
    ({"kind": "run.end", "status": "error", "error": "APIError: 429 RESOURCE_EXHAUSTED"}, QUOTA),
    ({"kind": "resume.result", "attempt": 1, "ok": False, "code": 1011, "reason": "Internal error encountered."}, None),
    ({"kind": "conn.closed", "conn": 1, "code": 1000, "reason": "", "by": "client"}, None),
    ({"kind": "model.text", "conn": 1, "text": "Your quota of slots is used, API key not valid"}, None),  # not an end
])
def test_classify_one_event(record, kind):
    assert classify_event(record) == kind


def test_live_stop_is_one_clear_line_without_the_key():
    log = EventLog()            # the agent's case: a recorded Event, as it is written
    e = log.write("conn.closed", src="client", conn=1, code=1008, reason=f"API key not valid: {KEY}", by="server")
    stop = live_stop(e)
    msg = str(stop)
    assert stop.kind == AUTH and stop.code == 5
    assert "refused the API key" in msg and KEY not in msg and "\n" not in msg
    assert live_stop(log.write("resume.result", src="client", attempt=1, ok=False, code=1011,
                               reason="Internal error encountered.")) is None


def test_stop_reason_reads_the_run_record(tmp_path):
    rows = [{"t": 1, "ms": 1, "src": "client", "kind": "resume.result", "ok": False, "code": 1011,
             "reason": "Internal error encountered."}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert stop_reason(tmp_path) is None
    rows.append({"t": 2, "ms": 2, "src": "client", "kind": "conn.closed", "conn": 1, "code": 1011,
                 "reason": "You exceeded your current quota", "by": "server"})
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "quota" in stop_reason(tmp_path)
    assert stop_reason(tmp_path / "nowhere") is None


def test_recorded_upgrade_refusal_text_is_auth():
    # what a client records when the upgrade is refused: the exception's text, no status attribute
    assert classify(reason="InvalidStatus: server rejected WebSocket connection: HTTP 403") == "auth"
    assert classify(reason="InvalidStatus: server rejected WebSocket connection: HTTP 429") == "quota"
    assert classify(reason="InvalidStatus: server rejected WebSocket connection: HTTP 404") == "other"
