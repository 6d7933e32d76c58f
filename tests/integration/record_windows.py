"""Timing windows for the twin's integration tests, taken from the records the twin's profile cites.

A delay the twin draws from a recorded distribution is checked against that distribution's own
range: the profile's `min`/`max` (or `[lo, hi]`), each the record's (shared fidelity.md §2, entered
on the twin's setup-frame base), never a tighter bound. The lower side is exact: a twin faster than
the real service ever was has skipped or shortened a delay, whatever the machine's load. The upper
side adds LOAD_S, once, here: a loaded machine only ever makes a message late, by an amount that is
this machine's and not a record's. How closely the draws follow the recorded quantiles is a pure
test (tests/unit/test_twin_params_quantiles.py, no clock); how fast the twin answers, a benchmark
(`lab bench twin`).
"""
from __future__ import annotations

from lab.twin.profile import load_profile
from lab.stats.quantiles import Quantiles

PROFILE = "developer-api"
# what a loaded 2-core test machine may add to a delay the twin kept (scheduling, the SDK's task
# switches, TLS on loopback); an allowance of the test machine, not a figure of the service
LOAD_S = 1.0


def recorded(name: str, profile: str = PROFILE) -> tuple[float, float]:
    """(lowest, highest) seconds a twin parameter's recorded distribution allows."""
    value = load_profile(profile)[name]
    if isinstance(value, Quantiles):
        return value.points[0][1], value.points[-1][1]
    if isinstance(value, (list, tuple)):
        return float(value[0]), float(value[-1])
    return float(value), float(value)


def window(*names: str, plus: float = 0.0) -> tuple[float, float]:
    """The window of a sum of recorded delays (and `plus` seconds the test itself waits)."""
    lo = plus + sum(recorded(n)[0] for n in names)
    hi = plus + sum(recorded(n)[1] for n in names) + LOAD_S
    return lo, hi


def assert_within(seconds: float, *names: str, plus: float = 0.0) -> None:
    lo, hi = window(*names, plus=plus)
    assert lo <= seconds <= hi, (f"{seconds:.3f} s outside {lo:.3f}-{hi:.3f} s: the records' "
                                 f"{' + '.join(names)}{f' + {plus:g} s' if plus else ''} (+{LOAD_S:g} s load)")
