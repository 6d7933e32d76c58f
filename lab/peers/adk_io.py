"""Reading ADK's live events into the app's log (adk venv only; stdlib + google-adk).

Shared by lab/peers/adk_app.py and lab/peers/adk_host.py: what the model said (its output
transcription, once finished), and each tool call and result as ADK ran it.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable


async def log_events(events: AsyncIterator[Any], log: Callable[..., None]) -> None:
    async for ev in events:
        tr = getattr(ev, "output_transcription", None)
        if tr is not None and getattr(tr, "text", None) and getattr(tr, "finished", True):
            log("model:", tr.text)
        for fc in ev.get_function_calls():
            log("tool call:", fc.name, fc.id, dict(fc.args or {}))
        for fr in ev.get_function_responses():
            log("tool result:", fr.name, fr.id, str(fr.response)[:200])
