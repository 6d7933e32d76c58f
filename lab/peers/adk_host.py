"""A user's ADK agent as the client under test: `lab run ... --client adk:MODULE[:ATTR]`.

Runs in .venv-adk (or its copy with the user's requirements), never in the project's venv: the
stdlib and google-adk only, and no lab import. The user's agent (ATTR, default `root_agent`, ADK's
convention; loaded by entry.py) is run as `adk run` / `adk web` run one live: an InMemoryRunner and
`run_live` with a LiveRequestQueue; its tools are ADK's to call, so they execute for real, with
whatever they do. ADK's google-genai client dials generativelanguage.googleapis.com, which the lab
maps to the twin ($SSL_CERT_FILE trusts it; $HTTPS_PROXY when the scenario puts a proxy in the path).

The user's lines: typed, each line on stdin is one user message (send_content); spoken
($LAB_INPUT_MODE=speech), the microphone's 16 kHz audio goes in as realtime input (send_realtime),
so the server hears speech and the text on stdin is only logged.
"""
from __future__ import annotations

import asyncio
import sys

import app_io
import entry
from adk_io import log_events

log = app_io.logger("adk_host")


async def main() -> None:
    module, attr, agent = entry.from_argv("adk", sys.argv, log)

    import google.adk
    from google.adk.agents.live_request_queue import LiveRequestQueue
    from google.adk.agents.run_config import RunConfig
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    spoken = app_io.spoken()
    log(f"google-adk {google.adk.__version__}: {module}:{attr} ({agent.name}), input {'speech' if spoken else 'text'}")
    runner = InMemoryRunner(agent=agent, app_name=agent.name)
    session = await runner.session_service.create_session(app_name=agent.name, user_id="user")
    queue = LiveRequestQueue()
    config = RunConfig(response_modalities=["AUDIO"],
                       output_audio_transcription=types.AudioTranscriptionConfig(),
                       input_audio_transcription=types.AudioTranscriptionConfig() if spoken else None,
                       session_resumption=types.SessionResumptionConfig())

    async def typed() -> None:
        async for text in app_io.user_lines(log):
            if not spoken:
                queue.send_content(types.Content(role="user", parts=[types.Part(text=text)]))

    async def mic() -> None:
        async for chunk in app_io.mic_chunks(log):
            queue.send_realtime(types.Blob(data=chunk, mime_type=f"audio/pcm;rate={app_io.MIC_RATE}"))

    tasks = [asyncio.create_task(log_events(runner.run_live(
        user_id="user", session_id=session.id, live_request_queue=queue, run_config=config), log)),
        asyncio.create_task(typed())]
    if spoken:
        tasks.append(asyncio.create_task(mic()))
    await tasks[0]


if __name__ == "__main__":
    asyncio.run(main())
