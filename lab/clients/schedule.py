"""When a probe-style client tries to resume after a loss: a pure schedule, the caller sleeps."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ResumeSchedule:
    """When a probe-style client tries to resume after a loss detected at t=0 (seconds).

    At detection if `at_detection`, then every `every_s` (or at the explicit offsets `offsets_s`),
    until `for_s` has passed; after the first refusal of an episode one quick retry
    `retry_after_refusal_s` later (the idle-drop 1011 is transient). Pure: the caller sleeps.
    """
    at_detection: bool = True
    every_s: float = 10.0
    for_s: float | None = None
    retry_after_refusal_s: float | None = None
    offsets_s: list[float] | None = None
    _k: int = 0
    _retry_at: float | None = None
    _retried: bool = False

    def __post_init__(self) -> None:
        self._k = 0 if self.at_detection else 1
        if self.offsets_s is not None:
            self._k = 0

    def _base(self, k: int) -> float | None:
        if self.offsets_s is not None:
            return self.offsets_s[k] if k < len(self.offsets_s) else None
        return k * self.every_s if self.every_s > 0 else (0.0 if k == 0 else None)

    def next_at(self, now: float) -> float | None:
        """The next attempt time (>= now), or None when the episode is over."""
        while True:                           # of slots already passed, keep only the latest
            nb = self._base(self._k + 1)
            if nb is None or nb > now + 1e-9:
                break
            self._k += 1
        b = self._base(self._k)
        cands = [x for x in (b, self._retry_at) if x is not None]
        if not cands:
            return None
        t = max(min(cands), now)
        if self.for_s is not None and t >= self.for_s:
            return None
        return t

    def attempted(self, at: float) -> None:
        if self._retry_at is not None and at >= self._retry_at - 1e-9:
            self._retry_at = None
        else:
            self._k += 1

    def refused(self, at: float) -> None:
        if self.retry_after_refusal_s is not None and not self._retried:
            self._retried = True
            self._retry_at = at + float(self.retry_after_refusal_s)
