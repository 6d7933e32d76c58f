"""The conversation engine: the model's state machine over a Conversation, pure and deterministic.

Inputs are a user's turn (its text, and whether it was spoken), a tool's response (the call id, the
response's fields, whether it asked for silence), a restored transcript, and the tools a client
declares. Outputs are `Plan`s: steps `say(text)`, `call(tool, args, blocking)` and `turn_complete`,
each with a delay; the protocol room (lab.twin.turns for the Gemini wire) times and sends them.

What it models, per tool of the conversation (seeds 000 and 001; fidelity.md §4, §8):
- a user turn is read by what it says (F5): a stop, a status question or a greeting
  (lab.conversation.intents, with each tool's action words), else the conversation turn it is most
  like, else a tool whose `asks` words it uses, else (lines-only) the declared tool whose name and
  description it matches best; anything else gets the conversation's plain answer;
- a call's arguments come from the turn, the tool's defaults, and values read from the line;
- after a response: the tool's `done`/`failed` sentence, its {fields} filled from the arguments and
  the response; a status question before the response gets `pending`, after it `status_done`;
- a stop, per side-effecting tool, with the stop study's behaviours as parameters (the tool's `stop:`
  in the file, else the twin profile's): the false "already done" claim with a NON_BLOCKING call out,
  then silence after the response at a rate; BLOCKING: a re-issue at a rate kept apart for text and
  speech (F3), else a contradiction of the response; after the commit "already made"; before the
  call the call may still come; never a cancellation (84 sessions of both studies had none);
- a restored session: with a status note the model answers from it; without, it issues the call again.

A session's state is a `Story`; how far the spoken lines got is its `Position`, which the protocol
room may share among one client's sessions, so a new session continues where the user's lines
stood (F6) while what it knows of earlier calls comes from what the client restores.

Knows no wire: no Gemini field names, no frames, no clock, no I/O.
"""
from __future__ import annotations

import difflib
import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from lab.conversation import intents
from lab.conversation import lines as L
from lab.conversation.semantics import words_of
from lab.conversation.format import SOURCE_LINES, Conversation, Tool
from lab.stats.distributions import draw

# A call's state, spelled as every record of the lab already spells it (the studies' booking words)
DONE, FAILED, PENDING = "booked", "not_booked", "pending"

DONE_WORDS = ("booked", "committed", "confirmed", "done", "ok", "success", "succeeded", "completed",
              "refunded", "reserved", "processed", "approved", "available", "free")
FAILED_WORDS = ("failed", "cancelled", "canceled", "not_booked", "not booked", "error", "rejected", "denied",
                "unavailable", "not found")
PENDING_WORDS = ("pending", "in_progress", "in progress", "processing", "running", "queued")
# failures said as a whole word only: "full" is no failure inside "successfully"
_FAILED_WHOLE = re.compile(r"\b(?:full|fully booked|sold out|no availability)\b")

# a conversation turn this much like the user's text is that turn (difflib ratio on folded text);
# assumption: high enough that "Did you book it?" is not "Book it", low enough for rewordings
TURN_MATCH = 0.72


def status_word(value: Any) -> str | None:
    """DONE | FAILED | PENDING | None from a status string."""
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if any(w == v or w in v for w in FAILED_WORDS) or _FAILED_WHOLE.search(v):
        return FAILED
    if any(w == v or w in v for w in PENDING_WORDS):
        return PENDING
    if any(w == v or w in v for w in DONE_WORDS):
        return DONE
    return None


def response_status(response: Any) -> str:
    """The status a tool's response carries: a 'status' (or 'state', 'result', or an 'error') at the
    top or up to two levels down (e.g. {"output": {"status": "booked"}}). No status and no error: done."""
    def find(obj: Any, depth: int = 0) -> str | None:
        if isinstance(obj, dict):
            if obj.get("error"):
                return FAILED
            for k in ("status", "state", "result"):
                s = status_word(obj.get(k))
                if s:
                    return s
            if depth < 2:
                for v in obj.values():
                    s = find(v, depth + 1)
                    if s:
                        return s
        elif isinstance(obj, str):
            return status_word(obj)
        return None
    return find(response) or DONE


def response_fields(response: Any) -> dict[str, Any]:
    """A response's scalar fields for {field} templates: the top level, then one level down (a value
    nested in {"output": {...}} or {"result": {...}} is found by its own name)."""
    out: dict[str, Any] = {}
    if isinstance(response, dict):
        for v in response.values():
            if isinstance(v, dict):
                out.update({k: x for k, x in v.items() if not isinstance(x, (dict, list))})
        out.update({k: x for k, x in response.items() if not isinstance(x, (dict, list))})
    # {response}: the whole answer, spoken plainly ("status shipped, eta 2 days")
    out["response"] = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in out.items() if v not in (None, ""))
    return out


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return ""       # a field the response lacks is left out of the sentence, not spoken as "{x}"


def render(template: str, *sources: Mapping[str, Any]) -> str:
    merged = _Fields()
    for s in sources:
        merged.update({k: v for k, v in s.items() if v not in (None, "")})
    try:
        text = template.format_map(merged)
    except (ValueError, IndexError, AttributeError):
        return template
    return _tidy(text)


@functools.lru_cache(maxsize=256)
def _tidy(text: str) -> str:
    """A sentence's spacing closed up where a left-out field left a gap (cached: a conversation says
    the same few sentences again and again, a status answer after every question)."""
    return re.sub(r"\s+([.,!?])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


# --------------------------------------------------------------------------------------------
# Plans


@dataclass
class Step:
    kind: str                 # "say" | "call" | "turn_complete"
    delay: float = 0.0        # seconds after the previous step finished (or after the plan started)
    text: str = ""            # say: the sentence
    tool: str = ""            # call: the tool
    args: dict = field(default_factory=dict)            # call: its arguments
    more: tuple[dict, ...] = ()                         # call: further calls in the same batch

    @property
    def slot(self) -> str:
        """The first argument's value (the booking story's slot)."""
        return str(next(iter(self.args.values()), "")) if self.args else ""

    @property
    def also(self) -> tuple[str, ...]:
        return tuple(str(next(iter(a.values()), "")) for a in self.more)


@dataclass
class Plan:
    steps: list[Step]
    hold: bool = False        # BLOCKING: the turn stays open after the call until its response
    why: str = ""             # which branch: for the log and tests
    match: dict = field(default_factory=dict)           # what the user's turn was matched to, and why

    def texts(self) -> list[str]:
        return [s.text for s in self.steps if s.kind == "say"]

    def has_call(self) -> bool:
        return any(s.kind == "call" for s in self.steps)


@dataclass
class Call:
    id: str
    name: str
    args: dict
    blocking: bool
    status: str = PENDING
    batch: tuple[str, ...] = ()   # the ids issued in the same batch, this one included
    fields: dict = field(default_factory=dict)          # the response's fields, once answered
    reissued: bool = False        # issued again after a stop (001 C): its answer says it was already done

    @property
    def slot(self) -> str:
        return str(next(iter(self.args.values()), "")) if self.args else ""


@dataclass
class Params:
    """The endpoint's measured behaviour (the twin profile's parameters, cited there)."""
    default_behavior: str = "NON_BLOCKING"
    tool_call_delay_s: Any = (0.5, 0.9)
    reply_delay_s: Any = (0.5, 0.9)
    response_reply_delay_s: Any = (0.5, 0.9)
    reissue_delay_s: Any = (0.6, 0.8)
    restore_first_audio_s: Any = (0.76, 1.2)
    stop_while_pending_reply: str = "Your 3 pm slot tomorrow is already booked."
    stop_claim_delay_s: Any = (0.522, 0.937)
    silent_after_stop_response_p: float = 0.889
    reissue_p: float = 0.583
    reissue_text_p: float | None = None           # None: reissue_p for text as well
    stop_contradict_reply: str = "The booking was not made, so nothing has been scheduled."
    stop_after_commit_reply: str = "The booking was already made."
    early_stop_call_p: float = 0.667
    early_stop_call_delay_s: Any = (1.047, 1.115)
    restore_reissue_call_s: Any = None            # None: the restore's re-issued call follows its sentence
    restore_reissue_say_s: Any = (0.66, 0.67)


class Position:
    """How far the user's spoken lines have got: shared by one client's sessions, so a new session
    hears the next line, not line 1 again (fidelity §8 F6). Only the position: what the model knows
    of earlier calls a new session learns from what the client restores (000 s2: with the status
    note it answers from it, without it issues the call again), as the real service's does."""

    def __init__(self) -> None:
        self.heard = 0


class Story:
    """One session's conversation: calls and their answers, the status notes read, what was said,
    and the spoken lines' position (shared with the client's other sessions)."""

    def __init__(self, position: Position | None = None) -> None:
        self.calls: dict[str, Call] = {}
        self.call_seq = 0
        self.position = position if position is not None else Position()
        self.notes: dict[str, str] = {}          # tool -> status, from a restore's "System note"
        self.history: list[tuple[str, str]] = []
        self.asked: dict[str, dict] = {}          # tool -> the args it was last asked with


READINGS_KEPT = 256     # distinct (line, main tool) readings one session keeps; more start it afresh


class Engine:
    """One session's model over a conversation and a Story. Deterministic for a given rng seed."""

    def __init__(self, conversation: Conversation, params: Params | None = None, rng: random.Random | None = None,
                 next_call_id: Callable[[bool], str] | None = None, story: Story | None = None,
                 script: list[str] | None = None):
        self.conv = conversation
        self.cfg = params or Params()
        self.rng = rng or random.Random(0)
        self._next_call_id = next_call_id
        self.story = story if story is not None else Story()
        # the spoken lines, in order (speech is not transcribed: utterance N is line N)
        self.script = list(script) if script is not None else conversation.lines
        self.tools: dict[str, Tool] = dict(conversation.tools)
        self.behaviors: dict[str, str] = {}
        self.declared: list[dict] = []
        self.assumed: dict[str, str] = {}         # lines-only: tool -> why its side effect was guessed
        self.call_planned: str | None = None      # a call step is on its way (F: the early stop)
        self.reissuing = False                    # the planned call comes after a stop (re-issued or late)
        self.stopped = False                      # the user said stop in this conversation
        self.quiet_ids: set[str] = set()          # calls whose response gets no reply (superseded, or A's silence)
        self.contradict = False                   # C without a re-issue: the next reply says "not made"
        self.pending_at_utterance: set[str] | None = None
        self._readings: dict[tuple[str, str | None], dict] = {}   # read()'s, for the tools as they are now

    # ---- shared state, by the names the twin has always used --------------------------------
    @property
    def calls(self) -> dict[str, Call]:
        return self.story.calls

    @property
    def history(self) -> list[tuple[str, str]]:
        return self.story.history

    @property
    def utterances(self) -> int:
        return self.story.position.heard

    # ---- the client's tools -----------------------------------------------------------------
    def declare(self, declared: list[dict]) -> None:
        """The tools a client declares: [{name, description, parameters, behavior}]. A conversation
        tool is matched to a declared name (exact, else the one the tool's `asks` words name); a
        lines-only conversation builds its tools from them (lab.conversation.lines)."""
        if not declared:
            return
        self.declared = declared
        self._readings.clear()
        if self.conv.source == SOURCE_LINES:
            self.tools, self.assumed = L.tools_from_declarations(declared)
        else:
            names = {d["name"]: d for d in declared}
            for name, tool in list(self.tools.items()):
                if name in names:
                    continue
                alias = next((n for n in names if any(w in n.lower() for w in tool.asks)), None)
                if alias and alias not in self.tools:
                    self.tools.pop(name)
                    self.tools[alias] = L.renamed(tool, alias, names[alias])
        for d in declared:
            if d.get("behavior") and d["name"] in self.tools:
                self.behaviors[d["name"]] = str(d["behavior"]).upper()

    def behavior(self, tool: str) -> str:
        t = self.tools.get(tool)
        return self.behaviors.get(tool) or (t.behavior if t and t.behavior else None) or self.cfg.default_behavior

    def is_blocking(self, tool: str) -> bool:
        return self.behavior(tool) == "BLOCKING"

    def main_tool(self) -> Tool | None:
        """The tool a stop or a bare status question is about: the side-effecting one called (or
        asked for) last, else the first side-effecting one, else the first."""
        for c in reversed(list(self.calls.values())):
            if c.name in self.tools and self.tools[c.name].semantics.side_effect:
                return self.tools[c.name]
        for name in reversed(list(self.story.asked)):
            if name in self.tools and self.tools[name].semantics.side_effect:
                return self.tools[name]
        side = [t for t in self.tools.values() if t.semantics.side_effect]
        return side[0] if side else next(iter(self.tools.values()), None)

    # ---- state --------------------------------------------------------------------------------
    def pending_calls(self, tool: str | None = None) -> list[Call]:
        return [c for c in self.calls.values() if c.status == PENDING and (tool is None or c.name == tool)]

    def status_of(self, tool: str | None) -> tuple[str | None, str, Call | None]:
        """(status, source, the call it comes from) for one tool: DONE over PENDING over a note over FAILED."""
        calls = [c for c in self.calls.values() if tool is None or c.name == tool]
        for want in (DONE, PENDING):
            hit = [c for c in calls if c.status == want]
            if hit:
                return want, "tool", hit[-1]
        note = self.story.notes.get(tool or "") or (next(iter(self.story.notes.values()), None) if tool is None else None)
        if note:
            return note, "note", None
        failed = [c for c in calls if c.status == FAILED]
        if failed:
            return FAILED, "tool", failed[-1]
        return None, "", None

    def new_call(self, args: dict | None = None, tool: str | None = None) -> Call:
        """Called by the protocol room when a call step is actually sent: only then does the id exist."""
        tool = tool or (self.main_tool().name if self.main_tool() else "")
        self.story.call_seq += 1
        self.call_planned = None
        blocking = self.is_blocking(tool)
        cid = self._next_call_id(blocking) if self._next_call_id else f"fc-{self.story.call_seq}"
        c = Call(id=cid, name=tool, args=dict(args if args is not None else self.default_args(tool)), blocking=blocking,
                 reissued=self.reissuing)
        self.reissuing = False
        self.calls[c.id] = c
        return c

    def new_calls(self, batch: list[dict], tool: str | None = None) -> list[Call]:
        """The calls of one batch, each knowing its batch (see tool_response)."""
        reissuing = self.reissuing
        calls = []
        for a in batch:
            self.reissuing = reissuing
            calls.append(self.new_call(a, tool))
        self.reissuing = False
        for c in calls:
            c.batch = tuple(x.id for x in calls)
        return calls

    def default_args(self, tool: str) -> dict:
        t = self.tools.get(tool)
        return {a.name: a.value for a in t.args if a.value is not None} if t else {}

    def next_line(self) -> str:
        """The text the next detected utterance stands for (line N of the script; '' past its end)."""
        i = self.story.position.heard
        self.story.position.heard += 1
        return self.script[i] if i < len(self.script) else ""

    def line_now(self) -> str:
        """The line the utterance in progress stands for (not yet taken)."""
        i = self.story.position.heard
        return self.script[i] if i < len(self.script) else ""

    # ---- reading a user turn ------------------------------------------------------------------
    def read(self, text: str) -> dict:
        """What a user's turn asks, with why: {intent, tool, ...}. intent: STOP | STATUS | GREETING |
        CALL (a tool asked for) | SAY (a conversation turn's sentence) | OTHER.

        A reading depends on the line, the tools, which of them is the main one and which was asked
        last (a follow-up "and what about London?" asks it again), nothing else:
        a session that says the same line again (a status question asked after every turn) is
        answered from `_readings`, which the tools' declaration empties. A copy each time: a plan
        keeps its match."""
        main = self.main_tool()
        last = next(reversed(self.story.asked), None)      # a follow-up line asks it again
        key = (text, main.name if main else None, last)
        m = self._readings.get(key)
        if m is None:
            if len(self._readings) >= READINGS_KEPT:
                self._readings.clear()
            m = self._readings[key] = self._read(text, main, self.tools.get(last) if last else None)
        return {**m, "args": dict(m["args"])} if "args" in m else dict(m)

    def _read(self, text: str, main: Tool | None, last: Tool | None = None) -> dict:
        order = ([main] if main else []) + [t for t in self.tools.values() if t is not main]
        # the intent by the one rule the report also reads a line by (semantics.words_of); the tool
        # it is about: the first whose own words hear the same, else the main one
        it = intents.intent(text, words_of(t.semantics for t in self.tools.values()))
        if it in (intents.STOP, intents.STATUS):
            t = next((t for t in order if t.semantics.words.verb and intents.intent(text, t.semantics.words) == it),
                     main or (order[0] if order else None))
            return {"intent": it, "tool": t.name if t else None, "by": "intents", "words": t.name if t else "default"}
        folded = intents.norm(text)
        best, score = None, 0.0
        for turn in self.conv.turns:
            if turn.call is None and turn.say is None:
                continue
            r = difflib.SequenceMatcher(None, folded, intents.norm(turn.user)).ratio()
            if r > score:
                best, score = turn, r
        if best is not None and score >= TURN_MATCH and (best.say or best.call in self.tools):
            kind = "CALL" if best.call else "SAY"
            return {"intent": kind, "tool": best.call, "by": "turn", "turn": best.user, "score": round(score, 3),
                    "args": dict(best.args), "say": best.say}
        for t in self.tools.values():
            w = next((w for w in t.asks if re.search(rf"\b{re.escape(w)}", folded)), None)
            if w:
                return {"intent": "CALL", "tool": t.name, "by": "asks", "word": w}
        if self.conv.source == SOURCE_LINES and self.tools:
            name, why = L.best_tool(text, self.tools, self.declared)
            if name:
                return {"intent": "CALL", "tool": name, "by": "lines", **why}
            again = L.follow_up(text, last) if last is not None else None
            if again is not None:
                return {"intent": "CALL", "tool": last.name, "by": "follow-up", **again}
        if intents.intent(text) == intents.GREETING:       # a hello that asks for nothing else
            return {"intent": intents.GREETING, "tool": None, "by": "intents"}
        return {"intent": "OTHER", "tool": None, "by": "none"}

    def args_for(self, tool: str, text: str, turn_args: Mapping[str, Any] | None = None) -> tuple[list[dict], dict]:
        """The calls a line asks of a tool (one, or one per value of an `each` argument) and where
        each argument came from."""
        t = self.tools[tool]
        # what the conversation already settled carries over ("reserve it" after checking a table)
        names = {a.name for a in t.args}
        said = {k: v for asked in self.story.asked.values() for k, v in asked.items() if k in names}
        base = {**self.default_args(tool), **said, **dict(turn_args or {})}
        filled, why = L.fill(t, text, base)
        for k in said:
            if why.get(k) == L.DEFAULTED and k not in (turn_args or {}):
                why[k] = "earlier in the conversation"
        for k in turn_args or {}:
            if why.get(k) == L.DEFAULTED:
                why[k] = "the conversation's turn"
        return filled, why

    # ---- inputs -------------------------------------------------------------------------------
    def utterance_started(self) -> None:
        """The user began speaking. A spoken stop is judged against the calls as they stood then: the
        end of speech is detected ~1.2 s later, and in the stop study's spoken C runs the tool
        response that came in between did not make the model treat the stop as one after the
        commit (001 part 2: "I have not booked the slot" although the response said booked)."""
        self.pending_at_utterance = {c.id for c in self.pending_calls()}

    def user_turn(self, text: str, spoken: bool = False) -> Plan | None:
        self.history.append(("user", text))
        spoken_from, self.pending_at_utterance = self.pending_at_utterance or set(), None
        m = self.read(text)
        plan = self._plan(m, text, spoken, spoken_from)
        if plan is not None:
            plan.match = m
        return plan

    # what the model says to speech it could not make out (assumption: the records hold no unclear
    # audio; a conversation's `answers: unclear:` replaces it)
    UNCLEAR = "Sorry, I didn't catch that. Could you say it again?"

    def not_understood(self) -> Plan:
        """A spoken turn the model could not make out: it asks again; nothing is called, nothing
        is added to the conversation's history (no user turn is invented from noise)."""
        return self._say(self.conv.answers.get("unclear") or self.UNCLEAR, "not-understood")

    def _d(self) -> float:
        return draw(self.cfg.reply_delay_s, self.rng)

    def _say(self, text: str, why: str, delay: float | None = None) -> Plan:
        return Plan([Step("say", self._d() if delay is None else delay, text), Step("turn_complete")], why=why)

    def sentence(self, tool: Tool | None, key: str, call: Call | None = None, args: Mapping | None = None) -> str:
        """The tool's sentence for one situation, its {fields} filled; '' when the file has none."""
        if tool is None:
            return ""
        tpl = tool.say.get(key)
        if not tpl:
            return ""
        return render(tpl, (call.args if call else None) or args or self.story.asked.get(tool.name)
                      or self.default_args(tool.name), call.fields if call else {})

    def _plan(self, m: dict, text: str, spoken: bool, spoken_from: set[str]) -> Plan | None:
        it = m["intent"]
        tool = self.tools.get(m.get("tool") or "") if m.get("tool") else None
        if it == intents.STOP:
            return self._stop_plan(tool or self.main_tool(), spoken, spoken_from)
        if it == intents.STATUS:
            return self._status_plan(tool or self.main_tool())
        if it == intents.GREETING:
            return self._say(self.conv.answers.get("greeting") or self._other(), "greeting")
        if it == "SAY":
            return self._say(m["say"], "turn-say")
        if it == "CALL" and tool is not None:
            batch, why = self.args_for(tool.name, text, m.get("args"))
            m["args_from"] = why
            if tool.semantics.side_effect:
                status, _, call = self.status_of(tool.name)
                # the same request: every slot of the batch already asked (a two-slot line restored
                # while its calls are under way is not a new request); the sentence follows the
                # slots' own state, under way over done
                had = {tool.semantics.key_of(c.args): c for c in self.calls.values()
                       if c.name == tool.name and c.status in (DONE, PENDING)}
                same = call is None or all(tool.semantics.key_of(a) in had for a in batch)
                if call is not None and same:
                    got = [had[tool.semantics.key_of(a)] for a in batch]
                    call = next((c for c in reversed(got) if c.status == PENDING), got[-1])
                    status = call.status
                if status == PENDING and same:
                    return self._say(self.sentence(tool, "again_pending", call) or self._other(), "book-pending")
                if status == DONE and same:
                    return self._say(self.sentence(tool, "again_done", call) or self._other(), "book-booked")
            self.story.asked.pop(tool.name, None)
            self.story.asked[tool.name] = batch[0]      # the most recent last
            return self._call_plan(tool.name, batch, draw(self.cfg.tool_call_delay_s, self.rng),
                                   why="book" if tool.semantics.side_effect else "call")
        pending = self.pending_calls()
        if pending:
            t = self.tools.get(pending[-1].name)
            said = self.sentence(t, "other_pending", pending[-1])
            if said:
                return self._say(said, "other-pending")
        return self._say(self._other(), "other")

    def _other(self) -> str:
        return self.conv.answers.get("other") or "Sure. How can I help you?"

    def _status_plan(self, tool: Tool | None) -> Plan:
        status, source, call = self.status_of(tool.name if tool else None)
        if status == PENDING:
            return self._say(self.sentence(tool, "pending", call) or self._other(), "status-pending")
        if status == DONE:
            key = "status_note_done" if source == "note" else "status_done"
            return self._say(self.sentence(tool, key, call) or self.sentence(tool, "status_done", call)
                             or self._other(), "status-booked")
        if status == FAILED:
            return self._say(self.sentence(tool, "status_failed", call) or self.sentence(tool, "failed", call)
                             or self._other(), "status-not")
        return self._say(self.sentence(tool, "status_none") or self._other(), "status-none")

    def stop_param(self, tool: Tool | None, key: str) -> Any:
        """A stop behaviour: the tool's own (the conversation file), else the profile's."""
        from lab.conversation.format import STOP_KEYS     # the one table of stop keys and their profile names
        if tool is not None and key in tool.stop:
            return tool.stop[key]
        v = getattr(self.cfg, STOP_KEYS[key])
        if key == "reissue_text_p" and v is None:
            return self.cfg.reissue_p
        return v

    def _stop_text(self, tool: Tool | None, key: str, call: Call | None) -> str:
        v = self.stop_param(tool, key)
        return render(v, (call.args if call else None) or (self.story.asked.get(tool.name) if tool else None) or {},
                      call.fields if call else {}) if isinstance(v, str) else str(v)

    def _stop_plan(self, tool: Tool | None, spoken: bool, then: set[str]) -> Plan:
        """The user said stop (001, scenario by scenario; see the module docstring). `then`: the calls
        pending when a spoken stop began (utterance_started)."""
        self.stopped = True
        name = tool.name if tool else None
        pending = self.pending_calls(name)
        answered_since = [self.calls[i] for i in then if i in self.calls and self.calls[i].status != PENDING]
        if any(c.blocking for c in pending + answered_since):
            # F3: text and speech re-issue at their own recorded rates
            rate = self.stop_param(tool, "reissue_audio_p" if spoken else "reissue_text_p")
            if self.rng.random() < rate:
                self.quiet_ids.update(c.id for c in pending + answered_since)
                self.reissuing = True
                last = (pending + answered_since)[-1]
                return self._call_plan(last.name, [dict(last.args)],
                                       draw(self.stop_param(tool, "reissue_delay_s"), self.rng), why="stop-reissue")
            if pending:
                self.contradict = True
                return Plan([], why="stop-blocking-no-reissue")
            # the response came while the user was still saying stop: the contradiction is said now
            return self._say(self._stop_text(tool, "contradict", answered_since[-1]), "stop-blocking-answered-while-speaking")
        if pending:
            if self.rng.random() < self.stop_param(tool, "silent_after_response_p"):
                self.quiet_ids.update(c.id for c in pending)
            return self._say(self._stop_text(tool, "claim", pending[-1]), "stop-pending",
                             delay=draw(self.stop_param(tool, "claim_delay_s"), self.rng))
        status, _, call = self.status_of(name)
        if status == DONE:
            return self._say(self._stop_text(tool, "after_commit", call), "stop-after-commit")
        if self.call_planned and not self.calls:
            if self.rng.random() < self.stop_param(tool, "late_call_p"):
                planned = self.call_planned
                self.reissuing = True
                return self._call_plan(planned, [self.story.asked.get(planned) or self.default_args(planned)],
                                       draw(self.stop_param(tool, "late_call_delay_s"), self.rng),
                                       why="stop-early-late-call")
            self.call_planned = None
            return self._say(self.sentence(tool, "status_none") or self._other(), "stop-early-no-call")
        return self._say(self.sentence(tool, "stopped") or "Okay.", "stop")

    def _call_plan(self, tool: str, batch: list[dict], delay: float, why: str, say_first: str | None = None,
                   say_delay: float = 0.0) -> Plan:
        self.call_planned = tool
        steps: list[Step] = []
        if say_first:
            steps.append(Step("say", say_delay, say_first))
        steps.append(Step("call", 0.0 if say_first else delay, tool=tool, args=dict(batch[0]),
                          more=tuple(dict(a) for a in batch[1:])))
        if self.is_blocking(tool):
            return Plan(steps, hold=True, why=why)
        steps.append(Step("turn_complete"))
        return Plan(steps, why=why)

    def tool_response(self, call_id: Any, response: Any, silent: bool = False) -> tuple[bool, str, Plan | None]:
        """(known, status, plan) for one tool response. `silent`: the client asked for no reply."""
        call = self.calls.get(call_id) if isinstance(call_id, str) else None
        status = response_status(response)
        if call is None:
            return False, status, None
        if call.status != PENDING:
            return True, status, None   # answered twice: nothing new to say
        call.status = status
        call.fields = response_fields(response)
        if status == PENDING:
            return True, status, None
        if any(self.calls[i].status == PENDING for i in call.batch if i != call_id):
            # assumption (no seed has a multi-call toolCall): the model answers a batch once, when
            # its last response is in; until then it waits, so a lost one leaves the turn hanging
            return True, status, None
        if call_id in self.quiet_ids:
            return True, status, (Plan([Step("turn_complete")], why="response-quiet")
                                  if call.blocking and not self.pending_calls() else None)
        tool = self.tools.get(call.name)
        # F1 is the idle model's answer; after a stop the model said it was made: the re-issued call's
        # answer "already booked/made" (001 C text, 3/3), the late call's "made" (001 F text, 2/2)
        key = ("again_done" if call.reissued or self.stopped else "done") if status == DONE else "failed"
        text = self.sentence(tool, key, call) or self.sentence(tool, "done" if status == DONE else "failed", call) or (
            "Done." if status == DONE else "That did not work.")
        if self.contradict:
            self.contradict = False
            text = self._stop_text(tool, "contradict", call)
        if silent:
            return True, status, (Plan([Step("turn_complete")], why="response-silent-end") if call.blocking else None)
        return True, status, Plan([Step("say", draw(self.cfg.response_reply_delay_s, self.rng), text),
                                   Step("turn_complete")], why=f"response-{status}")

    # ---- a restored session -------------------------------------------------------------------
    def restore(self, entries: list[tuple[str, str]], responses: list[Any], turn_complete: bool) -> Plan | None:
        """A new session's history: (role, text) entries and the tool responses it carried."""
        user_texts: list[str] = []
        asked: str | None = None
        for role, text in entries:
            if "system note" in text.lower():
                self._read_note(text)
                continue
            self.history.append((role, text))
            if role == "user":
                user_texts.append(text)
                m = self.read(text)
                if m["intent"] == "CALL" and m["tool"] and self.tools[m["tool"]].semantics.side_effect:
                    asked = m["tool"]
                    self.story.asked.setdefault(asked, self.args_for(asked, text, m.get("args"))[0][0])
        for resp in responses:
            s = response_status(resp)
            main = self.main_tool()
            if s in (DONE, FAILED) and main:
                self.story.notes[main.name] = s
        if not turn_complete:
            return None
        delay = draw(self.cfg.restore_first_audio_s, self.rng)
        tool = self.tools.get(asked) if asked else self.main_tool()
        status, source, call = self.status_of(tool.name if tool else None)
        last = user_texts[-1] if user_texts else ""
        last_intent = self.read(last)["intent"] if last else None
        if last_intent == intents.STATUS:
            if status == DONE:
                key = "status_note_done" if source == "note" else "status_done"
                return self._say(self.sentence(tool, key, call), "restore-status-booked", delay=delay)
            if status is None and asked:
                return self._reissue(asked, delay)
            return self._delayed(self.user_turn(last), delay)
        if status == DONE:
            # 000 s2: a restored session that knows it happened says it has been done (not F1's
            # in-progress sentence, the answer to a response)
            return self._say(self.sentence(tool, "note_done", call) or self.sentence(tool, "done", call),
                             "restore-booked", delay=delay)
        if status == PENDING and source == "note":
            return self._say(self.sentence(tool, "pending"), "restore-pending", delay=delay)
        if status is None and asked:
            return self._reissue(asked, delay)
        if last:
            return self._delayed(self.user_turn(last), delay)
        return None

    def _reissue(self, tool: str, delay: float) -> Plan:
        args = self.story.asked.get(tool) or self.default_args(tool)
        said = self.sentence(self.tools[tool], "reissue", args=args) or self.sentence(self.tools[tool], "pending")
        if self.cfg.restore_reissue_call_s is not None:
            # F12: without the status note the re-issued call came before any speech
            plan = self._call_plan(tool, [args], draw(self.cfg.restore_reissue_call_s, self.rng), why="restore-reissue")
            plan.steps.insert(1, Step("say", draw(self.cfg.restore_reissue_say_s, self.rng), said))
            return plan
        return self._call_plan(tool, [args], 0.0, why="restore-reissue", say_first=said, say_delay=delay)

    @staticmethod
    def _delayed(plan: Plan | None, delay: float) -> Plan | None:
        if plan and plan.steps:
            plan.steps[0].delay = delay
        return plan

    def _read_note(self, text: str) -> None:
        for line in text.splitlines() or [text]:
            low = line.lower()
            for tool in self.tools.values():
                if tool.name.lower() not in low and not any(w in low for w in tool.semantics.words.verb + tool.asks):
                    continue
                if any(w in low for w in FAILED_WORDS):
                    self.story.notes[tool.name] = FAILED
                elif any(w in low for w in PENDING_WORDS) or "still being processed" in low:
                    self.story.notes[tool.name] = PENDING
                elif re.search(r"\b(booked|committed|confirmed|done|" + "|".join(
                        map(re.escape, tool.semantics.words.done or ("booked",))) + r")\b", low):
                    self.story.notes[tool.name] = DONE
                break
