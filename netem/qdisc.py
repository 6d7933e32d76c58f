"""The lab's tc netem root qdisc, found and removed by its handle (pyroute2).

Its own module so clean-up (netem/cleanup.py) can remove qdiscs without importing the fault kinds,
whose workers are recorded through clean-up (netem/kinds/delay.py): no import circle.
"""
from __future__ import annotations

from netem.kernel import in_netns

NETEM_HANDLE = 0x1AB0  # "1ab0:" marks the lab's netem root qdisc, so clean-up removes only ours


def remove_netem(dev: str | None, netns: str | None) -> list[str]:
    """Remove the lab's netem root qdisc (handle 1ab0:) from `dev` (None: every device). Quiet."""
    from pyroute2 import IPRoute  # lazy: building and checking specs needs no netlink

    removed = []
    # in_netns, not pyroute2's NetNS (netem.kernel.in_netns says why)
    try:
        with in_netns(netns), IPRoute() as ipr:
            links = {l["index"]: l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}
            for q in ipr.get_qdiscs():
                if q.get_attr("TCA_KIND") == "netem" and (q["handle"] >> 16) == NETEM_HANDLE:
                    name = links.get(q["index"])
                    if dev is None or name == dev:
                        try:
                            ipr.tc("del", "netem", q["index"], handle=f"{NETEM_HANDLE:x}:0")
                            removed.append(name)
                        except Exception:
                            pass
    except Exception:
        pass
    return removed
