"""Lines-only conversations: the tools built from what a client declares, and a user's line read for them.

With only the user's lines, the twin knows the agent's tools once the client's setup declares them
(name, description, a JSON schema of parameters). This module makes a conversation tool of each:
its side effect guessed from the verbs of its name and description (an assumption, recorded as
one), its action words inflected from its verb, its arguments read from a line by their names and
types (an order number, a date, a time, a party size, a quoted name). A line is asked of the tool
whose name and description it matches best. Deterministic: scores, then declaration order.

The same extraction fills a conversation file's `from_line` arguments. Pure: no I/O.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Mapping

from lab.conversation.format import Arg, Tool
from lab.conversation.semantics import ActionWords, ToolSemantics

# verbs that change the world, and verbs that only read it (assumption: the usual English of tool names)
SIDE_VERBS = ("refund", "book", "cancel", "create", "send", "pay", "reserve", "order", "delete", "remove",
              "update", "transfer", "submit", "schedule", "charge", "purchase", "buy", "place", "add", "set",
              "post", "issue", "approve", "reject", "close", "open", "register", "sign", "subscribe", "return")
READ_VERBS = ("check", "get", "look", "lookup", "list", "status", "find", "search", "fetch", "read", "query",
              "show", "view", "track", "describe", "verify", "lookup")
# words of a question about something's state: they lean to a tool that reads (assumption)
_ASKING = ("where", "what", "when", "which", "status", "track", "is", "does", "how")
_STOPWORDS = {"a", "an", "the", "of", "to", "for", "by", "and", "or", "in", "on", "at", "with", "my", "me", "i",
              "you", "your", "it", "its", "is", "be", "please", "can", "could", "would", "this", "that", "from",
              "an", "as", "given", "their", "s", "id", "number"}

_TIME = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s?(am|pm)\b", re.I)
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2}|today|tomorrow|tonight|monday|tuesday|wednesday|thursday|friday|saturday|"
                   r"sunday|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?)\b", re.I)
_NUMBER = re.compile(r"(?:#|\b(?:order|number|no\.?|id|ticket|account|invoice)\s*#?\s*)?\b([A-Z]{0,3}-?\d{3,})\b", re.I)
_PARTY = re.compile(r"\b(?:for|party of|table for)\s+(\d{1,2})\b|\b(\d{1,2})\s+(?:people|persons|guests|of us)\b", re.I)
_QUOTED = re.compile(r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d|(?<!\w)'([^']+)'(?!\w)")


def extract(kind: str, text: str) -> list[str]:
    """The values of one kind a line names, in order, each once."""
    t = text or ""
    if kind == "time":
        vals = [f"{int(h)}{':' + m if m else ''}{half.lower()}" for h, m, half in _TIME.findall(t)]
    elif kind == "date":
        vals = [d.lower() if not d[0].isdigit() else d for d in _DATE.findall(t)]
    elif kind == "number":
        vals = [n for n in _NUMBER.findall(_TIME.sub(" ", t))]
    elif kind == "party":
        vals = [a or b for a, b in _PARTY.findall(t)]
    elif kind == "quoted":
        vals = [next(x for x in g if x) for g in _QUOTED.findall(t)]
    else:
        vals = []
    out: list[str] = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


def fill(tool: Tool, text: str, base: Mapping[str, Any]) -> tuple[list[dict], dict]:
    """The calls a line asks of `tool` (one, or one per value of an `each` argument naming two or
    more) and, per argument, where its value came from."""
    args = dict(base)
    why: dict[str, str] = {a: "default" for a in args}
    many: tuple[str, list[str]] | None = None
    for a in tool.args:
        if a.from_line is None:
            continue
        vals = extract(a.from_line, text)
        if a.from_line == "number" and a.name in ("party", "party_size", "guests", "people"):
            vals = extract("party", text) or vals
        if not vals:
            continue
        if a.each:
            if len(vals) > 1 and many is None:
                many = (a.name, [a.template.replace("{value}", v) for v in vals])
                why[a.name] = f"{a.from_line} x{len(vals)} from the line"
            continue                # one value: the conversation's own (the studies' slot)
        args[a.name] = _typed(a, a.template.replace("{value}", vals[0]))
        why[a.name] = f"{a.from_line} {vals[0]!r} from the line"
    if many:
        return [{**args, many[0]: v} for v in many[1]], why
    return [args], why


def _typed(a: Arg, v: str) -> Any:
    if isinstance(a.value, int) and not isinstance(a.value, bool) and v.isdigit():
        return int(v)
    return v


# ---- tools from declarations ------------------------------------------------------------------

def _tokens(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text or "").lower()) if w]


def _stem(w: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w


def _inflect(verb: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    base = verb[:-1] if verb.endswith("e") else verb
    doing = (base + "ing",)
    done = (base + "ed",) if not verb.endswith("e") else (verb + "d",)
    if verb in ("pay",):
        done = ("paid",)
    if verb in ("send",):
        done = ("sent",)
    if verb in ("buy",):
        done = ("bought",)
    return doing, done + ("done", "processed", "completed")


def side_effect_of(name: str, description: str) -> tuple[bool, str, str]:
    """(side effect, the verb, why) guessed from the tool's name first, then its description."""
    for where, words in (("name", _tokens(name)), ("description", _tokens(description))):
        for w in words:
            s = _stem(w)
            if w in SIDE_VERBS or s in SIDE_VERBS:
                return True, (w if w in SIDE_VERBS else s), f"the verb {w!r} in its {where} changes something"
            if w in READ_VERBS or s in READ_VERBS:
                return False, (w if w in READ_VERBS else s), f"the verb {w!r} in its {where} only reads"
    return False, (_tokens(name) or ["use"])[0], "no verb known in its name or description: assumed to only read"


def _arg_kind(name: str, schema: Mapping[str, Any]) -> str | None:
    n = name.lower()
    typ = str(schema.get("type") or "").lower()
    if any(w in n for w in ("party", "guest", "people", "size", "persons")):
        return "party"
    if "date" in n or n in ("day", "when"):
        return "date"
    if "time" in n or "slot" in n or "hour" in n:
        return "time"
    if any(w in n for w in ("order", "id", "number", "ticket", "account", "invoice")) or typ in ("integer", "number"):
        return "number"
    if typ in ("string", ""):
        return "quoted"
    return None


def _properties(decl: Mapping[str, Any]) -> tuple[dict, list]:
    schema = decl.get("parameters") or decl.get("parametersJsonSchema") or {}
    if not isinstance(schema, Mapping):
        return {}, []
    props = schema.get("properties") or {}
    return (dict(props) if isinstance(props, Mapping) else {}), list(schema.get("required") or [])


def tools_from_declarations(declared: list[dict]) -> tuple[dict[str, Tool], dict[str, str]]:
    """{name: Tool} built from the client's declarations, and {name: why its side effect was guessed}."""
    tools: dict[str, Tool] = {}
    why: dict[str, str] = {}
    for d in declared:
        name = str(d.get("name") or "")
        if not name:
            continue
        desc = str(d.get("description") or "")
        side, verb, reason = side_effect_of(name, desc)
        props, required = _properties(d)
        args = []
        for pname, pschema in props.items():
            pschema = pschema if isinstance(pschema, Mapping) else {}
            enum = pschema.get("enum")
            args.append(Arg(str(pname), value=(enum[0] if isinstance(enum, list) and enum else None),
                            from_line=_arg_kind(str(pname), pschema)))
        key_fields = tuple(a.name for a in args if a.name in required) or tuple(a.name for a in args[:1])
        obj = next((w for w in _tokens(name) if _stem(w) != _stem(verb) and w not in _STOPWORDS), "")
        doing, done = _inflect(verb)
        words = ActionWords(verb=(verb,), doing=doing, done=done, noun=tuple(w for w in (verb, obj) if w))
        subject = f"{obj} {{{key_fields[0]}}}" if obj and key_fields else (obj or "it")
        subject_cap = subject[:1].upper() + subject[1:]
        if side:
            say = {"done": f"{subject_cap} is {done[0]}.", "failed": f"{subject_cap} was not {done[0]}.",
                   "pending": f"I'm {doing[0]} {subject} now.", "status_done": f"Yes, {subject} is {done[0]}.",
                   "status_failed": f"No, {subject} was not {done[0]}.",
                   "status_none": f"I haven't {done[0]} anything for you.",
                   "note_done": f"{subject_cap} has been {done[0]}.",
                   "status_note_done": f"Yes, {subject} has been {done[0]}.",
                   "again_pending": f"I'm already {doing[0]} {subject}.",
                   "again_done": f"{subject_cap} is already {done[0]}.",
                   "reissue": f"I'm {doing[0]} {subject} for you.", "stopped": f"Okay, I won't {verb} it.",
                   "other_pending": f"I'm {doing[0]} {subject} now."}
            stop = {"claim": f"{subject_cap} is already {done[0]}.", "after_commit": f"{subject_cap} was already {done[0]}.",
                    "contradict": f"{subject_cap} was not {done[0]}."}
        else:
            say = {"done": f"{subject_cap}: {{response}}.", "failed": f"I couldn't {verb} {subject}.",
                   "pending": f"I'm looking into {subject} now.", "status_done": f"{subject_cap}: {{response}}.",
                   "status_none": "I haven't looked anything up yet."}
            stop = {}
        tools[name] = Tool(semantics=ToolSemantics(name=name, side_effect=side, business_key=key_fields, words=words),
                           description=desc, asks=(), behavior=None, args=tuple(args), say=say, stop=stop)
        why[name] = reason
    return tools, why


def renamed(tool: Tool, name: str) -> Tool:
    """A conversation tool under the name the client declares it by."""
    return replace(tool, semantics=replace(tool.semantics, name=name))


def best_tool(text: str, tools: Mapping[str, Tool], declared: list[dict]) -> tuple[str | None, dict]:
    """The tool a line asks for, with the score and the words that matched; None below a score of 2."""
    words = {_stem(w) for w in _tokens(text) if w not in _STOPWORDS}
    asking = any(w in _tokens(text) for w in _ASKING) or text.strip().endswith("?")
    best: tuple[float, int, str, list[str]] | None = None
    for i, (name, tool) in enumerate(tools.items()):
        name_words = {_stem(w) for w in _tokens(name) if w not in _STOPWORDS}
        desc_words = {_stem(w) for w in _tokens(tool.description) if w not in _STOPWORDS} - name_words
        hit_name, hit_desc = sorted(words & name_words), sorted(words & desc_words)
        score = 2.0 * len(hit_name) + 1.0 * len(hit_desc)
        verb = tool.semantics.words.verb[0] if tool.semantics.words.verb else ""
        if verb and _stem(verb) in words:
            score += 2.0            # the line uses the tool's own verb
        if asking and not tool.semantics.side_effect and not any(_stem(v) in words for v in SIDE_VERBS):
            score += 1.0            # a question with no verb that changes anything: a tool that reads
        cand = (score, -i, name, hit_name + hit_desc)
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None or best[0] < 2.0:
        return None, {"score": best[0] if best else 0.0}
    return best[2], {"score": best[0], "matched": best[3]}
