"""`lab bench hearing`: what the twin's ear costs, a turn against its length, and whether it holds up
the event loop the other sessions' frames are on.

1. Recognition per turn (lab.twin.recognizer, in this process): the booking story's phrases spoken by
   espeak-ng as turns of about 1 to 15 s, each heard `--repeat` times. Two paths: a turn the
   phrases' grammar fits (the usual one), and speech no phrase holds, which is decoded again with
   the open language model before it is called "not understood". Printed: CPU ms a turn and the
   real-time factor (CPU over the turn's own audio length: the baseline every turn brings).
2. Off the loop: an asyncio ticker every 10 ms runs while an `Ear` (the worker process the twin's
   server uses) hears `--turns` long turns back to back; its worst and p99 lateness are printed
   beside the same ticker's with no ear at work, measured in the same run, and beside the lateness
   if the same turns were heard on the loop itself.
It asserts nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import time

from lab import speech
from lab.errors import LabError
from lab.stats.order import percentile
from lab.twin import recognizer

SCRIPT = ("Book me the 3pm slot tomorrow, please.", "Did you book it?", "Actually, stop. Don't book it.")
# turns of growing length, each made of the script's phrases (the grammar allows two in one turn;
# the longer ones are read as their first two, as a user's long turn would be)
HEARD = {"short": "Stop.", "question": SCRIPT[1], "request": SCRIPT[0], "two": f"{SCRIPT[0]} {SCRIPT[2]}",
         "long": " ".join(SCRIPT * 2)}
UNHEARD = {"short": "Banana.", "question": "Is the purple one?", "request": "Telephone banana purple lamp.",
           "two": "The purple telephone sang about a banana and a lamp in the rain.",
           "long": " ".join(["The purple telephone sang about a banana and a lamp in the rain."] * 3)}
TICK_S = 0.01


def clip(text: str) -> bytes:
    return speech.silence(300) + speech.synth(text) + speech.silence(300)


def per_turn(rec: recognizer.Recognizer, texts: dict[str, str], repeat: int) -> list[tuple[str, float, float, str]]:
    """(name, audio seconds, median CPU ms a turn, what was read) for each turn."""
    out = []
    for name, text in texts.items():
        pcm = clip(text)
        cpu, m = [], None
        for _ in range(repeat):
            heard, m = rec.hear_turn(SCRIPT, (), 0, pcm)
            cpu.append(heard.cpu_ms)
        out.append((name, len(pcm) / 2 / speech.IN_RATE, percentile(cpu, 50),
                    " + ".join(x[:24] for x in m.lines) if m.lines else "not understood"))
    return out


async def _lateness(seconds: float, work=None) -> list[float]:
    """How late each tick of a 10 ms ticker was (ms) while `work()` runs (or for `seconds`)."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done = asyncio.Event()

    async def ticker():
        due = loop.time() + TICK_S
        while not done.is_set():
            await asyncio.sleep(max(0.0, due - loop.time()))
            late.append(max(0.0, loop.time() - due) * 1000)
            due += TICK_S

    t = asyncio.create_task(ticker())
    if work is None:
        await asyncio.sleep(seconds)
    else:
        await work()
    done.set()
    await t
    return late


async def off_the_loop(turns: int) -> dict[str, list[float]]:
    pcm = clip(HEARD["two"])
    ear = recognizer.Ear()
    loop = asyncio.get_running_loop()
    try:
        # warm the worker first: its start-up is not what a turn costs
        warm = asyncio.Event()
        ear.hear(loop, SCRIPT, (), 0, pcm, speech.IN_RATE, lambda *_: warm.set())
        await warm.wait()

        async def through_the_ear():
            for _ in range(turns):
                got = asyncio.Event()
                ear.hear(loop, SCRIPT, (), 0, pcm, speech.IN_RATE, lambda *_: got.set())
                await got.wait()

        t0 = loop.time()
        with_ear = await _lateness(0, through_the_ear)
        span = loop.time() - t0
    finally:
        ear.close()
    rec = recognizer.Recognizer()

    async def on_the_loop():
        for _ in range(turns):
            rec.hear_turn(SCRIPT, (), 0, pcm)       # what the server would do without a worker
            await asyncio.sleep(0)

    return {"no ear at work (baseline)": await _lateness(span),
            "ear at work (worker process)": with_ear,
            "recognizer on the loop (not done)": await _lateness(0, on_the_loop)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="lab bench hearing")
    ap.add_argument("--repeat", type=int, default=3, help="times each turn is heard (median printed)")
    ap.add_argument("--turns", type=int, default=10, help="turns the ear hears while the ticker runs")
    args = ap.parse_args(argv)
    why = recognizer.missing()
    if why:
        raise LabError(f"bench hearing: {why}")
    print("lab bench hearing: the twin's recognizer (pocketsphinx) on espeak-ng turns; CPU a turn and "
          "its real-time factor (CPU / the turn's audio)", flush=True)
    rec = recognizer.Recognizer()
    rec.hear_turn(SCRIPT, (), 0, clip(SCRIPT[1]))          # the grammar is made once per conversation
    for title, texts in (("phrases the grammar fits", HEARD), ("speech no phrase holds", UNHEARD)):
        print(f"\n{title}:")
        print(f"  {'turn':10} {'audio s':>8} {'CPU ms':>8} {'RTF':>6}  read as")
        for name, audio_s, cpu_ms, read in per_turn(rec, texts, args.repeat):
            print(f"  {name:10} {audio_s:8.2f} {cpu_ms:8.1f} {cpu_ms / 1000 / audio_s:6.3f}  {read}")
    print(f"\nthe event loop's 10 ms ticker while {args.turns} two-phrase turns are heard:")
    print(f"  {'':36} {'ticks':>6} {'p99 late ms':>12} {'worst ms':>9}")
    for name, late in asyncio.run(off_the_loop(args.turns)).items():
        print(f"  {name:36} {len(late):6d} {percentile(late, 99):12.1f} {max(late, default=0):9.1f}")
    return 0
