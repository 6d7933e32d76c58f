"""Loading a user's agent where its framework keeps it (framework venvs only; stdlib + the framework).

    load(kind, module, attr)    the object, checked to be what the framework's host runs; EntryError
                                (one line) when the module does not import, has no such attribute,
                                or holds the wrong kind of object
    from_argv(kind, argv, log)  a host's `--entry MODULE ATTR`: (module, attr, the object); on an
                                EntryError the one line goes to the log and the host exits 3
    python entry.py check KIND MODULE ATTR
                                the same load, run by the lab in the framework's venv before a run
                                starts: exit 0, or the one line on stdout and exit 3

MODULE is a dotted module found from the current folder (where `lab run` was started), or a path
to a .py file or to a package folder (its parent goes on sys.path, as `python path/to/file.py` and
ADK's own loader do). For ADK, a package whose `root_agent` lives in its `agent` submodule (ADK's
layout: my_agent/__init__.py imports my_agent/agent.py) is found too.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from pathlib import Path
from typing import Any

EXIT_BAD_ENTRY = 3


class EntryError(Exception):
    """One line: what is wrong with the user's agent."""


def _import(module: str) -> Any:
    name = module
    if "/" in module or module.endswith(".py"):
        path = Path(module).resolve()
        if not path.exists():
            raise EntryError(f"{module} does not exist (from {os.getcwd()})")
        folder, name = (path.parent, path.stem) if path.is_file() else (path.parent, path.name)
        sys.path.insert(0, str(folder))
    else:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name or name.startswith(f"{e.name}."):
            raise EntryError(f"no module {name!r} (looked from {os.getcwd()})") from None
        raise EntryError(f"{module} does not import: {_last_frame(e)}") from None
    except BaseException as e:      # the user's module ran and failed: say where, in one line
        raise EntryError(f"{module} does not import: {_last_frame(e)}") from None


def _last_frame(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{where}"


def _attr(mod: Any, module: str, attr: str, kind: str) -> Any:
    if hasattr(mod, attr):
        return getattr(mod, attr)
    if kind == "adk" and not hasattr(mod, "agent") and hasattr(mod, "__path__"):
        try:
            importlib.import_module(f"{mod.__name__}.agent")
        except ModuleNotFoundError:
            pass
    sub = getattr(mod, "agent", None)
    if kind == "adk" and inspect.ismodule(sub) and hasattr(sub, attr):
        return getattr(sub, attr)
    raise EntryError(f"{module} has no attribute {attr!r}")


def _check_kind(kind: str, obj: Any, where: str) -> None:
    if kind == "adk":
        from google.adk.agents import BaseAgent
        if not isinstance(obj, BaseAgent):
            raise EntryError(f"{where} is {type(obj).__name__}, not an ADK agent (google.adk.agents.BaseAgent)")
    elif kind == "livekit":
        from livekit.agents import Agent
        if not (inspect.isclass(obj) and issubclass(obj, Agent)):
            what = obj.__name__ if inspect.isclass(obj) else type(obj).__name__
            raise EntryError(f"{where} is {what}, not a subclass of livekit.agents.Agent")
        try:
            inspect.signature(obj).bind()
        except TypeError:
            raise EntryError(f"{where} cannot be made without arguments: the lab builds it as {obj.__name__}()") \
                from None
    elif kind == "pipecat":
        if not inspect.iscoroutinefunction(obj):
            raise EntryError(f"{where} is {type(obj).__name__}, not an async function taking (transport, runner_args)")
        try:
            inspect.signature(obj).bind(None, None)
        except TypeError:
            try:
                inspect.signature(obj).bind(None)
            except TypeError:
                raise EntryError(f"{where} takes neither (transport, runner_args) nor (transport)") from None
    else:
        raise EntryError(f"no framework {kind!r}")


def load(kind: str, module: str, attr: str) -> Any:
    obj = _attr(_import(module), module, attr, kind)
    _check_kind(kind, obj, f"{module}:{attr}")
    return obj


def from_argv(kind: str, argv: list[str], log) -> tuple[str, str, Any]:
    if "--entry" not in argv or argv.index("--entry") + 2 >= len(argv):
        raise SystemExit("usage: --entry MODULE ATTR")
    i = argv.index("--entry")
    module, attr = argv[i + 1], argv[i + 2]
    try:
        return module, attr, load(kind, module, attr)
    except EntryError as e:
        log(e)
        raise SystemExit(EXIT_BAD_ENTRY) from None


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[1] != "check":
        print("usage: entry.py check KIND MODULE ATTR")
        return 2
    try:
        load(argv[2], argv[3], argv[4])
    except EntryError as e:
        print(e, flush=True)
        return EXIT_BAD_ENTRY
    return 0


if __name__ == "__main__":
    # the lab's check exits as soon as it knows: a user's module may leave threads behind
    sys.stdout.flush()
    os._exit(main(sys.argv))
