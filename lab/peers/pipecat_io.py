"""Starting a pipecat pipeline headless, with no transport (pipecat venv only; stdlib + pipecat).

Shared by lab/peers/pipecat_app.py and the pipecat peers under tests/peers/: the pipeline runs under
pipecat's worker and runner (PipelineTask is deprecated in 1.x) and is ready once the worker says
`on_pipeline_started`; stop_headless ends it.
"""
from __future__ import annotations

import asyncio
from typing import Any


async def start_headless(pipeline: Any, timeout: float, params: Any = None) -> tuple[Any, asyncio.Task]:
    """(worker, the runner's task) once the pipeline has started; TimeoutError if it does not.

    `params`: the worker's PipelineParams (e.g. enable_usage_metrics), pipecat's defaults if None.
    """
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.workers.runner import WorkerRunner

    worker = PipelineWorker(pipeline, cancel_on_idle_timeout=False, params=params)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run_task = asyncio.create_task(runner.run())
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker, frame):
        started.set()

    await asyncio.wait_for(started.wait(), timeout)
    return worker, run_task


async def stop_headless(worker: Any, run_task: asyncio.Task, timeout: float = 5) -> None:
    """End a headless pipeline: an EndFrame, and if it has not ended `timeout` seconds later, a cancel."""
    from pipecat.frames.frames import EndFrame

    if run_task.done():
        return
    await worker.queue_frame(EndFrame())
    try:
        await asyncio.wait_for(asyncio.shield(run_task), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        await worker.cancel(reason="peer script done")
        await asyncio.wait([run_task], timeout=timeout)
