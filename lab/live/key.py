"""The API key for live mode: from the environment, else from a .env file, never printed.

`load_key()` returns GEMINI_API_KEY from `os.environ`, or from a `.env` file (the current
directory or its parents, or an explicit path) read with python-dotenv's `dotenv_values`, which
parses the file without exporting anything into `os.environ`: a key that lives only in .env does
not leak into the environment of child processes (tcpdump, the agent's own logs). The caller
passes the key explicitly to the client that needs it.

A missing key raises a one-line LabError. `mask(key)` is the only form of the key fit for output.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from dotenv import dotenv_values, find_dotenv

from lab.errors import LabError

ENV_NAME = "GEMINI_API_KEY"
MISSING = "no GEMINI_API_KEY in the environment or .env; live mode needs a key"


def find_env_file(start: Path | str | None = None) -> Path | None:
    """The nearest .env from `start` (default: the current directory) upwards, if any."""
    if start is not None:
        d = Path(start).resolve()
        for p in (d, *d.parents):
            if (p / ".env").is_file():
                return p / ".env"
        return None
    found = find_dotenv(usecwd=True)
    return Path(found) if found else None


def load_key(env: Mapping[str, str] | None = None, dotenv_path: Path | str | None = None,
             required: bool = True, name: str = ENV_NAME) -> str | None:
    """GEMINI_API_KEY from `env` (default os.environ), else from .env; LabError if required and absent."""
    env = os.environ if env is None else env
    key = (env.get(name) or "").strip()
    if key:
        return key
    path = Path(dotenv_path) if dotenv_path is not None else find_env_file()
    if path is not None and path.is_file():
        key = (dotenv_values(path).get(name) or "").strip()
        if key:
            return key
    if required:
        raise LabError(MISSING)
    return None


def mask(key: str | None) -> str:
    """A key as it may be shown: its length only."""
    return "<no key>" if not key else f"<key: {len(key)} chars>"
