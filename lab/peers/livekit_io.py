"""Reading one LiveKit RealtimeSession generation to its end (livekit venv only; stdlib + livekit).

Shared by lab/peers/livekit_app.py and tests/peers/livekit_turn.py: a generation's messages each
carry a text stream and an audio stream, and the generation a function stream; all three close
when the generation is done (turnComplete, or the tool call itself).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable


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
