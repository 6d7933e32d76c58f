"""pipecat's GeminiLiveLLMService as the client under test: `lab run control --client pipecat`.

Runs in .venv-pipecat (scripts/peers-setup.sh; pipecat pins google-genai<3, so the v1beta route),
never in the project's venv: the stdlib and pipecat-ai[google] only, and no lab import. An app as a
pipecat user writes one, run black-box by lab/clients/command.py: no base URL (the service's
google-genai client dials generativelanguage.googleapis.com, which the lab maps to the twin, trusted
through $SSL_CERT_FILE), the key from $GOOGLE_API_KEY, the user's lines from stdin, one per line.
A headless pipeline, no transport: Pipeline([llm, sink]) under pipecat's worker and runner, an empty
context first, then each line as an InputTextRawFrame (in a spoken scenario the microphone's audio
as InputAudioRawFrames instead). book_slot is a registered function whose
result comes from the lab's backend ($LAB_BACKEND_URL, POST /book, which answers once the booking
commits). Reconnects and handles are pipecat's own: that is what a scenario measures.
"""
from __future__ import annotations

import asyncio
import os
import sys

import app_io
from app_io import book, user_lines
from pipecat_io import start_headless

log = app_io.logger("pipecat_app")


async def main() -> None:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("APP_LOG_LEVEL", "WARNING"))

    import pipecat
    try:
        from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
        from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    except ImportError:     # releases before 1.14 keep the schemas one package up: a sweep runs those too
        from pipecat.adapters.schemas.function_schema import FunctionSchema
        from pipecat.adapters.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import (Frame, InputAudioRawFrame, InputTextRawFrame, LLMContextFrame,
                                       TTSTextFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService

    log(f"pipecat-ai {getattr(pipecat, '__version__', '?')}")

    class Said(FrameProcessor):
        """Logs what the model said (its output transcription) and passes every frame on."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSTextFrame):
                log("model:", frame.text)
            await self.push_frame(frame, direction)

    async def book_slot(params) -> None:
        slot = params.arguments.get("slot")
        await params.result_callback(await asyncio.to_thread(book, slot, params.tool_call_id))

    tools = ToolsSchema(standard_tools=[FunctionSchema(
        name="book_slot", description="Book the given appointment slot for the user.",
        properties={"slot": {"type": "string", "description": "the slot, e.g. 'tomorrow 15:00'"}},
        required=["slot"])])
    llm = GeminiLiveLLMService(api_key=os.environ["GOOGLE_API_KEY"], tools=tools,
                               inference_on_context_initialization=False)
    llm.register_function("book_slot", book_slot)
    worker, run_task = await start_headless(Pipeline([llm, Said()]), timeout=20)
    await worker.queue_frame(LLMContextFrame(LLMContext()))
    async def session_up() -> None:
        # realtime input is dropped until the session is up: wait for it, as a transport would
        for _ in range(200):
            if getattr(llm, "_ready_for_realtime_input", False):
                break
            await asyncio.sleep(0.05)

    if app_io.spoken():     # the microphone's audio as a transport's input frames: the server hears speech
        async def mic() -> None:
            await session_up()
            async for chunk in app_io.mic_chunks(log):
                await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=app_io.MIC_RATE, num_channels=1))
        microphone = asyncio.create_task(mic())  # noqa: F841 (runs until the lab stops the app)
    async for text in user_lines(log):
        if app_io.spoken():
            continue
        await session_up()
        await worker.queue_frame(InputTextRawFrame(text=text))
    await run_task


if __name__ == "__main__":
    asyncio.run(main())
