"""The fork server's protocol: what a request may hold and how it travels. Pure; no processes here.

One request per connection (an AF_UNIX SOCK_SEQPACKET socket, so one message is one datagram):

    client -> server   {"argv": [...], "env": {...}, "cwd": "...", "netns": "ll-...", "new_session": true}
                       with three file descriptors beside it (SCM_RIGHTS): the child's stdin, stdout, stderr
    server -> client   {"pid": N}            the child is forked and entering its namespace
                   or  {"error": "..."}      nothing was forked
    server -> client   {"exit": CODE}        later, once it ended: Popen's returncode (-N for signal N)

A command is servable when it is the lab's own entry point run by the server's interpreter
(`<python> -m lab ...`) with the same interpreter settings (PYTHON* variables, one excepted that
the child applies itself): the child then runs the entry point the way `python -m lab` would.
Anything else (tcpdump, another venv's app, a different interpreter) is not, and is exec'd.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

ENTRY = ("-m", "lab")           # the entry point the server has pre-imported
CHILD_ENV = ("PYTHONUNBUFFERED",)   # interpreter settings the child applies itself (its stdio)
MAX_MESSAGE = 1 << 20           # a request's env is a few KiB; a bound for the receive buffer
FDS = 3                         # stdin, stdout, stderr


class ProtocolError(ValueError):
    """A message that is not one of the protocol's."""


@dataclass(frozen=True)
class Request:
    argv: tuple[str, ...]       # as Popen would have run it: (python, "-m", "lab", ...)
    env: dict[str, str]
    cwd: str
    netns: str
    new_session: bool

    def encode(self) -> bytes:
        return encode({"argv": list(self.argv), "env": self.env, "cwd": self.cwd, "netns": self.netns,
                       "new_session": self.new_session})

    @classmethod
    def decode(cls, data: bytes) -> "Request":
        msg = decode(data)
        try:
            argv, env, cwd, netns, new_session = (msg[k] for k in ("argv", "env", "cwd", "netns", "new_session"))
        except KeyError as e:
            raise ProtocolError(f"a request without {e.args[0]!r}") from None
        if not (isinstance(argv, list) and len(argv) > len(ENTRY) and all(isinstance(a, str) for a in argv)):
            raise ProtocolError("argv: a list of strings, the interpreter, -m lab and its arguments")
        if tuple(argv[1:1 + len(ENTRY)]) != ENTRY:
            raise ProtocolError(f"argv: only {' '.join(ENTRY)} is served, not {argv[1:3]}")
        if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ProtocolError("env: a mapping of strings")
        if not (isinstance(cwd, str) and cwd.startswith("/")):
            raise ProtocolError("cwd: an absolute path")
        if not (isinstance(netns, str) and netns and "/" not in netns and netns not in (".", "..")):
            raise ProtocolError(f"netns: a namespace name, not {netns!r}")
        if not isinstance(new_session, bool):
            raise ProtocolError("new_session: true or false")
        return cls(tuple(argv), dict(env), cwd, netns, new_session)

    def module_argv(self) -> list[str]:
        """sys.argv for the entry point, as `python -m lab A B` sets it (argv[0] is filled in by runpy)."""
        return ["-m", *self.argv[1 + len(ENTRY):]]


def encode(msg: dict) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"a message of {len(data)} bytes (at most {MAX_MESSAGE})")
    return data


def decode(data: bytes) -> dict:
    try:
        msg = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("a message is a JSON object")
    return msg


def interpreter_env(env: dict[str, str]) -> dict[str, str]:
    """The PYTHON* variables that shape an interpreter at its start (and so must match the server's)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in CHILD_ENV}


def servable(argv: list[str], env: dict[str, str], executable: str, server_env: dict[str, str]) -> str | None:
    """None if the server can run `argv` with `env`; else why not (the command is then exec'd)."""
    if len(argv) <= len(ENTRY) or argv[0] != executable or tuple(argv[1:1 + len(ENTRY)]) != ENTRY:
        return "not the lab's entry point under this interpreter"
    if interpreter_env(env) != interpreter_env(server_env):
        return "other interpreter settings (PYTHON* variables) than the fork server's"
    return None
