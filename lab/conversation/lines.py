"""Lines-only conversations: the tools built from what a client declares, and a user's line read for them.

With only the user's lines, the twin knows the agent's tools once the client's setup declares them
(name, description, a JSON schema of parameters). This module makes a conversation tool of each:
its side effect guessed from the verbs of its name and description (an assumption, recorded as
one), its action words inflected from its verb, its arguments read from a line by their names and
types (an order number, a date, a time, a party size, a quoted name) and then by their schemas (an
enum value the line names, a name after "under", a free-text argument's sentence of the line); a
required argument the line does not give gets a value of its declared type (declared_value), so a
framework that checks its tool's arguments gets a call it accepts. A line is asked of the tool
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
_TIME24 = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b(?!\s?(?:am|pm)\b)", re.I)
_NUMBER = re.compile(r"(?:#|\b(?:order|number|no\.?|id|ticket|account|invoice)\s*#?\s*)?\b([A-Z]{0,3}-?\d{3,})\b", re.I)
# a short number is an identifier only right after a word that says so ("ticket T-1", "#12")
_KEYED = re.compile(r"(?:#|\b(?:order|number|no\.?|id|ticket|account|invoice|reference|ref)\s*#?\s*)([A-Z]{0,3}-?\d{1,2})\b", re.I)
_COUNT_WORDS = {w: str(i) for i, w in enumerate(("one", "two", "three", "four", "five", "six", "seven", "eight",
                                                 "nine", "ten", "eleven", "twelve"), start=1)}
_COUNT = r"(\d{1,2}|" + "|".join(_COUNT_WORDS) + r")"
_PARTY = re.compile(rf"\b(?:for|party of|table for)\s+{_COUNT}\b|\b{_COUNT}\s+(?:people|persons|guests|of us)\b", re.I)
_QUOTED = re.compile(r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d|(?<!\w)'([^']+)'(?!\w)")

# ---- free nouns in plain English (assumption: the usual English of a user's request) -------------
# A run of capitalised words is a proper noun ("Paris", "New York", "Dr Smith"); the words that open
# a sentence or a question capitalised are not
_PROPER = re.compile(r"\b([A-Z][\w'.-]*(?:\s+(?:de|da|del|van|von|le|la|of)?\s*[A-Z][\w'.-]*)*)")
_NOT_PROPER = {"i", "what", "what's", "whats", "how", "how's", "is", "are", "and", "but", "so", "please", "can",
               "could", "would", "will", "do", "does", "did", "hi", "hello", "hey", "ok", "okay", "yes", "no", "the",
               "a", "an", "tell", "give", "show", "find", "check", "get", "look", "book", "i'm", "i'd", "it's",
               "thanks", "thank", "when", "where", "which", "who", "why", "also", "then", "now", "tomorrow",
               "search", "send", "buy", "order", "reserve", "cancel", "refund", "create", "open", "log", "add",
               "remind", "call", "let", "set", "make", "help", "list", "track", "any", "my", "let's",
               "today", "tonight", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
# a place follows these words ("weather in Paris", "flights to Rome"); a person these ("for Alice")
_PLACE_BEFORE = ("in", "at", "to", "from", "near", "around", "about", "for", "of", "into", "outside")
_PERSON_BEFORE = ("for", "to", "with", "from", "call", "tell", "ask", "message", "email", "text", "remind",
                  "named", "called", "name", "under", "about")
# lower-case words after "in"/"at" that are not places ("in progress", "at noon")
_NOT_PLACE = {"progress", "advance", "general", "case", "time", "the", "a", "an", "my", "your", "stock", "total",
              "fact", "morning", "afternoon", "evening", "night", "noon", "midnight", "all", "least", "most", "once",
              "it", "this", "that", "there", "here", "full", "detail", "short", "order", "person", "line"}
# what a free noun ends at: a clause's edge or a word that starts another part of the sentence
_NOUN_END = {"please", "and", "but", "for", "in", "at", "on", "to", "from", "with", "by", "tomorrow", "today",
             "tonight", "now", "then", "is", "are", "was", "will", "would", "that", "which", "if", "when"}
_ARTICLES = {"a", "an", "the", "my", "our", "your", "some", "any", "this", "that"}


def _proper_runs(text: str) -> list[tuple[int, str]]:
    """(position, words) of each run of capitalised words the line has, not its sentence openers."""
    out = []
    for m in _PROPER.finditer(text or ""):
        words = m[1].split()
        while words and words[0].lower().strip(".,") in _NOT_PROPER:
            words = words[1:]
        if words:
            out.append((m.start(), " ".join(words).rstrip(".,'")))
    return out


def _after(text: str, before: tuple[str, ...], run: str) -> bool:
    """Whether `run` in the line follows one of `before` ("in Paris")."""
    return bool(re.search(rf"\b(?:{'|'.join(before)})\s+(?:the\s+)?{re.escape(run)}\b", text or "", re.I))


def _places(text: str) -> list[str]:
    runs = [r for _, r in _proper_runs(text)]
    after = [r for r in runs if _after(text, _PLACE_BEFORE, r)]
    if after or runs:
        return after or runs
    # a place said in lower case after "in"/"at"/"to": "weather in paris"
    low = [m[1] for m in re.finditer(r"\b(?:in|at|to|near|from)\s+([a-z][a-z'-]+(?:\s+[a-z][a-z'-]+)?)", text or "")]
    out = []
    for v in low:
        words = [w for w in v.split() if w not in _NOT_PLACE and w not in _STOPWORDS and w not in _NOUN_END]
        if words and words[0] == v.split()[0] and not _DATE.search(words[0]):
            out.append(" ".join(w.capitalize() for w in words))
    return out


def _persons(text: str) -> list[str]:
    named = [m[1] for m in _NAMED.finditer(text or "")]
    runs = [r for _, r in _proper_runs(text)]
    return named + [r for r in runs if _after(text, _PERSON_BEFORE, r) and r not in named]


def _nouns(text: str) -> list[str]:
    """A free noun of the line: a proper noun, else the words after "for"/"about"/"of"/"on" (the thing
    asked about: "the price of a blue kettle" -> "blue kettle"), up to a word that starts another part."""
    runs = [r for _, r in _proper_runs(text)]
    if runs:
        return runs
    out = []
    for m in re.finditer(r"\b(?:for|about|of|on|called)\s+([a-z][\w' -]*)", text or "", re.I):
        words = []
        for w in m[1].split():
            lw = w.lower()
            if lw in _NOUN_END or len(words) >= 4:
                break
            if not words and lw in _ARTICLES:
                continue
            words.append(w)
        if words and not _TIME.search(" ".join(words)) and not _DATE.search(" ".join(words)):
            out.append(" ".join(words))
    return out


def extract(kind: str, text: str) -> list[str]:
    """The values of one kind a line names, in order, each once."""
    t = text or ""
    if kind == "time":
        found = [(m.start(), f"{int(m[1])}{':' + m[2] if m[2] else ''}{m[3].lower()}") for m in _TIME.finditer(t)]
        found += [(m.start(), f"{int(m[1]):02d}:{m[2]}") for m in _TIME24.finditer(t)]
        vals = [v for _, v in sorted(found)]
    elif kind == "date":
        vals = [d.lower() if not d[0].isdigit() else d for d in _DATE.findall(t)]
    elif kind == "number":
        bare = _TIME24.sub(" ", _TIME.sub(" ", t))
        vals = [v for _, v in sorted([(m.start(), m[1]) for m in _NUMBER.finditer(bare)] +
                                     [(m.start(), m[1]) for m in _KEYED.finditer(bare)])]
    elif kind == "party":
        vals = [_COUNT_WORDS.get((a or b).lower(), a or b) for a, b in _PARTY.findall(t)]
    elif kind == "quoted":
        vals = [next(x for x in g if x) for g in _QUOTED.findall(t)]
    elif kind in ("place", "person", "noun"):
        # a quoted value is what the user meant exactly; else the plain English of the line
        vals = [next(x for x in g if x) for g in _QUOTED.findall(t)] or \
            {"place": _places, "person": _persons, "noun": _nouns}[kind](_QUOTED.sub(" ", t))
    else:
        vals = []
    out: list[str] = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


DEFAULTED = "default"       # where an argument the line should have given but did not came from


def fill(tool: Tool, text: str, base: Mapping[str, Any]) -> tuple[list[dict], dict]:
    """The calls a line asks of `tool` (one, or one per value of an `each` argument naming two or
    more) and, per argument, where its value came from."""
    args = dict(base)
    # an argument read from the line or declared by the client that the line does not give is
    # "default" (the report shows it, lab/report/arguments.py); one the conversation fixes is its own
    readable = {a.name for a in tool.args if a.from_line is not None or a.schema is not None}
    why: dict[str, str] = {a: DEFAULTED if a in readable else "the conversation's value" for a in args}
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
            else:               # one value: the conversation's own (the studies' slot)
                why[a.name] = f"the conversation's value ({a.from_line} {vals[0]!r} in the line)"
            continue
        args[a.name] = _typed(a, a.template.replace("{value}", vals[0]))
        why[a.name] = f"{a.from_line} {vals[0]!r} from the line"
    taken = {str(v).lower() for k, v in args.items() if why.get(k, "").endswith("from the line")}
    for a in tool.args:
        if a.schema is not None and not why.get(a.name, "").endswith("from the line"):
            found = from_schema(a, tool, text, taken)
            if found is not None:
                args[a.name], why[a.name] = found
    if many:
        return [{**args, many[0]: v} for v in many[1]], why
    return [args], why


def _typed(a: Arg, v: str) -> Any:
    typ = schema_type(a.schema or {})
    if (typ == "integer" or isinstance(a.value, int) and not isinstance(a.value, bool)) and v.isdigit():
        return int(v)
    if typ == "number" and re.fullmatch(r"\d+(?:\.\d+)?", v):
        return float(v)
    return v


# ---- a declared argument the line does not name by its kind --------------------------------------
# parameters whose value is the user's own words (assumption: the usual English of parameter names)
FREE_TEXT = ("reason", "why", "cause", "summary", "description", "describe", "describing", "detail", "details",
             "message", "note", "notes", "problem", "issue", "comment", "text", "query", "request", "complaint",
             "feedback", "title", "subject", "explanation", "sentence")
# a value of a string format a framework may validate
FORMAT_SAMPLES = {"email": "user@example.com", "date": "2030-01-01", "date-time": "2030-01-01T12:00:00Z",
                  "time": "12:00", "uri": "https://example.com/", "uuid": "00000000-0000-0000-0000-000000000000"}
_CLAUSE = re.compile(r"[.!?;,]+(?:\s+|$)|\s+-+\s+")
_NAMED = re.compile(r"\b(?:name|named|under|called)\s+(?:is\s+|of\s+)?([A-Z][\w'-]*)")


def schema_type(schema: Mapping[str, Any]) -> str:
    """A JSON schema's type, lower case ('STRING' in Gemini's Schema; the first non-null of a list)."""
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if str(t).lower() != "null"), "")
    return str(typ or "").lower()


def placeholder(name: str, schema: Mapping[str, Any]) -> str:
    """A short stand-in for a string the line does not give, from the parameter's name (else its
    description): `reason` -> 'reason not given'."""
    words = _tokens(name) or [w for w in _tokens(str(schema.get("description") or "")) if w not in _STOPWORDS][:3]
    return f"{' '.join(words) or 'value'} not given"


def declared_value(name: str, schema: Mapping[str, Any], required: bool) -> Any:
    """A parameter's value when the line gives none: its schema's default, else its first enum value;
    a required one with neither gets a value of its type (the minimum or 1, false, an empty list or
    object, a sample of its string format, else a placeholder from its name); an optional one none."""
    if "default" in schema:
        return schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if not required:
        return None
    typ = schema_type(schema)
    low = schema.get("minimum")
    if typ == "integer":
        return int(low) if isinstance(low, (int, float)) else 1
    if typ == "number":
        return float(low) if isinstance(low, (int, float)) else 1.0
    if typ == "boolean":
        return False
    if typ == "array":
        return []
    if typ == "object":
        return {}
    return FORMAT_SAMPLES.get(str(schema.get("format") or ""), placeholder(name, schema))


def _content(words: list[str]) -> list[str]:
    return [w for w in words if w not in _STOPWORDS and len(w) > 2]


def is_free_text(name: str, schema: Mapping[str, Any]) -> bool:
    """A string whose value is the user's own words: its name or description says so (FREE_TEXT)."""
    words = {_stem(w) for w in _tokens(name) + _tokens(str(schema.get("description") or ""))}
    return schema_type(schema) in ("string", "") and bool(words & {_stem(w) for w in FREE_TEXT})


def sentence_for(a: Arg, tool: Tool, text: str, taken: set[str]) -> str | None:
    """The part of the line that is a free-text argument's value: of the line's sentences and
    clauses, leaving out the one that asks for the tool (the tool's own verb) and any that
    only names another argument's value, the first that uses a word of the parameter's name or
    description, else the first left; None when none is left."""
    # the tool's own verbs: "order" in "the frother on order A1002" is a noun, not the ask
    verbs = {_stem(v) for v in tool.semantics.words.verb} | {
        _stem(w) for w in _tokens(tool.name) if w in SIDE_VERBS + READ_VERBS or _stem(w) in SIDE_VERBS + READ_VERBS}
    about = {_stem(w) for w in _content(_tokens(a.name) + _tokens(str((a.schema or {}).get("description") or "")))}
    left = []
    for clause in (c.strip() for c in _CLAUSE.split(text or "")):
        words = _tokens(clause)
        if not clause or {_stem(w) for w in words} & verbs:
            continue
        if len([w for w in _content(words) if w not in taken]) < 2:
            continue        # a greeting, "it's urgent": no words of the user's own to give
        left.append(clause)
    hit = next((c for c in left if {_stem(w) for w in _content(_tokens(c))} & about), None)
    return hit or (left[0] if left else None)


def from_schema(a: Arg, tool: Tool, text: str, taken: set[str]) -> tuple[Any, str] | None:
    """(value, where it came from) for a declared argument the line gives by its schema: an enum
    value the line names, a name after "name"/"under"/"called", a free-text argument's sentence;
    None: the argument keeps its declared value (declared_value)."""
    schema = a.schema or {}
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        named = next((v for v in enum if isinstance(v, str) and re.search(rf"\b{re.escape(v)}\b", text or "", re.I)), None)
        return (named, f"enum value {named!r} from the line") if named is not None else None
    if schema_type(schema) not in ("string", ""):
        return None
    if "name" in _tokens(a.name):
        m = _NAMED.search(text or "")
        if m:
            return m[1], f"name {m[1]!r} from the line"
    if is_free_text(a.name, schema):
        said = sentence_for(a, tool, text, taken)
        if said:
            return said, f"sentence {said!r} from the line"
    return None


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


# string parameters named for a free noun of the line (assumption: the usual English of parameter names)
PLACE_NAMES = ("location", "city", "place", "destination", "town", "country", "address", "region", "origin",
               "venue", "where", "area", "state", "airport", "station")
PERSON_NAMES = ("name", "person", "customer", "contact", "recipient", "who", "attendee", "patient", "passenger",
                "owner", "caller", "client", "user")
NOUN_NAMES = ("product", "item", "query", "topic", "term", "keyword", "search", "movie", "song", "dish", "food",
              "restaurant", "brand", "model", "service", "thing", "what", "artist", "book", "sku")


def _arg_kind(name: str, schema: Mapping[str, Any]) -> str | None:
    n = name.lower()
    words = _tokens(name)
    typ = str(schema.get("type") or "").lower()
    stringy = typ in ("string", "")
    if "name" in words and stringy:
        return "person"         # guest_name is a person, not a party's size
    if any(w in n for w in ("party", "guest", "people", "size", "persons")):
        return "party"
    if "date" in n or n in ("day", "when"):
        return "date"
    if "time" in n or "slot" in n or "hour" in n:
        return "time"
    if any(w in n for w in ("order", "number", "ticket", "account", "invoice")) or "id" in words \
            or n.endswith("id") or typ in ("integer", "number"):
        return "number"
    if stringy:
        for kind, names in (("place", PLACE_NAMES), ("person", PERSON_NAMES), ("noun", NOUN_NAMES)):
            if any(w in names or _stem(w) in names for w in words):
                return kind
        return "quoted"
    return None


def _properties(decl: Mapping[str, Any]) -> tuple[dict, list]:
    schema = decl.get("parameters") or decl.get("parametersJsonSchema") or {}
    if not isinstance(schema, Mapping):
        return {}, []
    props = schema.get("properties") or {}
    return (dict(props) if isinstance(props, Mapping) else {}), list(schema.get("required") or [])


# words of a tool's name that say how it acts, not on what (request_refund: the refund of an order)
_HOW_WORDS = ("request", "start", "make", "do", "handle", "process", "run", "perform", "initiate", "begin", "new",
              "try", "submit")


def _object_word(name: str, description: str, verb: str) -> str:
    """What the tool acts on, for its sentences: the first word of its name that is neither its verb
    nor a word of how it acts, else such a word of its description ("Start a refund for an order":
    order); '' when there is none."""
    skip = {_stem(verb)} | {_stem(w) for w in _HOW_WORDS}
    for words in (_tokens(name), _tokens(description)):
        w = next((w for w in words if _stem(w) not in skip and w not in _STOPWORDS and len(w) > 2), "")
        if w:
            return w
    return ""


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
        required = _properties(d)[1]
        args = list(declared_args(d))
        key_fields = tuple(a.name for a in args if a.name in required) or tuple(a.name for a in args[:1])
        obj = _object_word(name, desc, verb)
        doing, done = _inflect(verb)
        words = ActionWords(verb=(verb,), doing=doing, done=done, noun=tuple(w for w in (verb, obj) if w))
        # a sentence names the thing by a key that identifies it (an order number, a time), never by
        # a free text or a level ("Ticket My laptop won't connect ... is created", "Ticket urgent")
        named_by = next((a.name for a in args if a.name in key_fields and a.from_line in ("number", "time", "date")), None)
        subject = f"{obj} {{{named_by}}}" if obj and named_by else (f"the {obj}" if obj else "it")
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


def declared_args(decl: Mapping[str, Any]) -> tuple[Arg, ...]:
    """A declaration's parameters as conversation arguments: each read from the line by its kind
    and schema, with its declared value (declared_value) when the line gives none."""
    props, required = _properties(decl)
    args = []
    for pname, pschema in props.items():
        pschema = pschema if isinstance(pschema, Mapping) else {}
        # an enum's value is one of its own, which from_schema finds in the line, never free text
        kind = None if isinstance(pschema.get("enum"), list) and pschema["enum"] else _arg_kind(str(pname), pschema)
        args.append(Arg(str(pname), value=declared_value(str(pname), pschema, pname in required),
                        from_line=kind, schema=pschema))
    return tuple(args)


def renamed(tool: Tool, name: str, decl: Mapping[str, Any] | None = None) -> Tool:
    """A conversation tool under the name the client declares it by. Given the declaration, its
    arguments become the declared ones (an argument of the conversation's own that the declaration
    names keeps its value and reading), so a framework that checks its tool's arguments accepts
    the call: the booking story's `slot` is no argument of a `reserve_table(time, party_size, name)`."""
    tool = replace(tool, semantics=replace(tool.semantics, name=name))
    if decl is None or not _properties(decl)[0]:
        return tool
    own = {a.name: a for a in tool.args}
    args = tuple(own.get(a.name, a) for a in declared_args(decl))
    names = {a.name for a in args}
    key = tuple(k for k in tool.semantics.business_key if k in names) or \
        tuple(a.name for a in args if a.name in _properties(decl)[1]) or tuple(a.name for a in args[:1])
    return replace(tool, args=args, semantics=replace(tool.semantics, business_key=key))


# how a line asks the last question again about something else (assumption: the usual English)
_AGAIN = re.compile(r"^\s*(?:and|also|what about|how about|same for|and what about|and how about|what of|now)\b|\?\s*$", re.I)


def follow_up(text: str, tool: Tool) -> dict | None:
    """A line that names no tool but asks the last one again for another value ("And what about
    London?" after the weather in Paris): {"args": the arguments it gives} when it reads like a
    follow-up and gives at least one of the tool's arguments, else None."""
    if not _AGAIN.search(text or ""):
        return None
    _, why = fill(tool, text, {})
    given = {k: w for k, w in why.items() if w.endswith("from the line")}
    return {"given": given} if given else None


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
