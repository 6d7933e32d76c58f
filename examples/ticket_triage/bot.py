"""A ticket-triage voice bot, written as pipecat's examples write a Gemini Live bot (pipecat-ai 1.x):
`run_bot(transport, runner_args)` builds the pipeline, `bot(runner_args)` is the development
runner's entry point and picks the transport.

    python bot.py                                     talk to it in a browser (pipecat's runner)
    lab run l1-goaway --client pipecat:bot --conversation lines.txt     the same bot under a fault
"""
from __future__ import annotations

import os

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import LLMRunFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.runner.types import RunnerArguments
from pipecat.runner.utils import create_transport
from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService
from pipecat.services.llm_service import FunctionCallParams
from pipecat.transports.base_transport import BaseTransport, TransportParams
from pipecat.workers.runner import WorkerRunner

# the help desk's queue, in memory
TICKETS: dict[str, dict] = {}

create_ticket_schema = FunctionSchema(
    name="create_ticket",
    description="Open a support ticket for the caller's problem.",
    properties={
        "summary": {"type": "string", "description": "one sentence describing the problem"},
        "priority": {"type": "string", "enum": ["low", "normal", "urgent"], "description": "how urgent it is"},
    },
    required=["summary", "priority"],
)
ticket_status_schema = FunctionSchema(
    name="ticket_status",
    description="Look up the status of the caller's ticket.",
    properties={"ticket_id": {"type": "string", "description": "the ticket number, e.g. T-1"}},
    required=["ticket_id"],
)


async def create_ticket(params: FunctionCallParams):
    ticket_id = f"T-{len(TICKETS) + 1}"
    TICKETS[ticket_id] = {"summary": params.arguments.get("summary"), "priority": params.arguments.get("priority"),
                          "status": "open"}
    await params.result_callback({"ticket_id": ticket_id, **TICKETS[ticket_id]})


async def ticket_status(params: FunctionCallParams):
    ticket = TICKETS.get(str(params.arguments.get("ticket_id", "")).upper())
    await params.result_callback(ticket or {"found": False})


async def run_bot(transport: BaseTransport, runner_args: RunnerArguments):
    llm = GeminiLiveLLMService(
        api_key=os.getenv("GOOGLE_API_KEY"),
        system_instruction=(
            "You triage IT support calls. Ask what is wrong, open a ticket with create_ticket and "
            "an honest priority, and read the ticket number back. Use ticket_status when asked."
        ),
        tools=ToolsSchema(standard_tools=[create_ticket_schema, ticket_status_schema]),
    )
    llm.register_function("create_ticket", create_ticket)
    llm.register_function("ticket_status", ticket_status)

    context = LLMContext()
    aggregators = LLMContextAggregatorPair(context)
    pipeline = Pipeline([
        transport.input(),
        aggregators.user(),
        llm,
        transport.output(),
        aggregators.assistant(),
    ])
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True),
                            idle_timeout_secs=runner_args.pipeline_idle_timeout_secs)

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport, client):
        await worker.queue_frames([LLMRunFrame()])

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    await runner.add_workers(worker)
    await runner.run()


async def bot(runner_args: RunnerArguments):
    transport = await create_transport(runner_args, {
        "webrtc": lambda: TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    })
    await run_bot(transport, runner_args)


if __name__ == "__main__":
    from pipecat.runner.run import main

    main()
