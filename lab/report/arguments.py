"""The tool arguments a run's user never gave: each call's arguments the twin's model filled with
a default because the line did not name them (lab.conversation.lines, `args_from` "default").

A call of `get_weather(location="location not given")` is a call the user did not mean: the agent
answered a question nobody asked. The verdict lists these (`defaulted_args`) and the summary shows
them beside the run, so a user sees when a line did not say what the tool needed.

    rows = defaulted_args(twin_events)     # [{"tool", "arg", "value", "line", "ms"}], in call order

Pure: the twin's record in, rows out.
"""
from __future__ import annotations

from typing import Any, Iterable

from lab.conversation.lines import DEFAULTED
from lab.events import Event


def defaulted_args(twin: Iterable[Event] | None) -> list[dict[str, Any]]:
    """Each argument of a call the twin's model made that the user's line did not give, once per
    (tool, argument, line)."""
    out, seen = [], set()
    for e in twin or ():
        if e.kind != "twin.model" or not e.get("tool"):
            continue
        why = (e.get("match") or {}).get("args_from") or {}
        args = e.get("args") or {}
        for arg, src in why.items():
            key = (e.get("tool"), arg, e.get("text"))
            if src != DEFAULTED or key in seen:
                continue
            seen.add(key)
            out.append({"tool": e.get("tool"), "arg": arg, "value": args.get(arg), "line": e.get("text"), "ms": e.ms})
    return out


def describe(rows: list[dict[str, Any]]) -> list[str]:
    """One line per defaulted argument, for the verdict's notes and the summary."""
    return [f"{r['tool']}({r['arg']}={r['value']!r}): the line \"{str(r['line'] or '')[:60]}\" did not give it "
            f"(defaulted)" for r in rows]
