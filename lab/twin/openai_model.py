"""The OpenAI Realtime wire's side of the conversation engine (lab.conversation.engine).

The same engine, over the same conversation and the same profile values, that the Gemini twin plays
(lab.twin.model is its Gemini side): one conversation file drives both protocols. What this module
maps: a session's `tools` ({type: function, name, description, parameters}) become the tools the
client declares; a function_call_output (call_id, output) a tool's response. OpenAI has no
NON_BLOCKING/BLOCKING or SILENT scheduling, so neither is read from the wire: a tool's behaviour is
the conversation's or the profile's default, as for a Gemini client that does not say.
"""
from __future__ import annotations

import json
import random
from typing import Any, Callable

from lab.conversation import engine as E
from lab.twin import model as M
from lab.twin.openai_wire import output_value


def declarations(tools: Any) -> list[dict]:
    """A session's function tools as the engine's declared tools."""
    out = []
    for t in tools if isinstance(tools, list) else []:
        if isinstance(t, dict) and t.get("type", "function") == "function" and t.get("name"):
            out.append({"name": str(t["name"]), "description": str(t.get("description") or ""),
                        "parameters": t.get("parameters") or {}, "behavior": None})
    return out


class OpenAIModel(E.Engine):
    """One OpenAI session's model. A new socket is a new session with an empty conversation, so each
    model has a Story of its own (no Position shared across sessions: the service keeps nothing)."""

    def __init__(self, cfg: M.ModelConfig, rng: random.Random, next_call_id: Callable[[bool], str]):
        super().__init__(M.conversation_for(cfg), cfg, rng, next_call_id=next_call_id, script=cfg.script)

    def configure(self, tools: Any) -> None:
        self.declare(declarations(tools))

    def output_arrived(self, call_id: str, output: Any) -> tuple[bool, str, E.Plan | None]:
        """(known, status, the reply the model will give when asked) for one function_call_output."""
        return self.tool_response(call_id, output_value(output))

    def written_call(self, call_id: str, name: str, arguments: str) -> None:
        """A function_call item the client wrote itself (the history it replays into a new session):
        the model knows the call from then on, as the service knows every item of its conversation,
        so the output that follows answers it and a status question reads it."""
        if not call_id or call_id in self.calls:
            return
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = {}
        self.calls[call_id] = E.Call(id=call_id, name=name, args=args if isinstance(args, dict) else {},
                                     blocking=False)
