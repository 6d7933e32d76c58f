"""A lab process to SIGKILL in a test: a Python script run as a child of its own session (so a kill
reaches it alone) that prints one JSON line once it has set up what the test wants left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start(script: str) -> tuple[subprocess.Popen, dict]:
    """Run `script` (dedented) from the repository; its first stdout line, as JSON. The caller kills it."""
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    line = p.stdout.readline()
    if not line:
        p.kill()
        p.wait()
        raise AssertionError(f"the child ended before it reported (exit {p.returncode})")
    return p, json.loads(line)


def kill_9(p: subprocess.Popen) -> None:
    """SIGKILL: no handler, no atexit, nothing of the child's own clean-up runs."""
    if p.poll() is None:
        p.kill()
    p.wait()
