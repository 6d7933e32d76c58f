"""The OpenAI Realtime twin over real loopback TLS sockets, driven by the UNMODIFIED openai SDK
(`client.realtime.connect(...)`), pointed at the twin by its `websocket_base_url` and the twin's CA in
an ssl context (websocket_connection_options, passed through to websockets' connect).

Loopback only: no key exists for the real service and none is needed.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from pathlib import Path

import pytest
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed

from lab.events import EventLog
from lab.twin.server import TwinServer

KEY = "sk-livelab-test"
RESERVATION = str(Path(__file__).resolve().parents[2] / "lab" / "conversations" / "reservation.yaml")
TOOLS = [{"type": "function", "name": n, "description": d, "parameters": {"type": "object", "properties": {}}}
         for n, d in (("check_slot", "Check whether a table is free"), ("reserve_table", "Reserve a table"))]
ASK = "Is there a table free for 6 people on 2026-12-31 at 8pm?"
# the engine's delays drawn short: the test is about order and content, not the (Gemini) timings
FAST = {"reply_delay_s": 0.05, "tool_call_delay_s": 0.05, "response_reply_delay_s": 0.05}


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def openai_twin(**overrides):
    log = EventLog()
    twin = TwinServer(protocol="openai", api_key=KEY, seed=5, conversation=RESERVATION,
                      overrides={**FAST, **overrides}, log=log)
    await twin.start()
    try:
        yield twin
    finally:
        await twin.stop()


def connect(twin: TwinServer, key: str = KEY):
    """The SDK's own connect, at the twin: the SDK appends /realtime?model=... to websocket_base_url."""
    client = AsyncOpenAI(api_key=key, websocket_base_url=f"wss://127.0.0.1:{twin.port}/v1")
    ctx = ssl.create_default_context(cafile=twin.ca_path)
    return client.realtime.connect(model="gpt-realtime", websocket_connection_options={"ssl": ctx})


async def until(conn, kind: str, seen: list) -> object:
    """Events up to and including the first of `kind` (each appended to `seen`)."""
    while True:
        ev = await conn.recv()
        seen.append(ev)
        if ev.type == kind:
            return ev


@contextlib.asynccontextmanager
async def a_call(twin: TwinServer):
    """A session on the SDK that declared the tools and asked the reservation line: (the connection,
    the function call it got, every event so far)."""
    seen: list = []
    async with connect(twin) as conn:
        await until(conn, "session.created", seen)
        await conn.session.update(session={"type": "realtime", "tools": TOOLS})
        await until(conn, "session.updated", seen)
        await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                  "content": [{"type": "input_text", "text": ASK}]})
        await conn.response.create()
        await until(conn, "response.done", seen)
        yield conn, next(e for e in seen if e.type == "response.function_call_arguments.done"), seen


def test_sdk_holds_a_tool_conversation_with_the_twin():
    async def body():
        async with openai_twin() as twin:
            async with a_call(twin) as (conn, call, seen):
                assert call.name == "check_slot"
                assert json.loads(call.arguments) == {"date": "2026-12-31", "time": "8pm", "party": 6}
                kinds = [e.type for e in seen]
                assert kinds.index("response.created") < kinds.index("rate_limits.updated") \
                    < kinds.index("response.function_call_arguments.delta") < kinds.index("response.done")
                assert kinds.count("conversation.item.added") == 2          # the user's item, the call's item
                # the client answers the call, then asks for the reply: nothing comes before it asks
                await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id,
                                                          "output": json.dumps({"status": "free"})})
                after: list = []
                await until(conn, "conversation.item.done", after)
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(conn.recv(), 0.5)                 # no auto-continue
                await conn.response.create()
                await until(conn, "response.done", after)
                said = next(e for e in after if e.type == "response.output_audio_transcript.done").transcript
                assert said == "A table for 6 on 2026-12-31 at 8pm is free."
                assert any(e.type == "response.output_audio.delta" for e in after)
                assert after[-1].response.status == "completed"
            logged = [e for e in twin.log.events if e.kind in ("twin.tool_call", "twin.tool_response")]
            assert [(e.kind, e["id"]) for e in logged] == [("twin.tool_call", call.call_id),
                                                           ("twin.tool_response", call.call_id)]
            assert logged[1]["known"] is True
    run(body())


def test_a_tool_output_sent_into_a_new_session_after_a_reconnect_is_an_orphan_error():
    async def body():
        async with openai_twin() as twin:
            async with a_call(twin) as (_, call, first):
                pass
            # the socket is gone, and with it the session: the reconnect is a new, empty one
            second: list = []
            async with connect(twin) as conn:
                created = await until(conn, "session.created", second)
                assert created.session.id != first[0].session.id
                await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id,
                                                          "output": json.dumps({"status": "free"})})
                err = await until(conn, "error", second)
                assert (err.error.type, err.error.code, err.error.param) == \
                    ("invalid_request_error", "invalid_value", "item.call_id")
                assert call.call_id in err.error.message
                # an error leaves the session open: it still answers
                await conn.session.update(session={"type": "realtime", "instructions": "still here"})
                await until(conn, "session.updated", second)
            assert not any(e.type == "conversation.item.added" for e in second)
    run(body())


def test_the_session_cap_is_session_expired_then_close_1001():
    async def body():
        async with openai_twin(openai_session_max_s=1.5) as twin:
            seen: list = []
            async with connect(twin) as conn:
                await until(conn, "session.created", seen)
                err = await until(conn, "error", seen)
                assert err.error.code == "session_expired"
                assert err.error.message == "Your session hit the maximum duration of 0.025 minutes."
                with pytest.raises(ConnectionClosed) as closed:
                    await conn.recv()
                assert closed.value.rcvd.code == 1001 and closed.value.rcvd.reason == err.error.message
    run(body())


def test_a_wrong_key_is_refused_on_the_socket_with_invalid_api_key():
    async def body():
        async with openai_twin() as twin:
            async with connect(twin, key="sk-wrong") as conn:
                err = await conn.recv()
                assert (err.type, err.error.code) == ("error", "invalid_api_key")
                with pytest.raises(ConnectionClosed) as closed:
                    await conn.recv()
                assert closed.value.rcvd.code == 3000
    run(body())


def test_the_lab_openai_client_books_through_the_backend_and_hears_the_reply():
    """`--client openai`: the lab's client on the same SDK, its events the kinds the Gemini clients
    write, so the report's user outcomes judge it alike (the booking story, default conversation)."""
    from lab.backend import Backend
    from lab.clients import ClientContext, Endpoint, get

    async def body():
        log = EventLog()
        twin = TwinServer(protocol="openai", api_key=KEY, seed=5, overrides=FAST, log=log)
        await twin.start()
        client = get("openai")(ClientContext(endpoint=Endpoint(twin.base_url, KEY, twin.ca_path), log=log,
                                             backend=Backend(log, commit_after_s=0.2)))
        try:
            await client.start()
            assert client.flow() is not None and client.flow()[3] == twin.port
            await client.say("Book me the 3pm slot tomorrow, please.", 1)
            await log.wait_for("model.text", timeout=20)
        finally:
            await client.stop()
            await twin.stop()
        kinds = [e.kind for e in log.events if e.src == "client"]
        order = [kinds.index(k) for k in ("conn.open", "user.say", "tool.call", "tool.response", "model.audio",
                                          "model.text")]
        assert order == sorted(order)
        # two responses: the call alone, then the reply the client asked for after the result
        assert kinds.count("model.turn_complete") == 2 and kinds[-1] == "model.turn_complete"
        call = next(e for e in log.events if e.kind == "tool.call")
        assert call["name"] == "book_slot" and call["args"] == {"slot": "tomorrow 3pm"}
        resp = next(e for e in log.events if e.kind == "tool.response")
        assert (resp["id"], resp["status"], resp["sent"]) == (call["id"], "booked", True)
        assert any(e.kind == "backend.commit" for e in log.events)
        assert next(e for e in log.events if e.kind == "model.text")["text"]
        twin_saw = next(e for e in log.events if e.kind == "twin.tool_response")
        assert twin_saw["id"] == call["id"] and twin_saw["known"] is True
    run(body())
