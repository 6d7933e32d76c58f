"""How a batch is cut into shards: each index's folder and its share of the live-session budget."""
from __future__ import annotations

from lab.errors import LabError


def split_budget(total: int, n: int) -> list[int]:
    """Sessions per index: floor(total / n) each, the remainder one more each to the lowest indexes.

    The shares add up to `total` exactly, so shards that each stay within their own never exceed it.
    """
    if n < 1:
        raise LabError(f"completions must be at least 1, got {n}")
    if total < n:
        raise LabError(f"a live budget of {total} sessions cannot give each of {n} shards one")
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def shard_name(index: int | str) -> str:
    """The folder of one index's results, under the batch folder (what the fan-in merges).

    `index` may be a placeholder the pod fills in, e.g. "$(SHARD)" in a Kubernetes env value.
    """
    return f"shard-{index}"


# Written by each shard when it is over, whatever happened (lab.deploy.shard); the fan-in waits for
# one per index before it merges, so it never reports a batch half-written.
DONE_MARKER = "shard-done.json"
