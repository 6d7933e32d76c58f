"""Errors of the netem room. Each carries one clear line; the CLI prints it as `lab: <message>`.

Everything derives from NetemError (a LabError). What the machine lacks (a kernel feature, a tool,
the privilege) is also a CapabilityError, so callers that only know lab.errors can still tell
"bad input" (exit 2) from "this machine cannot" (exit 3).
"""
from __future__ import annotations

from lab.errors import CapabilityError, LabError


class NetemError(LabError):
    """Any failure of the fault machinery."""


class FaultSpecError(NetemError):
    """A fault spec that does not validate; the message names the field and what is allowed."""


class FaultUnsupported(NetemError, CapabilityError):
    """The kernel lacks what a fault needs (sch_netem, an xtables target)."""


class NoPrivilege(NetemError, CapabilityError):
    """Not root / no CAP_NET_ADMIN in this namespace."""


class ToolMissing(NetemError, CapabilityError):
    """A command-line tool (iptables-restore, tcpdump, ip) is not installed."""


class RuleError(NetemError):
    """iptables-restore refused a rule set; the message carries its first error line."""
