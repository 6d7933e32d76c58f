"""LiveKit's realtime plugins as the client under test: `lab run control --client livekit`.

Runs in .venv-livekit (scripts/peers-setup.sh), never in the project's venv: the stdlib and
livekit-agents / livekit-plugins-google / livekit-plugins-openai only, and no lab import. It is an
app as a LiveKit user writes one, run black-box by lab/clients/command.py: no base URL, the key from
the environment, the user's lines from stdin, one per line (in a spoken scenario the microphone's
audio instead, pushed into the session). Which model it runs is the key it was given, as the lab
gives a run's protocol's key alone: $GOOGLE_API_KEY, the Google realtime model (its google-genai
client dials generativelanguage.googleapis.com); $OPENAI_API_KEY, the OpenAI realtime model
(`openai.realtime.RealtimeModel`, which dials wss://api.openai.com/v1/realtime). The lab maps either
name to the twin, trusted through $SSL_CERT_FILE (aiohttp's and websockets' default contexts read it).

The plugin's RealtimeSession is driven headless (no LiveKit server, no room): each line goes in as a
user message in the chat context, then generate_reply(); a book_slot call is answered the way
AgentSession answers one, as a FunctionCallOutput in the chat context, after the lab's backend
($LAB_BACKEND_URL, POST /book) took the booking; and, for a model that does not reply to a tool's
output by itself (OpenAI's: `capabilities.auto_tool_reply_generation` false), a generate_reply()
after it, as AgentSession asks for that reply. Reconnects, resumption handles and the replay of
history or unsent results are the plugin's own: that is what a scenario measures.

On cue from the scenario (seed 003; the lab passes the parameters as --params JSON, declared in
lab/clients/frameworks): with update_tools_in_tool, book_slot behaves like a tool that changes the
agent's tools when it succeeds: once the booking is made it calls update_tools() (which restarts
the plugin's websocket, livekit/agents#6479), then returns result_after_update_s later, so its
result reaches the plugin while the restart is under way. When one generation holds several calls
(seed 003 review finding 2, k3) their bookings run at once; then the first changes the tools and
the app hands each result over in turn, one update_chat_ctx per result, as two tool rounds would,
so both results land in the one restart. AgentSession would hand one generation's results over in
a single round; the two-round case is the one the review names.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time

import app_io
from app_io import app_params, book, user_lines
from livekit_io import drain_generation, realtime_model

log = app_io.logger("livekit_app")


async def main() -> None:
    import livekit.agents
    from livekit.agents import llm

    cue = app_params(sys.argv)      # {} when run by hand without --params: no cue, plain booking
    api = app_io.realtime_api()
    # the lab's Gemini model unless $APP_MODEL names one; OpenAI's plugin's own default
    chosen = os.environ.get("APP_MODEL", "gemini-3.8-live") if api == "gemini" else os.environ.get("APP_MODEL")
    plugin, model = realtime_model(api, chosen)
    log(f"livekit-agents {livekit.agents.__version__} {plugin}, model {model.model}"
        + (f" params {json.dumps(cue, sort_keys=True)}" if cue else ""))

    @llm.function_tool
    async def book_slot(slot: str) -> dict:
        """Book the given appointment slot for the user.

        Args:
            slot: the slot to book, e.g. "tomorrow 15:00"
        """
        return {"slot": slot}      # answered in answer_tool, which knows the call id

    @llm.function_tool
    async def check_booking(slot: str) -> dict:
        """Look up whether the given slot is booked.

        Args:
            slot: the slot to look up
        """
        return {"slot": slot}      # the tool the agent gains after a booking; the twin never calls it

    tool_sets = ([book_slot], [book_slot, check_booking])
    sess = model.session()
    await sess.update_tools(list(tool_sets[0]))
    chat = llm.ChatContext.empty()
    tasks: set[asyncio.Task] = set()
    restarts = 0

    async def answer_tools(calls) -> None:
        nonlocal restarts
        # the bookings run at once, as AgentSession runs one generation's tools
        results = await asyncio.gather(*(asyncio.to_thread(book, json.loads(fc.arguments or "{}").get("slot"),
                                                           fc.call_id) for fc in calls))
        for i, (fc, result) in enumerate(zip(calls, results)):
            out = llm.FunctionCallOutput(call_id=fc.call_id, name=fc.name, output=json.dumps(result), is_error=False)
            chat.insert(fc)
            if i == 0 and cue.get("update_tools_in_tool"):
                # a different tool set each time, so every turn's first booking restarts the websocket
                restarts += 1
                await sess.update_tools(list(tool_sets[restarts % 2]))
                log(f"update_tools at {time.time():.3f}: restart asked")
                await asyncio.sleep(float(cue.get("result_after_update_s", 0.0)))
            chat.insert(out)
            try:
                await sess.update_chat_ctx(chat)
            except Exception as e:      # a RealtimeError (the server never acknowledged): logged, as AgentSession logs it
                log(f"tool result {out.call_id} not handed over: {type(e).__name__}: {str(e)[:200]}")
                return
            log(f"tool result {out.call_id} handed over at {time.time():.3f}")
        if not sess.capabilities.auto_tool_reply_generation:
            # the model waits to be asked for its reply to the results (OpenAI Realtime): AgentSession asks
            try:
                await sess.generate_reply()
            except Exception as e:      # the plugin gives up waiting for a generation after a while
                log("generate_reply after the tool:", type(e).__name__, str(e)[:200])

    async def consume(ev) -> None:
        said: list[str] = []
        calls = await drain_generation(ev, on_text=said.append)
        if said:
            log("model:", "".join(said))
        booking = [fc for fc in calls if fc.name == "book_slot"]
        if booking:
            await answer_tools(booking)

    def spawn(coro) -> None:
        t = asyncio.create_task(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    sess.on("generation_created", lambda ev: spawn(consume(ev)))
    sess.on("error", lambda ev: log("error:", repr(getattr(ev, "error", ev))[:200],
                                    "recoverable" if getattr(ev, "recoverable", True) else "fatal"))

    if app_io.spoken():     # the microphone into the realtime session, as AgentSession forwards a room's audio
        from livekit import rtc

        async def mic() -> None:
            async for chunk in app_io.mic_chunks(log):
                sess.push_audio(rtc.AudioFrame(data=chunk, sample_rate=app_io.MIC_RATE, num_channels=1,
                                               samples_per_channel=len(chunk) // 2))
        spawn(mic())
    async for text in user_lines(log):
        if app_io.spoken():
            continue
        # a typed user message as AgentSession sends one to a realtime model: into the chat
        # context, then generate_reply() (the same call on every release; generate_reply's
        # `instructions` changed meaning across releases)
        chat.add_message(role="user", content=text)
        await sess.update_chat_ctx(chat)
        try:
            await sess.generate_reply()
        except Exception as e:      # the plugin gives up waiting for a generation after 5 s
            log("generate_reply:", type(e).__name__, str(e)[:200])
    await asyncio.Event().wait()        # stdin closed: keep the session until the lab stops us


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main())
