"""One text turn by pipecat's GeminiLiveLLMService against the lab's twin, headless (issue 2).

Run it with the peer's own venv (scripts/peers-setup.sh makes it), not the project's:

    .venv-pipecat/bin/python tests/peers/pipecat_turn.py --base-url https://127.0.0.1:PORT --ca ca.pem

Standalone on purpose: the stdlib plus pipecat-ai[google] only (which pins google-genai<3, so it cannot
share the project's venv). No transport: the service runs in a Pipeline([tap, llm, tap]) under a
PipelineWorker and WorkerRunner, and the taps record every frame either way. The user's text goes in
as the first LLMContextFrame (`context` mode, pipecat's usual start: the service connects and sends
the history as clientContent with turnComplete), or as an InputTextRawFrame after an empty context
(`realtime` mode: realtimeInput.text). A `book_slot` tool is declared and its handler registered with
register_function; the service sends the handler's result back as a toolResponse on its own.

The pipeline runs with usage metrics on: each LLMUsageMetricsData (from the turn's usageMetadata)
goes into the JSON line's `usage`, and every warning pipecat logs into `warnings`.

Prints one JSON line, then exits 0 when a turn completed (a tool call, or a spoken reply closed by
turnComplete), 1 otherwise (error or timeout).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from pathlib import Path

# the helpers the lab's own framework client uses (lab/peers: stdlib + the framework, no project)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "peers"))
from pipecat_io import start_headless, stop_headless  # noqa: E402

BOOK = "Book me the 3pm slot tomorrow, please."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the twin's https://127.0.0.1:PORT")
    ap.add_argument("--ca", required=True, help="the twin's CA certificate (PEM)")
    ap.add_argument("--text", default=BOOK, help="the user's text turn")
    ap.add_argument("--model", default=None, help="default: the service's own (models/gemini-3.8-live)")
    ap.add_argument("--api-key", default="lab-peer-test", help="any string: the twin checks none by default")
    ap.add_argument("--mode", choices=("context", "realtime"), default="context",
                    help="context: LLMContextFrame with the user message; "
                         "realtime: empty context, then InputTextRawFrame")
    ap.add_argument("--no-tool-result", action="store_true", help="register no handler result (no toolResponse)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole turn")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds to keep listening after the turn completed (late frames, errors)")
    ap.add_argument("--log-level", default="WARNING", help="pipecat's loguru level on stderr")
    return ap.parse_args(argv)


async def run(args: argparse.Namespace, out: dict) -> None:
    from google.genai.types import HttpOptions
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    failed = asyncio.Event()

    def on_error_log(message) -> None:
        # a failing connect() is only logged ("unexpected exception"), never pushed as an ErrorFrame
        rec = message.record
        out["errors"].append({"error": f"{rec['name']}: {rec['message']}"[:300], "fatal": True})
        failed.set()

    def on_warning_log(message) -> None:
        # pipecat reports what it misses in the server's messages (e.g. "Received turn_complete
        # without usage_metadata") only as a warning: the test wants none
        rec = message.record
        if rec["level"].name == "WARNING":
            out["warnings"].append(f"{rec['name']}: {rec['message']}"[:300])

    logger.add(on_error_log, level="ERROR", format="{message}")
    logger.add(on_warning_log, level="WARNING", format="{message}")

    import pipecat
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import (ErrorFrame, Frame, FunctionCallInProgressFrame,
                                       FunctionCallResultFrame, InputTextRawFrame, LLMContextFrame,
                                       LLMFullResponseEndFrame, MetricsFrame, TTSAudioRawFrame,
                                       TTSTextFrame)
    from pipecat.metrics.metrics import LLMUsageMetricsData
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService

    out["versions"] = {"pipecat-ai": getattr(pipecat, "__version__", "?")}
    try:
        import google.genai
        out["versions"]["google-genai"] = google.genai.__version__
    except Exception:  # pragma: no cover - version is informative only
        pass

    t0 = time.monotonic()
    turn_done = asyncio.Event()
    state = {"call": None, "speech": 0, "turn_speech": 0}

    def note(frame: Frame, direction: FrameDirection) -> None:
        name = type(frame).__name__
        out["frames"][name] = out["frames"].get(name, 0) + 1
        if isinstance(frame, TTSAudioRawFrame):
            out["speech_bytes"] += len(frame.audio)
            state["turn_speech"] += len(frame.audio)
            out["sample_rate"] = frame.sample_rate
        elif isinstance(frame, TTSTextFrame):
            out["transcript"] += frame.text          # the outputTranscription, as spoken
        elif isinstance(frame, FunctionCallInProgressFrame):
            out["tool_call"] = frame.function_name
            out["tool_call_id"] = frame.tool_call_id
            if args.no_tool_result:
                turn_done.set()
        elif isinstance(frame, FunctionCallResultFrame) and direction == FrameDirection.DOWNSTREAM:
            out["tool_response_sent"] = True
        elif isinstance(frame, ErrorFrame):
            out["errors"].append({"error": str(frame.error)[:300], "fatal": bool(getattr(frame, "fatal", False))})
            if getattr(frame, "fatal", False):
                failed.set()
        elif isinstance(frame, MetricsFrame):
            for d in frame.data:
                if isinstance(d, LLMUsageMetricsData):
                    # the service pushes it right after the turnComplete that carried usageMetadata
                    out["usage"].append({"at_s": round(time.monotonic() - t0, 3),"prompt_tokens": d.value.prompt_tokens,
                                           "completion_tokens": d.value.completion_tokens,
                                           "total_tokens": d.value.total_tokens})
        elif isinstance(frame, LLMFullResponseEndFrame):
            out["turns"].append({"speech_bytes": state["turn_speech"], "tool_call": out["tool_call"],
                                 "at_s": round(time.monotonic() - t0, 3)})
            if state["turn_speech"] or (out["tool_call"] and args.no_tool_result):
                turn_done.set()
            state["turn_speech"] = 0

    class Tap(FrameProcessor):
        """Records what passes; forwards everything unchanged."""

        def __init__(self, where: str):
            super().__init__(name=f"tap-{where}")
            self.where = where

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if (self.where == "down") == (direction == FrameDirection.DOWNSTREAM):
                note(frame, direction)
            await self.push_frame(frame, direction)

    async def book_slot(params) -> None:
        out["tool_args"] = dict(params.arguments)
        await params.result_callback({"status": "booked", "slot": params.arguments.get("slot")})

    tools = ToolsSchema(standard_tools=[FunctionSchema(
        name="book_slot", description="Book the given appointment slot for the user.",
        properties={"slot": {"type": "string", "description": "the slot, e.g. 'tomorrow 15:00'"}},
        required=["slot"])])
    ctx = ssl.create_default_context(cafile=args.ca)
    kw = {}
    if args.model:
        kw["settings"] = GeminiLiveLLMService.Settings(model=args.model)
    llm = GeminiLiveLLMService(
        api_key=args.api_key, tools=tools,
        http_options=HttpOptions(base_url=args.base_url, async_client_args={"ssl": ctx}),
        inference_on_context_initialization=(args.mode == "context"), **kw)
    llm.register_function("book_slot", book_slot)

    # usage metrics are off by default: the service drops the turn's usageMetadata without them
    worker, run_task = await start_headless(Pipeline([Tap("up"), llm, Tap("down")]), timeout=10,
                                            params=PipelineParams(enable_metrics=True,
                                                                  enable_usage_metrics=True))
    try:
        if args.mode == "context":
            await worker.queue_frame(LLMContextFrame(LLMContext(messages=[{"role": "user", "content": args.text}])))
        else:
            await worker.queue_frame(LLMContextFrame(LLMContext()))
            # realtime input is dropped until the session is up and the context handled
            for _ in range(100):
                if getattr(llm, "_ready_for_realtime_input", False):
                    break
                await asyncio.sleep(0.05)
            await worker.queue_frame(InputTextRawFrame(text=args.text))
        waiters = [asyncio.create_task(turn_done.wait()), asyncio.create_task(failed.wait()), run_task]
        await asyncio.wait(waiters, timeout=max(0.1, args.timeout - (time.monotonic() - t0)),
                           return_when=asyncio.FIRST_COMPLETED)
        for w in waiters[:2]:
            w.cancel()
        out["connected"] = getattr(llm, "_session_resumption_handle", None) is not None or bool(out["turns"])
        out["handle_seen"] = getattr(llm, "_session_resumption_handle", None) is not None
        out["turn_complete"] = turn_done.is_set()
        if turn_done.is_set() and args.settle > 0:
            await asyncio.sleep(args.settle)
        out["elapsed_s"] = round(time.monotonic() - t0, 3)
    finally:
        await stop_headless(worker, run_task)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict = {"peer": "pipecat", "mode": args.mode, "connected": False, "handle_seen": False,
                 "tool_call": None, "tool_response_sent": False, "speech_bytes": 0, "transcript": "",
                 "turn_complete": False, "turns": [], "frames": {}, "usage": [], "warnings": [],
                 "errors": []}

    async def bounded() -> None:
        await asyncio.wait_for(run(args, out), args.timeout + 15)

    try:
        asyncio.run(bounded())
    except (asyncio.TimeoutError, TimeoutError):
        out["errors"].append({"error": f"timeout after {args.timeout + 15:.0f} s"})
    except Exception as e:
        out["errors"].append({"error": repr(e)[:300]})
    ok = out["turn_complete"] and out["connected"]
    out["ok"] = ok
    print(json.dumps(out), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
