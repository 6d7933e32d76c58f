"""Empirical distributions given by recorded quantiles, sampled by inverse CDF.

The studies publish a measure as a table of quantiles (min, p10, p25, p50, p75, p90, p95, max, and
where a tail was recorded, a point such as p98.5 before a far max). A `Quantiles` is that table read
as a piecewise-linear inverse CDF: a uniform u in [0, 1) is mapped to the value between the two
points whose probabilities bracket it, linearly interpolated. So every table point is reproduced as
a quantile of the draws, the draws never leave [min, max], and a peaked body with a long thin tail
stays peaked (a flat [lo, hi] range would not).

Keys are `min` (probability 0), `max` (probability 1) and `pNN` for 0 < NN < 100 (decimals allowed:
`p98.5`). Both ends are required; values must be finite and must not decrease with the probability.
A bad table raises BadTable with one line saying what is wrong.

Knows nothing of parameters, files, clocks or what the values mean.
"""
from __future__ import annotations

import bisect
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

_KEY = re.compile(r"p(\d+(?:\.\d+)?)")


class BadTable(ValueError):
    """A quantile table that cannot be a distribution (one line: which key, what is wrong)."""


def _probability(key: Any) -> float:
    if key == "min":
        return 0.0
    if key == "max":
        return 1.0
    m = _KEY.fullmatch(key) if isinstance(key, str) else None
    if m is None or not 0 < float(m.group(1)) < 100:
        raise BadTable(f"unknown quantile {key!r} (use min, max or pNN with 0 < NN < 100)")
    return float(m.group(1)) / 100.0


def _key(p: float) -> str:
    if p == 0.0:
        return "min"
    if p == 1.0:
        return "max"
    return f"p{p * 100:.10g}"


@dataclass(frozen=True)
class Quantiles:
    """A recorded distribution: (probability, value) points, probabilities increasing from 0 to 1."""
    points: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, table: Mapping[Any, Any]) -> "Quantiles":
        """A table {min: .., pNN: .., max: ..} checked and ordered; BadTable names the first fault."""
        if not isinstance(table, Mapping):
            raise BadTable("a quantile table is a mapping like {min: 0.4, p50: 0.5, max: 0.6}")
        pts: dict[float, float] = {}
        for key, value in table.items():
            p = _probability(key)
            if p in pts:
                raise BadTable(f"quantile {key!r} given twice")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise BadTable(f"quantile {key!r}: {value!r} is not a finite number")
            pts[p] = float(value)
        for end in ("min", "max"):
            if _probability(end) not in pts:
                raise BadTable(f"a quantile table needs {end!r}")
        ordered = tuple(sorted(pts.items()))
        for (p0, x0), (p1, x1) in zip(ordered, ordered[1:]):
            if x1 < x0:
                raise BadTable(f"quantile {_key(p1)} = {x1:g} is below {_key(p0)} = {x0:g} (values must not decrease)")
        return cls(ordered)

    @property
    def lo(self) -> float:
        return self.points[0][1]

    @property
    def hi(self) -> float:
        return self.points[-1][1]

    def at(self, u: float) -> float:
        """The inverse CDF at probability u in [0, 1], linear between the table's points."""
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"probability {u!r} outside [0, 1]")
        probs = [p for p, _ in self.points]
        i = min(max(bisect.bisect_right(probs, u), 1), len(probs) - 1)
        (p0, x0), (p1, x1) = self.points[i - 1], self.points[i]
        return x0 + (x1 - x0) * (u - p0) / (p1 - p0)

    def sample(self, rng: random.Random) -> float:
        """One draw; one rng.random() per draw, so a seeded rng reproduces the sequence."""
        return self.at(rng.random())

    def as_mapping(self) -> dict[str, float]:
        return {_key(p): x for p, x in self.points}

    def __repr__(self) -> str:
        # the YAML flow form, so `--list-params` prints what `--set name=...` accepts back
        return "{" + ", ".join(f"{k}: {x:g}" for k, x in self.as_mapping().items()) + "}"

    __str__ = __repr__
