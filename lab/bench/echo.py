"""The baseline of `lab bench twin`: a bare websockets server with the twin's shell and none of the twin.

Same process shape as `lab twin serve` (its own process, uvloop, TLS from lab.twin.server's
make_certs, the same websockets settings), so the twin's own cost prints as a ratio to this.
It does the least any Live API server must: parses every frame (JSON, and the audio's base64,
decoded and checked by the twin's own decoder, so the decoder is not what the ratio measures),
answers a setup with setupComplete and a sessionResumptionUpdate, and a text question with the frames
the twin sends for a short spoken reply, when the twin sends them: one audio chunk of the twin's
recorded size at once, generationComplete when the twin's generation of it is over (the chunk's
length over its send speed, the profile's audio_chunk_ms / audio_send_speed), and turnComplete once
the chunk has played. The pacing matters to the comparison: the load asks its next question after a
turnComplete, so a baseline that answered the whole turn at once would be asked about twice as many
questions per second as the twin over the same microphone stream, and its CPU per client frame
would measure another mix of work. It writes a frame as the twin's shell does
(lab.twin.server.write_now). It has no sessions, turns, VAD or log; its two timers per
question are the generationComplete and the turnComplete, as the twin's are.

    python -m lab.bench.echo --cert-dir DIR     # prints "base_url URL" and "ca_path PATH", serves until SIGTERM
"""
from __future__ import annotations

import argparse
import asyncio
import ssl
import sys

import orjson
import uvloop
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from lab.twin import wire
from lab.twin.model import tone
from lab.twin.profile import load_profile
from lab.twin.server import make_certs, stop_signal, write_now

_PROFILE = load_profile("developer-api")    # the profile `lab bench twin` serves the twin with
REPLY_CHUNK_S = _PROFILE["audio_chunk_ms"] / 1000.0
GENERATED_S = REPLY_CHUNK_S / _PROFILE["audio_send_speed"]
SETUP_REPLY = (orjson.dumps(wire.setup_complete()), orjson.dumps(wire.resumption_update("baseline")))
# the twin's frames for a short spoken reply to the load's setup (which asks for no transcription):
# the audio now, generationComplete and turnComplete later
REPLY_NOW = (orjson.dumps(wire.audio_chunk(tone(REPLY_CHUNK_S))),)
GENERATED = orjson.dumps(wire.generation_complete())
PLAYED = orjson.dumps(wire.turn_complete())


def answer(message: bytes | str) -> tuple[bytes, ...] | None:
    """The frames to send now for one client frame; None when none is due (a microphone chunk, read
    and decoded, or anything but a setup or a question).
    One function, so that a timed baseline (lab.bench.timed_server) times what the twin's core does
    for the same frame: the handler's call of it is the one cost the split adds, a call a frame."""
    body = orjson.loads(message)
    if "setup" in body:
        return SETUP_REPLY
    rt = body.get("realtime_input") or body.get("realtimeInput") or {}
    audio = rt.get("audio")
    if audio:
        wire.b64decode_any(audio["data"])
        return None
    return REPLY_NOW if rt.get("text") else None


def due(ws, frame: bytes) -> None:
    """A timer's callback: its frame (the reply's generationComplete or turnComplete) goes out, as the
    twin's shell writes one: at once when the connection need not wait, else by websockets' send."""
    if not write_now(ws, frame):
        ws.loop.create_task(_send_later(ws, frame))


async def _send_later(ws, frame: bytes) -> None:
    try:
        await ws.send(frame)
    except ConnectionClosed:
        pass


async def _handler(ws) -> None:
    loop = asyncio.get_running_loop()
    try:
        async for message in ws:
            reply = answer(message)
            if reply is None:
                continue
            for f in reply:
                if not write_now(ws, f):    # as the twin's shell writes a frame due now
                    await ws.send(f)
            if reply is REPLY_NOW:
                loop.call_later(GENERATED_S, due, ws, GENERATED)
                loop.call_later(REPLY_CHUNK_S, due, ws, PLAYED)
    except ConnectionClosed:
        pass


async def _serve(cert_dir: str) -> None:
    ca, chain, key = make_certs(cert_dir)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(chain), str(key))
    async with serve(_handler, "127.0.0.1", 0, ssl=ctx, ping_interval=None, compression=None,
                     max_size=64 * 1024 * 1024, max_queue=64, server_header=None) as server:
        port = server.sockets[0].getsockname()[1]
        stop = stop_signal()
        print(f"base_url https://127.0.0.1:{port}", flush=True)
        print(f"ca_path {ca}", flush=True)
        await stop.wait()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.bench.echo", description=__doc__.splitlines()[0])
    ap.add_argument("--cert-dir", required=True)
    uvloop.run(_serve(ap.parse_args(argv).cert_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
