"""A measured sample against a twin parameter's distribution: the fitted quantiles and the distance.

A Delay parameter's value is a distribution (lab.twin.params): a quantile table read as a
piecewise-linear inverse CDF, a [lo, hi] range drawn uniformly, or one number. `cdf(value, x)` is
that distribution's CDF, so a sample is compared with the exact distribution the twin draws from,
not with a second sample of it.

The distance is the one-sample Kolmogorov-Smirnov statistic D = sup |F_n(x) - F(x)| (F_n the
sample's empirical CDF, F the parameter's). Its sampling error at n is the critical value D_crit at
the 1 % level: a sample drawn from F itself exceeds it one time in a hundred (1 %, not 5 %: drift
tests nine parameters at once, and at 5 % a night with nothing changed would flag one in three).
D_crit uses Stephens' approximation c / (sqrt(n) + 0.12 + 0.11 / sqrt(n)) with c = 1.628 (1 %) or
1.358 (5 %), within 2 % of the exact table from n = 4; at n = 1-5 the exact values are used. So
D > D_crit says the sample did not come from the profile's distribution. The quantiles are fitted
with linear interpolation between order statistics (the same rule as the tables in the records), at
the probabilities of the profile's own table, so a fitted table drops in where the old one was; each
quantile also gets its bootstrap standard error (seeded: the same sample gives the same figures).

A one-number parameter (the twin's fixed VAD onset) is a step: against it KS says 1 for any
sample that is not exactly that number, which every timer on a loaded machine misses by a few ms.
So for a number, `changed` asks whether the number lies outside the sample's median +- 3 bootstrap
errors, widened by `resolution` (the caller's figure for the lab's own timer lag).

Knows nothing of files, runs or what a parameter means.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from lab.stats.order import quantile
from lab.stats.quantiles import Quantiles

# the tables of the records: min, p10, p25, p50, p75, p90, p95, max (shared/fidelity.md section 2)
RECORD_PROBABILITIES = (0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 1.0)
LEVEL = 0.01
# the exact one-sample KS critical values at small n (Massey's table), and Stephens' constant, per level
EXACT_CRIT = {0.05: {1: 0.975, 2: 0.842, 3: 0.708, 4: 0.624, 5: 0.565},
              0.01: {1: 0.995, 2: 0.929, 3: 0.829, 4: 0.734, 5: 0.669}}
STEPHENS = {0.05: 1.358, 0.01: 1.628}
BOOTSTRAP_ROUNDS = 400


def probabilities_of(value: Any) -> tuple[float, ...]:
    """The probabilities to fit at: the profile's own table's, else the records' usual ones."""
    if isinstance(value, Quantiles):
        return tuple(p for p, _ in value.points)
    return RECORD_PROBABILITIES


def cdf(value: Any, x: float) -> float:
    """The CDF at x of a parameter value: a Quantiles table, a [lo, hi] range, or a number."""
    if isinstance(value, Quantiles):
        pts = value.points
        if x < pts[0][1]:
            return 0.0
        if x >= pts[-1][1]:
            return 1.0
        for (p0, x0), (p1, x1) in zip(pts, pts[1:]):
            if x0 <= x < x1:
                return p0 + (p1 - p0) * (x - x0) / (x1 - x0)
        return 1.0
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
        if hi <= lo:
            return 0.0 if x < lo else 1.0
        return min(1.0, max(0.0, (x - lo) / (hi - lo)))
    return 0.0 if x < float(value) else 1.0


def ks_statistic(sample: Sequence[float], value: Any) -> float:
    """sup |F_n - F| over the sample's jump points (where the supremum of a one-sample KS lies)."""
    xs = sorted(sample)
    n = len(xs)
    d = 0.0
    for i, x in enumerate(xs):
        f = cdf(value, x)
        # F's left limit at x: a number-valued (step) F jumps at x itself
        f_left = cdf(value, math.nextafter(x, -math.inf))
        d = max(d, (i + 1) / n - f, f_left - i / n)
    return d


def ks_critical(n: int, level: float = LEVEL) -> float:
    """The critical value of the one-sample KS statistic at n, at the 1 % (default) or 5 % level."""
    if level not in STEPHENS:
        raise ValueError(f"no KS critical values at level {level} (known: {', '.join(map(str, STEPHENS))})")
    if n < 1:
        return math.inf
    if n in EXACT_CRIT[level]:
        return EXACT_CRIT[level][n]
    r = math.sqrt(n)
    return STEPHENS[level] / (r + 0.12 + 0.11 / r)


@dataclass(frozen=True)
class Fit:
    n: int
    probabilities: tuple[float, ...]
    fitted: tuple[float, ...]          # the sample's quantile at each probability
    stderr: tuple[float, ...]          # its bootstrap standard error
    profile: tuple[float, ...]         # the profile's quantile at each probability
    ks: float                          # D against the profile's distribution
    ks_crit: float                     # D's critical value at n (LEVEL)
    point: bool = False                # the profile's value is one number: the median is compared
    resolution: float = 0.0            # with a point: the timer lag allowed beside the sampling error

    @property
    def median_gap(self) -> float:
        """|the sample's median - the profile's|, and below, what the sampling error allows of it."""
        i = min(range(len(self.probabilities)), key=lambda k: abs(self.probabilities[k] - 0.5))
        return abs(self.fitted[i] - self.profile[i])

    @property
    def median_allowed(self) -> float:
        i = min(range(len(self.probabilities)), key=lambda k: abs(self.probabilities[k] - 0.5))
        return 3 * self.stderr[i] + self.resolution

    @property
    def changed(self) -> bool:
        if self.point:
            return self.median_gap > self.median_allowed
        return self.ks > self.ks_crit

    @property
    def max_quantile_diff(self) -> float:
        """The largest |fitted - profile| over the table's inner quantiles (min and max are a sample's
        extremes: at small n they say little about the distribution's)."""
        inner = [abs(f - q) for p, f, q in zip(self.probabilities, self.fitted, self.profile) if 0 < p < 1]
        return max(inner or [abs(f - q) for f, q in zip(self.fitted, self.profile)])

    def table(self) -> Quantiles:
        return Quantiles(tuple(zip(self.probabilities, self.fitted)))


def profile_quantile(value: Any, p: float) -> float:
    if isinstance(value, Quantiles):
        return value.at(p)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
        return lo + (hi - lo) * p
    return float(value)


def fit(sample: Sequence[float], value: Any, seed: int = 0, resolution: float = 0.0) -> Fit:
    """The sample's quantiles at the profile's probabilities, their errors, and D against `value`
    (`resolution`: the timer lag allowed when `value` is one number)."""
    xs = sorted(float(x) for x in sample)
    if not xs:
        raise ValueError("no values to fit")
    probs = probabilities_of(value)
    fitted = tuple(quantile(xs, p) for p in probs)
    # monotone by construction (order statistics); a bootstrap of the same rule gives each error
    rng = random.Random(seed)
    boots = [[] for _ in probs]
    if len(xs) > 1:
        for _ in range(BOOTSTRAP_ROUNDS):
            re = sorted(rng.choice(xs) for _ in xs)
            for k, p in enumerate(probs):
                boots[k].append(quantile(re, p))
    stderr = tuple(_sd(b) if b else math.inf for b in boots)
    return Fit(len(xs), probs, fitted, stderr, tuple(profile_quantile(value, p) for p in probs),
               ks_statistic(xs, value), ks_critical(len(xs)),
               point=not isinstance(value, (Quantiles, list, tuple)), resolution=resolution)


def _sd(v: list[float]) -> float:
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / max(1, len(v) - 1))
