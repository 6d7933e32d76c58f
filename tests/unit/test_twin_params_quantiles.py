"""Recorded distributions as a parameter shape: sampling reproduces the table, a seed the sequence,
a malformed table fails at load in one line."""
from __future__ import annotations

import bisect
import math
import random
import re

import pytest

from lab.errors import LabError
from lab.twin.io_actions import Close
from lab.twin.core import TwinCore
from lab.stats.distributions import bounds, draw
from lab.twin.params import BadParameter, Delay
from lab.twin.profile import load_profile
from lab.stats.quantiles import BadTable, Quantiles

# the refusal delay as the profile holds it: a peaked body and a thin far tail
REFUSAL = {"min": 0.427, "p10": 0.472, "p25": 0.4985, "p50": 0.526, "p75": 0.552, "p90": 0.572,
           "p95": 0.6085, "p98.5": 0.755, "max": 1.818}
N = 10000


def _cdf(xs_sorted: list[float], x: float) -> float:
    return bisect.bisect_right(xs_sorted, x) / len(xs_sorted)


def test_n_draws_reproduce_every_quantile_within_sampling_error():
    q = Quantiles.parse(REFUSAL)
    rng = random.Random(20261201)
    xs = sorted(q.sample(rng) for _ in range(N))
    assert q.lo <= xs[0] and xs[-1] <= q.hi
    for p, x in q.points[1:-1]:
        # the share of draws at or below the table's pNN value is NN % within 4 standard errors
        se = math.sqrt(p * (1 - p) / N)
        assert abs(_cdf(xs, x) - p) <= 4 * se, (p, x, _cdf(xs, x))
    # the tail is there and thin: about 1.5 % above 0.755 s, some draws beyond 1 s
    above = 1 - _cdf(xs, 0.755)
    assert 0.01 <= above <= 0.02 and xs[-1] > 1.0


def test_a_flat_range_would_not_pass_the_same_check():
    # the check above can fail: uniform draws over the same [min, max] miss the median badly
    q = Quantiles.parse(REFUSAL)
    rng = random.Random(1)
    xs = sorted(rng.uniform(q.lo, q.hi) for _ in range(N))
    assert abs(_cdf(xs, 0.526) - 0.5) > 0.3


def test_the_inverse_cdf_is_linear_between_points_and_exact_at_them():
    q = Quantiles.parse({"min": 1.0, "p50": 2.0, "max": 4.0})
    assert q.at(0.0) == 1.0 and q.at(0.5) == 2.0 and q.at(1.0) == 4.0
    assert q.at(0.25) == pytest.approx(1.5) and q.at(0.75) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        q.at(1.5)


def test_the_same_seed_gives_the_same_draws_and_another_seed_others():
    q = Quantiles.parse(REFUSAL)
    a = [q.sample(random.Random(5)) for _ in range(3)]
    r1, r2, r3 = random.Random(5), random.Random(5), random.Random(6)
    s1 = [draw(q, r1) for _ in range(50)]
    assert s1 == [draw(q, r2) for _ in range(50)] and s1 != [draw(q, r3) for _ in range(50)]
    assert a[0] == a[1] == a[2]


def test_a_twin_with_a_seed_replays_its_delays():
    def refusal_closes(seed):
        core = TwinCore(seed=seed)
        at = []
        for conn in range(1, 6):
            core.connection_opened(conn, 0.0)
            acts = core.frame_received(conn, '{"setup": {"model": "models/gemini-3.8-live", "sessionResumption": {"handle": "unknown"}}}', 0.0)
            at += [a.at for a in acts if isinstance(a, Close)]
        return at

    assert refusal_closes(3) == refusal_closes(3) != refusal_closes(4)
    assert all(0.427 <= x <= 1.818 for x in refusal_closes(3))


def test_a_table_round_trips_through_its_printed_form():
    q = Quantiles.parse(REFUSAL)
    assert repr(q).startswith("{min: 0.427, p10: 0.472,") and "p98.5: 0.755" in repr(q)
    assert Quantiles.parse(q.as_mapping()) == q and bounds(q) == (0.427, 1.818)
    assert bounds([0.1, 0.2]) == (0.1, 0.2) and bounds(3) == (3.0, 3.0) and bounds("x") is None


@pytest.mark.parametrize("table,fragment", [
    ({"p50": 0.5, "max": 0.6}, "needs 'min'"),
    ({"min": 0.5, "p50": 0.6}, "needs 'max'"),
    ({"min": 0.5, "p50": 0.4, "max": 0.6}, "p50 = 0.4 is below min = 0.5"),
    ({"min": 0.1, "p100": 0.2, "max": 0.3}, "unknown quantile 'p100'"),
    ({"min": 0.1, "median": 0.2, "max": 0.3}, "unknown quantile 'median'"),
    ({"min": 0.1, "p50": "soon", "max": 0.3}, "'p50': 'soon' is not a finite number"),
    ({"min": 0.1, "p50": float("nan"), "max": 0.3}, "not a finite number"),
    ({"min": 0.1, "p50": True, "max": 0.3}, "not a finite number"),
])
def test_a_malformed_table_says_what_is_wrong(table, fragment):
    with pytest.raises(BadTable, match=fragment):
        Quantiles.parse(table)
    with pytest.raises(BadParameter, match="bad value for refuse_close_s: .*" + re.escape(fragment)):
        Delay().check("refuse_close_s", table)


def test_a_negative_delay_table_is_refused():
    with pytest.raises(BadParameter, match="min = -0.1 is below 0 s"):
        Delay().check("x_s", {"min": -0.1, "max": 0.1})


def test_a_table_on_the_command_line():
    prof = load_profile("developer-api", ["tool_call_delay_s={min: 0.1, p50: 0.2, max: 0.4}"])
    assert bounds(prof["tool_call_delay_s"]) == (0.1, 0.4)
    with pytest.raises(LabError, match="bad value for tool_call_delay_s: quantile p50 = 0.05 is below"):
        load_profile("developer-api", ["tool_call_delay_s={min: 0.1, p50: 0.05, max: 0.4}"])
