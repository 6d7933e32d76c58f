"""LiveKit's Google realtime plugin as the client under test: `lab run control --client livekit`.

Runs in .venv-livekit (scripts/peers-setup.sh), never in the project's venv: the stdlib and
livekit-agents / livekit-plugins-google only, and no lab import. It is an app as a LiveKit user
writes one, run black-box by lab/clients/command.py: no base URL (the plugin's google-genai client
dials generativelanguage.googleapis.com, which the lab maps to the twin, trusting it through
$SSL_CERT_FILE), the key from $GOOGLE_API_KEY, the user's lines from stdin, one per line. The
plugin's RealtimeSession is driven headless (no LiveKit server, no room): each line goes in as
generate_reply(instructions=line); a book_slot call is answered the way AgentSession answers one,
as a FunctionCallOutput in the chat context, after the lab's backend ($LAB_BACKEND_URL, POST /book)
took the booking. Reconnects, resumption handles and the replay of unsent results are the plugin's
own: that is what a scenario measures.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

import app_io
from app_io import book, user_lines
from livekit_io import drain_generation

MODEL = os.environ.get("APP_MODEL", "gemini-3.8-live")
log = app_io.logger("livekit_app")


async def main() -> None:
    import livekit.agents
    from google.genai import types
    from livekit.agents import llm
    from livekit.plugins import google as lk_google

    log(f"livekit-agents {livekit.agents.__version__}")
    model = lk_google.realtime.RealtimeModel(model=MODEL, api_key=os.environ["GOOGLE_API_KEY"],
                                             output_audio_transcription=types.AudioTranscriptionConfig())

    @llm.function_tool
    async def book_slot(slot: str) -> dict:
        """Book the given appointment slot for the user.

        Args:
            slot: the slot to book, e.g. "tomorrow 15:00"
        """
        return {"slot": slot}      # answered in answer_tool, which knows the call id

    sess = model.session()
    await sess.update_tools([book_slot])
    chat = llm.ChatContext.empty()
    tasks: set[asyncio.Task] = set()

    async def answer_tool(fc) -> None:
        args = json.loads(fc.arguments or "{}")
        result = await asyncio.to_thread(book, args.get("slot"), fc.call_id)
        chat.insert([fc, llm.FunctionCallOutput(call_id=fc.call_id, name=fc.name, output=json.dumps(result),
                                                is_error=False)])
        await sess.update_chat_ctx(chat)

    async def consume(ev) -> None:
        said: list[str] = []
        calls = await drain_generation(ev, on_text=said.append)
        if said:
            log("model:", "".join(said))
        for fc in calls:
            if fc.name == "book_slot":
                await answer_tool(fc)

    def spawn(coro) -> None:
        t = asyncio.create_task(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    sess.on("generation_created", lambda ev: spawn(consume(ev)))
    sess.on("error", lambda ev: log("error:", repr(getattr(ev, "error", ev))[:200],
                                    "recoverable" if getattr(ev, "recoverable", True) else "fatal"))

    async for text in user_lines(log):
        try:
            await sess.generate_reply(instructions=text)
        except Exception as e:      # the plugin gives up waiting for a generation after 5 s
            log("generate_reply:", type(e).__name__, str(e)[:200])
    await asyncio.Event().wait()        # stdin closed: keep the session until the lab stops us


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main())
