"""The fault registry: the only list of fault kinds, and the entry points other rooms call.

    kinds()                     -> ["blackhole", "delay", ...]
    check_spec(spec)            validate without building (a scenario validator passes
                                PLACEHOLDER_TARGET as `target` for kinds with needs_target)
    build(spec)                 -> a Fault, validated
    unmet(kind, caps)           -> what this machine lacks for a kind (empty: it can run here)

Each kind is one module under netem/kinds/ (what it is, its spec, its rules or what it installs);
adding a kind is that file, its tests, and one line in KINDS below. netem/fault.py says what a
kind declares (`requires`, `needs_target`, `cuts_path`, `check`).
"""
from __future__ import annotations

from netem.errors import FaultSpecError
from netem.fault import Fault
from netem.kernel import MISSING_TEXT, Capabilities
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
REGISTRY: dict[str, type[Fault]] = {c.kind: c for c in KINDS}

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


def unmet(kind: str, caps: Capabilities) -> list[str]:
    """One line per feature `kind` requires that `caps` lacks (empty: the kind can run here, on its
    own path or on one of its `alternatives`)."""
    have = caps.features()
    cls = REGISTRY[kind]
    if any(alt <= have for alt in cls.alternatives):
        return []
    return [f"{f}: {MISSING_TEXT.get(f, f)}" for f in sorted(cls.requires - have)]


def path_of(kind: str, caps: Capabilities) -> str | None:
    """For a kind with alternatives: 'kernel' (its `requires` met) or 'userspace'; None otherwise."""
    cls = REGISTRY[kind]
    if not cls.alternatives:
        return None
    have = caps.features()
    if cls.requires <= have:
        return "kernel"
    return "userspace" if any(alt <= have for alt in cls.alternatives) else None
