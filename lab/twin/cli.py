"""`lab twin serve`: run the endpoint twin standalone until SIGINT/SIGTERM.

    lab twin serve --port 8765 --profile developer-api --set idle_release_s=1.5 --log twin.jsonl
    lab twin serve --protocol openai          # OpenAI Realtime at /v1/realtime (profile openai-realtime)
    lab twin calibrate captures/nightly-*/    # the timed parameters fitted from live runs (an overlay)

Prints the base URL and the CA path (the PEM a client must trust) and serves until stopped.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys

from lab.errors import LabError
from lab.protocols import DEFAULT as DEFAULT_PROTOCOL, PROTOCOLS


def add_parser(sub) -> None:
    p = sub.add_parser("twin", help="the endpoint twin (Gemini Live; OpenAI Realtime with serve --protocol openai)")
    tsub = p.add_subparsers(dest="twin_command", metavar="TWIN_COMMAND")
    s = tsub.add_parser("serve", help="serve the twin until SIGINT/SIGTERM")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="port (0 = any free port; default 8765)")
    s.add_argument("--protocol", choices=PROTOCOLS, default=DEFAULT_PROTOCOL,
                   help="the wire to speak: gemini (Live API, default) or openai (Realtime API at /v1/realtime; "
                        "docs/protocol-openai.md)")
    s.add_argument("--profile", default=None,
                   help="profile name or YAML path (default developer-api; openai-realtime with --protocol openai)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override one profile parameter (repeatable), e.g. --set freeze_close_s=30")
    s.add_argument("--cert-dir", default=None, help="where to write ca.pem and the server certificate")
    s.add_argument("--san", action="append", default=[], help="extra certificate name (repeatable)")
    s.add_argument("--no-tls", action="store_true", help="serve plain ws (the SDK then needs its ws_connect patch)")
    s.add_argument("--api-key", default=None,
                   help="require this key (x-goog-api-key, ?key= or Authorization): a wrong one closes the setup "
                        "1007, a missing one 1008 (with --set key_refusal=http: HTTP 403 / 401 at the upgrade)")
    s.add_argument("--control", default=None, metavar="HOST:PORT",
                   help="serve the control channel here (POST /fault, POST /goaway, GET /state)")
    s.add_argument("--log", default=None, help="twin.jsonl path (default: no file)")
    s.add_argument("--seed", type=int, default=None, help="random seed for drawn delays and handles")
    s.add_argument("--t0", type=float, default=None,
                   help="the run's clock (epoch seconds): twin.jsonl counts ms from it, like events.jsonl")
    s.add_argument("--list-params", action="store_true", help="print the profile's parameters and sources, then exit")
    s.add_argument("--conversation", default=None, metavar="NAME|FILE",
                   help="what the model plays: a conversation in lab/conversations, a .yaml file, or a text file "
                        "of user lines (default booking; docs/conversations.md)")
    s.set_defaults(func=_serve)
    r = tsub.add_parser("replay", help="serve a recorded run's frames.jsonl back, connection by connection")
    r.add_argument("frames", help="a run's frames.jsonl (or its run folder)")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8765)
    r.add_argument("--cert-dir", default=None)
    r.add_argument("--san", action="append", default=[])
    r.set_defaults(func=_replay)
    c = tsub.add_parser("calibrate", help="fit the profile's timed parameters from live run folders; "
                                          "writes a profile overlay")
    c.add_argument("dirs", nargs="+", help="live run folders or batches (events.jsonl + frames.jsonl)")
    c.add_argument("--profile", default="developer-api", help="the profile to compare with and extend")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter of the profile as compared (repeatable; as `serve --set`)")
    c.add_argument("--out", default=None, help="the overlay's path (default DIR/twin-calibrated.yaml, first DIR)")
    c.add_argument("--min-records", type=int, default=5,
                   help="fewest records for a parameter to be set in the overlay (default 5)")
    c.set_defaults(func=_calibrate)
    k = tsub.add_parser("compile", help="compile the twin's hot rooms with mypyc into a cache outside the "
                                        "sources (used when LAB_TWIN_COMPILED=1; docs/benchmarks.md)")
    k.add_argument("--check", action="store_true", help="only say whether the build for these sources exists")
    k.set_defaults(func=_compile)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def parse_twin_command(argv: list[str], prog: str, description: str, usage: str) -> argparse.Namespace:
    """`twin ...` parsed as `lab` parses it, without the orchestration above the twin: for the
    programs that run a twin with something of their own first (the bench's timed and floor servers).
    Exits 2 with one usage line when argv names no twin command."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    add_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.error(f"usage: {prog} {usage}")
    return args


def _compile(args) -> int:
    from lab.twin import compiled   # here, like the others: only this command builds
    if args.check:
        why = compiled.problem()
        print(why or f"compiled twin core: up to date in {compiled.build_dir()}")
        return 1 if why else 0
    try:
        compiled.build()
    except compiled.BuildMissing as e:
        raise LabError(str(e)) from None
    return 0


def _calibrate(args) -> int:
    # here, like the twin's own: the parsers load without the statistics; lab.live reads the twin's
    # profiles, the twin's rooms never read lab.live
    from lab.live.calibrate import calibrate_dirs

    if args.min_records < 1:
        raise LabError("--min-records must be at least 1")
    out, _, lines = calibrate_dirs(args.dirs, args.profile, args.overrides, args.out, args.min_records)
    for line in lines:
        print(line)
    print(f"overlay: {out}")
    return 0


def _replay(args) -> int:
    from pathlib import Path

    from lab.twin.replay import ReplayServer   # here: `lab` builds every parser; websockets loads when used
    from lab.twin.server import stop_signal    # as above: websockets loads only to serve

    frames = Path(args.frames)
    if frames.is_dir():
        frames = frames / "frames.jsonl"

    async def run() -> int:
        srv = ReplayServer(frames, host=args.host, port=args.port, cert_dir=args.cert_dir, san=args.san)
        await srv.start()
        stop = stop_signal()
        print(f"twin replay of {frames} ({len(srv.order)} connections) at {srv.base_url}", flush=True)
        print(f"ca_path {srv.ca_path}", flush=True)
        await stop.wait()
        await srv.stop()
        return 0

    return asyncio.run(run())


def _serve(args) -> int:
    from lab.twin.profile import load_profile   # here, like the others: the parsers load without the twin
    from lab.twin.params import DEFAULT_PROFILE   # here, as load_profile

    from lab.conversation.format import load as load_conversation   # here too: only serving reads one

    args.profile = args.profile or DEFAULT_PROFILE[args.protocol]
    # LabError on a bad profile or --set, or a profile of the other protocol
    prof = load_profile(args.profile, args.overrides, protocol=args.protocol)
    # a bad conversation fails before anything listens; its lines are the spoken order unless --set script
    args.conversation = load_conversation(args.conversation) if args.conversation else None
    if args.conversation is not None and not any(str(o).startswith("script=") for o in args.overrides):
        args.overrides = [*args.overrides, "script=" + json.dumps(args.conversation.lines)]
    if args.list_params:
        for name, prm in prof.params.items():
            print(f"{name} = {prm.value!r}\n    source: {prm.source}")
        return 0
    if not 0 <= args.port <= 65535:
        raise LabError(f"bad --port {args.port}")
    args.control = _host_port(args.control) if args.control else None
    import uvloop   # libuv's loop: the twin's throughput with hundreds of streaming sessions (lab bench twin)
    return uvloop.run(_run(args))


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise LabError(f"bad --control {text!r}: expected HOST:PORT")
    return host, int(port)


async def _run(args) -> int:
    from lab.twin.server import TwinServer, stop_signal   # here: websockets and trustme load only to serve

    twin = TwinServer(profile=args.profile, host=args.host, port=args.port, tls=not args.no_tls,
                      cert_dir=args.cert_dir, api_key=args.api_key, overrides=args.overrides,
                      log_path=args.log, seed=args.seed, san=args.san, t0=args.t0, control=args.control,
                      conversation=args.conversation, keep_events=False, protocol=args.protocol)
    try:
        await twin.start()
    except OSError as e:
        raise LabError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    # what is loaded by now lives as long as the twin: out of the collector's sight, so a full
    # collection does not walk it again with hundreds of sessions open (160 ms pauses measured
    # with 200 streaming, lab bench twin)
    gc.freeze()
    stop = stop_signal()
    print(f"twin: {twin.profile.name} at {twin.base_url}", flush=True)
    print(f"base_url {twin.base_url}", flush=True)
    print(f"ca_path {twin.ca_path or '-'}", flush=True)
    if twin.control is not None:
        print(f"control {twin.control.url}", flush=True)
    if twin.why_deaf:     # hearing was asked for and cannot be had here: say so once
        print(f"twin: warning: {twin.hearing}", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        await twin.stop()
        print("twin: stopped", file=sys.stderr, flush=True)
    return 0
