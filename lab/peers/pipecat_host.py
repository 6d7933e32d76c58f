"""A user's pipecat bot as the client under test: `lab run ... --client pipecat:MODULE[:FUNC]`.

Runs in .venv-pipecat (or its copy with the user's requirements), never in the project's venv: the
stdlib and pipecat-ai[google] only, and no lab import. FUNC (default `run_bot`, the name pipecat's
examples give the function their `bot()` entry point hands a transport) is called as pipecat's
development runner calls a bot: with a transport and the RunnerArguments, here `LabTransport`, the
lab's user on the other side instead of a browser or a phone. The bot builds its own pipeline, its
GeminiLiveLLMService and its registered functions, which pipecat runs for real. The service's
google-genai client dials generativelanguage.googleapis.com, which the lab maps to the twin
($SSL_CERT_FILE trusts it; $HTTPS_PROXY when the scenario puts a proxy in the path).

LabTransport: its input fires `on_client_connected` once the pipeline has started (where bots
queue their first frames) and then pushes the user's input: each typed line (stdin) as an
InputTextRawFrame, or, spoken ($LAB_INPUT_MODE=speech), the microphone's 16 kHz audio as
InputAudioRawFrames, as a call's audio track would arrive. Its output takes the bot's audio at the
pace a speaker plays it and drops it. stdin's end is not the call's end: the bot runs until the lab
stops it.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import sys

import app_io
import entry

log = app_io.logger("pipecat_host")


def make_transport():
    from pipecat.frames.frames import InputAudioRawFrame, InputTextRawFrame, OutputAudioRawFrame, StartFrame
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.transports.base_input import BaseInputTransport
    from pipecat.transports.base_output import BaseOutputTransport
    from pipecat.transports.base_transport import BaseTransport, TransportParams

    spoken = app_io.spoken()

    class LabInput(BaseInputTransport):
        def __init__(self, params, transport):
            super().__init__(params)
            self._transport = transport
            self._feeds: list[asyncio.Task] = []

        async def start(self, frame: StartFrame):
            await super().start(frame)
            await self.set_transport_ready(frame)
            if not self._feeds:
                await self._transport.connected()
                self._feeds.append(self.create_task(self._typed()))
                if spoken:
                    self._feeds.append(self.create_task(self._mic()))

        async def _typed(self):
            async for text in app_io.user_lines(log):
                if not spoken:
                    await self.push_frame(InputTextRawFrame(text=text))

        async def _mic(self):
            async for chunk in app_io.mic_chunks(log):
                await self.push_audio_frame(InputAudioRawFrame(audio=chunk, sample_rate=app_io.MIC_RATE,
                                                               num_channels=1))

        async def cleanup(self):
            for t in self._feeds:
                await self.cancel_task(t)
            self._feeds.clear()
            await super().cleanup()

    class LabOutput(BaseOutputTransport):
        async def start(self, frame: StartFrame):
            await super().start(frame)
            await self.set_transport_ready(frame)

        async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
            # a speaker plays a chunk in its own duration: the bot's pacing stays what a call's would be
            await asyncio.sleep(len(frame.audio) / (2 * frame.num_channels * frame.sample_rate))
            return True

    class LabTransport(BaseTransport):
        """The lab's user as a transport: typed lines or microphone audio in, the bot's audio out."""

        def __init__(self):
            super().__init__(name="LabTransport")
            self._params = TransportParams(audio_in_enabled=True, audio_in_sample_rate=app_io.MIC_RATE,
                                           audio_out_enabled=True, audio_out_sample_rate=24000)
            self._input: FrameProcessor | None = None
            self._output: FrameProcessor | None = None
            self._register_event_handler("on_client_connected")
            self._register_event_handler("on_client_disconnected")

        def input(self) -> FrameProcessor:
            if self._input is None:
                self._input = LabInput(self._params, self)
            return self._input

        def output(self) -> FrameProcessor:
            if self._output is None:
                self._output = LabOutput(self._params)
            return self._output

        async def connected(self) -> None:
            await self._call_event_handler("on_client_connected", "livelab-user")

    return LabTransport()


async def main() -> None:
    module, attr, bot = entry.from_argv("pipecat", sys.argv, log)

    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("APP_LOG_LEVEL", "WARNING"))

    import pipecat
    from pipecat.runner.types import RunnerArguments

    log(f"pipecat-ai {getattr(pipecat, '__version__', '?')}: {module}:{attr}, "
        f"input {'speech' if app_io.spoken() else 'text'}")
    transport = make_transport()
    runner_args = RunnerArguments(session_id="livelab")
    runner_args.pipeline_idle_timeout_secs = None    # a scenario's silences are part of the test
    try:
        inspect.signature(bot).bind(transport, runner_args)
        args = (transport, runner_args)
    except TypeError:       # entry.py checked it takes (transport) then
        args = (transport,)
    await bot(*args)
    log("the bot returned")


if __name__ == "__main__":
    asyncio.run(main())
