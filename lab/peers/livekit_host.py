"""A user's LiveKit agent as the client under test: `lab run ... --client livekit:MODULE:CLASS`.

Runs in .venv-livekit (or its copy with the user's requirements), never in the project's venv:
the stdlib and livekit-agents / livekit-plugins-google / livekit-plugins-openai only, and no lab
import. CLASS is the user's `Agent` subclass (loaded by entry.py), with its instructions and
`@function_tool`s; it is hosted in an AgentSession with a realtime model, headless (no LiveKit
server, no room), as LiveKit's own test helpers host an agent: `session.start(agent)`, then each
typed line as a user input (`generate_reply(user_input=...)`). The session runs the agent's tools
itself, so they execute for real, and asks for the reply after them when the model does not.

The model is the one whose key the host was given (the lab gives a run's protocol's key alone,
lab/peers/app_io.py realtime_api): $GOOGLE_API_KEY, the Google realtime model, whose google-genai
client dials generativelanguage.googleapis.com; $OPENAI_API_KEY, `openai.realtime.RealtimeModel()`,
which dials wss://api.openai.com/v1/realtime. The lab maps either name to the twin ($SSL_CERT_FILE
trusts it; $HTTPS_PROXY when the scenario puts a proxy in the path).

Spoken ($LAB_INPUT_MODE=speech): the session's audio input is the lab's microphone (16 kHz mono
frames, what a room's audio track would give it), so the server hears speech and stdin is only logged.
An agent that names its own `llm` keeps it, as in any AgentSession.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys

import app_io
import entry
from livekit_io import realtime_model

log = app_io.logger("livekit_host")


async def main() -> None:
    module, attr, agent_cls = entry.from_argv("livekit", sys.argv, log)

    import livekit.agents
    from livekit import rtc
    from livekit.agents import AgentSession
    from livekit.agents.voice import io as lk_io

    spoken = app_io.spoken()

    class Microphone(lk_io.AudioInput):
        """The lab's microphone as the session's audio input: one 100 ms frame per chunk."""

        def __init__(self) -> None:
            super().__init__(label="livelab-mic")
            self._chunks = app_io.mic_chunks(log)

        async def __anext__(self) -> rtc.AudioFrame:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise StopAsyncIteration from None
            n = len(chunk) // 2
            return rtc.AudioFrame(data=chunk, sample_rate=app_io.MIC_RATE, num_channels=1, samples_per_channel=n)

    agent = agent_cls()
    # the plugin's own default model unless $APP_MODEL names one, as an entrypoint that names none gets
    plugin, model = realtime_model(app_io.realtime_api(), os.environ.get("APP_MODEL"))
    log(f"livekit-agents {livekit.agents.__version__} {plugin}: "
        f"{module}:{attr}, input {'speech' if spoken else 'text'}, model {model.model}")
    session = AgentSession(llm=model)

    def item_added(ev) -> None:
        item = ev.item
        text = getattr(item, "text_content", None)
        if text:
            log(f"{getattr(item, 'role', '?')}:", text)

    def tools_done(ev) -> None:
        for call, out in zip(ev.function_calls, ev.function_call_outputs):
            log("tool call:", call.name, call.call_id, call.arguments,
                "->", (out.output if out is not None else None) and str(out.output)[:200])

    session.on("conversation_item_added", item_added)
    session.on("function_tools_executed", tools_done)
    session.on("error", lambda ev: log("error:", repr(getattr(ev, "error", ev))[:200]))
    if spoken:
        session.input.audio = Microphone()
    await session.start(agent)

    async for text in app_io.user_lines(log):
        if spoken:
            continue
        try:
            session.generate_reply(user_input=text)
        except Exception as e:      # a session that is closing refuses new input; the run goes on
            log("generate_reply:", type(e).__name__, str(e)[:200])
    await asyncio.Event().wait()        # stdin closed: keep the session until the lab stops us


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main())
