"""What every fault kind is (Toxiproxy style): one small class per kind, in netem/kinds/.

A kind declares, as class attributes:
    kind          its name in a spec ("blackhole")
    shape         what it does to the path (a Shape, below): what the agent's `loss` event, the
                  report's rules and its metrics ask of a fault, never its name
    does          the same in a few words, for a person ("a NAT that reaps a flow once it is idle")
    requires      the kernel features it needs, named as netem.kernel.FEATURES names them
    needs_target  whether its spec has a `target` (the flow or destination it acts on)
    fields        the spec keys it accepts besides kind and name
and validates a spec in `_normalise` (a classmethod: `check(spec)` validates without building).
`cuts_path` follows from the shape (a CUT); a `requires` that names no feature of the kernel
table fails when the class is defined.

Two small interfaces say how a fault takes effect; a kind implements one or both:
    RuleFault       describes iptables rules (`rules()`); the FaultTable installs every active
                    fault's rules in one atomic iptables-restore
    InstalledFault  installs something that is not a rule (`install(netns)` / `uninstall(netns)`):
                    a qdisc, or a worker process. Installed before its rules go in, removed after.

    f = build({"kind": "blackhole", "name": "b1", "target": {"dst": "10.203.7.2", "dport": 8443}})
    f.apply(table) # active in the table's namespace (table: a netem.table.FaultTable)
    f.clear()      # gone; idempotent
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum
from typing import ClassVar

from netem import spec as S
from netem.errors import FaultSpecError
from netem.iptables import Rules, nflog
from netem.kernel import KIND_FEATURES


class Shape(StrEnum):
    """What a fault does to the client's path when it is applied: a closed set, so a reader of the
    record (the report's rules) can judge a kind it has never heard of by its shape alone."""
    CUT = "cut"            # nothing passes from the moment it is applied: the path is gone
    DEGRADE = "degrade"    # everything still arrives, or would with TCP's retransmissions: late,
                           # reordered, doubled, a random share lost; the connection is healthy
    ZOMBIE = "zombie"      # the connection stays open at both ends and small packets pass, but large
                           # ones vanish and nobody closes: only the client's own detection can tell
    ARMED = "armed"        # nothing yet: it cuts a flow later, when the flow meets a condition (idle
                           # too long, too old); when it did is in the capture, not in the record


class Fault(ABC):
    kind: ClassVar[str]
    shape: ClassVar[Shape]
    does: ClassVar[str]
    lives_with_owner: ClassVar[bool] = False  # it ends with the process that applied it (a worker)
    requires: ClassVar[frozenset[str]] = frozenset()
    # feature sets that serve instead of `requires`: another path to the same effect (netem's userspace one)
    alternatives: ClassVar[tuple[frozenset[str], ...]] = ()
    needs_target: ClassVar[bool] = False
    cuts_path: ClassVar[bool] = False  # derived from `shape` (below); the agent's `loss` event carries it
    fields: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        unknown = set(cls.requires).union(*cls.alternatives) - KIND_FEATURES
        if unknown:
            raise TypeError(f"{cls.__name__} requires {sorted(unknown)}: not features of netem.kernel.FEATURES")
        if "shape" in cls.__dict__:
            cls.cuts_path = cls.shape is Shape.CUT

    def __init__(self, spec: dict):
        self.spec = self.normalise(spec)
        self.name: str = self.spec["name"]
        self._table = None
        self.path: str | None = None   # a kind with alternatives says which took effect: kernel | userspace

    # ---- validation --------------------------------------------------------------------------
    @classmethod
    def check(cls, spec: dict) -> None:
        """Validate `spec` without building anything; FaultSpecError names the bad key."""
        cls.normalise(spec)

    @classmethod
    def normalise(cls, spec: dict) -> dict:
        """The validated spec with its defaults filled in (a copy)."""
        if not isinstance(spec, dict):
            raise FaultSpecError(f"a fault spec must be an object, got {type(spec).__name__}")
        spec = dict(spec)
        if spec.setdefault("kind", cls.kind) != cls.kind:
            raise S.fail(cls.kind, f"kind is {spec['kind']!r}, not {cls.kind!r}")
        name = spec.setdefault("name", cls.kind)
        if not isinstance(name, str) or not S.NAME_RE.match(name):
            raise S.fail(cls.kind, f"name must be 1-32 characters of A-Z a-z 0-9 _ . : -, got {name!r}")
        S.only_keys(spec, cls.kind, {"kind", "name"} | cls.fields)
        return cls._normalise(spec)

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        return spec

    # ---- life cycle --------------------------------------------------------------------------
    def apply(self, table) -> "Fault":
        """Make the fault active in `table` (a netem.table.FaultTable: it owns the namespace's chains)."""
        table.add(self)
        return self

    def clear(self) -> None:
        """Remove the fault; a no-op when it is not active."""
        if self._table is not None:
            self._table.remove(self)

    @property
    def active(self) -> bool:
        return self._table is not None

    def prefix(self, direction: str) -> str:
        """The NFLOG prefix of this fault's packets in one direction (out, in, rst)."""
        return f"ll {self.kind} {self.name} {direction}"[:63]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.spec}>"


class RuleFault(Fault):
    """A fault made of iptables rules, installed by the FaultTable with every other active fault's."""

    @abstractmethod
    def rules(self) -> Rules:
        """The rules this fault adds (pure: the same spec gives the same text)."""


class InstalledFault(Fault):
    """A fault that installs something besides rules in a namespace: a qdisc, a worker process."""

    @abstractmethod
    def install(self, netns: str | None) -> None:
        """Put it in place in `netns` (None: the current namespace); raise NetemError if it cannot."""

    @abstractmethod
    def uninstall(self, netns: str | None) -> None:
        """Take it away again; quiet and idempotent."""


class MatchFault(RuleFault):
    """A rule fault on a target in one or both directions; by default it logs and drops what matches.

    Direction `out` matches packets to the target (OUTPUT), `in` packets from it (INPUT), `both` both.
    """
    needs_target = True
    fields = frozenset({"target", "direction"})
    portless_proto: ClassVar[str] = "any"  # a destination without a port: every protocol, a really dead path

    @classmethod
    def _normalise(cls, spec: dict) -> dict:
        if "target" not in spec:
            raise S.fail(cls.kind, "target is required: a flow {src,sport,dst,dport} or a destination {dst[,dport]}")
        spec["target"] = S.target(cls.kind, spec["target"], cls.portless_proto)
        spec["direction"] = S.direction(cls.kind, spec.get("direction", "both"))
        return spec

    def matches(self) -> dict[str, str]:
        """iptables match text per active direction ('out': packets to the target, 'in': from it)."""
        out, in_ = self.match_pair()
        d = self.spec["direction"]
        return {k: v for k, v in (("out", out), ("in", in_)) if d in (k, "both")}

    def match_pair(self) -> tuple[str, str]:
        """(out match, in match) whatever the direction."""
        t = self.spec["target"]
        proto = t["proto"]
        p = "" if proto == "any" else f" -p {proto}"
        if "src" in t:
            out = f"-s {t['src']}/32 -d {t['dst']}/32{p} --sport {t['sport']} --dport {t['dport']}"
            in_ = f"-s {t['dst']}/32 -d {t['src']}/32{p} --sport {t['dport']} --dport {t['sport']}"
        else:
            dst = t["dst"] if "/" in t["dst"] else f"{t['dst']}/32"
            port_out = f" --dport {t['dport']}" if "dport" in t else ""
            port_in = f" --sport {t['dport']}" if "dport" in t else ""
            out, in_ = f"-d {dst}{p}{port_out}", f"-s {dst}{p}{port_in}"
        return out, in_

    def nflog(self, direction: str) -> str:
        return nflog(self.prefix(direction))

    def verdict(self, direction: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} drops nothing: it overrides rules()")

    def rules(self) -> Rules:
        r = Rules()
        for direction, m in self.matches().items():
            lines = r.out if direction == "out" else r.in_
            lines.append(f"{m} {self.nflog(direction)}")
            lines.append(f"{m} {self.verdict(direction)}")
        return r
