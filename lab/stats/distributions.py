"""A value that stands for a distribution, and one event's draw from it.

A delay or a pause the lab plays (a twin's setup time, a conversation's think time) is written as
one of three shapes:

    a number         itself, every time
    [lo, hi]         uniform between the two (lo when hi <= lo)
    a Quantiles      a recorded table {min, pNN.., max}, sampled by inverse CDF (lab.stats.quantiles)

    draw(value, rng)   one event's value; one rng call per draw, so a seeded rng reproduces a run
    bounds(value)      its smallest and largest outcome, None for a value of no such shape

Checking that a value has one of these shapes (and what its name is) is its reader's job: the
twin's parameters (lab.twin.params), a conversation's pauses.
"""
from __future__ import annotations

import random
from typing import Any

from lab.stats.quantiles import Quantiles


def is_number(v: Any) -> bool:
    """An int or a float (a bool is not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_range(v: Any) -> bool:
    """A [lo, hi] pair of numbers."""
    return isinstance(v, (list, tuple)) and len(v) == 2 and all(is_number(x) for x in v)


def draw(v: Any, rng: random.Random) -> float:
    """One event's value: a quantile table sampled by inverse CDF, a range [lo, hi] drawn uniformly,
    a number is itself."""
    if isinstance(v, Quantiles):
        return v.sample(rng)
    if is_range(v):
        lo, hi = float(v[0]), float(v[1])
        return lo if hi <= lo else rng.uniform(lo, hi)
    return float(v)


def bounds(v: Any) -> tuple[float, float] | None:
    """A value's smallest and largest outcome (a number is both); None for any other value."""
    if isinstance(v, Quantiles):
        return v.lo, v.hi
    if is_range(v):
        return float(v[0]), float(v[1])
    if is_number(v):
        return float(v), float(v)
    return None
