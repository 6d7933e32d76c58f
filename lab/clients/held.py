"""When every resume AND every new session is refused: waiting out a server that still holds the
lost session. Pure: `lab.clients.recovery` sleeps, connects and writes the events.

Why a client needs this: 000 round 3 saw a silently lost session stay locked for the whole 15
minutes tried (every resume refused 1011) until the server's own close ~480 s after its last
message; its rule 5 (a short cut-off on resuming, then a new session) is the way out only while the
server takes a new session. Whether it does while it holds lost ones is on 000's "not tested" list
("how many lost sessions the server holds at once"); the twin's `held_sessions_max` (an assumption)
refuses it the same way. A client whose new session is refused too has one honest course:

* keep trying, on a bounded, growing backoff (`Backoff`): never a storm (the study's plain resume
  loop made 118 attempts in 60 s and never told the user), never giving up before the server's
  own close could have let the session go (`for_s` past 000's ~480 s);
* tell the user at once, in the app, that it is reconnecting and what the booking's state is,
  read from the backend and never from the model (001: the model announced a booking the backend
  had not made), and again whenever that state changes (`held_status`);
* once a session is given (the lost one resumed, or a new one), restore as any fallback does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from lab.errors import LabError

BOOKED, PENDING, NOT_BOOKED = "booked", "pending", "not_booked"


@dataclass(frozen=True)
class Backoff:
    """The wait before each retry round while the server holds the session: `first_s`, times
    `factor` per round, at most `max_s`; no round starts later than `for_s` after the first refusal."""
    first_s: float = 1.0
    factor: float = 2.0
    max_s: float = 10.0
    for_s: float = 600.0

    def __post_init__(self) -> None:
        if not (self.first_s > 0 and self.factor >= 1 and self.max_s >= self.first_s and self.for_s >= 0):
            raise LabError(f"recovery backoff: need retry_first_s > 0, retry_factor >= 1, retry_max_s >= "
                           f"retry_first_s and retry_for_s >= 0; got {self.first_s:g}, {self.factor:g}, "
                           f"{self.max_s:g}, {self.for_s:g}")

    def delay(self, k: int) -> float:
        """The wait before round k (0 is the first retry)."""
        return min(self.max_s, self.first_s * self.factor ** min(k, 64))

    def next_delay(self, k: int, elapsed_s: float) -> float | None:
        """The wait before round k when `elapsed_s` have passed since the first refusal; None when that
        round would start after `for_s` (give up)."""
        d = self.delay(k)
        return d if elapsed_s + d <= self.for_s else None

    def rounds_within(self, span_s: float) -> int:
        """Rounds started within `span_s` if each took no time: how many attempts a hold that long costs."""
        k, t = 0, 0.0
        while True:
            d = self.next_delay(k, t)
            if d is None or t + d > span_s:
                return k
            t += d
            k += 1


def _booking_state(state: str) -> str:
    return {"booked": BOOKED, "pending": PENDING}.get(state, NOT_BOOKED)


def held_status(jobs: Iterable[dict[str, Any]], gave_up: bool = False) -> tuple[str, str]:
    """(status, text) the app tells the user while the assistant cannot be reached, from the
    backend's jobs (`Backend.ledger()` rows: slot, state). status is booked when a booking
    committed, pending when one is still being processed, else not_booked: never booked before the
    backend says so."""
    rows = [(_booking_state(str(j.get("state"))), str(j.get("slot"))) for j in jobs]
    lead = ("I could not reconnect to the assistant." if gave_up
            else "The connection to the assistant was lost; reconnecting.")
    if not rows:
        return NOT_BOOKED, f"{lead} Nothing has been booked."
    said = {BOOKED: "is booked (confirmed by the booking system)",
            PENDING: "is still being processed; I will confirm it once it is done",
            NOT_BOOKED: "was not booked"}
    states = {s for s, _ in rows}
    status = BOOKED if BOOKED in states else (PENDING if PENDING in states else NOT_BOOKED)
    return status, " ".join([lead] + [f"Your booking for {slot} {said[s]}." for s, slot in rows])
