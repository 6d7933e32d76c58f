"""What every framework-side app (lab/peers/*_app.py) does the same way, with the stdlib only.

These apps run in the frameworks' own venvs, without the project, as black-box clients
(lab/clients/command.py); a script's own folder is on its sys.path, so `import app_io` works there.

    book(slot, call_id)    the lab's backend API ($LAB_BACKEND_URL, POST /book): waits for the commit
    logger(name)           print to stderr (client.log in the run folder), prefixed with the app's name
    user_lines(log)        async iterator over the user's lines on stdin, one per line, until EOF
    app_params(argv)       the scenario's client_params for this app: `--params JSON` (the lab passes
                           every parameter the framework declares, lab/clients/frameworks); {} without
    realtime_api()         which realtime API the app talks to: the one whose key it was given
                           ($OPENAI_API_KEY: "openai", OpenAI Realtime; $GOOGLE_API_KEY or
                           $GEMINI_API_KEY: "gemini", the Live API); one line and exit otherwise
    spoken()               True in a spoken scenario ($LAB_INPUT_MODE=speech): the user's lines come
                           as audio on the microphone, and their text on stdin is not the user's input
    mic_chunks(log)        async iterator over the microphone's audio ($LAB_AUDIO_SOCKET: 16 kHz s16le
                           mono, 100 ms per chunk, silence between lines; lab/clients/mic.py)
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import AsyncIterator, Callable

# the key variables each realtime API's SDK reads (google-genai; openai-python), as a user's shell has
# one of them; the lab gives an app its run's protocol's alone (equal to lab.protocols.KEY_VARS,
# kept so by tests/unit/test_framework_protocols.py)
KEY_VARS = {"gemini": ("GOOGLE_API_KEY", "GEMINI_API_KEY"), "openai": ("OPENAI_API_KEY",)}
BOOK_TIMEOUT_S = 70      # the API answers once the booking commits (at most 60 s, then "pending")
MIC_RATE = 16000
MIC_CHUNK_BYTES = MIC_RATE // 10 * 2     # 100 ms of s16le mono, as lab/clients/mic.py sends it


def book(slot: str, call_id: str) -> dict:
    req = urllib.request.Request(os.environ["LAB_BACKEND_URL"] + "/book", method="POST",
                                 data=json.dumps({"slot": slot, "call_id": call_id}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=BOOK_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def app_params(argv: list[str]) -> dict:
    if "--params" not in argv:
        return {}
    i = argv.index("--params")
    if i + 1 >= len(argv):
        raise SystemExit("--params needs a JSON object")
    given = json.loads(argv[i + 1])
    if not isinstance(given, dict):
        raise SystemExit(f"--params must be a JSON object, got {argv[i + 1]!r}")
    return given


def logger(name: str) -> Callable[..., None]:
    def log(*a) -> None:
        print(f"{name}:", *a, file=sys.stderr, flush=True)
    return log


async def user_lines(log: Callable[..., None]) -> AsyncIterator[str]:
    import asyncio   # here: the module's helpers above need no event loop
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if line.strip():
            log("user:", line.strip())
            yield line.strip()


def realtime_api(environ=None) -> str:
    """"gemini" or "openai": the API whose key variable is set. Neither or both: SystemExit with one line
    (the app cannot tell which service its user means)."""
    env = os.environ if environ is None else environ
    given = [api for api, names in KEY_VARS.items() if any(env.get(n) for n in names)]
    if len(given) != 1:
        raise SystemExit("set the key of one realtime API: $GOOGLE_API_KEY (Gemini Live API) or $OPENAI_API_KEY "
                         f"(OpenAI Realtime), not {'both' if given else 'neither'}")
    return given[0]


def key(api: str, environ=None) -> str:
    """The key the app was given for `api` (its first variable that is set)."""
    env = os.environ if environ is None else environ
    return next(env[n] for n in KEY_VARS[api] if env.get(n))


def spoken() -> bool:
    return os.environ.get("LAB_INPUT_MODE") == "speech"


async def mic_chunks(log: Callable[..., None]) -> AsyncIterator[bytes]:
    """The microphone, read as a sound card is: whole 100 ms chunks until the lab closes it."""
    import asyncio
    reader, writer = await asyncio.open_unix_connection(os.environ["LAB_AUDIO_SOCKET"])
    log("mic: open,", os.environ.get("LAB_AUDIO_FORMAT", "s16le;rate=16000;channels=1"))
    try:
        while True:
            try:
                chunk = await reader.readexactly(MIC_CHUNK_BYTES)
            except asyncio.IncompleteReadError:
                log("mic: closed")
                return
            yield chunk
    finally:
        writer.close()
