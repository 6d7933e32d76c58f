"""The conversation file: load and validate a YAML conversation, or a plain text file of user lines.

A conversation is the user's side of a story and what the model does with the agent's tools (the
format, with an example, is in docs/conversations.md). Every error names `file:line`, every unknown
key is refused, and all of it happens before anything starts (ConversationError, exit 2). A file
that is not YAML mappings but lines of text is a lines-only conversation: the engine builds the rest
from the tools the client declares (lab.conversation.lines).

Pure apart from reading the one file; knows no wire protocol.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from lab import yamlines
from lab.conversation.semantics import ActionWords, ToolSemantics
from lab.errors import ScenarioError

DEFAULT = "booking"
SOURCE_FILE, SOURCE_LINES = "file", "lines"     # semantics.EVENT_KIND's `source`

TOP_KEYS = {"name", "description", "source", "tools", "turns", "answers"}
TOOL_KEYS = {"description", "side_effect", "business_key", "words", "asks", "behavior", "args", "say", "stop"}
ARG_KEYS = {"value", "from_line", "template", "each"}
WORD_KEYS = {"verb", "doing", "done", "noun"}
TURN_KEYS = {"user", "call", "args", "say"}
ANSWER_KEYS = {"other", "greeting", "unclear"}
BEHAVIORS = ("NON_BLOCKING", "BLOCKING")
# what a value in a user line can be read as (lab.conversation.lines.extract)
FROM_LINE = ("time", "number", "date", "quoted", "party", "place", "person", "noun")

# Each sentence the model may say about a tool; {field} is filled from the call's arguments and
# its response's fields. The keys and what they answer:
SAY_KEYS = {
    "done": "after a response saying the action happened, the model idle",
    "failed": "after a response saying it did not happen",
    "pending": "a status question while the call is out",
    "status_done": "a status question after it happened",
    "status_failed": "a status question after it failed",
    "status_none": "a status question with nothing asked",
    "note_done": "a restored session told by a status note that it happened",
    "status_note_done": "a status question answered from that note",
    "again_pending": "asked again while the call is out",
    "again_done": "asked again after it happened",
    "reissue": "a restored session without the note: said after the call it issues again",
    "stopped": "a stop with nothing asked",
    "other_pending": "anything else asked while the call is out",
}
# The stop study's behaviours per side-effecting tool (seed 001; fidelity.md §4, §8 F3). Absent: the
# twin profile's parameter of the same meaning (named on the right), so a profile `--set` still rules.
STOP_KEYS = {
    "claim": "stop_while_pending_reply", "claim_delay_s": "stop_claim_delay_s",
    "silent_after_response_p": "silent_after_stop_response_p",
    "reissue_text_p": "reissue_text_p", "reissue_audio_p": "reissue_p", "reissue_delay_s": "reissue_delay_s",
    "contradict": "stop_contradict_reply", "after_commit": "stop_after_commit_reply",
    "late_call_p": "early_stop_call_p", "late_call_delay_s": "early_stop_call_delay_s",
}
_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class ConversationError(ScenarioError):
    """A malformed conversation file; the message names the file and line."""


@dataclass(frozen=True)
class Arg:
    name: str
    value: Any = None                 # the argument when the user's line does not give one
    from_line: str | None = None      # read it from the line: one of FROM_LINE
    template: str = "{value}"         # how a value read from the line becomes the argument
    each: bool = False                # a line naming two or more values asks one call per value;
                                      # with `each`, a line naming only one keeps `value` (the studies' slot)
    # lines-only tools: the parameter's JSON schema as the client declared it, which
    # lab.conversation.lines reads a value from the line by (not compared: a dict has no hash)
    schema: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class Tool:
    semantics: ToolSemantics
    description: str = ""
    asks: tuple[str, ...] = ()        # words in a user line that ask for this tool
    behavior: str | None = None       # the declaration's `behavior` wins; None: the profile's default
    args: tuple[Arg, ...] = ()
    say: Mapping[str, str] = field(default_factory=dict)
    stop: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.semantics.name


@dataclass(frozen=True)
class Turn:
    user: str
    call: str | None = None           # the tool this line asks for
    args: Mapping[str, Any] = field(default_factory=dict)
    say: str | None = None            # or a sentence the model answers it with
    line: int = 0


@dataclass(frozen=True)
class Conversation:
    name: str
    tools: Mapping[str, Tool]
    turns: tuple[Turn, ...] = ()
    answers: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    source: str = SOURCE_FILE         # "file", or "lines": the tools are built from the client's declarations
    path: str = ""

    @property
    def lines(self) -> list[str]:
        return [t.user for t in self.turns]

    def to_json(self) -> dict[str, Any]:
        """conversation.json (semantics.JSON_FILE): what the run played; tools as ToolSemantics."""
        return {"name": self.name, "source": self.source, "path": self.path, "description": self.description,
                "lines": self.lines, "tools": [t.semantics.to_json() for t in self.tools.values()]}


def catalogue_dir() -> Path:
    return Path(str(resources.files("lab.conversations")))


def names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir().glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A catalogue name (`booking`) or a path to a .yaml or text file."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    cand = catalogue_dir() / f"{name_or_path}.yaml"
    if cand.exists():
        return cand
    raise ConversationError(f"unknown conversation {name_or_path!r}: no such file, and the catalogue has "
                            f"{', '.join(names())}")


def load(name_or_path: str | None = None) -> Conversation:
    path = resolve(name_or_path or DEFAULT)
    if path.suffix not in (".yaml", ".yml"):
        return from_lines(path)
    return parse(yamlines.load(path, ConversationError), str(path))


def from_lines(path: Path) -> Conversation:
    """A plain text file: one user line per line (blank lines and `#` comments skipped)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConversationError(f"{path}: cannot read the user's lines ({e})") from None
    turns = tuple(Turn(user=ln.strip(), line=i) for i, ln in enumerate(text.splitlines(), 1)
                  if ln.strip() and not ln.lstrip().startswith("#"))
    if not turns:
        raise ConversationError(f"{path}:1: no user lines (one line of what the user says per line)")
    return Conversation(name=path.stem, tools={}, turns=turns, source=SOURCE_LINES, path=str(path))


# ---- validation --------------------------------------------------------------------------------

def parse(raw: Any, path: str = "<conversation>") -> Conversation:
    err = yamlines.errs(path, ConversationError)
    if not isinstance(raw, dict):
        raise ConversationError(f"{path}:1: a conversation is a mapping with name, tools and turns")
    yamlines.refuse_unknown(err, raw, TOP_KEYS, "key")
    name = _text(err, raw, "name", required=True)
    tools_raw = raw.get("tools")
    if not isinstance(tools_raw, dict) or not tools_raw:
        raise err(raw, "tools", "tools: a mapping of tool name to its declaration (at least one)")
    tools = {str(n): _tool(err, tools_raw, str(n), spec) for n, spec in tools_raw.items()}
    turns_raw = raw.get("turns") or []
    if not isinstance(turns_raw, list):
        raise err(raw, "turns", "turns: a list of {user: ..., call: TOOL | say: ...}")
    turns = tuple(_turn(err, raw, t, tools) for t in turns_raw)
    answers_raw = raw.get("answers") or {}
    if not isinstance(answers_raw, dict):
        raise err(raw, "answers", "answers: a mapping (other, greeting, unclear)")
    yamlines.refuse_unknown(err, answers_raw, ANSWER_KEYS, "answer")
    answers = {k: _text(err, answers_raw, k) for k in answers_raw}
    return Conversation(name=name, tools=tools, turns=turns, answers=answers,
                        description=_text(err, raw, "description") or "", path=path)


def _text(err, node: dict, key: str, required: bool = False) -> str | None:
    v = node.get(key)
    if v is None:
        if required:
            raise err(node, None, f"missing {key!r}")
        return None
    if not isinstance(v, str) or not v.strip():
        raise err(node, key, f"{key}: a non-empty string")
    return v


def _words(err, node: dict, key: str) -> tuple[str, ...]:
    v = node.get(key)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(w, str) and w.strip() for w in v):
        raise err(node, key, f"{key}: a word or a list of words")
    return tuple(w.strip().lower() for w in v)


def _tool(err, parent: dict, name: str, spec: Any) -> Tool:
    if not _NAME.match(name):
        raise err(parent, name, f"tool name {name!r}: letters, digits, '_', '.', '-'")
    if not isinstance(spec, dict):
        raise err(parent, name, f"tool {name}: a mapping ({', '.join(sorted(TOOL_KEYS))})")
    yamlines.refuse_unknown(err, spec, TOOL_KEYS, f"key of tool {name}")
    side = spec.get("side_effect", False)
    if not isinstance(side, bool):
        raise err(spec, "side_effect", "side_effect: true or false")
    args = _args(err, spec, name)
    key = _words(err, spec, "business_key")
    for f in key:
        if f not in {a.name for a in args}:
            raise err(spec, "business_key", f"business_key field {f!r} is not one of tool {name}'s args")
    words_raw = spec.get("words") or {}
    if not isinstance(words_raw, dict):
        raise err(spec, "words", "words: a mapping (verb, doing, done, noun)")
    yamlines.refuse_unknown(err, words_raw, WORD_KEYS, "words key")
    words = ActionWords(**{k: _words(err, words_raw, k) for k in WORD_KEYS})
    behavior = spec.get("behavior")
    if behavior is not None and str(behavior).upper() not in BEHAVIORS:
        raise err(spec, "behavior", f"behavior: one of {', '.join(BEHAVIORS)}")
    say_raw = spec.get("say") or {}
    if not isinstance(say_raw, dict):
        raise err(spec, "say", "say: a mapping of situation to sentence")
    yamlines.refuse_unknown(err, say_raw, set(SAY_KEYS), "say key")
    say = {k: _text(err, say_raw, k) for k in say_raw}
    stop_raw = spec.get("stop") or {}
    if not isinstance(stop_raw, dict):
        raise err(spec, "stop", "stop: a mapping of the stop study's behaviours")
    yamlines.refuse_unknown(err, stop_raw, set(STOP_KEYS), "stop key")
    if stop_raw and not side:
        raise err(spec, "stop", "stop: behaviours after a stop are for a tool with side_effect: true")
    stop = {k: _stop_value(err, stop_raw, k) for k in stop_raw}
    return Tool(semantics=ToolSemantics(name=name, side_effect=side, business_key=key, words=words),
                description=_text(err, spec, "description") or "", asks=_words(err, spec, "asks"),
                behavior=str(behavior).upper() if behavior else None, args=args, say=say, stop=stop)


def _args(err, spec: dict, tool: str) -> tuple[Arg, ...]:
    raw = spec.get("args") or {}
    if not isinstance(raw, dict):
        raise err(spec, "args", "args: a mapping of argument name to {value, from_line, template, each}")
    out = []
    for n, a in raw.items():
        if not isinstance(a, dict):
            a = {"value": a}        # `slot: tomorrow 3pm` is the value
        else:
            yamlines.refuse_unknown(err, a, ARG_KEYS, f"key of {tool}.{n}")
        fl = a.get("from_line")
        if fl is not None and fl not in FROM_LINE:
            raise err(a, "from_line", f"from_line: one of {', '.join(FROM_LINE)}")
        tpl = a.get("template", "{value}")
        if not isinstance(tpl, str) or "{value}" not in tpl:
            raise err(a, "template", "template: a string with {value} in it")
        each = a.get("each", False)
        if not isinstance(each, bool):
            raise err(a, "each", "each: true or false")
        if a.get("value") is None and fl is None:
            raise err(raw, n, f"argument {n}: give a value, or from_line to read it from the user's line")
        out.append(Arg(str(n), a.get("value"), fl, tpl, each))
    return tuple(out)


def _stop_value(err, node: dict, key: str) -> Any:
    v = node[key]
    if key.endswith("_p"):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1:
            raise err(node, key, f"{key}: a probability between 0 and 1")
        return float(v)
    if key.endswith("_s"):
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0) or (
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v) and v[0] <= v[1])
        if not ok:
            raise err(node, key, f"{key}: seconds, or a range [lo, hi]")
        return v
    return _text(err, node, key)


def _turn(err, parent: dict, t: Any, tools: Mapping[str, Tool]) -> Turn:
    if isinstance(t, str):
        return Turn(user=t, line=getattr(parent, "lines", {}).get("turns", 0))
    if not isinstance(t, dict):
        raise err(parent, "turns", "each turn: a string, or {user: ..., call: TOOL | say: ...}")
    yamlines.refuse_unknown(err, t, TURN_KEYS, "turn key")
    user = _text(err, t, "user", required=True)
    call = t.get("call")
    if call is not None and call not in tools:
        raise err(t, "call", f"call: unknown tool {call!r}{yamlines.near(call, tools)}; declared: {', '.join(tools)}")
    if call is not None and t.get("say") is not None:
        raise err(t, "say", "a turn either calls a tool or says a sentence, not both")
    args = t.get("args") or {}
    if not isinstance(args, dict) or (args and call is None):
        raise err(t, "args", "args: a mapping, with call:")
    if call:
        known = {a.name for a in tools[call].args}
        for k in args:
            if k not in known:
                raise err(args, k, f"tool {call} has no argument {k!r}{yamlines.near(k, known)}")
    return Turn(user=user, call=call, args=dict(args), say=_text(err, t, "say"), line=t.line)


def fields_of(template: str) -> list[str]:
    """The {field} names a sentence template reads."""
    return _TEMPLATE_FIELD.findall(template)
