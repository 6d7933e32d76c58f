"""pipecat's OpenAI Realtime service (OpenAIRealtimeLLMService) against the lab's OpenAI twin, headless.

Run it with the pipecat venv (scripts/peers-setup.sh pipecat), not the project's:

    .venv-pipecat/bin/python tests/peers/pipecat_openai_session.py --base-url wss://127.0.0.1:PORT/v1/realtime --ca ca.pem

Standalone on purpose: the stdlib plus pipecat-ai[openai] only. No transport: the service runs in
Pipeline([user aggregator, tap, llm, tap, assistant aggregator]) under pipecat's worker and runner, with
an LLMContextAggregatorPair over an LLMContext that declares a `book_slot` tool, whose handler is
registered with register_function, as a pipecat app for the realtime service is built. The service
takes `base_url` (the websocket URL, to which it appends `?model=M`) and dials it with websockets'
connect and no ssl argument, so the twin's CA is trusted through $SSL_CERT_FILE (set here from --ca
before anything is imported).

Typed input: the realtime service sends the user's words only as audio (and the initial context);
the first line on stdin goes into the context and an LLMRunFrame starts the session with it, as a
pipecat app that opens with a prompt does. Later lines are appended with LLMMessagesAppendFrame
(run_llm) and recorded; what reaches the twin of them is the twin's record to say.

Spoken input: a line `speak PATH` is the user speaking: PATH holds raw 16 kHz 16-bit mono PCM, pushed
into the pipeline as InputAudioRawFrames of 100 ms, as a transport's microphone pushes them; the
service resamples them to 24 kHz and appends them to the input audio buffer (the server's VAD ends
the turn). `--audio-pace-s` is the gap between frames (0.1 is real time).

One JSON line per thing that happens (`{"ev": ...}`: started, user, tool, said, error), then the
summary (`{"ev": "end", ...}`) once stdin closes. Exit 0 unless the script itself failed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "peers"))

T0 = time.monotonic()


def emit(ev: str, **fields) -> None:
    print(json.dumps({"ev": ev, "at_s": round(time.monotonic() - T0, 3), **fields}), flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the twin's wss://127.0.0.1:PORT/v1/realtime")
    ap.add_argument("--ca", required=True, help="the twin's CA certificate (PEM)")
    ap.add_argument("--api-key", default="sk-livelab-peer")
    ap.add_argument("--model", default="gpt-realtime")
    ap.add_argument("--tool-s", type=float, default=0.0, help="seconds book_slot takes (a window for a drop)")
    ap.add_argument("--log-level", default="WARNING", help="pipecat's loguru level on stderr")
    ap.add_argument("--audio-pace-s", type=float, default=0.1, help="seconds between 100 ms audio frames")
    return ap.parse_args(argv)


async def run(args: argparse.Namespace, out: dict) -> None:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=args.log_level)

    def on_log(message) -> None:
        rec = message.record
        if rec["level"].no >= 40:        # ERROR and above: what pipecat says went wrong
            out["logged_errors"].append(f"{rec['name']}: {rec['message']}"[:300])
            emit("log_error", text=f"{rec['name']}: {rec['message']}"[:300])
    logger.add(on_log, level="ERROR", format="{message}")

    import pipecat
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import (ErrorFrame, Frame, InputAudioRawFrame, LLMFullResponseEndFrame,
                                       LLMMessagesAppendFrame, LLMRunFrame, TTSTextFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
    from pipecat_io import start_headless, stop_headless

    out["versions"] = {"pipecat-ai": getattr(pipecat, "__version__", "?")}
    turn = {"text": ""}

    class Tap(FrameProcessor):
        """Records what the service says (downstream of it) and the errors it pushes (either way: an
        ErrorFrame goes upstream, to the pipeline's source); forwards everything unchanged."""

        def __init__(self, side: str):
            super().__init__(name=f"tap-{side}")
            self.side = side

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if (self.side == "down") != (direction == FrameDirection.DOWNSTREAM):
                pass
            elif isinstance(frame, TTSTextFrame):
                turn["text"] += frame.text
            elif isinstance(frame, LLMFullResponseEndFrame) and turn["text"].strip():
                out["said"].append(turn["text"].strip())
                emit("said", text=turn["text"].strip())
                turn["text"] = ""
            elif isinstance(frame, ErrorFrame):
                out["errors"].append({"error": str(frame.error)[:300], "fatal": bool(getattr(frame, "fatal", False))})
                emit("error", error=str(frame.error)[:300], fatal=bool(getattr(frame, "fatal", False)))
            await self.push_frame(frame, direction)

    async def book_slot(params) -> None:
        out["tool_calls"].append({"name": "book_slot", "args": dict(params.arguments)})
        emit("tool", name="book_slot", args=dict(params.arguments), call_id=params.tool_call_id)
        await asyncio.sleep(args.tool_s)
        await params.result_callback({"status": "booked", "slot": params.arguments.get("slot")})

    tools = ToolsSchema(standard_tools=[FunctionSchema(
        name="book_slot", description="Book the given appointment slot for the user.",
        properties={"slot": {"type": "string", "description": "the slot, e.g. 'tomorrow 15:00'"}},
        required=["slot"])])
    llm = OpenAIRealtimeLLMService(api_key=args.api_key, base_url=args.base_url,
                                   settings=OpenAIRealtimeLLMService.Settings(model=args.model))
    llm.register_function("book_slot", book_slot)
    context = LLMContext(messages=[{"role": "system", "content": "You book appointment slots for the user."}],
                         tools=tools)
    pair = LLMContextAggregatorPair(context)
    worker, run_task = await start_headless(Pipeline([pair.user(), Tap("up"), llm, Tap("down"), pair.assistant()]), timeout=20)
    emit("started", **out["versions"])

    loop = asyncio.get_running_loop()
    first = True
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("speak "):
                pcm = Path(text[len("speak "):]).read_bytes()
                emit("user", audio_ms=len(pcm) // 32)
                step = 3200                                     # 100 ms at 16 kHz, 16-bit
                for i in range(0, len(pcm), step):
                    await worker.queue_frame(InputAudioRawFrame(audio=pcm[i:i + step], sample_rate=16000,
                                                                num_channels=1))
                    await asyncio.sleep(args.audio_pace_s)
                continue
            emit("user", text=text)
            if first:
                context.add_message({"role": "user", "content": text})
                await worker.queue_frame(LLMRunFrame())
                first = False
            else:
                await worker.queue_frame(LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}],
                                                                run_llm=True))
    finally:
        await stop_headless(worker, run_task)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # before websockets makes its default context: it trusts what $SSL_CERT_FILE names
    os.environ["SSL_CERT_FILE"] = args.ca
    out: dict = {"tool_calls": [], "said": [], "errors": [], "logged_errors": []}
    rc = 0
    try:
        asyncio.run(run(args, out))
    except Exception as e:
        out["errors"].append({"error": repr(e)[:300], "fatal": True})
        rc = 1
    emit("end", **out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
