"""The lab's one percentile: a sample's quantile, linear between order statistics.

    quantile(values, q)      q a probability in [0, 1]
    percentile(values, p)    the same, p in percent: quantile(values, p / 100)

The meaning is Hyndman and Fan's definition 7 (numpy's default `linear` method, R's default type,
Python's statistics.quantiles(method="inclusive")): sort the n values x[0] <= ... <= x[n-1], put
h = q * (n - 1), and answer x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)]). So q = 0
is the smallest value, q = 1 the largest, q = 0.5 the usual median (the mean of the two middle
values when n is even), and every answer lies within the sample: never an extrapolation.

One value is its own every quantile; no values raise ValueError (there is no honest number to give),
unless the caller names what to answer instead (`default=`, as max() takes one: a benchmark prints
"nan" for a load level that got no answers).
"""
from __future__ import annotations

import math
from typing import Any, Iterable


_NO_DEFAULT = object()


def quantile(values: Iterable[float], q: float, default: Any = _NO_DEFAULT) -> float:
    """The q-quantile (0 <= q <= 1) of `values` (any order), linear between order statistics."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q!r} outside [0, 1]")
    xs = sorted(values)
    if not xs:
        if default is _NO_DEFAULT:
            raise ValueError("the quantile of no values")
        return default
    h = q * (len(xs) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (h - lo)


def percentile(values: Iterable[float], p: float, default: Any = _NO_DEFAULT) -> float:
    """quantile(values, p / 100): the same definition, for callers that speak in percent (p50, p99)."""
    return quantile(values, p / 100.0, default)
