"""The iptables side of rule faults: what one fault adds (`Rules`) and the restore text for them all.

The lab's own chains (filter table only):

    OUTPUT  -j LL_OUT    LL_OUT  the out-direction rules of all faults
    INPUT   -j LL_IN     LL_IN   the in-direction rules
                         LL_L_*  per-fault chains (random loss)

Every dropped or rejected packet first hits `-j NFLOG --nflog-group 5 --nflog-threshold 1` with the
prefix `ll <kind> <name> <out|in>`, so a capture of nflog:5 shows it (`nflog()` below).
"""
from __future__ import annotations

from dataclasses import dataclass, field

NFLOG_GROUP = 5
OUT_CHAIN = "LL_OUT"
IN_CHAIN = "LL_IN"
FAULT_CHAIN_PREFIX = "LL_L_"  # a chain of one fault's own (random loss) starts with this
PROBE_CHAIN = "LL_PROBE"      # netem.kernel tries xtables targets in it, unhooked


def is_netem_chain(name: str) -> bool:
    """A chain netem makes (and so may remove). Other LL_ chains (the topology's uplink) are not."""
    return name in (OUT_CHAIN, IN_CHAIN, PROBE_CHAIN) or name.startswith(FAULT_CHAIN_PREFIX)


@dataclass
class Rules:
    """What one fault adds: lines for LL_OUT / LL_IN and any chains of its own (name -> lines)."""
    out: list[str] = field(default_factory=list)
    in_: list[str] = field(default_factory=list)
    chains: dict[str, list[str]] = field(default_factory=dict)


def nflog(prefix: str) -> str:
    """The NFLOG jump that goes before every drop; threshold 1 so each packet is logged at once."""
    return f'-j NFLOG --nflog-group {NFLOG_GROUP} --nflog-threshold 1 --nflog-prefix "{prefix[:63]}"'


def render_restore(faults: list, out_chain: str = OUT_CHAIN, in_chain: str = IN_CHAIN,
                   stale_chains: list[str] = ()) -> str:
    """The iptables-restore --noflush text that makes the lab's chains hold exactly these rule
    faults (anything with `rules() -> Rules`).

    Declaring a chain (`:NAME - [0:0]`) under --noflush flushes it, so the whole rule set is
    replaced in one nf_tables transaction. `stale_chains` (per-fault chains of faults just removed)
    are declared too, which empties them; they are deleted afterwards, outside the time-critical step.
    """
    out, in_, extra = [], [], {}
    for f in faults:
        r = f.rules()
        out += r.out
        in_ += r.in_
        extra.update(r.chains)
    lines = ["*filter", f":{out_chain} - [0:0]", f":{in_chain} - [0:0]"]
    lines += [f":{c} - [0:0]" for c in list(extra) + [c for c in stale_chains if c not in extra]]
    for c, body in extra.items():
        lines += [f"-A {c} {b}" for b in body]
    lines += [f"-A {out_chain} {r}" for r in out]
    lines += [f"-A {in_chain} {r}" for r in in_]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"
