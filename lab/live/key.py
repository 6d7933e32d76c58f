"""The API key for live mode: from the environment, else from a .env file, never printed.

Each protocol's live key has one variable (`KEY_VAR`): GEMINI_API_KEY for the Live API,
OPENAI_API_KEY for the OpenAI Realtime API (the variable openai-python itself reads).
`load_key(protocol=...)` returns it from `os.environ`, or from a `.env` file (the current
directory or its parents, or an explicit path) read with python-dotenv's `dotenv_values`, which
parses the file without exporting anything into `os.environ`: a key that lives only in .env does
not leak into the environment of child processes (tcpdump, the agent's own logs). The caller
passes the key explicitly to the client that needs it.

A missing key raises a one-line LabError naming the variable. `mask(key)` is the only form of the
key fit for output.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from dotenv import dotenv_values, find_dotenv

from lab.errors import LabError
from lab.protocols import GEMINI, OPENAI, PROTOCOLS

# the one variable each protocol's live key is read from (env or .env)
KEY_VAR: dict[str, str] = {GEMINI: "GEMINI_API_KEY", OPENAI: "OPENAI_API_KEY"}
ENV_NAME = KEY_VAR[GEMINI]


def key_var(protocol: str = GEMINI) -> str:
    """The variable `protocol`'s live key is read from."""
    if protocol not in KEY_VAR:
        raise LabError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return KEY_VAR[protocol]


def missing(name: str) -> str:
    return f"no {name} in the environment or .env; live mode needs a key"


MISSING = missing(ENV_NAME)


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
             required: bool = True, name: str | None = None, protocol: str = GEMINI) -> str | None:
    """`protocol`'s key (or the variable `name`) from `env` (default os.environ), else from .env;
    LabError if required and absent."""
    name = name or key_var(protocol)
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
        raise LabError(missing(name))
    return None


def load_keys(env: Mapping[str, str] | None = None, dotenv_path: Path | str | None = None) -> list[str]:
    """Every protocol's live key that is set (env or .env): what `lab scan` looks for."""
    keys = (load_key(env, dotenv_path, required=False, protocol=p) for p in PROTOCOLS)
    return list(dict.fromkeys(k for k in keys if k))


def mask(key: str | None) -> str:
    """A key as it may be shown: its length only."""
    return "<no key>" if not key else f"<key: {len(key)} chars>"
