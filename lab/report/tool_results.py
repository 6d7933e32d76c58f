"""Tool results by call id, as the twin received them: what a client owed the model and delivered.

Seed 003 (livekit/agents PR #6481 and its review) and pipecat#5465 are about tool results that
never reach the model across a websocket restart, reach it twice, or bring a second, spurious
reply. A black-box client cannot say what it sent; the twin's record can (twin.jsonl: every
twin.tool_call and twin.tool_response by call id, with `known`: whether the session that received
it had issued that id, also before a resume; every user turn it heard and every line it said).

    tool_result_metrics(events, twin)   the metrics below; each None without a twin record

- tool_results_missing: call ids the twin issued that no tool response ever answered (the turn
  that waits for one hangs: the released plugin in k1);
- tool_results_repeated: call ids answered more than once;
- tool_results_unknown: responses the receiving session never issued (an id from an old session
  sent to a new one, which cannot use it);
- replies_per_tool_result: the most lines the model said between one tool response and the next
  user line (the answer to the result is one; the PR's "." nudge adds another, review finding 3);
- unscripted_user_turns: user turns the twin heard beyond the lines the scenario said (the nudge
  is one). Pure.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from lab.events import Event

NAMES = ("tool_results_missing", "tool_results_repeated", "tool_results_unknown", "replies_per_tool_result",
         "unscripted_user_turns")


def tool_result_metrics(events: Iterable[Event], twin: Iterable[Event] | None) -> dict[str, Any]:
    if twin is None:
        return dict.fromkeys(NAMES)
    tw = sorted(twin, key=lambda e: e.ms)
    calls = {e.get("id") for e in tw if e.kind == "twin.tool_call"}
    responses = [e for e in tw if e.kind == "twin.tool_response"]
    answered = Counter(e.get("id") for e in responses)
    # the user's lines as the agent said them (the lab's own record, not the twin's)
    said = sorted(e.ms for e in events if e.kind == "user.say")
    replies = 0
    for r in responses:
        nxt = next((ms for ms in said if ms > r.ms), float("inf"))
        replies = max(replies, sum(1 for e in tw if e.kind == "twin.say" and r.ms <= e.ms < nxt))
    heard = sum(1 for e in tw if e.kind == "twin.user")
    return {
        "tool_results_missing": len(calls - set(answered)),
        "tool_results_repeated": sum(1 for n in answered.values() if n > 1),
        "tool_results_unknown": sum(1 for e in responses if e.get("known") is False),
        "replies_per_tool_result": replies if responses else None,
        "unscripted_user_turns": max(0, heard - len(said)),
    }
