"""`lab bench twin`: how many sessions the twin holds and how fast it answers. Prints figures only.

The twin runs as `lab twin serve` in its own process (TLS on 127.0.0.1), with the model's reply
delays set to 0 so what is measured is the twin itself: the time from a client frame
(realtimeInput text "Did you book it?") to the first frame of the twin's reply, seen by a raw
websockets client. At each level (1, 50, 200 concurrent sessions by default) every session holds
its connection for the whole level and sends `--rounds` questions at random 50-300 ms gaps, all
sessions at once. `--audio` also streams 16 kHz silence from every session (100 ms chunks), the
load of an open microphone.

Floors to compare against (not asserted): 200 sessions held; p99 < 20 ms at 50 active sessions.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import tempfile
import time

from lab.errors import LabError

QUESTION = json.dumps({"realtime_input": {"text": "Did you book it?"}})
BENCH_SETTINGS = ["reply_delay_s=0", "tool_call_delay_s=0", "speech_ms_per_char=5", "new_setup_s=0.01",
                  "freeze_close_s=3600"]
PATH = "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


async def _one(i: int, url: str, ctx, rounds: int, audio: bool, go: asyncio.Event, ready: list,
               lats: list, errors: list, sem: asyncio.Semaphore, stop_audio: asyncio.Event) -> bool:
    from websockets.asyncio.client import connect

    rng = random.Random(i)
    try:
        async with sem:
            ws = await connect(url, ssl=ctx, ping_interval=None, compression=None, open_timeout=30,
                               max_size=None, additional_headers={"x-goog-api-key": "bench"})
            await ws.send(json.dumps({"setup": {"model": "models/gemini-3.8-live", "generationConfig": {"responseModalities": ["AUDIO"]}, "sessionResumption": {}}}))
            first = json.loads(await ws.recv())
            if "setupComplete" not in first:
                raise RuntimeError(f"first frame {list(first)}")
            await ws.recv()   # the one sessionResumptionUpdate
    except Exception as e:  # noqa: BLE001
        errors.append(f"connect: {e!r}")
        return False
    ready.append(i)
    await go.wait()
    mic = None
    lock = asyncio.Lock()
    if audio:
        chunk = json.dumps({"realtime_input": {"audio": {"data": base64.b64encode(bytes(3200)).decode(),
                                                         "mime_type": "audio/pcm;rate=16000"}}})

        async def stream():
            while not stop_audio.is_set():
                async with lock:
                    await ws.send(chunk)
                await asyncio.sleep(0.1)
        mic = asyncio.create_task(stream())
    held = True
    try:
        for _ in range(rounds):
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            async with lock:
                t0 = time.perf_counter()
                await ws.send(QUESTION)
            await ws.recv()
            lats.append((time.perf_counter() - t0) * 1000)
            while True:
                f = json.loads(await ws.recv())
                if f.get("serverContent", {}).get("turnComplete"):
                    break
    except Exception as e:  # noqa: BLE001
        errors.append(f"turn: {e!r}")
        held = False
    finally:
        if mic:
            stop_audio.set()
            mic.cancel()
    held = held and ws.state.name == "OPEN"
    await ws.close()
    return held


async def _level(n: int, url: str, ctx, rounds: int, audio: bool) -> dict:
    go = asyncio.Event()
    stop_audio = asyncio.Event()
    ready: list = []
    lats: list = []
    errors: list = []
    sem = asyncio.Semaphore(25)
    tasks = [asyncio.create_task(_one(i, url, ctx, rounds, audio, go, ready, lats, errors, sem, stop_audio))
             for i in range(n)]
    t_open = time.monotonic()
    while len(ready) + len(errors) < n and time.monotonic() - t_open < 120:
        await asyncio.sleep(0.05)
    opened = len(ready)
    open_s = time.monotonic() - t_open
    go.set()
    held = sum(1 for ok in await asyncio.gather(*tasks) if ok)
    return {"n": n, "opened": opened, "held": held, "open_s": open_s, "lats": lats, "errors": errors}


def _start_twin(profile: str, cert_dir: str, extra: list[str]) -> tuple[subprocess.Popen, str, str]:
    argv = [sys.executable, "-m", "lab", "twin", "serve", "--port", "0", "--profile", profile,
            "--cert-dir", cert_dir, "--seed", "1"]
    for s in BENCH_SETTINGS + extra:
        argv += ["--set", s]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = ca = None
    t0 = time.monotonic()
    while (base is None or ca is None) and time.monotonic() - t0 < 20:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("base_url "):
            base = line.split()[1]
        elif line.startswith("ca_path "):
            ca = line.split()[1]
    if base is None or ca is None:
        proc.kill()
        raise LabError(f"the twin did not start: {proc.stderr.read().strip()[-300:]}")
    return proc, base, ca


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab bench twin", description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,50,200", help="concurrent sessions per level (default 1,50,200)")
    ap.add_argument("--rounds", type=int, default=20, help="questions per session per level (default 20)")
    ap.add_argument("--audio", action="store_true", help="also stream 16 kHz silence from every session")
    ap.add_argument("--profile", default="developer-api")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv or [])
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        raise LabError(f"bad --levels {args.levels!r}")
    with tempfile.TemporaryDirectory(prefix="livelab-bench-") as d:
        proc, base, ca = _start_twin(args.profile, d, args.overrides)
        try:
            ctx = ssl.create_default_context(cafile=ca)
            url = base.replace("https://", "wss://").replace("http://", "ws://") + PATH
            print(f"twin bench: profile {args.profile}, TLS on loopback, twin in its own process, raw websockets "
                  f"clients in one process; {args.rounds} questions per session"
                  + (", every session streaming 16 kHz audio" if args.audio else ""))
            print("latency = client frame (realtimeInput text) -> first frame of the twin's reply; "
                  f"{os.cpu_count()} CPUs")
            print(f"{'sessions':>8} {'held':>9} {'open s':>7} {'replies':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
            results = []
            for n in levels:
                r = asyncio.run(_level(n, url, ctx, args.rounds, args.audio))
                results.append(r)
                lats = r["lats"]
                print(f"{n:>8} {r['held']:>4}/{n:<4} {r['open_s']:>7.2f} {len(lats):>8} "
                      f"{_pct(lats, 50):>7.2f} {_pct(lats, 99):>7.2f} {max(lats) if lats else float('nan'):>7.2f}")
                for e in r["errors"][:3]:
                    print(f"         error: {e}")
            by = {r["n"]: r for r in results}
            if 200 in by:
                print(f"floor: 200 sessions held -> {by[200]['held']}/200")
            if 50 in by:
                print(f"floor: p99 < 20 ms at 50 active sessions -> p99 {_pct(by[50]['lats'], 99):.2f} ms")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
