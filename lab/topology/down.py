"""`lab down`: remove what runs whose owner is gone left behind, and leave live runs alone.

Each run's resources carry its owner (netem.cleanup: an owner record per netns run; a label on each
container of a Compose project), so `lab down` typed beside a running `lab run` lists that run and
does not touch it. `--owner PID` narrows it to the runs of the named owner pids: what a script (or a
test) that started those runs may remove, and nothing of anyone else's.
"""
from __future__ import annotations

from lab.errors import CapabilityError, LabError


def add_parser(sub) -> None:
    p = sub.add_parser("down", help="remove what runs whose owner is gone left behind (live runs are left alone)")
    p.add_argument("--owner", action="append", default=None, metavar="PID",
                   help="only the runs this orchestrator pid owned (repeatable)")
    p.set_defaults(func=_cmd_down)


def _owner_pids(values: list[str] | None) -> set[int] | None:
    if values is None:
        return None
    try:
        return {int(v) for item in values for v in item.split(",") if v.strip()}
    except ValueError:
        raise LabError(f"--owner takes process ids, not {values!r}") from None


def _cmd_down(args) -> int:
    owner_pids = _owner_pids(args.owner)
    # imported here, each guarded: `lab down` must clean up what it can even when one part is broken
    done = []
    try:
        from lab.topology.uplink import down  # netem.cleanup.down and the live-mode uplinks
        from netem.cleanup import describe
        done.append(describe(down(owner_pids=owner_pids, current_ns=owner_pids is None)))
    except ModuleNotFoundError:
        pass
    try:
        from lab.topology.compose import docker_ready, down_all   # guarded: Docker may be absent
        if docker_ready():
            projects = down_all(owner_pids=owner_pids)
            line = f"compose projects: {', '.join(projects['removed']) or 'none'}"
            if projects["spared"]:
                line += f" (left live ones alone: {', '.join(projects['spared'])})"
            done.append(line)
    except (ModuleNotFoundError, ImportError):
        pass
    except CapabilityError:
        pass
    print("lab down: " + ("; ".join(done) if done else "nothing to do"))
    return 0
