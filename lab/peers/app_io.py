"""What every framework-side app (lab/peers/*_app.py) does the same way, with the stdlib only.

These apps run in the frameworks' own venvs, without the project, as black-box clients
(lab/clients/command.py); a script's own folder is on its sys.path, so `import app_io` works there.

    book(slot, call_id)    the lab's backend API ($LAB_BACKEND_URL, POST /book): waits for the commit
    logger(name)           print to stderr (client.log in the run folder), prefixed with the app's name
    user_lines(log)        async iterator over the user's lines on stdin, one per line, until EOF
    app_params(argv)       the scenario's client_params for this app: `--params JSON` (the lab passes
                           every parameter the framework declares, lab/clients/frameworks); {} without
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import AsyncIterator, Callable

BOOK_TIMEOUT_S = 70      # the API answers once the booking commits (at most 60 s, then "pending")


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
