"""The conformance rules: what a client must do, as named checks over one run's record.

Each rule comes from a study's "what a client must do" list (seed 000, §"What a client must do",
items 1-9; seed 001, §"What it means for an app"), from the review of seed 003 (livekit/agents
PR #6481), or from item 3 of that list meeting the router's middlebox paths (a zombie path, m4; a
poor path that is no loss, h1), and is a pure function of the run's record that returns PASS, FAIL or NA with what was
observed. Defined here once; `lab matrix` (lab/report/matrix.py) tabulates them per scenario and
client.

    outcome = RULES["owed_results_delivered"].judge(record)    # Outcome(status, observed, figure)
    outcomes = judge_all(record)                                # every rule, in RULES order

Every rule reads what the lab sees itself, so it judges a black-box client (a framework, a
`--client-cmd` app) exactly as the lab's own: the twin's record (`twin.jsonl`: connections, setups,
refusals, accepts, goAways, tool calls and responses by call id and session, restores, user turns),
the backend's events, the agent's loss and heal events, and the run's metrics
(lab/report/metrics.py). Where the record cannot show the thing (no twin record in a live run, the
lab's own backend deduplicated before the client could), the rule says NA with the reason instead
of guessing. Thresholds that no record measured say "assumption".

The side effects are the conversation's (lab.report.run_tools: which tools have one and their
business keys; the booking's for a run recorded before conversations), and their truth is the lab's
backend when the run used it, else what the twin observed of the calls (lab.report.effects): a rule
that reads it says so in what it observed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from lab import actions
from lab.events import Event
from lab.protocols import GEMINI, PROTOCOLS
from lab.report import effects as effects_mod
from lab.report import loss_shape, run_tools
from lab.report.loss_shape import ARMED, CUT, DEGRADE, ZOMBIE

PASS, FAIL, NA = "pass", "fail", "n/a"

# How a connection ended, as the twin records it (twin.conn.end `how`, lab/twin/server.py): these
# three are the client's doing (a close frame, a RST, a FIN); server_* and tcp_timeout are the server's.
CLIENT_ENDS = ("close_frame", "rst", "eof")

# How long after the path returns a client's close may take to reach the server: on a path that was
# dead for 30 s the close frame waits behind TCP's retransmission backoff (B2 here: ~24 s after the
# heal for the probe, which closed 3 s after it). 30 s is an assumption: b2-path-return's own close_wait_s.
CLOSE_WINDOW_S = 30.0

# the twin's own decisions to close a connection (lab/twin/session.py): the silent connection's close
# (freeze_close_s, 000 round 3's ~480 s) and the close after a goAway
SERVER_CLOSES = ("twin.freeze_close", "twin.goaway_close")

# the twin's reason for refusing a resume right after an idle drop (lab/twin/session.py): released
# idle_release_s after the last data frame (000 §2: refused at once, accepted ~1.5 s later, 12/12)
IDLE_REFUSAL = "idle_release"

# 000 §4: the reference pattern fell back to a new session 6.1-7.1 s after the loss (4 s of resume
# window). The must-do list gives no number; 15 s is an assumption: "short" next to the study's
# 15 minutes of refusals, and room for a 10 s resume schedule's first retry.
FALLBACK_WITHIN_S = 15.0

# What the loss did to the path is its shape (lab.report.loss_shape: the fault kind's own declaration,
# or the action's), never its name. Two shapes cut no path the moment they are applied, so the rules
# that time a cut cannot use them:
# - a zombie path: the connection stays open at both ends and the client's small frames still pass,
#   but the server's large ones (audio) vanish (m4, a VPN's path-MTU black hole); only the client's
#   own detection can tell, from the moment the fault starts (the server's audio is full-size)
# - an armed middlebox: it cuts a flow only later, when the flow has been idle (a NAT's reap, m1) or
#   reaches an age (a relay, m2); when it did is in the router's capture, not in this record


@dataclass(frozen=True)
class Outcome:
    status: str                     # PASS, FAIL or NA
    observed: str                   # what the record showed, in words
    figure: float | None = None     # the observed figure the rule turns on (ms), when it has one

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "observed": self.observed, "figure": self.figure}


def _na(why: str) -> Outcome:
    return Outcome(NA, why)


# ---- the record a rule reads ----------------------------------------------------------------------
@dataclass
class TwinConn:
    """One connection as the twin saw it."""
    conn: Any
    opened_ms: float
    resume: bool = False
    session: str | None = None
    accept_ms: float | None = None
    refused: str | None = None          # the twin.refuse `why`
    refused_ms: float | None = None
    end_ms: float | None = None
    how: str | None = None


@dataclass
class Record:
    """One run's record as the rules read it: the lab's events, the twin's, run.json and metrics."""
    events: list[Event]
    twin: list[Event] | None
    meta: dict[str, Any]
    metrics: dict[str, Any]
    conversation: dict[str, Any] | None = None                    # the run folder's conversation.json
    conns: dict[Any, TwinConn] = field(default_factory=dict)      # the twin's connections, by its id
    teardown_ms: float | None = None                              # when the lab began ending the run
    tools: run_tools.RunTools = field(init=False, default=run_tools.DEFAULT)     # the run's tools
    effects: effects_mod.Effects = field(init=False, default=None)               # their effects' truth

    def __post_init__(self) -> None:
        self.events = sorted(self.events, key=lambda e: e.ms)
        self.twin = sorted(self.twin, key=lambda e: e.ms) if self.twin is not None else None
        self.tools = run_tools.of_run(self.twin, self.conversation)
        self.effects = effects_mod.of_run(self.events, self.twin, self.tools)
        # the run's teardown: the agent heals at exit, then stops the client (a black-box app gets
        # SIGTERM). A connection ending from then on was ended by the lab, not by the client, so it
        # counts as still open at the end (else a killed app would pass "get a close to the server")
        ends = [e.ms for e in self.events if (e.kind == "fault.clear" and e.get("at_exit")) or e.kind == "run.end"]
        self.teardown_ms = min(ends, default=None)
        for e in self.twin or []:
            c = e.get("conn")
            if e.kind == "twin.setup" or (e.kind in ("twin.accept", "twin.refuse") and c not in self.conns):
                # a connection is known from its setup message; a protocol with none (OpenAI's session
                # starts with the socket: its twin accepts or refuses at once) from its accept or refusal
                self.conns[c] = TwinConn(c, e.ms, resume=bool(e.get("resume")))
            if c in self.conns and e.kind != "twin.setup":
                tc = self.conns[c]
                if e.kind == "twin.accept":
                    tc.accept_ms, tc.session = e.ms, e.get("session")
                elif e.kind == "twin.refuse":
                    tc.refused, tc.refused_ms = e.get("why"), e.ms
                elif e.kind == "twin.conn.end":
                    tc.session = tc.session or e.get("session")
                    if self.teardown_ms is None or e.ms < self.teardown_ms:
                        tc.end_ms, tc.how = e.ms, e.get("how")

    def twin_kind(self, kind: str) -> list[Event]:
        return [e for e in self.twin or [] if e.kind == kind]

    def kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def effect_calls(self) -> list[Event]:
        """The twin's calls of a side-effecting tool (every call in a run with no conversation of its own)."""
        return [e for e in self.twin_kind("twin.tool_call") if self.tools.default or self.tools.effect(e.get("name"))]

    @property
    def own_action(self) -> bool:
        """The run has a conversation of its own, or its effects are known other than from the lab's
        backend: what a rule observed names the tools and how their effects are known."""
        return not self.tools.default or self.effects.source != effects_mod.BACKEND

    def how_known(self) -> str:
        """' (refund_order; a twin observation ...)' for a run with its own action; '' for one read as always."""
        return f" ({self.tools.names}; known from {self.effects.evidence})" if self.own_action else ""

    @property
    def loss_ms(self) -> float | None:
        return self.metrics.get("loss_ms")

    @property
    def loss_shape(self) -> str | None:
        """What the loss did to the path (cut, degrade, zombie, armed); None: no loss, or not known."""
        return loss_shape.of_metrics(self.metrics)

    @property
    def end_ms(self) -> float:
        last = [e.ms for e in self.events] + [e.ms for e in self.twin or []]
        return max(last, default=0.0)

    def accepted(self, after: float, resume: bool | None = None, session: str | None = None) -> list[TwinConn]:
        """Connections the twin accepted after `after` (resumes, new sessions, or both)."""
        return sorted((c for c in self.conns.values() if c.accept_ms is not None and c.accept_ms > after
                       and (resume is None or c.resume == resume) and (session is None or c.session == session)),
                      key=lambda c: c.accept_ms)

    def lost_conn(self) -> TwinConn | None:
        """The connection the twin held at the loss: accepted before it and not ended by then."""
        if self.loss_ms is None:
            return None
        held = [c for c in self.conns.values() if c.accept_ms is not None and c.accept_ms <= self.loss_ms
                and (c.end_ms is None or c.end_ms > self.loss_ms)]
        return max(held, key=lambda c: c.accept_ms) if held else None

    def pending_at_loss(self) -> list[Event]:
        """Tool calls the twin issued before the loss and had no response for by then."""
        if self.loss_ms is None:
            return []
        answered = {e.get("id") for e in self.twin_kind("twin.tool_response") if e.ms <= self.loss_ms}
        return [e for e in self.twin_kind("twin.tool_call") if e.ms <= self.loss_ms and e.get("id") not in answered]


def _silent_to_client(m: dict[str, Any]) -> bool:
    """The loss cut the path and the client did not cause it (a fault, a proxy freeze): only its own
    detection can tell it (000 §3). A client action (abort, close) is a loss the client knows of."""
    kind = str(m.get("loss_kind") or "")
    if loss_shape.of_metrics(m) != CUT:
        return False
    if kind.startswith(loss_shape.ACTION):
        a = actions.ACTIONS.get(kind.split(":", 1)[1])
        return a is not None and a.by != actions.CLIENT
    return True


def _armed(m: dict[str, Any]) -> Outcome | None:
    """NA, saying why, when the loss is an armed middlebox: the agent's loss is when it was armed
    (m2's relay: before the first connection), so what was pending or new "after the loss" is not."""
    if loss_shape.of_metrics(m) == ARMED:
        kind = m.get("loss_kind")
        return _na(f"{loss_shape.does(kind) or 'a middlebox that cuts a flow later'} ({kind}): when it cut the "
                   "flow, if it did, is in the router's capture, not in this record")
    return None


def _not_a_cut(m: dict[str, Any]) -> Outcome | None:
    """NA, saying why, when the loss is one of the router's middleboxes that cut no path when applied."""
    if loss_shape.of_metrics(m) == ZOMBIE:
        return _na(f"a zombie path ({m.get('loss_kind')}), not a cut: leaves_zombie_connection judges it")
    return _armed(m)


def path_back_ms(r: Record) -> float | None:
    """When the lost path came back during the run: the agent healed the loss's fault (not at exit),
    or a scripted action gave it back (lab.actions heals_path: the proxy's unfreeze); None: never."""
    healing = actions.healing_names()
    return next((e.ms for e in r.events if r.loss_ms is not None and e.ms > r.loss_ms
                 and ((e.kind == "fault.clear" and not e.get("at_exit"))
                      or (e.kind == "action" and e.get("what") in healing))), None)


def _needs_twin(fn: Callable[[Record], Outcome]) -> Callable[[Record], Outcome]:
    def judge(r: Record) -> Outcome:
        if r.twin is None:
            return _na("not observable: no twin record (a live run)")
        return fn(r)
    return judge


def _ms(v: float) -> str:
    return f"{v:.0f} ms"


# ---- the rules ------------------------------------------------------------------------------------
@_needs_twin
def _ledger(r: Record) -> Outcome:
    if r.loss_ms is None:
        return _na("no loss")
    if (armed := _armed(r.metrics)) is not None:
        return armed
    pending = r.pending_at_loss()
    if not pending:
        return _na("no tool call pending at the loss")
    judged, missing, took = 0, [], []
    for call in pending:
        resumed = r.accepted(r.loss_ms, resume=True, session=call.get("session"))
        if not resumed:
            continue
        judged += 1
        acc = resumed[0].accept_ms
        resp = [e for e in r.twin_kind("twin.tool_response") if e.get("id") == call.get("id") and e.ms >= acc
                and e.get("session") == call.get("session")]
        if resp:
            took.append(resp[0].ms - acc)
        else:
            missing.append(str(call.get("id")))
    if not judged:
        return _na("no resume of the call's session was accepted after the loss")
    if missing:
        return Outcome(FAIL, f"the old call id {', '.join(missing)} was never answered on the resumed session")
    return Outcome(PASS, f"the old call id answered on the resumed session {_ms(took[0])} after its accept", took[0])


@_needs_twin
def _retry(r: Record) -> Outcome:
    refused = sorted((c for c in r.conns.values() if c.resume and c.refused and c.refused != "transparent"),
                     key=lambda c: c.opened_ms)
    if not refused:
        return _na("no resume was refused")
    # 000 §2 is about the refusal right after an idle drop, which the twin records as `idle_release`
    # (a later attempt is accepted); a refusal while the server still holds the old connection stays a
    # refusal however often it is retried (000 §3), and R4/R5 judge what the client does about it
    first = next((c for c in refused if c.refused == IDLE_REFUSAL), None)
    if first is None:
        return _na(f"every refusal was for a session the server still held ({refused[0].refused}): "
                   "a retry alone cannot help")
    at = first.end_ms if first.end_ms is not None else first.refused_ms
    later = sorted((c for c in r.conns.values() if c.resume and c.opened_ms > at), key=lambda c: c.opened_ms)
    if not later:
        return Outcome(FAIL, "no resume attempt after the refusal right after the drop")
    gap = later[0].opened_ms - at
    ok = "accepted" if later[0].accept_ms is not None else "refused too"
    return Outcome(PASS, f"tried again {_ms(gap)} after the refusal right after the drop ({ok})", gap)


@_needs_twin
def _detection(r: Record) -> Outcome:
    m = r.metrics
    if r.loss_ms is None:
        return _na("no loss")
    if not _silent_to_client(m):
        return _not_a_cut(m) or _na(f"the loss ({m.get('loss_kind')}) did not need the client's own detection")
    after = sorted((c for c in r.conns.values() if c.opened_ms > r.loss_ms), key=lambda c: c.opened_ms)
    own = f"; its own loss.detected {_ms(m['detection_ms'])} after the loss" if m.get("detection_ms") is not None else ""
    if not after:
        return Outcome(FAIL, f"no new connection in the {(r.end_ms - r.loss_ms) / 1000:.0f} s after the loss" + own)
    gap = after[0].opened_ms - r.loss_ms
    what = "a resume" if after[0].resume else "a new session"
    return Outcome(PASS, f"{what} reached the twin {_ms(gap)} after the loss" + own, gap)


@_needs_twin
def _close(r: Record) -> Outcome:
    if r.loss_ms is None or r.loss_shape != CUT:
        return _na("no loss that cut the path")
    back = path_back_ms(r)
    if back is None:
        return _na("the path did not come back during the run")
    lost = r.lost_conn()
    if lost is None:
        return _na("the twin held no connection at the loss")
    if lost.end_ms is not None and lost.end_ms <= back:
        return _na(f"the connection had ended ({lost.how}) before the path came back")
    # b3: the server's own close went into the dead path before it came back; the session went with
    # it (000 round 3), so there was nothing left for the client's close to unlock
    shut = next((e for e in r.twin if e.kind in SERVER_CLOSES and e.get("conn") == lost.conn and e.ms <= back), None)
    if shut is not None:
        return _na(f"the server closed it itself ({shut.kind}) {_ms(shut.ms - r.loss_ms)} after the loss, before the "
                   "path came back: nothing left for the client's close to unlock")
    if lost.end_ms is None and r.end_ms - back < CLOSE_WINDOW_S * 1000:
        return _na(f"the run ended {(r.end_ms - back) / 1000:.0f} s after the path came back, before a close "
                   f"could be expected ({CLOSE_WINDOW_S:g} s)")
    if lost.end_ms is None:
        return Outcome(FAIL, f"the old connection was still open at the server {(r.end_ms - back) / 1000:.0f} s after "
                             "the path came back")
    if lost.how not in CLIENT_ENDS:
        return Outcome(FAIL, f"the old connection ended by the server ({lost.how}), not by the client")
    gap = lost.end_ms - back
    return Outcome(PASS, f"the old connection ended ({lost.how}) {_ms(gap)} after the path came back", gap)


@_needs_twin
def _fallback(r: Record) -> Outcome:
    m = r.metrics
    if r.loss_ms is None or r.loss_shape != CUT:
        return (_not_a_cut(m) if r.loss_ms is not None else None) or _na("no loss that cut the path")
    if r.accepted(r.loss_ms, resume=True):
        return _na("a resume was accepted: no fallback needed")
    new = r.accepted(r.loss_ms, resume=False)
    if new:
        gap = new[0].accept_ms - r.loss_ms
        tries = sum(1 for c in r.conns.values() if c.resume and r.loss_ms < c.opened_ms < new[0].opened_ms)
        status = PASS if gap <= FALLBACK_WITHIN_S * 1000 else FAIL
        return Outcome(status, f"a new session {_ms(gap)} after the loss, after {tries} resume attempt(s)"
                               + ("" if status == PASS else f" (later than {FALLBACK_WITHIN_S:g} s)"), gap)
    left = r.end_ms - r.loss_ms
    if left < FALLBACK_WITHIN_S * 1000:
        return _na(f"the run ended {left / 1000:.0f} s after the loss, before the {FALLBACK_WITHIN_S:g} s cut-off")
    tries = sum(1 for c in r.conns.values() if c.resume and c.opened_ms > r.loss_ms)
    return Outcome(FAIL, f"no new session in the {left / 1000:.0f} s after the loss ({tries} resume attempt(s), "
                         "none accepted)")


@_needs_twin
def _status_note(r: Record) -> Outcome:
    if r.loss_ms is None:
        return _na("no loss")
    if (armed := _armed(r.metrics)) is not None:
        return armed
    if r.accepted(r.loss_ms, resume=True):
        return _na("a resume was accepted: the conversation went on in its own session")
    new = r.accepted(r.loss_ms, resume=False)
    if not new:
        return _na("no new session after the loss")
    s = new[0]
    # a side effect asked before the new session: the backend's request, or a side-effecting call the
    # twin issued (an app that executes its tools itself)
    requests = [ms for ms, _ in r.effects.requested if ms <= s.accept_ms]
    if not requests:
        return _na("no side effect before the new session" + r.how_known())
    note = next((e for e in r.twin_kind("twin.restore") if e.get("session") == s.session and e.get("note") is not None),
                None)
    # 000 §4: without the note the model re-issued the call; a note that comes only after it did was late
    reissued = next((e for e in r.effect_calls() if e.get("session") == s.session), None)
    if note is None:
        return Outcome(FAIL, "the new session got no status of the side effect"
                       + ("; the model re-issued the call there" if reissued else "") + r.how_known())
    if reissued is not None and reissued.ms < note.ms:
        return Outcome(FAIL, f"the status note ({note.get('note')}) came {_ms(note.ms - reissued.ms)} after the model "
                             "had re-issued the call in the new session" + r.how_known())
    return Outcome(PASS, f"the new session was restored with a status note ({note.get('note')}) "
                         f"{_ms(note.ms - s.accept_ms)} after its setup" + r.how_known())


@_needs_twin
def _dedupe(r: Record) -> Outcome:
    # the same effect asked twice: side-effecting calls under different ids with one business key
    by_key: dict[str, set] = {}
    for e in r.twin_kind("twin.tool_call"):
        key = r.tools.key_of(e)
        if key is not None:
            by_key.setdefault(key, set()).add(e.get("id"))
    repeated = {k: ids for k, ids in by_key.items() if len(ids) > 1}
    if not repeated:
        return _na(f"no {r.tools.names} call was asked for twice (one business key)" if r.own_action
                   else "no booking was asked for twice")
    key, ids = next(iter(repeated.items()))
    done = [d for d in r.effects.done if str(d.key) == key]
    scn = r.meta.get("scenario") if isinstance(r.meta.get("scenario"), dict) else {}
    if (r.effects.source == effects_mod.BACKEND and bool((scn.get("backend") or {}).get("dedup", True))
            and r.kind("tool.dedup")):
        return _na(f"not observable: {len(ids)} calls for {key!r}, deduplicated by the lab's backend itself")
    status = PASS if len(done) <= 1 else FAIL
    if r.own_action:
        return Outcome(status, f"{len(ids)} calls for {key!r}, {len(done)} done{r.how_known()}", float(len(done)))
    return Outcome(status, f"{len(ids)} calls for {key!r}, {len(done)} booking(s)", float(len(done)))


@_needs_twin
def _transparent(r: Record) -> Outcome:
    if not r.conns:
        return _na("the twin saw no setup")
    asked = [c for c in r.conns.values() if c.refused == "transparent"]
    if asked or r.metrics.get("transparent_requested"):
        return Outcome(FAIL, f"{max(len(asked), 1)} setup(s) asked for transparent resumption (refused 1007)")
    return Outcome(PASS, f"none of {len(r.conns)} setup(s) asked for transparent resumption")


@_needs_twin
def _goaway(r: Record) -> Outcome:
    # the server's own ends of a live session (server_*: its goAway close, the silent connection's
    # close, the session cap); tcp_timeout is its TCP giving up on a dead path, the loss's doing
    marks = sorted([(e.ms, e.get("conn"), "goAway") for e in r.twin_kind("twin.goaway")]
                   + [(c.end_ms, c.conn, "the server's close") for c in r.conns.values()
                      if c.accept_ms is not None and c.end_ms is not None and str(c.how).startswith("server_")],
                   key=lambda x: x[0])
    if not marks:
        return _na("no goAway and no server close of a live session")
    at, gone, what = marks[0]
    # on a session again: another connection the twin accepted that was live after the mark (one the
    # client had already moved to counts, as the recovery client's new session does)
    live = [c for c in r.conns.values() if c.conn != gone and c.accept_ms is not None
            and (c.end_ms is None or c.end_ms > at)]
    if not live:
        return Outcome(FAIL, f"no session after {what} ({(r.end_ms - at) / 1000:.0f} s to the end of the run)")
    first = min(live, key=lambda c: c.accept_ms)
    gap = max(0.0, first.accept_ms - at)
    return Outcome(PASS, f"on a session again ({'resumed' if first.resume else 'new'}) {_ms(gap)} after {what}", gap)


@_needs_twin
def _owed(r: Record) -> Outcome:
    calls = r.twin_kind("twin.tool_call")
    if not calls:
        return _na("no tool call")
    responses = r.twin_kind("twin.tool_response")
    pending = {e.get("id") for e in r.pending_at_loss()}
    # a call pending at the loss is owed only if its session came back (000 §4: the fallback never
    # answers the old id, as there is no session left to answer it on)
    owed = [c for c in calls if c.get("id") not in pending
            or r.accepted(r.loss_ms, resume=True, session=c.get("session"))]
    issued = {(c.get("session"), c.get("id")) for c in calls}
    misdirected = [e for e in responses if e.get("known") is False or (e.get("session"), e.get("id")) not in issued]
    lost = [c for c in owed if not any(e.get("id") == c.get("id") and e.get("session") == c.get("session")
                                       for e in responses)]
    if not owed and not misdirected:
        return _na("no result owed: the calls were pending at the loss and their session never came back")
    parts = [f"{len(owed) - len(lost)} of {len(owed)} owed result(s) reached the call's session"]
    if misdirected:
        parts.append(f"{len(misdirected)} sent to a session that never issued the call")
    if r.own_action:
        # the results a side effect's truth hangs on, named: a lost one leaves the model unable to say it
        fx = [c for c in owed if r.tools.effect(c.get("name"))]
        fx_lost = [c for c in fx if c in lost]
        parts.append(f"{len(fx) - len(fx_lost)} of {len(fx)} of a side-effecting tool ({r.tools.names})")
    return Outcome(FAIL if lost or misdirected else PASS, "; ".join(parts), float(len(lost) + len(misdirected)))


@_needs_twin
def _spurious(r: Record) -> Outcome:
    said = [e for e in r.kind("user.say")]
    if not said:
        return _na("the user said nothing")
    turns = r.twin_kind("twin.user")
    reasked = _reasked(r)
    extra = len(turns) - len(said) - reasked
    how = ", ".join(f"{n} by {src}" for src, n in sorted(
        {str(e.get("source")): sum(1 for x in turns if x.get("source") == e.get("source")) for e in turns}.items()))
    status = FAIL if extra > 0 else PASS
    again = f" and {reasked} asked again, unanswered at a loss" if reasked else ""
    return Outcome(status, f"{len(turns)} user turn(s) reached the twin ({how}) for {len(said)} line(s) said{again}",
                   float(max(extra, 0)))


def _reasked(r: Record) -> int:
    """The user's lines a client carried into a new session's restore (`user.replay` how restore) with
    no reply to them heard before: the same line asked again, whose first reply went down with the
    lost socket, is the user's turn, not an invented one. A line already answered is not counted."""
    says = r.kind("user.say")
    heard = sorted([e.ms for e in r.events if (e.kind == "model.audio" and e.get("first")) or e.kind == "model.text"]
                   + [e.ms for e in r.kind("tool.call")])
    n = 0
    for rp in r.kind("user.replay"):
        said = [e for e in says if e.get("line") == rp.get("line") and e.ms <= rp.ms]
        if rp.get("how") == "restore" and said and not any(said[-1].ms <= ms < rp.ms for ms in heard):
            n += 1
    return n


@_needs_twin
def _zombie(r: Record) -> Outcome:
    if r.loss_ms is None or r.loss_shape != ZOMBIE:
        return _na(f"no zombie path ({', '.join(loss_shape.kinds_of(ZOMBIE))}) in this run")
    lost = r.lost_conn()
    if lost is None:
        return _na("the twin held no connection when the path turned into a zombie")
    # until the path heals: after it, the connection works again and leaving it proves nothing
    until = path_back_ms(r)
    limit, what = (until, "the path healed") if until is not None else (r.end_ms, "the run ended")
    # leaving it: the client ends it (its close frame, RST or FIN are small and pass) or opens another
    left = [(c.opened_ms, "a resume" if c.resume else "a new session")
            for c in r.conns.values() if c.opened_ms > r.loss_ms]
    if lost.end_ms is not None and lost.how in CLIENT_ENDS:
        left.append((lost.end_ms, f"its end of the old connection ({lost.how})"))
    left = [x for x in left if x[0] <= limit]
    if not left:
        return Outcome(FAIL, f"it held the zombie connection {(limit - r.loss_ms) / 1000:.0f} s, until {what}")
    at, how = min(left)
    return Outcome(PASS, f"{how} reached the twin {_ms(at - r.loss_ms)} into the zombie path, before {what}",
                   at - r.loss_ms)


@_needs_twin
def _false_alarm(r: Record) -> Outcome:
    # a fault of shape degrade: delay, jitter, random loss (not a zombie path, not an armed middlebox)
    if r.loss_ms is None or r.loss_shape != DEGRADE:
        return _na("no fault that only degraded the path (delay, jitter, random loss)")
    lost = r.lost_conn()
    if lost is None:
        return _na("the twin held no connection when the path degraded")
    after = sorted((c for c in r.conns.values() if c.opened_ms > r.loss_ms), key=lambda c: c.opened_ms)
    if not after:
        return Outcome(PASS, f"stayed on its session the {(r.end_ms - r.loss_ms) / 1000:.0f} s the path was degraded",
                       0.0)
    first = after[0]
    if lost.end_ms is not None and lost.end_ms <= first.opened_ms and lost.how not in CLIENT_ENDS:
        return _na(f"the server ended the session ({lost.how}) before the client's next connection: it was needed")
    what = "a resume" if first.resume else "a new session"
    old = "still open" if lost.end_ms is None or lost.end_ms > first.opened_ms else f"ended by the client ({lost.how})"
    return Outcome(FAIL, f"{what} {_ms(first.opened_ms - r.loss_ms)} into a path that was only degraded, the old "
                         f"connection {old} ({len(after)} connection(s) after the fault)", float(len(after)))


@dataclass(frozen=True)
class Rule:
    name: str
    source: str             # the record it comes from: seed file and section
    about: str
    judge: Callable[[Record], Outcome]
    protocols: tuple[str, ...] = PROTOCOLS      # the realtime protocols it applies to (lab.protocols)

    def applies(self, r: Record) -> Outcome | None:
        """n/a, saying so, for a run of a protocol the rule is not about; None when it applies."""
        proto = str(r.meta.get("protocol") or GEMINI)
        if proto in self.protocols:
            return None
        return Outcome(NA, f"a rule of the {', '.join(self.protocols)} protocol (resumption with a handle); "
                           f"this run spoke {proto}, which has none")


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("ledger_old_id_after_resume", "000 §What a client must do, 1",
         "after an accepted resume, the result for the call id pending at the loss reaches the resumed session",
         _ledger, protocols=(GEMINI,)),
    Rule("retry_refused_resume", "000 §What a client must do, 2",
         "a resume refused right after an idle drop is tried again (that 1011 is not a dead handle)", _retry,
         protocols=(GEMINI,)),
    Rule("own_loss_detection", "000 §What a client must do, 3",
         "after a loss nobody told the client of, it reconnects on its own (seen at the twin)", _detection),
    Rule("close_reaches_server", "000 §What a client must do, 4",
         "when the path comes back, the client ends the old connection so the server sees it (what unlocks the "
         "session)", _close),
    Rule("resume_cutoff_fallback", "000 §What a client must do, 5",
         f"with no resume accepted, a new session within {FALLBACK_WITHIN_S:g} s of the loss (bound: assumption)",
         _fallback),
    Rule("status_from_backend", "000 §What a client must do, 6",
         "the new session is told each side effect's status (a System note), not only the transcript", _status_note),
    Rule("dedupe_by_business_key", "000 §What a client must do, 7; 001 §What it means for an app",
         "a side effect asked for twice (a re-issued call, a new id, one business key: a booking, a refund) "
         "happens once", _dedupe),
    Rule("no_transparent_mode", "000 §What a client must do, 8; §Other findings",
         "no setup asks for transparent resumption (the Developer API closes it 1007)", _transparent,
         protocols=(GEMINI,)),
    Rule("no_reliance_on_goaway", "000 §What a client must do, 9; fidelity §5 (goAway)",
         "after a goAway or the server's own close the client is on a session again", _goaway),
    Rule("owed_results_delivered", "000 §Results 1 and §What a client must do, 1; 003 review (lost and overwritten "
         "results)", "every tool result owed reaches the session that issued the call; none goes to a session "
         "that never issued it", _owed),
    Rule("no_spurious_reply", "003 review (the '.' nudge after the replay)",
         "the twin receives no user turn the user did not say (an injected nudge makes the model answer twice)",
         _spurious),
    Rule("leaves_zombie_connection", "000 §What a client must do, 3; scenario m4 (a VPN's path-MTU black hole)",
         "on a zombie path (small frames pass, the server's audio vanishes, nobody closes) the client leaves the "
         "connection on its own before the path heals", _zombie),
    Rule("no_false_alarm", "000 §What a client must do, 3 (its detection, never tried on a poor path); "
         "scenario h1", "on a path that is only degraded (delay, jitter, random loss; TCP retransmits) the "
         "client stays on its session: no resume, no new session", _false_alarm),
)}


def judge_all(record: Record) -> dict[str, Outcome]:
    """Every rule's outcome for one run, in RULES order."""
    return {name: rule.applies(record) or rule.judge(record) for name, rule in RULES.items()}
