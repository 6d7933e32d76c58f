"""What the run's loss did to the path, asked of what caused it, never read from its name.

The agent's `loss` event says what caused the loss (`how`: fault:<kind> or action:<name>) and
whether it cut the path (`cuts_path`). A fault kind declares its shape (netem.fault.Shape: cut,
degrade, zombie, armed) in netem's registry; a timeline action says whether it cuts the path
(lab.actions). The report's rules and metrics ask here, so a kind added to the registry is judged
by its shape with no change to them.

    kind_of_loss(loss_event)            -> "fault:blackhole" | "action:abort"
    shape("fault:mtu_blackhole", False) -> "zombie"
    does("fault:nat_reap")              -> "a NAT that reaps a flow once it is idle"
"""
from __future__ import annotations

from lab import actions
from lab.events import Event
from netem import faults
from netem.fault import Shape

FAULT, ACTION = "fault:", "action:"   # the agent's spelling of a loss's cause (lab.events: loss `how`)
CUT, DEGRADE, ZOMBIE, ARMED = (str(s) for s in (Shape.CUT, Shape.DEGRADE, Shape.ZOMBIE, Shape.ARMED))


def kind_of_loss(loss: Event) -> str:
    """fault:<kind> or action:<name>. Older records wrote `how` as fault:<kind> or a bare action."""
    how = str(loss.get("how") or "")
    return how if ":" in how else f"{ACTION}{how}"


def _fault(loss_kind: str | None) -> str | None:
    k = str(loss_kind or "")
    return k[len(FAULT):] if k.startswith(FAULT) else None


def shape(loss_kind: str | None, cuts_path: bool | None) -> str | None:
    """The loss's shape: the fault kind's own declaration; an action that cuts the path is a cut.
    For a fault kind the registry no longer has, the record's `cuts_path` can still say it was a cut;
    anything else it cannot tell (None), and a rule that needs the shape says n/a."""
    kind = _fault(loss_kind)
    if kind is not None and (s := faults.shape_of(kind)) is not None:
        return str(s)
    name = str(loss_kind or "")[len(ACTION):] if str(loss_kind or "").startswith(ACTION) else None
    if name is not None and name in actions.ACTIONS:
        return CUT if actions.ACTIONS[name].cuts_path else None
    return CUT if cuts_path is True else None


def of_metrics(m: dict) -> str | None:
    """The shape in a run's metrics (`loss_shape`), or worked out from what an older verdict kept."""
    if "loss_shape" in m:
        return m["loss_shape"]
    return shape(m.get("loss_kind"), m.get("loss_cuts_path")) if m.get("loss_ms") is not None else None


def does(loss_kind: str | None) -> str:
    """What the loss's fault kind does, in its own words ('' for an action or an unknown kind)."""
    kind = _fault(loss_kind)
    cls = faults.REGISTRY.get(kind) if kind is not None else None
    return cls.does if cls is not None else ""


def kinds_of(s: str) -> list[str]:
    """The fault kinds of one shape, as a record names them (fault:<kind>)."""
    return [FAULT + k for k in faults.with_shape(Shape(s))]
