"""Google ADK's `run_live` as the client under test: `lab run control --client adk`.

Runs in .venv-adk (scripts/peers-setup.sh: google-adk==2.13.0 pinned exactly, with its own
google-genai<3 and websockets<16), never in the project's venv: the stdlib and google-adk only, and
no lab import. An app as an ADK user writes one, run black-box by lab/clients/command.py: no base
URL (ADK's google-genai client dials generativelanguage.googleapis.com, which the lab maps to the
twin, trusted through $SSL_CERT_FILE), the key from $GOOGLE_API_KEY, the user's lines from stdin, one
per line, each sent into a LiveRequestQueue (in a spoken scenario the microphone's audio instead, as
realtime input). book_slot is a FunctionTool that ADK runs itself; it
takes the booking from the lab's backend ($LAB_BACKEND_URL, POST /book, which answers once the
booking commits) under the call id ADK hands it. Resumption, goAway and retries are ADK's own.
"""
from __future__ import annotations

import asyncio
import os

import app_io
from adk_io import log_events
from app_io import book, user_lines

MODEL = os.environ.get("APP_MODEL", "gemini-3.8-live")
log = app_io.logger("adk_app")


async def main() -> None:
    import google.adk
    from google.adk.agents import Agent
    from google.adk.agents.live_request_queue import LiveRequestQueue
    from google.adk.agents.run_config import RunConfig
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types

    log(f"google-adk {google.adk.__version__}")

    async def book_slot(slot: str, tool_context: ToolContext) -> dict:
        """Book the given appointment slot for the user.

        Args:
            slot: the slot to book, e.g. "tomorrow 15:00"
        """
        return await asyncio.to_thread(book, slot, tool_context.function_call_id)

    agent = Agent(name="booker", model=MODEL, tools=[book_slot],
                  instruction="You are a booking assistant. Use book_slot to book a slot.")
    runner = InMemoryRunner(agent=agent, app_name="lab-app")
    session = await runner.session_service.create_session(app_name="lab-app", user_id="user")
    queue = LiveRequestQueue()
    config = RunConfig(response_modalities=["AUDIO"],
                       output_audio_transcription=types.AudioTranscriptionConfig(),
                       session_resumption=types.SessionResumptionConfig())

    consumer = asyncio.create_task(log_events(runner.run_live(
        user_id="user", session_id=session.id, live_request_queue=queue, run_config=config), log))
    if app_io.spoken():     # the microphone, as realtime input: the server hears the user speak
        async def mic() -> None:
            async for chunk in app_io.mic_chunks(log):
                queue.send_realtime(types.Blob(data=chunk, mime_type=f"audio/pcm;rate={app_io.MIC_RATE}"))
        microphone = asyncio.create_task(mic())  # noqa: F841 (runs until the lab stops the app)
    async for text in user_lines(log):
        if not app_io.spoken():
            queue.send_content(types.Content(role="user", parts=[types.Part(text=text)]))
    await consumer


if __name__ == "__main__":
    asyncio.run(main())
