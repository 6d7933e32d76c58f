"""`lab netem probe|apply|clear`: the fault machinery by hand, in the current namespace (or --netns)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from netem.errors import FaultSpecError, NetemError
from lab.errors import CapabilityError


def add_parser(sub) -> None:
    p = sub.add_parser("netem", help="faults in one network namespace: probe, apply, clear")
    nsub = p.add_subparsers(dest="netem_command", metavar="WHAT")
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])

    pr = nsub.add_parser("probe", help="what this kernel and namespace offer (iptables, nflog, nfqueue, netem)")
    pr.add_argument("--json", action="store_true", help="print the capabilities as JSON")
    pr.set_defaults(func=_probe)

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


def _probe(args) -> int:
    from netem.kernel import probe

    caps = probe()
    print(json.dumps(caps.as_dict(), indent=2) if args.json else caps.summary())
    if not caps.iptables:
        why = caps.missing[0] if caps.missing else "iptables-restore failed"
        raise CapabilityError(f"iptables is not usable here: {why}")
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
    from netem.faults import build
    from netem.table import FaultTable

    faults = [build(s) for s in _load_specs(args.spec)]
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
    from netem.cleanup import remove_chains
    from netem.faults import remove_netem

    try:
        chains = remove_chains(args.netns)
        qdiscs = remove_netem(None, args.netns)
    except NetemError:
        raise
    print(f"removed {len(chains)} lab chain(s)" + (f" and netem on {', '.join(qdiscs)}" if qdiscs else ""))
    return 0
