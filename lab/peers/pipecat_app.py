"""pipecat's realtime LLM services as the client under test: `lab run control --client pipecat`.

Runs in .venv-pipecat (scripts/peers-setup.sh; pipecat pins google-genai<3, so the v1beta route),
never in the project's venv: the stdlib and pipecat-ai[google,openai] only, and no lab import. An app
as a pipecat user writes one, run black-box by lab/clients/command.py: no base URL, the key from the
environment, the user's lines from stdin, one per line. Which service it runs is the key it was
given, as the lab gives a run's protocol's key alone (app_io.realtime_api):

- $GOOGLE_API_KEY: GeminiLiveLLMService, whose google-genai client dials
  generativelanguage.googleapis.com. A headless pipeline, no transport: Pipeline([llm, sink]), an
  empty context first, then each line as an InputTextRawFrame.
- $OPENAI_API_KEY: OpenAIRealtimeLLMService, which dials its default wss://api.openai.com/v1/realtime
  with websockets. Pipeline([user aggregator, llm, sink, assistant aggregator]) over an
  LLMContextAggregatorPair whose LLMContext declares the tool, as pipecat's realtime examples build
  one: the assistant aggregator is what asks the service for its reply to a tool's output (OpenAI
  never continues by itself). The first line goes into the context, then an LLMRunFrame: the
  service sends the context as items and asks for a response. Each later line is appended as pipecat
  appends text to a conversation (LLMMessagesAppendFrame, run_llm), which the user aggregator takes
  into the context; the service, in pipecat 1.14.0, sends nothing for it (it takes the user's later
  turns as audio: tests/integration/test_openai_frameworks.py, docs/protocol-openai.md), so what
  reaches the twin of those lines is the twin's record to say.

Either way the lab maps the name to the twin, trusted through $SSL_CERT_FILE; in a spoken scenario
the microphone's audio goes in as InputAudioRawFrames instead of the typed lines. book_slot is a
registered function whose result comes from the lab's backend ($LAB_BACKEND_URL, POST /book, which
answers once the booking commits). Reconnects and handles are pipecat's own: that is what a
scenario measures.
"""
from __future__ import annotations

import asyncio
import os
import sys

import app_io
from app_io import book, user_lines
from pipecat_io import start_headless

log = app_io.logger("pipecat_app")
INSTRUCTIONS = "You book appointment slots for the user."


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
                                       LLMMessagesAppendFrame, LLMRunFrame, TTSTextFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    api = app_io.realtime_api()
    log(f"pipecat-ai {getattr(pipecat, '__version__', '?')}, {api}")

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
    if api == "openai":
        from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
        from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService

        # the service's own default URL and model; the key is a required argument
        llm = OpenAIRealtimeLLMService(api_key=app_io.key("openai"))
        context = LLMContext(messages=[{"role": "system", "content": INSTRUCTIONS}], tools=tools)
        pair = LLMContextAggregatorPair(context)
        pipeline = Pipeline([pair.user(), llm, Said(), pair.assistant()])
    else:
        from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService

        llm = GeminiLiveLLMService(api_key=app_io.key("gemini"), tools=tools,
                                   inference_on_context_initialization=False)
        pipeline = Pipeline([llm, Said()])
    llm.register_function("book_slot", book_slot)
    worker, run_task = await start_headless(pipeline, timeout=20)
    if api == "gemini":
        await worker.queue_frame(LLMContextFrame(LLMContext()))

    async def session_up() -> None:
        # realtime input is dropped until the session is up: wait for it, as a transport would
        # (each service has its own flag for it)
        for _ in range(200):
            if getattr(llm, "_ready_for_realtime_input", False) or getattr(llm, "_api_session_ready", False):
                break
            await asyncio.sleep(0.05)

    if app_io.spoken():     # the microphone's audio as a transport's input frames: the server hears speech
        async def mic() -> None:
            await session_up()
            async for chunk in app_io.mic_chunks(log):
                await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=app_io.MIC_RATE, num_channels=1))
        microphone = asyncio.create_task(mic())  # noqa: F841 (runs until the lab stops the app)
    first = True
    async for text in user_lines(log):
        if app_io.spoken():
            continue
        if api == "gemini":
            await session_up()
            await worker.queue_frame(InputTextRawFrame(text=text))
        elif first:     # the session starts from the context, the user's first line in it
            context.add_message({"role": "user", "content": text})
            await worker.queue_frame(LLMRunFrame())
        else:
            await session_up()
            await worker.queue_frame(LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}],
                                                            run_llm=True))
        first = False
    await run_task


if __name__ == "__main__":
    asyncio.run(main())
