"""LiveKit's Google realtime plugin against the lab's twin, headless: how its generations follow the
twin's turns (issue 9). One check per run, chosen with --check:

- overlap: generate_reply() while the model is still speaking its first reply. The second call must
  get a generation of its own (no "generate_reply timed out", no audio appended to the first one
  after the second was created).
- barge:   the model speaks, the "user" speaks over it (push_audio of a loud tone, then silence, in
  real time): the twin's VAD cuts the turn (the plugin emits input_speech_started); the next
  generate_reply() gets a new generation that speaks.
- goaway:  the twin runs with a short connection cap (connection_max_s / goaway_lead_s); the plugin
  closes on goAway and reconnects with its resumption handle; a generate_reply() after that gets a
  spoken reply on the new connection.

Run it with the peer's own venv (scripts/peers-setup.sh makes it):

    .venv-livekit/bin/python tests/peers/livekit_checks.py --check overlap --base-url https://127.0.0.1:PORT --ca ca.pem

Standalone on purpose (stdlib + livekit-agents / livekit-plugins-google), like livekit_turn.py. No
LiveKit server or room: the plugin's RealtimeSession is driven directly. Prints one JSON line (every
generation, the plugin's events and errors, what each generate_reply() got) and exits 0 when the
script ran to its end; the test decides whether what it saw is right.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import ssl
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab" / "peers"))
from livekit_io import drain_generation  # noqa: E402

STATUS = "Did you book it?"
IN_RATE = 16000
FRAME_MS = 20
REPLY_WAIT_S = 8.0      # generate_reply's own limit is 5 s; this bounds the wait for its future


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", required=True, choices=("overlap", "barge", "goaway"))
    ap.add_argument("--base-url", required=True, help="the twin's https://127.0.0.1:PORT")
    ap.add_argument("--ca", required=True, help="the twin's CA certificate (PEM)")
    ap.add_argument("--model", default="gemini-3.8-live")
    ap.add_argument("--api-key", default="lab-peer-test", help="any string: the twin checks none by default")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole check")
    ap.add_argument("--goaway-wait", type=float, default=9.0,
                    help="goaway: seconds from the start before the reply is asked for (past the reconnect)")
    return ap.parse_args(argv)


def tone_frame(amplitude: int, n_frame: int) -> bytes:
    """20 ms of a 440 Hz tone at 16 kHz, int16 mono: far over the twin's energy VAD threshold."""
    n = IN_RATE * FRAME_MS // 1000
    start = n_frame * n
    return b"".join(struct.pack("<h", int(amplitude * math.sin(2 * math.pi * 440 * (start + i) / IN_RATE)))
                    for i in range(n))


class Recorder:
    """Every generation the session creates, with its audio, and when each one ended."""

    def __init__(self, out: dict, t0: float):
        self.out, self.t0 = out, t0
        self.tasks: list[asyncio.Task] = []
        self.first_audio: dict[int, asyncio.Event] = {}
        self.done: dict[int, asyncio.Event] = {}
        self.by_event: dict[int, int] = {}      # id(GenerationCreatedEvent) -> its number

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def on_generation(self, ev) -> None:
        n = len(self.out["generations"]) + 1
        gen = {"n": n, "user_initiated": ev.user_initiated, "response_id": ev.response_id,
               "created_s": self.now(), "speech_bytes": 0, "late_bytes": 0, "done_s": None}
        self.out["generations"].append(gen)
        self.by_event[id(ev)] = n
        self.first_audio[n], self.done[n] = asyncio.Event(), asyncio.Event()
        self.tasks.append(asyncio.create_task(self._consume(ev, gen)))

    async def _consume(self, ev, gen: dict) -> None:
        n = gen["n"]

        def on_audio(frame) -> None:
            size = len(frame.data.tobytes())
            gen["speech_bytes"] += size
            if len(self.out["generations"]) > n:     # a later generation exists: appended to this one
                gen["late_bytes"] += size
            self.first_audio[n].set()

        try:
            await drain_generation(ev, on_audio=on_audio)
        finally:
            gen["done_s"] = self.now()
            self.done[n].set()


async def ask(sess, out: dict, rec: Recorder, label: str) -> int | None:
    """generate_reply(instructions=STATUS); the number of the generation it got, None if none."""
    asked = {"label": label, "asked_s": rec.now(), "generation": None, "error": None}
    out["replies"].append(asked)
    fut = sess.generate_reply(instructions=STATUS)
    try:
        ev = await asyncio.wait_for(asyncio.shield(fut), REPLY_WAIT_S)
    except Exception as e:      # generate_reply's own timeout, or ours
        asked["error"] = repr(e)[:300]
        return None
    asked["generation"] = rec.by_event.get(id(ev))
    asked["got_s"] = rec.now()
    return asked["generation"]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except (asyncio.TimeoutError, TimeoutError):
        return False


async def push_speech(sess, speech_ms: int, silence_ms: int) -> None:
    """The user's voice, paced in real time: a loud tone, then digital silence."""
    from livekit import rtc

    n = IN_RATE * FRAME_MS // 1000
    for i in range((speech_ms + silence_ms) // FRAME_MS):
        pcm = tone_frame(8000, i) if i * FRAME_MS < speech_ms else bytes(2 * n)
        sess.push_audio(rtc.AudioFrame(data=pcm, sample_rate=IN_RATE, num_channels=1, samples_per_channel=n))
        await asyncio.sleep(FRAME_MS / 1000)


async def check_overlap(sess, out: dict, rec: Recorder) -> None:
    first = await ask(sess, out, rec, "first")
    if first is None or not await wait_event(rec.first_audio[first], 5):
        return
    # the first reply is speaking (its turnComplete is due when its audio would have played out)
    second = await ask(sess, out, rec, "while speaking")
    if second is not None:
        await wait_event(rec.done[second], 10)


async def check_barge(sess, out: dict, rec: Recorder) -> None:
    first = await ask(sess, out, rec, "first")
    if first is None or not await wait_event(rec.first_audio[first], 5):
        return
    out["barge_s"] = rec.now()
    # 600 ms of voice (onset is 140 ms), then enough silence for the twin's end of speech (<=1.3 s)
    await push_speech(sess, speech_ms=600, silence_ms=1600)
    await wait_event(rec.done[first], 3)
    after = await ask(sess, out, rec, "after barge-in")
    if after is not None:
        await wait_event(rec.done[after], 10)


async def check_goaway(sess, out: dict, rec: Recorder, wait_s: float) -> None:
    out["goaway_wait_s"] = wait_s
    await asyncio.sleep(max(0.0, wait_s - rec.now()))
    out["handle_before_reply"] = sess.session_resumption_handle is not None
    after = await ask(sess, out, rec, "after goAway")
    if after is not None:
        await wait_event(rec.done[after], 10)


async def run(args: argparse.Namespace, out: dict) -> None:
    from google.genai import types
    from livekit.agents import APIConnectOptions
    from livekit.plugins import google as lk_google

    import livekit.agents
    out["versions"] = {"livekit-agents": livekit.agents.__version__}
    t0 = time.monotonic()
    ctx = ssl.create_default_context(cafile=args.ca)
    model = lk_google.realtime.RealtimeModel(
        model=args.model, api_key=args.api_key,
        http_options=types.HttpOptions(base_url=args.base_url, async_client_args={"ssl": ctx}),
        output_audio_transcription=types.AudioTranscriptionConfig(),
        # a failure is reported, not retried behind the test's back (a goAway's reconnect is no retry)
        conn_options=APIConnectOptions(max_retry=0, timeout=10.0))
    sess = model.session()
    rec = Recorder(out, t0)
    sess.on("generation_created", rec.on_generation)
    sess.on("input_speech_started", lambda ev: out["speech_started_s"].append(rec.now()))
    sess.on("error", lambda ev: out["errors"].append(
        {"error": repr(getattr(ev, "error", ev))[:300], "recoverable": getattr(ev, "recoverable", None)}))
    try:
        if args.check == "overlap":
            await check_overlap(sess, out, rec)
        elif args.check == "barge":
            await check_barge(sess, out, rec)
        else:
            await check_goaway(sess, out, rec, args.goaway_wait)
        await asyncio.sleep(0.3)        # late frames, errors
        out["completed"] = True
    finally:
        out["elapsed_s"] = rec.now()
        await sess.aclose()
        await model.aclose()
        for t in rec.tasks:
            t.cancel()


class WarningsToOut(logging.Handler):
    """The plugin's warnings (e.g. "generate_reply timed out ...") into the JSON line."""

    def __init__(self, out: dict):
        super().__init__(level=logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out["warnings"].append(f"{record.name}: {record.getMessage()}"[:300])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: dict = {"peer": "livekit", "check": args.check, "completed": False, "generations": [],
                 "replies": [], "speech_started_s": [], "warnings": [], "errors": []}
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger().addHandler(WarningsToOut(out))

    async def bounded() -> None:
        await asyncio.wait_for(run(args, out), args.timeout)

    try:
        asyncio.run(bounded())
    except (asyncio.TimeoutError, TimeoutError):
        out["errors"].append({"error": f"timeout after {args.timeout:.0f} s"})
    except Exception as e:
        out["errors"].append({"error": repr(e)[:300]})
    print(json.dumps(out), flush=True)
    return 0 if out["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
