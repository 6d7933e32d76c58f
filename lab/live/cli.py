"""`lab scan DIR` and `lab drift DIR`: the live-mode rails on the command line.

- scan: exits 1 if an API key (each protocol's: GEMINI_API_KEY, OPENAI_API_KEY, from the environment
  or .env, in any form the scanner knows), a raw
  resumption handle, a TLS key log or embedded TLS secrets is found anywhere under DIR;
  `--allow-tls-secrets` accepts only the secrets a twin run embeds in its own capture.
- drift: compares the runs under DIR... with a twin profile, writes drift.md into the first DIR, exits 1
  on a change.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from lab.errors import LabError
from lab.live.drift import CHANGED, drift_dir
from lab.live.key import KEY_VAR, load_keys
from lab.live.scanner import scan


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="fail if a key, handle or TLS secret is anywhere under DIR")
    p.add_argument("dir", type=Path)
    p.add_argument("--secret-env", action="append", default=[], metavar="NAME",
                   help="also look for the value of this environment variable (repeatable)")
    p.add_argument("--allow-tls-secrets", action="store_true",
                   help="accept the TLS secrets a twin run embeds in its own capture (throw-away CA, nothing real)")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("drift", help="compare live runs under DIR... with the twin profile; writes drift.md "
                                     "(into the first DIR)")
    p.add_argument("dir", type=Path, nargs="+")
    p.add_argument("--profile", default=None, help="profile name (lab/twin/profiles) or a YAML path (default: the "
                   "runs' protocol's, developer-api or openai-realtime)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="overrides",
                   help="a twin parameter as the twin was run with it (repeatable; as `lab twin serve --set`)")
    p.add_argument("--tolerance", type=float, default=0.25, help="allowed fraction outside a measured range")
    p.set_defaults(func=cmd_drift)


def cmd_scan(args: argparse.Namespace) -> int:
    if not args.dir.exists():
        raise LabError(f"no such folder: {args.dir}")
    secrets = load_keys()
    secrets += [os.environ[n] for n in args.secret_env if os.environ.get(n)]
    findings = scan(args.dir, secrets, allow_tls_secrets=args.allow_tls_secrets)
    note = "" if secrets else (f" (no {' or '.join(KEY_VAR.values())} to look for: handles, key logs and TLS "
                               "secrets only)")
    if findings:
        for f in findings:
            print(f"FOUND {f}")
        print(f"lab scan: {len(findings)} finding(s) under {args.dir}; do not publish it{note}")
        return 1
    print(f"lab scan: {args.dir} is clean{note}")
    return 0


def cmd_drift(args: argparse.Namespace) -> int:
    out, behaviours = drift_dir(args.dir, args.profile, args.tolerance, args.overrides)
    for b in behaviours:
        print(f"{b.status:<13} {b.name:<48} {b.parameter} = {b.expected}; observed {b.observed}")
    print(f"drift: {out}")
    return 1 if any(b.status == CHANGED for b in behaviours) else 0
