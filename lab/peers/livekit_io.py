"""What the LiveKit side shares (livekit venv only; stdlib + livekit and its plugins).

    drain_generation(ev)        read one RealtimeSession generation to its end (lab/peers/livekit_app.py,
                                tests/peers/livekit_turn.py): a generation's messages each carry a
                                text stream and an audio stream, and the generation a function stream;
                                all three close when the generation is done (turnComplete, or the
                                tool call itself)
    realtime_model(api, model)  the plugin's realtime model for the API the app was given a key for
                                (app_io.realtime_api), as a user builds it: no base URL, the key from
                                its variable; `model` None is the plugin's own default
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import app_io


async def drain_generation(ev: Any, on_text: Callable[[str], None] = lambda t: None,
                           on_audio: Callable[[Any], None] = lambda f: None) -> list:
    """Consume `ev` (a GenerationCreatedEvent); returns its function calls."""
    async def messages() -> None:
        async for msg in ev.message_stream:
            async def text() -> None:
                async for t in msg.text_stream:
                    on_text(t)

            async def audio() -> None:
                async for frame in msg.audio_stream:
                    on_audio(frame)

            await asyncio.gather(text(), audio())

    calls: list = []

    async def functions() -> None:
        async for fc in ev.function_stream:
            calls.append(fc)

    await asyncio.gather(messages(), functions())
    return calls


def realtime_model(api: str, model: str | None = None) -> tuple[str, Any]:
    """(the plugin and its release, for the log; the model)."""
    chosen = {"model": model} if model else {}
    if api == "openai":
        from livekit.plugins import openai as lk_openai
        # RealtimeModel() reads $OPENAI_API_KEY, and dials its own URL, wss://api.openai.com/v1/realtime
        return f"livekit-plugins-openai {lk_openai.__version__}", lk_openai.realtime.RealtimeModel(**chosen)
    from google.genai import types
    from livekit.plugins import google as lk_google
    return (f"livekit-plugins-google {lk_google.__version__}",
            lk_google.realtime.RealtimeModel(api_key=app_io.key("gemini"), **chosen,
                                             output_audio_transcription=types.AudioTranscriptionConfig()))
