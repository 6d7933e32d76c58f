"""The fault registry: the only list of fault kinds, and the entry points other rooms call.

    kinds()                     -> ["blackhole", "delay", ...]
    check_spec(spec)            validate without building (a scenario validator passes
                                PLACEHOLDER_TARGET as `target` for kinds with needs_target)
    build(spec)                 -> a Fault, validated
    shape_of(kind)              -> what the kind does to the path (netem.fault.Shape); None: no such kind
    unmet(kind, caps)           -> what this machine lacks for a kind (empty: it can run here)
    needing(feature)            -> the kinds that need a kernel feature (netem.kernel.FEATURES)
    table()                     -> one row per kind: its shape, what it does, what it needs

Each kind is one module under netem/kinds/ (what it is, what it does to the path, its spec, its
rules or what it installs); adding a kind is that file, its tests, and one line in KINDS below:
nothing that reads the record (the report's rules and metrics) names a kind, they ask its shape.
netem/fault.py says what a kind declares (`shape`, `does`, `requires`, `needs_target`, `check`).
"""
from __future__ import annotations

from netem.errors import FaultSpecError
from netem.fault import Fault, Shape
from netem.kernel import FEATURES, Capabilities
from netem.kinds.blackhole import Blackhole
from netem.kinds.delay import Delay
from netem.kinds.duplicate import Duplicate
from netem.kinds.loss import Loss
from netem.kinds.mtu_blackhole import MtuBlackhole
from netem.kinds.nat_reap import NatReap
from netem.kinds.netem import Netem
from netem.kinds.reject import Reject
from netem.kinds.relay_age import RelayAge
from netem.kinds.reorder import Reorder

KINDS: tuple[type[Fault], ...] = (Blackhole, Reject, Loss, Netem, Delay, Reorder, Duplicate, NatReap, RelayAge,
                                  MtuBlackhole)


def declared(cls: type[Fault]) -> type[Fault]:
    """`cls`, once it says what it does to the path (a Shape and its `does` words): the report judges
    a kind by its shape alone, so a kind without one is refused where it is registered."""
    if not isinstance(getattr(cls, "shape", None), Shape) or not getattr(cls, "does", ""):
        raise TypeError(f"fault kind {cls.kind}: declares no shape (netem.fault.Shape) or no `does`")
    return cls


REGISTRY: dict[str, type[Fault]] = {c.kind: declared(c) for c in KINDS}

# A valid flow for checking a scenario's fault before any connection exists (documentation range).
PLACEHOLDER_TARGET = {"src": "192.0.2.1", "sport": 40000, "dst": "192.0.2.2", "dport": 443}


def kinds() -> list[str]:
    return sorted(REGISTRY)


def kind_of(spec: dict) -> type[Fault]:
    """The class for a spec's `kind`; FaultSpecError lists the known kinds."""
    if not isinstance(spec, dict):
        raise FaultSpecError(f"a fault spec must be an object, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in REGISTRY:
        raise FaultSpecError(f"unknown fault kind {kind!r}; known kinds: {', '.join(kinds())}")
    return REGISTRY[kind]


def check_spec(spec: dict) -> None:
    """Validate a spec without building anything; FaultSpecError names the bad key."""
    kind_of(spec).check(spec)


def build(spec: dict) -> Fault:
    """A Fault from its spec, validated; FaultSpecError names the field and what is allowed."""
    return kind_of(spec)(spec)


def shape_of(kind: str) -> Shape | None:
    """What `kind` does to the path, as it declares it; None for a name no kind has (a record of a
    kind since removed)."""
    cls = REGISTRY.get(kind)
    return cls.shape if cls is not None else None


def with_shape(shape: Shape) -> list[str]:
    """The kinds of one shape, sorted (the words a reader prints: 'a zombie path: mtu_blackhole')."""
    return sorted(k for k, c in REGISTRY.items() if c.shape is shape)


def unmet(kind: str, caps: Capabilities) -> list[str]:
    """One line per feature `kind` requires that `caps` lacks (empty: the kind can run here, on its
    own path or on one of its `alternatives`)."""
    have = caps.features()
    cls = REGISTRY[kind]
    if any(alt <= have for alt in cls.alternatives):
        return []
    return [f"{f}: {FEATURES[f].missing}" for f in sorted(cls.requires - have)]


def needing(feature: str) -> list[str]:
    """The kinds that cannot run without `feature` (on none of their paths), sorted."""
    return sorted(k for k, c in REGISTRY.items()
                  if feature in c.requires and all(feature in alt for alt in c.alternatives))


def path_of(kind: str, caps: Capabilities) -> str | None:
    """For a kind with alternatives: 'kernel' (its `requires` met) or 'userspace'; None otherwise."""
    cls = REGISTRY[kind]
    if not cls.alternatives:
        return None
    have = caps.features()
    if cls.requires <= have:
        return "kernel"
    return "userspace" if any(alt <= have for alt in cls.alternatives) else None


def table() -> list[dict]:
    """One row per kind, in KINDS order: what docs and `lab netem kinds` show."""
    return [{"kind": c.kind, "shape": str(c.shape), "does": c.does, "requires": sorted(c.requires),
             "or": [sorted(a) for a in c.alternatives]} for c in KINDS]
