"""Which live errors end a batch: a bad key (auth) or spent quota stop it at once.

`classify(err)` takes what a live session failed with (an SDK `APIError` with a close code, a
websockets `InvalidStatus` / `ConnectionClosed`, an HTTP status, or just a code and a reason) and
returns

- ``"auth"``: close 1008 with an invalid/missing API key, an HTTP 401/403 refusal of the upgrade
  (`InvalidStatus`), or "API key not valid" anywhere in the message; for OpenAI Realtime the
  `error` event's code `invalid_api_key` (or `account_deactivated`), which the service sends on an
  accepted socket before it closes 3000 "invalid_request_error.invalid_api_key" (the profile
  openai-realtime's openai_bad_key_*; LiveKit counts both codes fatal, /work/shared/openai-realtime.md);
- ``"quota"``: close 1011/1013 whose reason says quota / RESOURCE_EXHAUSTED / rate limit, or HTTP
  429; for OpenAI the `error` codes `insufficient_quota`, `billing_hard_limit_reached` (fatal in
  LiveKit) and `rate_limit_exceeded` (the REST API's code for a 429; that the Realtime socket uses
  it too is an assumption), and a close 3000 whose reason names one of them (the bad key's close
  form, assumed for quota);
- ``"budget"``: a connection the client did not open because the session budget refused it (the
  client records "not opened (BudgetError): <the budget's line>");
- ``"other"``: everything else. A plain 1011 "Internal error encountered." is the resume refusal
  the lab studies, not a reason to stop.

`classify_event(event)` applies the same rules to one record of events.jsonl (a `conn.closed` or
`resume.result` with its code and reason, or a record carrying an `error`) and returns auth, quota
or None. `live_stop(event)` turns such a record into the `LiveStop` to raise (one clear line), or
None. Both the agent (at once, mid-run: it watches its own event log) and the batch (after the
run, `stop_reason(run_dir)`) ask these, so the two can never disagree. Messages never include the
key: reasons are cut to 120 characters and anything looking like a key is masked.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from lab.errors import LAB_REASON, LabError
from lab.events import Event, read_events
from lab.live.key import key_var
from lab.protocols import GEMINI

AUTH, QUOTA, BUDGET, LAB, OTHER = "auth", "quota", "budget", "lab", "other"
STOP_KINDS = (AUTH, QUOTA, BUDGET)
AUTH_RE = re.compile(r"api[ _-]?key (not valid|invalid|missing|expired)|invalid[ _]api[ _-]?key|"
                     r"incorrect api key|account_deactivated|"
                     r"API_KEY_INVALID|PERMISSION_DENIED|UNAUTHENTICATED|unregistered callers|"
                     r"method doesn't allow unregistered", re.I)
# rate_limits.updated is OpenAI's routine report of what is left, not a refusal
QUOTA_RE = re.compile(r"quota|RESOURCE_EXHAUSTED|rate[ _-]?limit(?!s\.updated)|too many requests|"
                      r"exceeded your current|billing_hard_limit", re.I)
# close codes a quota refusal comes with: Gemini's 1011/1013; 3000, the OpenAI Realtime close after an
# error event (seen for a bad key, [T] twilio-samples/speech-assistant-openai-realtime-api-python#4;
# for quota: assumption)
QUOTA_CLOSE_CODES = (1011, 1013, 3000, None)
KEYISH_RE = re.compile(r"AIza[0-9A-Za-z_\-]{20,}|[A-Za-z0-9_\-]{32,}")


class LiveStop(LabError):
    """Stop the batch: the key is refused, the quota is spent, the session budget is, or the lab's
    own configuration cannot run (a conversation asking for tools the client does not declare)."""
    code = 5

    def __init__(self, kind: str, detail: str, protocol: str = GEMINI):
        self.kind, self.detail = kind, detail
        if kind == BUDGET:   # the budget's own line already says which cap and what to do
            super().__init__(f"live batch stopped: {detail}")
            return
        if kind == LAB:      # the lab's own configuration, found by the twin at the setup
            super().__init__(f"the run stopped: {detail}")
            return
        what = ("the endpoint refused the API key" if kind == AUTH else "the API quota is spent")
        hint = (f"check {key_var(protocol)} (env or .env)" if kind == AUTH
                else "wait for the quota to reset or lower N/DURATION")
        super().__init__(f"live batch stopped: {what} ({detail}); {hint}")


def _status(err: Any) -> int | None:
    for path in (("response", "status_code"), ("status_code",), ("response", "status"), ("http_status",)):
        obj = err
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, int):
            return obj
    return None


def _code(err: Any) -> int | None:
    for attr in ("code", "close_code"):
        v = getattr(err, attr, None)
        if isinstance(v, int):
            return v
    rcvd = getattr(err, "rcvd", None)  # websockets ConnectionClosed
    if rcvd is not None and isinstance(getattr(rcvd, "code", None), int):
        return rcvd.code
    return None


def _text(err: Any) -> str:
    parts = [str(err)]
    for attr in ("message", "reason", "status", "details"):
        v = getattr(err, attr, None)
        if v and not isinstance(v, int):
            parts.append(str(v))
    rcvd = getattr(err, "rcvd", None)
    if rcvd is not None and getattr(rcvd, "reason", None):
        parts.append(str(rcvd.reason))
    return " ".join(parts)


def classify(err: Any = None, *, code: int | None = None, reason: str | None = None,
             status: int | None = None) -> str:
    """auth | quota | other for an exception, or for a close code / reason / HTTP status."""
    code = code if code is not None else (_code(err) if err is not None else None)
    status = status if status is not None else (_status(err) if err is not None else None)
    text = " ".join(x for x in (reason, _text(err) if err is not None else None) if x)
    if status is None and "InvalidStatus" in (type(err).__name__ + " " + text):
        # an upgrade refused with an HTTP status, as an exception or as its recorded text
        m = re.search(r"HTTP (\d{3})", text)
        status = int(m.group(1)) if m else None
    if re.search(r"\bBudgetError\b", text):
        return BUDGET
    if LAB_REASON in text:
        return LAB
    if status in (401, 403) or AUTH_RE.search(text) or (code == 1008 and re.search(r"api[ _-]?key|auth", text, re.I)):
        return AUTH
    if status == 429 or (code in QUOTA_CLOSE_CODES and QUOTA_RE.search(text)):
        return QUOTA
    return OTHER


def describe(err: Any = None, *, code: int | None = None, reason: str | None = None, status: int | None = None) -> str:
    code = code if code is not None else (_code(err) if err is not None else None)
    status = status if status is not None else (_status(err) if err is not None else None)
    text = reason or (_text(err) if err is not None else "")
    text = KEYISH_RE.sub("<redacted>", " ".join(text.split()))[:120]
    head = (f"close {code}" if code is not None else f"HTTP {status}" if status is not None
            else type(err).__name__ if err is not None else "")
    return f"{head}: {text}" if head and text else (text or head)


# Records that carry a close code and reason, and records that carry an error text.
CLOSE_KINDS = ("conn.closed", "resume.result")
ERROR_KINDS = ("client.error", "fallback.new_failed", "run.end", "user.say.failed", "step.error")


def _code_reason(event: Event | Mapping[str, Any]) -> tuple[int | None, str] | None:
    """(close code, reason text) of a record that reports an end or an error, else None."""
    get = event.get
    kind = event.kind if isinstance(event, Event) else get("kind")
    if kind in CLOSE_KINDS and (get("code") is not None or get("reason")):
        code = get("code")
        return (code if isinstance(code, int) else None), str(get("reason") or "")
    if kind in ERROR_KINDS and get("error"):
        return None, str(get("error"))
    return None


def live_stop(event: Event | Mapping[str, Any], protocol: str = GEMINI) -> LiveStop | None:
    """The LiveStop (one line, no key; its hint names `protocol`'s key variable) a record calls for,
    or None: the agent raises it at once."""
    got = _code_reason(event)
    if got is None:
        return None
    code, reason = got
    kind = classify(code=code, reason=reason)
    if kind == BUDGET:
        return LiveStop(kind, reason.split("): ", 1)[-1])
    if kind == LAB:
        return LiveStop(kind, reason[reason.find(LAB_REASON) + len(LAB_REASON):])
    return LiveStop(kind, describe(code=code, reason=reason), protocol) if kind in (AUTH, QUOTA) else None


def classify_event(event: Event | Mapping[str, Any]) -> str | None:
    """auth | quota | budget for a record that must stop a live batch, else None (a 1011 refusal included)."""
    stop = live_stop(event)
    return stop.kind if stop is not None else None


def stop_reason(run_dir: Path | str) -> str | None:
    """Why a live batch must stop after this run (the first auth or quota record), else None."""
    p = Path(run_dir) / "events.jsonl"
    if not p.is_file():
        return None
    protocol = _protocol_of(Path(run_dir))
    return next((str(stop) for stop in (live_stop(e, protocol) for e in read_events(p)) if stop is not None), None)


def _protocol_of(run_dir: Path) -> str:
    """The protocol the run's run.json says it spoke (gemini for a run that says none)."""
    try:
        return str(json.loads((run_dir / "run.json").read_text()).get("protocol") or GEMINI)
    except (OSError, ValueError, AttributeError):
        return GEMINI
