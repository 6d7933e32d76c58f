"""`lab netem probe|kinds|apply|clear`: the fault machinery by hand, in the current namespace (or --netns).

Imports nothing from lab: its errors are NetemErrors, which the lab CLI prints as one line.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from netem.cleanup import remove_chains
from netem.errors import CapabilityMissing, FaultSpecError
from netem.faults import build, kinds, needing, path_of, table, unmet
from netem.kernel import probe
from netem.kinds.netem import remove_netem
from netem.table import FaultTable


def add_parser(sub) -> None:
    p = sub.add_parser("netem", help="faults in one network namespace: probe, apply, clear")
    nsub = p.add_subparsers(dest="netem_command", metavar="WHAT")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])

    pr = nsub.add_parser("probe", help="what this kernel and namespace offer, and which fault kinds can run")
    pr.add_argument("--json", action="store_true", help="print the capabilities as JSON")
    pr.set_defaults(func=_probe)

    kd = nsub.add_parser("kinds", help="every fault kind: what it does to the path and the kernel features it needs")
    kd.add_argument("--json", action="store_true", help="print the table as JSON")
    kd.set_defaults(func=_kinds)

    ap = nsub.add_parser("apply", help="apply fault(s) and leave them in place (see `clear`)")
    ap.add_argument("spec", help='a fault spec as JSON (object or list), or @file.json; e.g. '
                                 '\'{"kind":"blackhole","target":{"dst":"10.203.7.2","dport":8443}}\'')
    ap.add_argument("--netns", help="a named network namespace instead of the current one")
    ap.add_argument("--hold", type=float, metavar="SECONDS",
                    help="keep the faults this long, then clear them (Ctrl-C clears at once)")
    ap.set_defaults(func=_apply)

    cl = nsub.add_parser("clear", help="remove every lab chain (and lab netem qdisc) in the namespace")
    cl.add_argument("--netns", help="a named network namespace instead of the current one")
    cl.set_defaults(func=_clear)


def kinds_summary(caps) -> str:
    """One line per fault kind: yes, or NO and what it lacks (from the kind's `requires`)."""
    lines = ["fault kinds:"]
    width = max(map(len, kinds()))
    for k in kinds():
        lacks = unmet(k, caps)
        path = path_of(k, caps)
        yes = f"yes ({path} path)" if path else "yes"
        lines.append(f"  {k:{width}s} {yes if not lacks else 'NO   needs ' + '; '.join(lacks)}")
    return "\n".join(lines)


def _probe(args) -> int:
    caps = probe()
    if args.json:
        print(json.dumps({**caps.as_dict(), "kinds": {k: unmet(k, caps) for k in kinds()}}, indent=2))
    else:
        print(caps.summary(needed_by=needing))
        print(kinds_summary(caps))
    if not caps.iptables:
        why = caps.missing[0] if caps.missing else "iptables-restore failed"
        raise CapabilityMissing(f"iptables is not usable here: {why}")
    return 0


def kinds_table() -> str:
    """The registry as a table: kind, shape, what it does, the features it needs."""
    rows = [(r["kind"], r["shape"], ",".join(r["requires"]) + "".join(f" or {','.join(a)}" for a in r["or"]),
             r["does"]) for r in table()]
    rows.insert(0, ("kind", "shape", "needs", "does"))
    w = [max(len(row[i]) for row in rows) + 2 for i in range(3)]
    return "\n".join(f"{k:{w[0]}}{s:{w[1]}}{n:{w[2]}}{d}" for k, s, n, d in rows)


def _kinds(args) -> int:
    print(json.dumps(table(), indent=2) if args.json else kinds_table())
    return 0


def _load_specs(text: str) -> list[dict]:
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise FaultSpecError(f"cannot read {text[1:]}: {e.strerror}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise FaultSpecError(f"spec is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    specs = obj if isinstance(obj, list) else [obj]
    if not specs:
        raise FaultSpecError("no fault spec given")
    return specs


def _apply(args) -> int:
    faults = [build(s) for s in _load_specs(args.spec)]
    if args.hold is None and any(f.lives_with_owner for f in faults):
        held = ", ".join(f.kind for f in faults if f.lives_with_owner)
        raise FaultSpecError(f"{held} lasts only while the process that applied it runs: give --hold SECONDS")
    table = FaultTable(netns=args.netns, handle_signals=args.hold is not None)
    try:
        for f in faults:
            t0 = time.time()
            f.apply(table)
            print(f"applied {f.kind} {f.name} in {(time.time() - t0) * 1000:.1f} ms")
    except BaseException:
        table.close()
        raise
    if args.hold is None:
        table.detach()
        print("left in place; `lab netem clear" + (f" --netns {args.netns}" if args.netns else "") + "` removes them")
        return 0
    try:
        time.sleep(args.hold)
    except KeyboardInterrupt:
        pass
    finally:
        table.close()
        print("cleared", file=sys.stderr)
    return 0


def _clear(args) -> int:
    chains = remove_chains(args.netns)
    qdiscs = remove_netem(None, args.netns)
    print(f"removed {len(chains)} lab chain(s)" + (f" and netem on {', '.join(qdiscs)}" if qdiscs else ""))
    return 0
