"""The reference recovery client: what the study says a client must do, with the fallback hedged.

* Its own ledger of tool calls by call id, across connections (`SdkClient.ledger`).
* Detection with its own WebSocket pings (one every 0.25 s) and the kernel's TCP as a witness
  (lab.clients.liveness): three pings unanswered by TCP, each past TCP's own RTO, the oldest for
  0.35 s, while the spare session the suspicion opened (after them) is up, are a loss
  (`lost_probes`, `probed_lost_after_s`); so is silent and nothing acknowledged
  for max(0.8 s, 4 RTO), and silent for 4 s whatever TCP says (`lost_after_s`, `lost_rtos`,
  `stall_after_s`). A path with jitter and random loss is slow, not dead: TCP acks it within a few
  RTOs, so it is never taken for a loss (`lab bench false-alarms`); `tcp_witness: false` is the
  silence-only rule.
* Suspicion first: a ping unanswered by TCP for 0.05 s (`probe_after_s`, or the path's own RTO)
  sends the next ones every `probe_interval_s` (0.025 s), so that three are out before TCP's own
  timeout; two unanswered, the oldest for max(0.1 s, 2 of the path's own RTOs) (or silent and
  unacknowledged for max(0.1 s, 2 RTO); `suspect_after_s`, `suspect_rtos`) start the resume
  attempt and the spare session while the session is kept, so at the loss the refusal (the twin's
  refuse_close_s, ~0.53 s) and the new session's setup are already behind it; heard again, the
  spare is closed (`prepare_on_suspect`).
* On a loss, three things at once: one resume attempt with the handle; a clean close on the old
  socket (on a dead path it costs nothing; if the path is back, it is what unlocks the session); and
  a new session without a handle (the hedge), so a fallback costs no extra setup time.
* The resume window: until the first refusal or 1.5 s (`resume_window_s` overrides the 1.5 s and
  then refusals are retried inside it). After a silent loss whose suspicion already started a resume
  attempt, the window closes at the loss (`cut_off_at_loss`): the server holds such a session and
  refuses it, so the fallback does not wait for the refusal. When the old connection is known closed (aborted, closed
  by the server, or our close was echoed), a refusal is the transient idle-drop 1011: it is retried
  `retry_refused_after_s` (1 s) later while within `closed_window_s` (3 s) of the loss.
* Resume accepted: every result of the session still owed is sent, all of them in one
  toolResponse; the spare session is closed.
* Otherwise the fallback: the new session is restored with ONE send_client_content: the last
  `restore_turns` turns of the client's own transcript plus a "System note" with one status line
  per side effect from the backend (`status_note`). The old call ids are never answered in the new
  session; a job of the old session that commits later is told as a note before the user's next
  line (`status_updates`, turn_complete false: no filler turn, no extra reply). A call the model
  issues again is deduplicated by business key in the backend and answered from the existing job.
* The server still holds the lost session and refuses the new one too (lab.clients.held): the
  client tells the user at once, from the backend, that it is reconnecting and what the booking's
  state is (`user.status`; again when that state changes), and retries a resume and a new session
  together on a bounded backoff (`retry_first_s` 1 s, x`retry_factor` 2, at most `retry_max_s`
  10 s apart, for `retry_for_s` 600 s: past 000's ~480 s server close), whichever the server gives
  first (the resume preferred); a refusal by `ctx.before_connect` (the live budget) ends it.
* The user's lines said while recovering wait for the recovered session (up to `hold_input_max_s`).
* Speech cut by a loss is buffered and spoken again (`replay_gap_speech`; the study's rule 8,
  "buffer anything you need to replay yourself", and rule 10, speech cut by a drop is partly
  repeated): a line whose audio was streaming when the loss was detected stops there (the rest
  would land mid-utterance on the next session) and, once recovered, is streamed again whole on a
  resumed session; a new session already got the line as text in its restore (the transcript), so
  it is not spoken twice there. A line that ended before the loss was detected is not replayed
  (the client cannot tell what of it the server heard).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from google.genai import types

from lab.backend import status_line
from lab.clients.connection import SRC, Connection
from lab.clients.held import Backoff, held_status
from lab.clients.ledger import ToolCall
from lab.clients.liveness import Detector
from lab.clients.restore import restore_contents
from lab.clients.sdk import SdkClient
from lab.errors import LabError


class RecoveryClient(SdkClient):
    name = "recovery"
    DEFAULTS = {
        **SdkClient.DEFAULTS,
        "ping_interval_s": 0.25,
        "lost_after_s": 0.8,
        "tcp_witness": True,            # ask TCP before calling a silent connection lost
        "suspect_after_s": 0.1,         # a ping unanswered this long (and 2 of the path's own RTOs)
        "stall_after_s": 4.0,           # silent this long is a loss even with TCP acking
        "suspect_rtos": 2.0,
        "lost_rtos": 4.0,               # a segment lost twice in a row stalls 3 RTO + RTT, still under it
        "probe_after_s": 0.05,          # a ping unanswered this long: ...
        "probe_interval_s": 0.025,      # ... the next ones this often, out before TCP's RTO
        "lost_probes": 3,               # this many pings unanswered past TCP's RTO is a loss ...
        "probed_lost_after_s": 0.35,    # ... once the oldest has waited this long
        "prepare_on_suspect": True,     # resume attempt and spare session at the suspicion
        "resume_window_s": None,        # None: until the first refusal, at most 1.5 s
        "default_window_s": 1.5,
        "cut_off_at_loss": True,        # silent loss, attempt from the suspicion unanswered: fall back now
        "closed_window_s": 3.0,         # old connection known closed: retry refusals this long
        "retry_refused_after_s": 1.0,
        "hedge": True,                  # open the new session in parallel with the resume
        "status_note": True,
        "status_updates": True,
        "restore_turns": 6,
        "restore_turn_complete": True,
        "retry_first_s": 1.0,           # the server refuses the new session too: retry rounds ...
        "retry_factor": 2.0,            # ... growing by this factor ...
        "retry_max_s": 10.0,            # ... at most this far apart ...
        "retry_for_s": 600.0,           # ... for this long (000: the server's own close at ~480 s)
        "tell_user_when_held": True,    # user.status from the backend while the session is held
        "hold_input_while_recovering": True,
        "obey_resume_action": False,
        "replay_gap_speech": True,      # speech cut by a loss is spoken again once recovered
    }

    def __init__(self, ctx: Any):
        super().__init__(ctx)
        self._next_session = 1
        self._notes: list[str] = []
        self._recover_task: asyncio.Task | None = None
        self._early: _Early | None = None
        self._backoff = Backoff(float(self.p["retry_first_s"]), float(self.p["retry_factor"]),
                                float(self.p["retry_max_s"]), float(self.p["retry_for_s"]))
        self._held = False                   # waiting out a server that holds the lost session
        self._told: tuple[str, str] | None = None
        if self.p["tcp_witness"]:
            det = Detector(suspect_after_s=float(self.p["suspect_after_s"]), lost_after_s=float(self.p["lost_after_s"]),
                           stall_after_s=float(self.p["stall_after_s"]), suspect_rtos=float(self.p["suspect_rtos"]),
                           lost_rtos=float(self.p["lost_rtos"]), lost_probes=int(self.p["lost_probes"]),
                           probed_lost_after_s=float(self.p["probed_lost_after_s"]),
                           probe_after_s=float(self.p["probe_after_s"]))
            self._timing = dataclasses.replace(self._timing, detector=det,
                                               probe_interval_s=float(self.p["probe_interval_s"]))
        self._conn_events = dataclasses.replace(self._conn_events, suspect=self._on_suspect)

    # ---- suspicion ---------------------------------------------------------------------------
    def _on_suspect(self, c: Connection, suspected: bool) -> None:
        if c is not self.current or self.recovering or not self.p["prepare_on_suspect"]:
            return
        if suspected and self._early is None:
            session = self._new_session_no()
            hedge = self.spawn(self._open_new(session), name="recovery-early-hedge") if self.p["hedge"] else None
            if hedge is not None:
                hedge.add_done_callback(lambda t, c=c: _witness(t, c))
            # bounded: the attempt must not outlive the resume window of the loss it prepares for
            timeout = float(self.p["default_window_s"]) + float(self.p["stall_after_s"])
            resume = (self.spawn(self.attempt_resume("suspect", timeout=timeout), name="recovery-early-resume")
                      if self.handle is not None else None)
            self._early = _Early(c, session, hedge, resume)
        elif not suspected and self._early is not None:
            early, self._early = self._early, None
            self.spawn(self._stand_down(early), name="recovery-stand-down")

    async def _stand_down(self, early: "_Early") -> None:
        """The suspected connection was heard again: the spare is closed; a resume the server
        accepted meanwhile has moved the session, so it is adopted."""
        if early.hedge is not None:
            self.spawn(self._drop_spare(early.hedge), name="recovery-drop-spare")
        if early.resume is None:
            return
        try:
            c = await early.resume
        except BaseException:
            return
        if c is not None and not self.recovering:
            await self.accept_resume(c)

    # ---- loss --------------------------------------------------------------------------------
    def on_loss(self, c: Connection, cause: str) -> None:
        if self.recovering:
            return
        self.recovering = True
        self._recover_task = self.spawn(self._recover(c, cause), name="recovery")

    def _new_session_no(self) -> int:
        self._next_session = max(self._next_session, max((x.session_no for x in self.conns), default=1)) + 1
        return self._next_session

    async def _open_new(self, session: int) -> Connection:
        c = self.new_conn("new", None, session)
        await c.open(timeout=float(self.p["attempt_timeout_s"]))
        return c

    async def _recover(self, lost: Connection, cause: str) -> None:
        try:
            await self._recover_once(lost, cause)
        finally:
            if not self.ready.is_set():
                self.recovering = False          # failed: a later loss may start a new episode

    async def _recover_once(self, lost: Connection, cause: str) -> None:
        t_loss = time.monotonic()
        early, self._early = self._early, None
        if early is not None and early.conn is not lost:     # prepared for another connection
            self.spawn(self._stand_down(early), name="recovery-stand-down")
            early = None
        if not lost.closed:
            self.spawn(lost.close(float(self.p["close_wait_s"])), name="recovery-close-old")
        hedge: asyncio.Task | None = None
        if early is not None:
            new_session, hedge = early.session, early.hedge
        else:
            new_session = self._new_session_no()
            if self.p["hedge"]:
                hedge = self.spawn(self._open_new(new_session), name="recovery-hedge")
        resumed = await self._resume_window(lost, t_loss, early.resume if early is not None else None)
        if resumed is None and self.current is not lost and self.current is not None and self.current.usable:
            # someone else (a scripted resume) already got the session back
            if hedge is not None:
                self.spawn(self._drop_spare(hedge), name="recovery-drop-spare")
            self.recovering = False
            return
        if resumed is not None:
            await self.accept_resume(resumed)
            if hedge is not None:
                self.spawn(self._drop_spare(hedge), name="recovery-drop-spare")
            return
        await self._fallback(lost, hedge, new_session)

    async def _resume_window(self, lost: Connection, t_loss: float,
                             first: asyncio.Task | None = None) -> Connection | None:
        """`first`: an attempt already under way (started at the suspicion); it counts as the first."""
        if self.handle is None and first is None:
            self.log.write("resume.skip", src=SRC, reason="no handle", why="recovery")
            return None
        explicit = self.p["resume_window_s"]
        window = float(explicit if explicit is not None else self.p["default_window_s"])
        closed_window = float(self.p["closed_window_s"])
        retry = float(self.p["retry_refused_after_s"])
        while True:
            if self.current is not lost:
                return None                           # resumed by other means meanwhile
            known_closed = lost.closed
            end = t_loss + (max(window, closed_window) if known_closed else window)
            left = end - time.monotonic()
            if left <= 0:
                return None
            if first is not None and self._cut_off_now(lost, first, explicit):
                first.cancel()
                self.log.write("resume.skip", src=SRC, reason="silent loss: the server holds the session",
                               why="cut-off")
                return None
            if first is not None:
                done, _ = await asyncio.wait({first}, timeout=left)
                if not done:
                    first.cancel()
                    return None
                c = None if first.cancelled() or first.exception() is not None else first.result()
                first = None
            else:
                c = await self.attempt_resume("recovery", timeout=left)
            if c is not None:
                return c
            # refused (or failed): retry only inside the window, and only when a retry can help
            known_closed = lost.closed
            end = t_loss + (max(window, closed_window) if known_closed else window)
            if not known_closed and explicit is None:
                return None                           # the default window ends at the first refusal
            if time.monotonic() + retry >= end:
                return None
            await asyncio.sleep(retry)

    def _cut_off_now(self, lost: Connection, first: asyncio.Task, explicit: Any) -> bool:
        """The resume cut-off (000, what a client must do, 5) placed at the loss itself: the path died
        silently (the old connection is not known closed, so the server saw no close) and the attempt
        the suspicion started is still unanswered. After a silent loss the server held the session and
        refused every resume for as long as the study tried (000 round 3: 450 of 450), so waiting out
        the refusal only delays the fallback by the server's refusal time. A path that is only slow
        is not here: the loss needs TCP's own witness (lab.clients.liveness). An explicit
        `resume_window_s` keeps the old window."""
        return (bool(self.p["cut_off_at_loss"]) and explicit is None and not first.done()
                and not lost.closed)

    async def _drop_spare(self, hedge: asyncio.Task) -> None:
        try:
            spare = await hedge
        except BaseException:
            return
        await spare.close(float(self.p["close_wait_s"]))

    # ---- fallback ----------------------------------------------------------------------------
    async def _fallback(self, lost: Connection, hedge: asyncio.Task | None, new_session: int) -> None:
        old_session = lost.session_no
        note_on = bool(self.p["status_note"])
        new, refused = await self._new_session(hedge, new_session)
        if new is None and not refused:
            got = await self._wait_out_hold(lost, new_session)
            if got is not None and got[0] == "resume":
                await self.accept_resume(got[1])
                return
            new = got[1] if got is not None else None
        if new is None:
            cur = self.current
            if cur is not lost and cur is not None and cur.usable:
                self.recovering = False           # resumed by other means meanwhile
                return
            self.log.write("fallback.failed", src=SRC, conn=lost.n)
            self.recovering = False
            return
        note = self.backend.status_note() if (note_on and self.backend is not None) else ""
        contents = restore_contents(self.transcript, note or None, int(self.p["restore_turns"]))
        self.log.write("fallback.start", src=SRC, conn=new.n, note=bool(note), turns=len(contents),
                       old_conn=lost.n)
        superseded = self.ledger.supersede(old_session)
        self._notes = []
        self._adopt(new, ready=False)
        if contents:
            await new.send(lambda s: s.send_client_content(turns=contents,
                                                           turn_complete=bool(self.p["restore_turn_complete"])))
        self.log.write("session.restored", src=SRC, conn=new.n, note=bool(note), turns=len(contents),
                       superseded=[x.id for x in superseded])
        self._adopt(new, ready=True)

    async def _new_session(self, hedge: asyncio.Task | None, new_session: int) -> tuple[Connection | None, bool]:
        """The hedge's session (opened at the loss) when there is a hedge, else one opened now:
        (it or None, refused). refused: a LabError, ctx.before_connect refusing the open (the SDK
        raises none); asking again later would be refused again, so the fallback stops there."""
        try:
            return (await hedge if hedge is not None else await self._open_new(new_session)), False
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self.log.write("fallback.new_failed", src=SRC, error=f"{type(e).__name__}: {e}"[:200])
            return None, isinstance(e, LabError)

    # ---- the server still holds the lost session (lab.clients.held) ---------------------------
    async def _wait_out_hold(self, lost: Connection, new_session: int) -> tuple[str, Connection] | None:
        """The new session was refused: the user is told, then retry rounds on the backoff until the
        server gives a session, ("resume", c) or ("new", c); None when the backoff ran out, the open
        was refused by before_connect, or the session came back by other means."""
        t0 = time.monotonic()
        self._held = True
        self._tell_held()
        try:
            k = 0
            while True:
                delay = self._backoff.next_delay(k, time.monotonic() - t0)
                if delay is None:
                    self._tell_held(gave_up=True)
                    return None
                await asyncio.sleep(delay)
                k += 1
                if self.current is not lost:
                    return None
                got, refused = await self._held_round(new_session)
                if got is not None or refused:
                    return got
        finally:
            self._held = False

    async def _held_round(self, new_session: int) -> tuple[tuple[str, Connection] | None, bool]:
        """One round: a resume with the handle and a new session at once; the resume is preferred
        (it keeps the conversation), a new session given too is closed. (got, refused)"""
        resume = self.spawn(self.attempt_resume("held"), name="recovery-held-resume") if self.handle else None
        new = self.spawn(self._new_session(None, new_session), name="recovery-held-new")
        await asyncio.wait([t for t in (resume, new) if t is not None])
        resumed = (resume.result() if resume is not None and not resume.cancelled() and resume.exception() is None
                   else None)
        opened, refused = (None, False) if new.cancelled() or new.exception() is not None else new.result()
        if resumed is not None:
            if opened is not None:
                self.spawn(opened.close(float(self.p["close_wait_s"])), name="recovery-drop-spare")
            return ("resume", resumed), False
        return (("new", opened) if opened is not None else None), refused

    def _tell_held(self, gave_up: bool = False) -> None:
        """user.status from the backend, when it says something new."""
        if not self.p["tell_user_when_held"]:
            return
        told = held_status(self.backend.ledger() if self.backend is not None else [], gave_up)
        if told == self._told:
            return
        self._told = told
        self.log.write("user.status", src=SRC, conn=None, status=told[0], text=told[1])

    async def _deliver(self, call: ToolCall, result: dict[str, Any]) -> None:
        await super()._deliver(call, result)
        if self._held:
            self._tell_held()            # a job committed while the user waits: say so now

    def on_superseded_result(self, call: ToolCall) -> None:
        """A job of the replaced session committed after the restore: tell the new session before the
        user's next line (never as an answer to the old call id)."""
        if not self.p["status_updates"] or self.backend is None or not call.job:
            return
        job = self.backend.job(call.job)
        if job is None:
            return
        line = status_line(job)
        if line not in self._notes:
            self._notes.append(line)

    async def _before_say(self) -> None:
        c = self.current
        if not self._notes or c is None or not c.usable:
            return
        text = "\n".join(self._notes)
        self._notes = []
        ok = await c.send(lambda s: s.send_client_content(
            turns=[types.Content(role="user", parts=[types.Part(text=text)])], turn_complete=False))
        self.log.write("session.note", src=SRC, conn=c.n, text=text, sent=ok)

    async def _speak(self, pcm: bytes, c: Connection, line: int, follow: bool = True) -> bool:
        if not self.p["replay_gap_speech"]:
            return await super()._speak(pcm, c, line, follow)
        if await super()._speak(pcm, c, line, follow=False):
            return True
        try:
            await asyncio.wait_for(self.ready.wait(), float(self.p["hold_input_max_s"]))
        except asyncio.TimeoutError:
            pass
        cur = self.current
        if cur is None or not cur.usable or not self.ready.is_set():
            self.log.write("user.replay", src=SRC, conn=None, line=line, how="lost")
            return False
        if cur.session_no != c.session_no:
            # the fallback's restore carried the transcript, this line's text included
            self.log.write("user.replay", src=SRC, conn=cur.n, line=line, how="restore")
            return False
        self.log.write("user.replay", src=SRC, conn=cur.n, line=line, how="audio")
        return await super()._speak(pcm, cur, line, follow=False)

    async def scripted_resume(self) -> Connection | None:
        """The recovery client resumes on its own policy; a scripted attempt (meant for the probe)
        would only compete with it, or steal a healthy session, unless `obey_resume_action`."""
        c = self.current
        if not self.p["obey_resume_action"] or self.recovering or c is None or c.closed or c.lost or c.ended_by_us:
            self.log.write("resume.skip", src=SRC, reason="recovering" if self.recovering else "own policy",
                           why="action")
            return None
        return await super().scripted_resume()


def _witness(hedge: asyncio.Task, suspected: Connection) -> None:
    """The spare session is up: the path to the endpoint carries a round trip begun after the
    suspicion, which the detector weighs against the suspected connection's unanswered pings."""
    if not hedge.cancelled() and hedge.exception() is None:
        suspected.path_answered(hedge.result())


@dataclasses.dataclass
class _Early:
    """What a suspicion started for connection `conn`: the spare session and the resume attempt."""
    conn: Connection
    session: int
    hedge: asyncio.Task | None
    resume: asyncio.Task | None
