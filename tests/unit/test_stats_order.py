"""The lab's one percentile (lab/stats/order.py): linear between order statistics, in any order."""
import random
import statistics

import pytest

from lab.stats.order import percentile, quantile


def test_quantile_is_linear_between_order_statistics():
    xs = [4.0, 1.0, 3.0, 2.0]             # any order: it sorts
    assert quantile(xs, 0.0) == 1.0 and quantile(xs, 1.0) == 4.0
    assert quantile(xs, 0.5) == pytest.approx(2.5)
    assert quantile(xs, 0.25) == pytest.approx(1.75)


def test_it_is_the_inclusive_method_of_the_standard_library():
    rng = random.Random(7)
    for n in (2, 3, 10, 101):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        cuts = statistics.quantiles(xs, n=100, method="inclusive")
        assert [percentile(xs, k) for k in range(1, 100)] == pytest.approx(cuts)


def test_percentile_is_the_quantile_in_percent():
    xs = [0.3, 9.0, 1.5, 2.25, 7.0]
    for p in (0, 10, 50, 95, 99, 100):
        assert percentile(xs, p) == pytest.approx(quantile(xs, p / 100))


def test_one_value_is_every_quantile_and_no_value_is_an_error():
    assert quantile([3.5], 0.0) == quantile([3.5], 0.99) == 3.5
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)
