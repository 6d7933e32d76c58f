"""`lab matrix`: catalogue scenarios x clients, N runs each, then the conformance matrix.

    lab matrix [--scenarios default|NAME...] [--clients probe,livekit,...] [-n N] [--duration S]
               [--out DIR] [--topology netns|compose] [-j N|auto] [--protocol gemini|openai|gemini,openai]
    lab matrix --report DIR [DIR...] [--out DIR]     rebuild matrix.md/json from result folders

Every run is `lab run`'s (lab.run.batch_cells: preflight, run folder, agent, capture, verdict), all
into one batch folder, so the cells are ordinary run folders that `lab report` reads too; `-j N`
runs N cells side by side (lab/parallel.py) and the matrix ends with its wall time against the
cells' own times summed (timing.json). Everything is checked before the first run: every scenario name, every client
name, each framework's venv, what the topology can do (lab.run.preflight, once per client); a bad
name is one line and exit 2 with nothing started. The clients' package versions are measured in
their own venvs before the runs and written to versions.json. After the runs (and after a run
that stopped the matrix half-way, for what ran) the matrix is written by lab/report/conformance.py.
Every cell runs: a framework on a scenario behind the lab's CONNECT proxy (m3) is sent through it
as any app is ($HTTPS_PROXY; the proxy maps the API's hostnames to the twin).

A sweep (`--clients livekit@1.8.7..1.8.9,pipecat@latest`, lab/clients/frameworks/releases.py)
is a matrix whose framework clients are releases: their venvs are built first (once, kept), and
after the matrix the board (lab/report/board.py: rules x releases per framework, each change
flagged) is written beside it.

`--protocol gemini,openai` runs both protocols side by side in one batch: each its own clients x
the scenarios that apply to it (per_protocol), every cell under the one `-j`; the matrix and the
board name each cell's protocol.

`--duration S` caps the scenarios that run their whole duration (`end: duration`, e.g. B1's 900 s);
a scenario that ends when the user's question is answered keeps its own duration, its upper bound.
Exit status: 0 when the matrix was written (its cells are findings, failing ones included), 2 for
bad input, the error's code when a run could not start.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from lab import parallel
from lab import run as run_mod
from lab import scenario as scenario_mod
from lab.clients import protocols_of, speaking
from lab.clients.frameworks import releases
from lab.clients.frameworks import resolve as resolve_framework
from lab.errors import LabError
from lab.protocols import DEFAULT as DEFAULT_PROTOCOL
from lab.protocols import OPENAI, parse_protocols
from lab.report import board
from lab.report import conformance as matrix_report
from lab.report.junit import publish
from lab.report import phases
from lab.report.shards import merge_summary
from lab.topology import TOPOLOGIES
from lab.topology import get as get_topology
from lab.topology.framework_image import IMAGE_REPO

# The named scenario sets: the studies' scenarios (text input; the spoken variants are the same
# findings at several times the run time) and the server's lifecycle.
SETS: dict[str, tuple[str, ...]] = {
    "resume": ("control", "r1-idle-abort-immediate", "r1-idle-abort-delayed", "r1-clean-close", "r1-abort-speaking",
               "r2-freeze", "b1-silent-loss", "b2-path-return", "s2-recovery"),          # seed 000
    "stop": ("stop-a-pending", "stop-b-pending-late", "stop-c-blocking", "stop-d-after-commit", "stop-e-silent",
             "stop-f-early"),                                                               # seed 001
    # fidelity §5; OpenAI's own: its session cap and its server_error close (a set keeps a protocol's own)
    "lifecycle": ("l1-goaway", "l2-slow-pongs", "l3-stall", "l1-session-cap", "l4-server-error"),
    # a phone switching networks and the middleboxes of real paths (n1, m1, m2, m4 behind
    # the router node; m3's CONNECT proxy is the endpoint's proxy, the same middlebox family)
    "router": ("n1-network-switch", "m1-nat-idle-reap", "m2-fixed-age-relay", "m3-proxy-idle-timeout",
               "m4-mtu-blackhole"),
    # seed 000's "Not tested" list, and a healthy poor path that must not look like a loss
    "untested": ("s3-second-loss", "g1-speech-in-gap", "b3-after-server-close", "s4-held-sessions-limit",
                 "h1-healthy-jitter-loss"),
}
SETS["default"] = SETS["resume"] + SETS["stop"] + SETS["lifecycle"]
DEFAULT_CLIENTS = ("probe", "recovery", "naive", "livekit", "pipecat", "adk")

# What each client's cell is the version of: the lab's own clients run the SDK in the project's
# venv; a framework runs its own packages (and the SDK they pin) in its venv.
SDK_PACKAGES = ("google-genai", "websockets")
# the SDK a lab client of each protocol runs on (lab.clients.protocols_of)
SDK_PACKAGES_OF: dict[str, tuple[str, ...]] = {DEFAULT_PROTOCOL: SDK_PACKAGES, OPENAI: ("openai", "websockets")}
FRAMEWORK_PACKAGES: dict[str, tuple[str, ...]] = {
    # both realtime plugins: the app runs the one of the run's protocol (lab/peers/livekit_app.py)
    "livekit": ("livekit-agents", "livekit-plugins-google", "livekit-plugins-openai") + SDK_PACKAGES + ("openai",),
    "pipecat": ("pipecat-ai",) + SDK_PACKAGES + ("openai",),
    "adk": ("google-adk",) + SDK_PACKAGES,
}
_VERSIONS_PY = ("import importlib.metadata as m, json, sys\n"
                "def v(p):\n try: return m.version(p)\n except m.PackageNotFoundError: return None\n"
                "print(json.dumps({p: v(p) for p in sys.argv[1:]}))")


def expand_scenarios(names: list[str], protocol: str = DEFAULT_PROTOCOL) -> list[str]:
    """Scenario names with the named sets expanded, each once, in order; a set keeps only the
    scenarios that apply to `protocol` (a scenario named on its own is checked by lab run's preflight)."""
    out: list[str] = []
    for n in names:
        members = [s for s in SETS[n] if protocol in scenario_mod.load(s).protocols] if n in SETS else [n]
        for s in members:
            if s not in out:
                out.append(s)
    return out


def default_clients(protocol: str) -> tuple[str, ...]:
    """The matrix's clients when --clients is not given: Gemini's set, or the clients that speak `protocol`
    (the lab's own, then the frameworks)."""
    return DEFAULT_CLIENTS if protocol == DEFAULT_PROTOCOL else tuple(speaking(protocol))


def per_protocol(scenarios: list[str], clients: list[str] | None,
                 protocols: tuple[str, ...]) -> list[tuple[str, list[str], list[str]]]:
    """Each protocol's part of a matrix: (protocol, its scenarios, its clients), in the order given.
    One protocol: every name goes to it (lab run's preflight refuses what does not speak it). Several,
    side by side: a set keeps the scenarios that apply to each protocol, a scenario named on its own
    goes to the protocols it applies to, and each client to each protocol it speaks (without
    --clients: each protocol's defaults); a name that fits none of them, or a protocol left with no
    scenario or no client, is one LabError line, before anything runs."""
    if len(protocols) == 1:
        (proto,) = protocols
        return [(proto, expand_scenarios(scenarios, proto), list(clients or default_clients(proto)))]
    named = {n: scenario_mod.load(n).protocols for n in scenarios if n not in SETS}
    for n, applies in named.items():
        if not set(applies) & set(protocols):
            raise LabError(f"scenario {n} applies to {', '.join(applies)} (its protocols: key), none of "
                           f"{', '.join(protocols)}")
    speaks = {c: protocols_of(c) for c in clients or ()}
    for c, spoken in speaks.items():
        if not set(spoken) & set(protocols):
            raise LabError(f"client {c} speaks {' and '.join(spoken)}, none of {', '.join(protocols)}: add "
                           f"{spoken[0]} to --protocol or leave the client out")
    out = []
    for proto in protocols:
        scns = expand_scenarios([n for n in scenarios if n in SETS or proto in named[n]], proto)
        mine = [c for c, spoken in speaks.items() if proto in spoken] if clients else list(default_clients(proto))
        if not scns:
            raise LabError(f"no scenario of --scenarios {' '.join(scenarios)} applies to {proto}; its scenarios: "
                           f"{', '.join(scenario_mod.names_for(proto))}")
        if not mine:
            raise LabError(f"no client of --clients speaks {proto}: add one of {', '.join(speaking(proto))}")
        out.append((proto, scns, mine))
    return out


def split_names(values: list[str]) -> list[str]:
    """`--clients probe,livekit adk` -> ['probe', 'livekit', 'adk']."""
    return [x for v in values for x in v.split(",") if x.strip()]


def client_versions(client: str, repo: Path | None = None, topology: str = "netns") -> dict[str, str | None]:
    """The client's packages and their versions, asked of the python that runs it (in Compose, a
    framework's: the client image's venv)."""
    build = resolve_framework(client)      # livekit, livekit@1.8.0, livekit@1.8.0+pr003: that build's venv
    if build is not None and topology == "compose":
        argv = [str(build.python(IMAGE_REPO)), "-c", _VERSIONS_PY, *FRAMEWORK_PACKAGES[build.framework.name]]
        p = get_topology("compose").run_in_client_image(argv, framework=build.name)
    else:
        if build is not None:
            python, pkgs = str(build.python(repo or run_mod.REPO)), FRAMEWORK_PACKAGES[build.framework.name]
        else:
            python, pkgs = sys.executable, SDK_PACKAGES_OF.get(protocols_of(client)[0], SDK_PACKAGES)
        p = subprocess.run([python, "-c", _VERSIONS_PY, *pkgs], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise LabError(f"client {client!r}: could not read its package versions: "
                       f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(p.stdout)


def _duration(scn: scenario_mod.Scenario, cap: float | None) -> float | None:
    return min(cap, scn.duration) if cap is not None and scn.end == "duration" else None


def run_matrix(scenarios: list[str], clients: list[str] | None, n: int = 1, duration: float | None = None,
               out_dir: Path | None = None, topology: str = "netns", out=print, jobs: int | str = 1,
               conversation: str | None = None, protocol: str | tuple[str, ...] = DEFAULT_PROTOCOL) -> Path:
    """Run every scenario x client n times into one batch folder, `jobs` cells side by side; write the
    matrix; return the folder. `protocol`: one, or several side by side (`gemini,openai`), each with
    its own scenarios and clients (per_protocol; `clients` None: each protocol's defaults), all their
    cells in one run of lab.parallel. `conversation`: what the twin plays and the user says in every
    cell (lab run --conversation's; an agent's own lines)."""
    if n < 1:
        raise LabError("-n must be at least 1")
    if duration is not None and duration <= 0:
        raise LabError("--duration must be positive")
    protocols = parse_protocols(protocol) if isinstance(protocol, str) else tuple(protocol)
    if not scenarios or clients == []:
        raise LabError("name at least one scenario and one client")
    parts = per_protocol(scenarios, clients, protocols)
    # every name, before any run
    scns = {(proto, c): run_mod.preflight(names, c, topology, "twin", conversation=conversation, protocol=proto)
            for proto, names, cls in parts for c in cls}
    all_clients = [c for _, _, cls in parts for c in cls]
    versions = {c: client_versions(c, topology=topology) for c in all_clients}
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    batch = Path(out_dir) if out_dir else Path.cwd() / "captures" / f"{stamp}-matrix"
    batch.mkdir(parents=True, exist_ok=True)
    (batch / matrix_report.VERSIONS_FILE).write_text(json.dumps(
        {"measured": datetime.now(timezone.utc).isoformat(timespec="seconds"), "clients": versions}, indent=2) + "\n")
    cells, not_run = [], []
    for (proto, client), mine in scns.items():
        for scn in mine:
            cells += run_mod.batch_cells([scn], batch, n=n, client=client, topology=topology,
                                         duration=_duration(scn, duration), conversation=conversation, out=out,
                                         protocol=proto)
    for proto, names, cls in parts:
        out(f"== matrix: {proto}: {len(names)} scenarios x {len(cls)} clients x {n}")
    out(f"== matrix: {len(cells)} cells -> {batch}")
    done = None
    try:
        # a client whose app cannot start (a release the app does not run on) stops its own cells only
        done = parallel.run_cells(cells, parallel.resolve_jobs(jobs, cells, out), out=out, contain=(LabError,))
        not_run += [{"scenario": None, "client": c, "why": why} for c, why in done.stopped.items()]
    finally:
        (batch / board.NOT_RUN_FILE).write_text(json.dumps({"cells": not_run}, indent=2) + "\n")
        if any(batch.glob("*/run.json")):
            from lab.report import summarize      # here: the report loads matplotlib
            summarize(batch)
            md, _ = matrix_report.write([batch], batch)
            out(f"== matrix: {md}")
            # a sweep, or protocols side by side: the rules x releases board too, naming each protocol
            if any(_release_of(c) for c in all_clients) or len(protocols) > 1:
                out(f"== board: {board.write(batch)[0]}")
    timing = _timing(cells, done)
    (batch / TIMING_FILE).write_text(json.dumps(timing, indent=2) + "\n")
    m = parallel.machine()
    out(f"== matrix time: {done.figure()}; load {m.load1:.1f} at the end on {m.cores} cores")
    out(f"== matrix goal: {goal_line(done)}")
    if timing["phases_read"]:
        out(f"== where the cells' time went ({timing['phases_read']} cells): {phases.line(timing['phases_s'])}")
    return batch


# the lab's goal for a matrix run side by side: at most a sixth of its serial time (the cells' own
# times summed), on a 2-core machine with the default matrix
GOAL_RATIO = 1 / 6


def goal_line(done: parallel.Report) -> str:
    """The ratio beside its goal and its floor: with -j N the wall can be no less than 1/N of the
    serial time, so a goal under 1/N needs more jobs, not faster cells."""
    met = "met" if done.ratio <= GOAL_RATIO else "not met"
    return (f"ratio {done.ratio:.3f} against the goal of at most {GOAL_RATIO:.3f} (1/6 of serial): {met}; "
            f"the floor with -j {done.jobs} is {1 / done.jobs:.3f} (1/{done.jobs})")


def _release_of(client: str) -> bool:
    """The client names a framework at a release of its own (livekit@1.8.8), not the pinned name."""
    build = resolve_framework(client)
    return build is not None and not build.pinned


TIMING_FILE = "timing.json"   # the matrix's wall time and each cell's own (the -j figure's inputs)


def _timing(cells: list, done) -> dict:
    total, read = phases.summed([c.log.parent for c in cells if c.log is not None])
    return {"phases_s": {k: round(v, 3) for k, v in total.items()}, "phases_read": read,"jobs": done.jobs, "wall_s": round(done.wall_s, 3), "cells_s": round(done.cells_s, 3),
            "ratio": round(done.wall_s / done.cells_s, 4) if done.cells_s else None,
            "cells": {c.name: (round(s, 3) if s is not None else None) for c, s in zip(cells, done.cell_s)}}


def report(roots: list[Path], out_dir: Path | None) -> Path:
    """Rebuild matrix.md/json (and, over several shards, one summary.md) from result folders."""
    if len(roots) > 1 and out_dir is None:
        raise LabError("several result folders: name --out for the merged matrix")
    dest = Path(out_dir) if out_dir else Path(roots[0])
    md, _ = matrix_report.write(roots, dest)
    if len(roots) > 1:
        merge_summary(roots, dest)
    return md


# ---- CLI -------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("matrix", help="scenarios x clients, N runs each, then matrix.md/json (the conformance rules)")
    p.add_argument("--scenarios", nargs="+", default=["default"],
                   help=f"scenario names or sets ({', '.join(SETS)}); default: default")
    p.add_argument("--clients", nargs="+", default=None,
                   help=f"client names, comma or space separated (default {','.join(DEFAULT_CLIENTS)}; with "
                        "--protocol openai: the clients that speak it; with several protocols, each protocol's "
                        "defaults, or each named client under the protocol it speaks); "
                        "NAME@A..B sweeps every release from A to B the package index serves, NAME@latest its "
                        "newest; a sweep builds the missing venvs and writes board.md/json")
    p.add_argument("-n", type=int, default=1, help="runs per cell")
    p.add_argument("--duration", type=float, default=None,
                   help="cap (s) for scenarios that run their whole duration (end: duration)")
    p.add_argument("--out", type=Path, default=None, help="batch folder (default captures/<time>-matrix)")
    p.add_argument("--topology", default="netns", choices=sorted(TOPOLOGIES))
    p.add_argument("--protocol", type=_protocols_arg, default=(DEFAULT_PROTOCOL,), metavar="gemini|openai|gemini,openai",
                   help="the realtime protocol(s) the twin and the clients speak (default gemini); several, comma "
                        "separated, run side by side in one matrix: each its own clients (--clients are sorted by "
                        "the protocol they speak) x the scenarios that apply to it")
    p.add_argument("-j", "--jobs", type=parallel.parse_jobs, default=1, metavar="N",
                   help="cells side by side, each in its own namespaces or Compose project; auto: from the "
                        "cores, the load and the memory (says what it picked)")
    p.add_argument("--report", nargs="+", type=Path, default=None, metavar="DIR",
                   help="rebuild the matrix from these result folders (shards merge) without running")
    p.add_argument("--conversation", default=None, metavar="FILE",
                   help="what the twin's model plays, in every cell: a conversation name or .yaml, or a text "
                        "file of the user's lines (your agent's own; docs/conversations.md)")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write every run's verdict and rules as JUnit XML (for a CI)")
    p.set_defaults(func=_cmd_matrix)


def _protocols_arg(text: str) -> tuple[str, ...]:
    try:
        return parse_protocols(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cmd_matrix(args) -> int:
    if args.report:
        md = report(args.report, args.out)
        print(f"matrix: {md}")
        publish(md.parent, args.junit_xml)
        return 0
    # livekit@1.8.0..1.8.9, pipecat@latest: releases
    clients = releases.expand(split_names(args.clients)) if args.clients else None
    releases.ensure_venvs(clients or [])
    batch = run_matrix(args.scenarios, clients, n=args.n,
                       duration=args.duration, out_dir=args.out, topology=args.topology, jobs=args.jobs,
                       conversation=args.conversation, protocol=args.protocol)
    print(f"== results: {batch} (matrix.md, matrix.json, summary.md)")
    publish(batch, args.junit_xml)
    return 0
