"""The conversation a run actually had, as a conversation file: `lab conversation record RUN_DIR`.

A live session that went wrong (or any twin run) becomes a regression test: the twin replays what
the user said and what the model did with the agent's tools, under whatever fault a scenario adds
(`lab run SCENARIO --conversation recorded.yaml`). Read from the run folder only, as the twin saw it:

- each user turn (`twin.model`: the line as the twin read it, and what it decided) in order;
- the model's tool calls with their arguments (`twin.tool_call`) and how their results came back
  (`twin.tool_response`); a call becomes the turn's `call:` and `args:`, the tool's observed
  arguments its `args` values, its business key the observed part of the one the run played;
- what the model said after each turn (`twin.say`): a turn with no call keeps it as its `say:`; a
  tool's first sentence after a result that did (or did not) happen is its `say: done` (`failed`),
  and its answer to a status question or a stop the sentence for that situation (`status_done`,
  `pending`, `stopped`, ...), so a replay answers from what happened as the run did;
- the timing, as a comment over each turn: when the user spoke, when the call and its result came,
  when the model answered (the format has no timing: the replay's timing is the scenario's).

Scrubbed: handles and audio are never read; anything in the text that looks like an API key
(`AIza...`) or is the twin's own key becomes `<key>`. The tools come from the run's
`twin.conversation` (what the client declared), else its conversation.json.

    record(run_dir) -> str        the conversation file's text; LabError (one line) when the run
                                  holds no conversation to record
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lab.conversation import semantics
from lab.errors import LabError

KEY_RE = re.compile(r"AIza[0-9A-Za-z_\-]{20,}")
SCRUBBED = "<key>"
TWIN_FILE = "twin.jsonl"
# a tool response's status words that say the action did not happen (the rest: it did, or is pending)
NOT_DONE = ("not_", "fail", "error", "refused", "cancel")
# what the twin's model did with a status question or a stop (twin.model `plan`), and the tool sentence
# (the conversation format's `say` key) its words stand for
PLAN_SAY = {"status-pending": "pending", "status-booked": "status_done", "status-not": "status_failed",
            "status-none": "status_none", "stop": "stopped"}


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        for ln in path.read_text().splitlines():
            if ln.strip():
                try:
                    out.append(json.loads(ln))
                except json.JSONDecodeError:
                    continue        # a line cut by a killed run
    except OSError:
        return []
    return out


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    out = KEY_RE.sub(SCRUBBED, str(text))
    for s in secrets:
        if s:
            out = out.replace(s, SCRUBBED)
    return out


def _q(value: Any) -> str:
    """A YAML scalar or flow collection: JSON is valid YAML and quotes every string plainly."""
    return json.dumps(value, ensure_ascii=False)


def _tools(twin: list[dict], run_dir: Path) -> list[dict[str, Any]]:
    decl = next((r.get("tools") for r in twin if r.get("kind") == semantics.EVENT_KIND and r.get("tools")), None)
    if decl:
        return decl
    try:
        return json.loads((run_dir / semantics.JSON_FILE).read_text()).get("tools") or []
    except (OSError, json.JSONDecodeError):
        return []


def _done(status: Any) -> bool:
    s = str(status or "").lower()
    return bool(s) and not any(w in s for w in NOT_DONE)


def record(run_dir: Path | str, secrets: tuple[str, ...] = ()) -> str:
    run_dir = Path(run_dir)
    twin = _records(run_dir / TWIN_FILE)
    if not twin:
        raise LabError(f"{run_dir}: no {TWIN_FILE}: a conversation is recorded from a twin or live run folder")
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    secrets = tuple(secrets) + ("lab-twin-key",)
    turns_at = [r for r in twin if r.get("kind") == "twin.model" and r.get("text")]
    if not turns_at:
        raise LabError(f"{run_dir}: the twin read no user turn (no twin.model in {TWIN_FILE}): nothing to record")
    tools = {t["name"]: t for t in _tools(twin, run_dir) if t.get("name")}
    calls = [r for r in twin if r.get("kind") == "twin.tool_call"]
    responses = {r.get("id"): r for r in twin if r.get("kind") == "twin.tool_response"}
    says = [r for r in twin if r.get("kind") == "twin.say" and r.get("text")]
    for c in calls:                 # a tool the client called but the record did not declare
        tools.setdefault(c.get("name"), {"name": c.get("name"), "side_effect": False, "business_key": [], "words": {}})
    if not tools:
        raise LabError(f"{run_dir}: the run declared no tools and called none: nothing for a conversation to hold")

    bounds = [r["ms"] for r in turns_at] + [float("inf")]
    args_seen: dict[str, dict[str, Any]] = {n: {} for n in tools}
    tool_say: dict[str, dict[str, str]] = {n: {} for n in tools}
    turn_rows: list[tuple[list[str], dict[str, Any]]] = []
    for i, t in enumerate(turns_at):
        lo, hi = t["ms"], bounds[i + 1]
        mine = [c for c in calls if lo <= c.get("ms", -1) < hi]
        said = [s for s in says if lo <= s.get("ms", -1) < hi]
        note = [f"at {lo / 1000:.1f} s ({t.get('source', '?')}): the twin read it as {t.get('plan') or '?'}"]
        row: dict[str, Any] = {"user": scrub(t["text"], secrets)}
        for c in mine:
            resp = responses.get(c.get("id"), {})
            args = {k: v for k, v in (c.get("args") or {}).items()}
            note.append(f"  {c.get('name')}({', '.join(f'{k}={v}' for k, v in args.items())}) at "
                        f"+{(c['ms'] - lo) / 1000:.1f} s; result {resp.get('status', 'none came back')}"
                        + (f" at +{(resp['ms'] - lo) / 1000:.1f} s" if resp.get("ms") is not None else ""))
            for k, v in args.items():
                args_seen[c["name"]].setdefault(k, v)
            if "call" not in row:       # the turn's first call is what it asks for
                row["call"], row["args"] = c["name"], args
            if resp and said:
                after = [s for s in said if s["ms"] > resp.get("ms", lo)]
                if after:
                    tool_say[c["name"]].setdefault("done" if _done(resp.get("status")) else "failed",
                                                   scrub(after[0]["text"], secrets))
        situation = PLAN_SAY.get(str(t.get("plan")))
        about = (t.get("match") or {}).get("tool") or next((n for n, d in tools.items() if d.get("side_effect")), None)
        if said and situation and about in tool_say:
            tool_say[about].setdefault(situation, scrub(said[0]["text"], secrets))
        if said:
            note.append(f"  the model said at +{(said[0]['ms'] - lo) / 1000:.1f} s: {scrub(said[0]['text'], secrets)}")
            # a status question or a stop is answered from what happened, not from a fixed sentence
            if "call" not in row and (t.get("match") or {}).get("intent") in (None, "OTHER", "CALL"):
                row["say"] = scrub(said[0]["text"], secrets)
        turn_rows.append((note, row))

    out = [f"# Recorded by `lab conversation record` from {run_dir.name} (scenario "
           f"{(meta.get('scenario') or {}).get('name', '?')}, client {meta.get('client', '?')}): the user's",
           "# turns, the model's tool calls and what it said, as the twin saw them. Handles, keys and",
           "# audio are not recorded; timing is in the comments (a replay's timing is its scenario's).",
           f"name: {_q('recorded-' + run_dir.name)}",
           f"description: {_q('the conversation of run ' + run_dir.name)}",
           f"source: {_q('recorded from ' + run_dir.name)}",
           "tools:"]
    for name, t in tools.items():
        seen = args_seen.get(name, {})
        key = [k for k in (t.get("business_key") or []) if k in seen]
        out.append(f"  {name}:")
        out.append(f"    side_effect: {'true' if t.get('side_effect') else 'false'}")
        if key:
            out.append(f"    business_key: {_q(key)}")
        dropped = [k for k in (t.get("business_key") or []) if k not in seen]
        if dropped:
            out.append(f"    # business key fields never seen in a call, so not recorded: {', '.join(dropped)}")
        words = {k: v for k, v in (t.get("words") or {}).items() if v}
        if words:
            out.append(f"    words: {_q(words)}")
        if seen:
            out.append("    args:")
            out += [f"      {k}: {{value: {_q(v)}}}" for k, v in seen.items()]
        if tool_say.get(name):
            out.append("    say:")
            out += [f"      {k}: {_q(v)}" for k, v in tool_say[name].items()]
    out.append("turns:")
    for note, row in turn_rows:
        out += [f"  # {n}" for n in note]
        out.append(f"  - user: {_q(row['user'])}")
        if "call" in row:
            out.append(f"    call: {row['call']}")
            if row["args"]:
                out.append(f"    args: {_q(row['args'])}")
        elif "say" in row:
            out.append(f"    say: {_q(row['say'])}")
    return "\n".join(out) + "\n"
