"""One text turn by LiveKit's Google realtime plugin against the lab's twin, headless (issue 2).

Run it with the peer's own venv (scripts/peers-setup.sh makes it), not the project's:

    .venv-livekit/bin/python tests/peers/livekit_turn.py --base-url https://127.0.0.1:PORT --ca ca.pem

Standalone on purpose: the stdlib plus livekit-agents / livekit-plugins-google only, so the peer venv
needs nothing from the project. No LiveKit server or room: the plugin's RealtimeSession is driven
directly, with a `book_slot` function tool registered. The user's text goes in either as
generate_reply(instructions=text) (`instructions` mode, the default: for the 3.x models the plugin
sends it as a user turn with turnComplete), or as AgentSession sends a typed user message (`chat`
mode: update_chat_ctx with the user message, then generate_reply(); for 3.1/3.8 models that second
step is a clientContent with no turns and turnComplete, which the twin does not answer, so use
`--model gemini-2.5-flash-native-audio-preview-12-2025`, whose "." placeholder turn it does). A tool call is answered the way AgentSession answers one: the tool runs and its output
goes back as a FunctionCallOutput in the chat context, which the plugin sends as a toolResponse.

Prints one JSON line, then exits 0 when a turn completed (a tool call, or a spoken reply closed by
turnComplete), 1 otherwise (error or timeout).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
import sys
import time
from pathlib import Path

# the helpers the lab's own framework client uses (lab/peers: stdlib + the framework, no project)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "peers"))
from livekit_io import drain_generation  # noqa: E402

BOOK = "Book me the 3pm slot tomorrow, please."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the twin's https://127.0.0.1:PORT")
    ap.add_argument("--ca", required=True, help="the twin's CA certificate (PEM)")
    ap.add_argument("--text", default=BOOK, help="the user's text turn")
    ap.add_argument("--model", default="gemini-3.8-live")
    ap.add_argument("--api-key", default="lab-peer-test", help="any string: the twin checks none by default")
    ap.add_argument("--mode", choices=("chat", "instructions"), default="instructions",
                    help="chat: update_chat_ctx(user message) + generate_reply() (AgentSession's path); "
                         "instructions: generate_reply(instructions=text)")
    ap.add_argument("--no-tool-result", action="store_true", help="do not answer a tool call")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole turn")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds to keep listening after the turn completed (late frames, errors)")
    return ap.parse_args(argv)


async def run(args: argparse.Namespace, out: dict) -> None:
    from google.genai import types
    from livekit.agents import APIConnectOptions, llm
    from livekit.plugins import google as lk_google

    import livekit.agents
    out["versions"] = {"livekit-agents": livekit.agents.__version__}
    try:
        import google.genai
        out["versions"]["google-genai"] = google.genai.__version__
    except Exception:  # pragma: no cover - version is informative only
        pass

    t0 = time.monotonic()
    ctx = ssl.create_default_context(cafile=args.ca)
    model = lk_google.realtime.RealtimeModel(
        model=args.model,
        api_key=args.api_key,
        http_options=types.HttpOptions(base_url=args.base_url, async_client_args={"ssl": ctx}),
        output_audio_transcription=types.AudioTranscriptionConfig(),
        # one connection: a failure is reported, not retried behind the test's back
        conn_options=APIConnectOptions(max_retry=0, timeout=10.0),
    )

    @llm.function_tool
    async def book_slot(slot: str) -> dict:
        """Book the given appointment slot for the user.

        Args:
            slot: the slot to book, e.g. "tomorrow 15:00"
        """
        out["tool_args"] = {"slot": slot}
        return {"status": "booked", "slot": slot}

    sess = model.session()
    # before the session's task first runs, so the tool is in the one setup frame (no reconnect)
    await sess.update_tools([book_slot])

    turn_done = asyncio.Event()
    failed = asyncio.Event()
    chat = llm.ChatContext.empty()
    tasks: list[asyncio.Task] = []

    def on_error(ev) -> None:
        err = getattr(ev, "error", ev)
        out["errors"].append({"error": repr(err)[:300], "recoverable": getattr(ev, "recoverable", None)})
        if not getattr(ev, "recoverable", True):
            failed.set()

    async def answer_tool(fc: llm.FunctionCall) -> None:
        args_ = json.loads(fc.arguments or "{}")
        result = await book_slot(**args_) if fc.name == "book_slot" else {"error": "unknown tool"}
        output = llm.FunctionCallOutput(call_id=fc.call_id, name=fc.name, output=json.dumps(result),
                                        is_error=False)
        chat.insert([fc, output])
        await sess.update_chat_ctx(chat)
        out["tool_response_sent"] = True

    async def consume(ev: llm.GenerationCreatedEvent) -> None:
        n = out["generations"] = out["generations"] + 1
        spoke = {"bytes": 0}

        def on_text(t: str) -> None:
            out["transcript"] += t

        def on_audio(frame) -> None:
            spoke["bytes"] += len(frame.data.tobytes())
            out["sample_rate"] = frame.sample_rate

        calls = await drain_generation(ev, on_text, on_audio)
        # both streams close when the generation is done: turnComplete, or the tool call itself
        out["speech_bytes"] += spoke["bytes"]
        out["turns"].append({"generation": n, "user_initiated": ev.user_initiated,
                             "speech_bytes": spoke["bytes"], "tool_calls": [c.name for c in calls],
                             "at_s": round(time.monotonic() - t0, 3)})
        if calls:
            out["tool_call"] = calls[0].name
            out["tool_call_id"] = calls[0].call_id
            if not args.no_tool_result:
                for fc in calls:
                    await answer_tool(fc)
                return          # the model answers the result with speech: that turn ends the run
        if calls or spoke["bytes"] or out["transcript"]:
            turn_done.set()

    def on_generation(ev) -> None:
        tasks.append(asyncio.create_task(consume(ev)))

    sess.on("generation_created", on_generation)
    sess.on("error", on_error)

    if args.mode == "chat":
        chat.add_message(role="user", content=args.text)
        await sess.update_chat_ctx(chat)
        fut = sess.generate_reply()
    else:
        fut = sess.generate_reply(instructions=args.text)
    fail_wait = asyncio.create_task(failed.wait())
    await asyncio.wait([fut, fail_wait], timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED)
    fail_wait.cancel()
    if fut.done() and not fut.cancelled():
        if fut.exception() is None:
            out["generation_created_s"] = round(time.monotonic() - t0, 3)
            out["user_initiated"] = fut.result().user_initiated
        else:
            # generate_reply gives up after 5 s without a generation; the turn may still come
            out["errors"].append({"error": f"generate_reply: {fut.exception()}"})

    waiters = [asyncio.create_task(turn_done.wait()), asyncio.create_task(failed.wait())]
    try:
        await asyncio.wait(waiters, timeout=max(0.1, args.timeout - (time.monotonic() - t0)),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    out["connected"] = bool(out["turns"]) or sess.session_resumption_handle is not None
    out["handle_seen"] = sess.session_resumption_handle is not None
    out["turn_complete"] = turn_done.is_set()
    if turn_done.is_set() and args.settle > 0:
        await asyncio.sleep(args.settle)
    out["elapsed_s"] = round(time.monotonic() - t0, 3)
    await sess.aclose()
    await model.aclose()
    for t in tasks:
        t.cancel()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out: dict = {"peer": "livekit", "mode": args.mode, "connected": False, "handle_seen": False,
                 "tool_call": None, "tool_response_sent": False, "speech_bytes": 0, "transcript": "",
                 "turn_complete": False, "generations": 0, "turns": [], "errors": []}

    async def bounded() -> None:
        await asyncio.wait_for(run(args, out), args.timeout + 10)

    try:
        asyncio.run(bounded())
    except (asyncio.TimeoutError, TimeoutError):
        out["errors"].append({"error": f"timeout after {args.timeout + 10:.0f} s"})
    except Exception as e:
        out["errors"].append({"error": repr(e)[:300]})
    ok = out["turn_complete"] and out["connected"]
    out["ok"] = ok
    print(json.dumps(out), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
