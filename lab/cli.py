"""The `lab` command. The Makefile calls it; it knows nothing of the rooms' internals.

Each subcommand lives in the module that owns it and registers itself through `add_parser(sub)`;
this file only wires them together and turns a LabError into one line and an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from lab.errors import run_command

# (module, what it adds): each module exposes add_parser(subparsers) and sets args.func.
SUBCOMMAND_MODULES = [
    "lab.run",          # lab run, lab list
    "lab.topology.down",  # lab down
    "lab.agent",        # lab agent (inside the client namespace; internal)
    "lab.report.cli",   # lab report
    "lab.twin.cli",     # lab twin serve
    "lab.proxy",        # lab proxy serve
    "lab.bench.cli",    # lab bench twin|faults|recovery
    "lab.soak",         # lab soak
    "lab.matrix",       # lab matrix
    "lab.report.board", # lab board write|compare
    "lab.live.cli",     # lab scan, lab drift
    "lab.record.cli",   # lab conversation record
    "netem.cli",        # lab netem probe|apply|clear
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lab", description="livelab: network fault-injection lab for Live API clients")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (e.name == name or name.startswith(e.name + ".")):
                continue  # that room is not built yet; its commands are simply absent
            raise
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return run_command(args.func, args)
    except KeyboardInterrupt:
        print("lab: interrupted; what was recorded so far is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
