"""Errors of the netem room. Each carries one clear line, and the exit code it means.

netem stands alone (it imports nothing from lab), so its errors are not LabErrors: `lab netem ...`
prints them itself, and lab code that calls netem catches NetemError next to LabError. `code` keeps
the lab's convention: 2 for bad input, 3 for "this machine cannot" (CapabilityMissing and below).
"""
from __future__ import annotations


class NetemError(Exception):
    """Any failure of the fault machinery."""
    code = 2


class FaultSpecError(NetemError):
    """A fault spec that does not validate; the message names the key and what is allowed."""


class RuleError(NetemError):
    """iptables-restore refused a rule set; the message carries its first error line."""


class CapabilityMissing(NetemError):
    """The machine lacks something a fault needs; exit code 3, as lab's CapabilityError."""
    code = 3


class FaultUnsupported(CapabilityMissing):
    """The kernel lacks what a fault needs (sch_netem, an xtables target, nfnetlink_queue)."""


class NoPrivilege(CapabilityMissing):
    """Not root / no CAP_NET_ADMIN in this namespace."""


class ToolMissing(CapabilityMissing):
    """A command-line tool (iptables-restore, tcpdump, ip) is not installed."""
