"""The openai SDK's own reconnect (`on_reconnecting`, the lab client's `sdk_reconnect`) when the twin
closes the socket with a code the SDK counts recoverable while a tool call is pending, over loopback
TLS: what the SDK sends into the new session, read from the twin's record.

The close is the session cap's (`session_expired`, then the close) with its code set to 1001 (the
service's) or 1011 (`openai_session_expired_code`); book_slot's job is still running at the cap.

What it shows (docs/protocol-openai.md): the SDK opens a new socket, which is a new, empty session;
it does not send `session.update` again (the new session has no tools and no instructions); the
tool's `function_call_output`, sent on the same SDK connection object, goes into the new session,
which never issued the call: an orphan `error` (invalid_value, item.call_id), while the client
records the result as sent. A send made while the SDK is between sockets waits in its send queue
and is flushed into the new session the moment it opens, the same orphan.
"""
from __future__ import annotations

import asyncio
import json
import ssl

import pytest
from openai import AsyncOpenAI

from lab.backend import Backend
from lab.clients import ClientContext, Endpoint, get
from lab.events import EventLog
from lab.twin.server import TwinServer

KEY = "sk-livelab-test"
FAST = {"reply_delay_s": 0.05, "tool_call_delay_s": 0.05, "response_reply_delay_s": 0.05}
CAP_S = 2.0          # the session cap: the booking's job (COMMIT_S) is still running when it comes
COMMIT_S = 3.0
LINE = "Book me the 3pm slot tomorrow, please."


def _twin(log: EventLog, code: int) -> TwinServer:
    return TwinServer(protocol="openai", api_key=KEY, seed=5, log=log,
                      overrides={**FAST, "openai_session_max_s": CAP_S, "openai_session_expired_code": code})


def _orphan(log: EventLog, conn: int):
    return next((e for e in log.events if e.kind == "twin.error_event" and e["conn"] == conn
                 and e["code"] == "invalid_value"), None)


async def _lab_client_at_the_cap(code: int, sdk_reconnect: bool) -> EventLog:
    """The lab's `openai` client asks for the booking; the cap closes the socket with `code` while the
    job runs; the run ends once the result was sent (or failed to be) and the twin had its say."""
    log = EventLog()
    twin = _twin(log, code)
    await twin.start()
    client = get("openai")(ClientContext(endpoint=Endpoint(twin.base_url, KEY, twin.ca_path), log=log,
                                         backend=Backend(log, commit_after_s=COMMIT_S),
                                         params={"sdk_reconnect": sdk_reconnect}))
    try:
        await client.start()
        await client.say(LINE, 1)
        resp = await log.wait_for("tool.response", timeout=30)
        if resp["sent"]:
            # the twin's answer to what was sent, as the client got it (before the new session's own cap)
            await log.wait_until(lambda e: e.kind == "client.error" and "invalid_value" in e["error"], 10)
    finally:
        await client.stop()
        await twin.stop()
    return log


@pytest.mark.parametrize("code", [1001, 1011])
def test_the_sdk_reconnects_into_an_empty_session_without_its_setup_and_the_result_is_an_orphan(code):
    log = asyncio.run(asyncio.wait_for(_lab_client_at_the_cap(code, sdk_reconnect=True), 60))
    ev = log.events
    # the twin closed the first socket with the code, while the booking's job was running
    (cap,) = [e for e in ev if e.kind == "twin.session_cap" and e["conn"] == 1]
    commit = next(e for e in ev if e.kind == "backend.commit")
    assert cap.ms < commit.ms
    # the SDK counted it recoverable and reconnected on its own: a second socket, a new session
    closed = next(e for e in ev if e.kind == "conn.closed" and e["how"] == "reconnect")
    assert (closed["conn"], closed["code"]) == (1, code)
    accepts = {e["conn"]: e["session"] for e in ev if e.kind == "twin.accept"}
    assert accepts[2] != accepts[1]
    assert next(e for e in ev if e.kind == "conn.open" and e["conn"] == 2)["purpose"] == "new"
    # what the twin received on each socket: the setup only on the first; on the second, the result
    # and the client's response.create, nothing else (no session.update, no history)
    sent = {n: [(e["type"], e.get("item")) for e in ev if e.kind == "twin.client_event" and e["conn"] == n]
            for n in (1, 2)}
    assert ("session.update", None) in sent[1]
    assert sent[2] == [("conversation.item.create", "function_call_output"), ("response.create", None)]
    # ... which the new session never issued: an orphan, while the client thinks it delivered it
    call = next(e for e in ev if e.kind == "tool.call")
    (reached,) = [e for e in ev if e.kind == "twin.tool_response"]
    assert (reached["conn"], reached["id"], reached["known"]) == (2, call["id"], False)
    assert _orphan(log, 2)["param"] == "item.call_id"
    resp = next(e for e in ev if e.kind == "tool.response")
    assert (resp["conn"], resp["sent"], resp["status"]) == (2, True, "booked")
    assert any(e.kind == "client.error" and e["conn"] == 2 and "invalid_value" in e["error"] for e in ev)
    assert sum(1 for e in ev if e.kind == "backend.commit") == 1


def test_without_sdk_reconnect_the_same_close_ends_the_conversation():
    """The contrast (the SDK's default): no second socket, and the result fails to send."""
    log = asyncio.run(asyncio.wait_for(_lab_client_at_the_cap(1001, sdk_reconnect=False), 60))
    assert [e["conn"] for e in log.events if e.kind == "twin.accept"] == [1]
    resp = next(e for e in log.events if e.kind == "tool.response")
    assert resp["sent"] is False and _orphan(log, 1) is None


def test_a_send_while_the_sdk_is_between_sockets_is_queued_and_flushed_into_the_new_session():
    """The SDK directly: the app's result sent in the gap (from the on_reconnecting hook's moment, so the
    SDK is reconnecting) waits in the SDK's send queue and is the first thing the new socket carries."""
    async def body():
        log = EventLog()
        twin = _twin(log, 1011)
        await twin.start()
        seen: list = []
        sends: list[asyncio.Task] = []
        try:
            client = AsyncOpenAI(api_key=KEY, websocket_base_url=f"wss://127.0.0.1:{twin.port}/v1")
            ctx = ssl.create_default_context(cafile=twin.ca_path)
            call_id: dict[str, str] = {}

            def reconnecting(event):
                seen.append(("reconnecting", event.close_code, event.attempt))
                sends.append(asyncio.get_running_loop().create_task(conn.conversation.item.create(item={
                    "type": "function_call_output", "call_id": call_id["id"], "output": json.dumps({"status": "booked"})})))
                return None

            async with client.realtime.connect(model="gpt-realtime", websocket_connection_options={"ssl": ctx},
                                               on_reconnecting=reconnecting) as conn:
                await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "tools": [{
                    "type": "function", "name": "book_slot", "description": "Book a slot",
                    "parameters": {"type": "object", "properties": {"slot": {"type": "string"}}}}]})
                await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                          "content": [{"type": "input_text", "text": LINE}]})
                await conn.response.create()
                async for ev in conn:       # the iterator is where the SDK reconnects
                    seen.append(ev.type)
                    if ev.type == "response.function_call_arguments.done":
                        call_id["id"] = ev.call_id      # the app's job runs; it is not done at the cap
                    if ev.type == "error" and ev.error.code == "invalid_value":
                        seen.append(("orphan", ev.error.param))
                        break
            await asyncio.gather(*sends)
        finally:
            await twin.stop()
        assert ("reconnecting", 1011, 1) in seen and ("orphan", "item.call_id") in seen
        # the queued output reached the new session before anything else of the client's, and was not known
        first2 = next(e for e in log.events if e.kind == "twin.client_event" and e["conn"] == 2)
        assert (first2["type"], first2["item"], first2["call_id"]) == (
            "conversation.item.create", "function_call_output", call_id["id"])
        assert not any(e.kind == "twin.client_event" and e["conn"] == 2 and e["type"] == "session.update"
                       for e in log.events)
        # the app is handed the new session's session.created like any event: a new session, in the same loop
        assert seen.count("session.created") == 2
    asyncio.run(asyncio.wait_for(body(), 60))
