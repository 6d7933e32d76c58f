"""Numbers every room may share: a sample's quantiles, and the recorded distributions a run draws from.

    lab.stats.order          quantile(values, q) / percentile(values, p): the lab's one percentile
    lab.stats.quantiles      Quantiles: a distribution given by a table of recorded quantiles
    lab.stats.distributions  draw(value, rng), bounds(value): a number, a [lo, hi] range or a Quantiles

Low in the house: imports nothing of the lab's but lab.errors, so the twin, the conversation engine,
the live fits, the report and the benchmarks all read the same definitions.
"""
