"""LiveKit Agents with its OpenAI Realtime model (livekit-plugins-openai) against the lab's OpenAI twin.

Run it with the livekit venv (scripts/peers-setup.sh livekit), not the project's:

    .venv-livekit/bin/python tests/peers/livekit_openai_session.py --base-url https://127.0.0.1:PORT/v1 --ca ca.pem

Standalone on purpose: the stdlib plus livekit-agents / livekit-plugins-openai only. An `Agent` with
a `book_slot` function tool is hosted in an `AgentSession` with `openai.realtime.RealtimeModel`,
headless (no LiveKit server, no room), as lab/peers/livekit_host.py hosts one with the Google
model: `session.start(agent)`, then each user line as `generate_reply(user_input=...)`. The session
runs the tool and hands its output to the plugin itself.

How it reaches the twin (`--via`):
  env   as an unmodified app would: `RealtimeModel()` with no arguments; the plugin reads
        $OPENAI_BASE_URL and $OPENAI_API_KEY, and aiohttp's default context trusts $SSL_CERT_FILE
        (this script sets the three from --base-url/--ca before importing anything)
  args  `RealtimeModel(base_url=..., api_key=..., http_session=...)`, the session's connector
        holding an ssl context with the twin's CA: nothing of the process's environment changes

The user's lines come on stdin, one per line (each said once the line is read); EOF ends the session.
Each thing that happens is one JSON line on stdout as it happens (`{"ev": ...}`: started, tool,
said, error), so a test can act between lines (drop the socket, then say the next one); the last
line is the summary (`{"ev": "end", ...}`). Exit 0 when the session ended without a fatal error.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import ssl
import sys
import time

T0 = time.monotonic()


def emit(ev: str, **fields) -> None:
    print(json.dumps({"ev": ev, "at_s": round(time.monotonic() - T0, 3), **fields}), flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the twin's https://127.0.0.1:PORT/v1")
    ap.add_argument("--ca", required=True, help="the twin's CA certificate (PEM)")
    ap.add_argument("--via", choices=("env", "args"), default="env")
    ap.add_argument("--api-key", default="sk-livelab-peer")
    ap.add_argument("--model", default="gpt-realtime")
    ap.add_argument("--tool-s", type=float, default=0.0, help="seconds book_slot takes (a window for a drop)")
    return ap.parse_args(argv)


async def run(args: argparse.Namespace, out: dict) -> None:
    import aiohttp
    import livekit.agents
    from livekit.agents import Agent, AgentSession, function_tool
    from livekit.plugins import openai as lk_openai

    out["versions"] = {"livekit-agents": livekit.agents.__version__,
                       "livekit-plugins-openai": lk_openai.__version__}
    http = None
    if args.via == "env":
        model = lk_openai.realtime.RealtimeModel()
    else:
        ctx = ssl.create_default_context(cafile=args.ca)
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
        model = lk_openai.realtime.RealtimeModel(model=args.model, base_url=args.base_url, api_key=args.api_key,
                                                 http_session=http)

    class Booker(Agent):
        def __init__(self) -> None:
            super().__init__(instructions="You book appointment slots for the user.")

        @function_tool
        async def book_slot(self, slot: str) -> dict:
            """Book the given appointment slot for the user.

            Args:
                slot: the slot to book, e.g. "tomorrow 15:00"
            """
            out["tool_calls"].append({"name": "book_slot", "args": {"slot": slot}})
            emit("tool", name="book_slot", args={"slot": slot})
            await asyncio.sleep(args.tool_s)
            emit("tool_done", name="book_slot")
            return {"status": "booked", "slot": slot}

    session = AgentSession(llm=model)
    fatal = asyncio.Event()

    def item_added(ev) -> None:
        item = ev.item
        text = getattr(item, "text_content", None)
        if getattr(item, "role", None) == "assistant" and text:
            out["said"].append(text)
            emit("said", text=text)

    def tools_done(ev) -> None:
        for call, result in zip(ev.function_calls, ev.function_call_outputs):
            emit("tool_output", call_id=call.call_id, output=result.output if result is not None else None)

    def on_error(ev) -> None:
        err = getattr(ev, "error", ev)
        recoverable = getattr(err, "recoverable", getattr(ev, "recoverable", None))
        out["errors"].append({"error": repr(err)[:300], "recoverable": recoverable})
        emit("error", error=repr(err)[:300], recoverable=recoverable)
        if recoverable is False:
            fatal.set()

    def on_close(ev) -> None:
        out["closed"] = {"reason": str(getattr(ev, "reason", ""))[:200]}
        emit("closed", **out["closed"])

    session.on("conversation_item_added", item_added)
    session.on("function_tools_executed", tools_done)
    session.on("error", on_error)
    session.on("close", on_close)
    await session.start(Booker())
    emit("started", **out["versions"])

    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        if not line.strip():
            continue
        emit("user", text=line.strip())
        try:
            session.generate_reply(user_input=line.strip())
        except Exception as e:      # a closed session refuses new input: recorded, and the script goes on
            out["errors"].append({"error": f"generate_reply: {e!r}"[:300], "recoverable": None})
            emit("error", error=f"generate_reply: {e!r}"[:300], recoverable=None)
    out["fatal"] = fatal.is_set()
    await session.aclose()
    await model.aclose()
    if http is not None:
        await http.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.via == "env":
        # before aiohttp is imported: its default context reads the CA file when the module loads
        os.environ.update({"OPENAI_BASE_URL": args.base_url, "OPENAI_API_KEY": args.api_key,
                           "SSL_CERT_FILE": args.ca})
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out: dict = {"via": args.via, "tool_calls": [], "said": [], "errors": [], "fatal": False, "closed": None}
    try:
        asyncio.run(run(args, out))
    except Exception as e:
        out["errors"].append({"error": repr(e)[:300], "recoverable": False})
        out["fatal"] = True
    emit("end", **out)
    return 1 if out["fatal"] else 0


if __name__ == "__main__":
    sys.exit(main())
