"""The orchestrator: one scenario run = topology up, twin, capture, agent, then the report.

Topology-agnostic: a topology is built by name from the registry (lab/topology), the services (twin,
proxy, capture) are started on its nodes, the agent runs on its client node. Everything a run needs
is checked before anything is recorded (scenario files, client names, what the topology can do), so
bad input costs nothing. Each run gets its own folder; a run that
fails half-way still leaves its events.jsonl and whatever capture it made, and the topology is
always taken down.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from lab import forkserver  # noqa: F401  (imported, it installs the netns topology's fork server)
from lab import parallel
from lab import scenario as scenario_mod
from lab.conversation import format as conversations
from lab.conversation import semantics
from lab.clients import get as get_client
from lab.clients import not_speaking, speaks
from lab.clients.command import parse_command
from lab.clients.frameworks import FRAMEWORKS, resolve as resolve_framework
from lab.clients.frameworks import venvs as framework_venvs
from lab.events import read_events
from lab.plan import KEY_ENV, RunPlan
from lab.report.phases import PHASES_FILE
from lab.report.verdict import REPRODUCTION, USER, headline, verdict_met   # reads old verdicts too; loads no matplotlib
from lab.errors import CapabilityError, LabError
from lab.model_id import DEFAULT_MODEL
from lab.protocols import DEFAULT as DEFAULT_PROTOCOL
from lab.protocols import KEY_VARS, LIVE_BASE_URL, PROTOCOLS, add_protocol_argument, endpoint_url
from lab.topology import AUTO, TOPOLOGIES
from lab.topology import choose as choose_topology
from lab.topology import get as get_topology
from lab.topology.compose import APP_DIR, app_command, app_mount_file
from lab.topology.framework_image import IMAGE_REPO
from lab.topology.framework_image import environment as framework_image_environment
from lab.topology.hostnames import ENDPOINT_PORT, endpoint_names
from lab.topology.services import Capture, Proxy, Twin
from netem import faults as netem_faults

TWIN_KEY = "lab-twin-key"          # the fake key the twin is configured with; never a real one
SPEECH_TOOLS = ("espeak-ng",)      # what `input: speech` needs on the client node (lab/speech.py)
REPO = Path(__file__).resolve().parent.parent


def _python() -> str:
    return sys.executable


def _relay(proc: subprocess.Popen, prefix: str, sink) -> threading.Thread:
    def pump():
        for line in proc.stdout:
            sink(f"{prefix}{line.rstrip()}")
    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def framework_build(name: str | None, requirements: str | None = None, out=print):
    """The framework build a client name stands for (None: no framework), in the venv copy with the
    user's requirements when there are some (made once: lab/clients/frameworks/venvs.py)."""
    build = resolve_framework(name)
    if build is None:
        if requirements:
            raise LabError(f"--requirements goes into a framework's venv; client {name!r} is none "
                           f"({', '.join(FRAMEWORKS)})")
        return None
    return framework_venvs.ensure(build, requirements, REPO, out) if requirements else build


def check_protocol(protocol: str, scns: list[scenario_mod.Scenario], client: str | None,
                   endpoint: str = "twin", client_cmd: str | None = None) -> None:
    """A run of `protocol` (lab.protocols) only with scenarios that apply to it and clients that
    speak it; else one LabError line, before anything starts."""
    if protocol not in PROTOCOLS:
        raise LabError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    for s in scns:
        if protocol not in s.protocols:
            others = scenario_mod.names_for(protocol)
            raise LabError(f"scenario {s.name} applies to {', '.join(s.protocols)} (its protocols: key), not "
                           f"{protocol}; the {protocol} scenarios: {', '.join(others) or 'none'}")
        name = client or s.client
        # an app alone speaks the run's protocol; an app judged as a client (--client) and a client must speak it
        refused = not_speaking(name, protocol) if client_cmd is None or client else None
        if refused:
            raise LabError(refused)


def preflight(scenarios: list[str], client: str | None, topology: str, endpoint: str,
              client_cmd: str | None = None, requirements: str | None = None,
              out=print, conversation: str | None = None,
              protocol: str = DEFAULT_PROTOCOL) -> list[scenario_mod.Scenario]:
    """Validate everything up front; raise one clear LabError on the first problem. The scenarios
    come back as played (`conversation`: the user's lines from `lab run --conversation`)."""
    scns = [scenario_mod.played(scenario_mod.load(s), conversation) for s in scenarios]
    check_protocol(protocol, scns, client, endpoint, client_cmd)
    entries_checked: set[str] = set()
    image_frameworks: set[str] = set()      # compose: the framework venvs the client image must hold
    compose_entries: list = []              # compose: users' agents, checked in that image
    for s in scns:
        if s.router_links and topology not in ("netns", "compose"):
            raise LabError(f"scenario {s.name} has a router (topology: {{router: true}}): it runs in the netns "
                           f"and compose topologies, not {topology} (no router node there)")
        if s.router_links and endpoint == "live":
            raise LabError(f"scenario {s.name} has a router: live mode has no uplink behind a router yet")
        name = client or s.client
        # livekit, livekit@1.8.9, livekit@1.8.9+pr003, livekit:agent:OrderSupport (the user's agent)
        if topology == "compose" and resolve_framework(name) is not None:
            # the client image holds the framework's pinned venv (lab/topology/framework_image.py)
            build = resolve_framework(name)
            if not build.pinned:
                raise LabError(f"client {name!r}: the Compose client image holds {build.name}'s pinned release "
                               f"only; another release or build runs in --topology netns")
            if requirements:
                raise LabError("--requirements goes into a venv on this host: use --topology netns")
            image_frameworks.add(build.name)
            if build.entry is not None:
                compose_entries.append(build)
            continue
        build = framework_build(name, requirements, out)
        if build is not None:
            if topology != "netns":    # its venv is on the host; the client image holds none
                raise LabError(f"client {name!r} runs in the netns and compose topologies only")
            build.check(REPO)
            if build.client_spec not in entries_checked:    # the user's module, loaded in the venv once
                build.check_entry(REPO, Path.cwd())
                entries_checked.add(build.client_spec)
            _check_client_cmd(build.command(REPO), endpoint, topology)
        else:
            get_client(name)
    if endpoint not in ("twin", "live"):
        raise LabError(f"unknown endpoint {endpoint!r}; use twin or live")
    if client_cmd is not None:
        _check_client_cmd(client_cmd, endpoint, topology)
    client_tools = frozenset(SPEECH_TOOLS if any(s.input == "speech" for s in scns) else ())
    topo_cls = get_topology(topology)
    if len(image_frameworks) > 1:
        raise LabError(f"one framework per Compose batch (the client image holds one): {sorted(image_frameworks)}")
    framework = next(iter(image_frameworks), None)
    image_kw = {"framework": framework} if framework else {}
    topo_cls.preflight(client_tools=client_tools, uplink=endpoint == "live", **image_kw)
    for build in {b.client_spec: b for b in compose_entries}.values():
        build.check_entry(IMAGE_REPO, Path.cwd(), run=lambda argv: topo_cls.run_in_client_image(
            argv, framework=build.name, app_dir=Path.cwd()))
    # every fault kind a scenario uses, asked of netem's registry (what the kernel must offer), as
    # the topology's client node sees it (the host, or the client image for compose)
    kinds = sorted({st.fault.kind for s in scns for st in s.timeline if st.fault})
    if kinds:
        caps = topo_cls.kernel_caps(**image_kw)
        for kind in kinds:
            missing = netem_faults.unmet(kind, caps)
            if missing:
                raise CapabilityError(f"a scenario uses the {kind} fault, which the {topology} topology's "
                                      "client node cannot run: " + "; ".join(missing))
    return scns


def _check_client_cmd(cmd: str, endpoint: str, topology: str = "netns") -> None:
    """A --client-cmd that cannot run is refused before anything starts."""
    prog = parse_command(cmd)[0]
    if endpoint != "twin":
        raise LabError("--client-cmd runs an app against the twin by the real endpoint names; use --endpoint twin")
    if topology != "netns":
        return      # the program is looked for in the client container, where it runs
    found = shutil.which(prog) if os.sep not in prog else (prog if os.access(prog, os.X_OK) else None)
    if not found:
        raise LabError(f"--client-cmd: {prog!r} is not an executable on PATH")


def _client_start_error(run_dir: Path) -> str | None:
    """The line a --client-cmd app that could not start left (client.error, task start), if any."""
    try:
        events = read_events(run_dir / "events.jsonl")
    except OSError:
        return None
    return next((str(e.get("error")) for e in events if e.kind == "client.error" and e.get("task") == "start"), None)


class RunSpec:
    """One run's inputs. In live mode `base_url` (None: the SDK's default, the real endpoint) and
    `ca` (None: the system's CAs) say where the client goes; `endpoint_hook(topology)`, given by
    tests, may start an endpoint once the topology is up and return (base_url, ca)."""

    def __init__(self, scn, client, topology, endpoint, run_dir, duration, base_url, model, live_key=None,
                 keylog_live=False, ca=None, endpoint_hook=None, budget_ledger=None, client_cmd=None,
                 framework=None, app_dir=None, conversation=None, app_judged_as=False, protocol=DEFAULT_PROTOCOL):
        self.protocol = protocol               # the realtime protocol the twin and the client speak (lab.protocols)
        # what the twin's model plays: `lab run --conversation`, else the scenario's own
        self.conversation = conversation or scn.conversation
        self.framework = framework             # a framework client's Build.describe(), for run.json
        self.client_cmd = client_cmd           # a user's app as the client, judged as `client`
        # the user named the client an app is judged as (`--client`): only then may it stand in for the
        # study's own client and be held to reproducing it; an app alone is held to its user's outcomes
        self.app_judged_as = app_judged_as
        self.app_dir = Path(app_dir or os.getcwd())   # where its command line's relative paths start
        self.budget_ledger = budget_ledger     # live: the agent charges each connection against it
        self.scn, self.client, self.topology, self.endpoint = scn, client, topology, endpoint
        self.run_dir, self.duration, self.base_url, self.model = run_dir, duration, base_url, model
        self.live_key, self.keylog_live = live_key, keylog_live
        self.ca, self.endpoint_hook = ca, endpoint_hook


def topology_id(run_dir: Path) -> str:
    """The run's name for its topology (namespaces, pidfiles, compose project): the run id and a hash of
    the run folder, so two batches running the same scenario at once (parallel tests, two users) never
    share a namespace."""
    return f"{run_dir.name}-{hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:4]}"


def run_one(spec: RunSpec, out=print) -> dict:
    """One run, start to finish; returns the verdict (or a dict with the error)."""
    run = _prepare_folder(spec, out)
    try:
        run.topo.up()
        run.phases.mark("topology_up")
        # the run's clock starts once the lab is up (a Compose build must not eat the scenario's
        # duration); every service that keeps time gets it
        t0 = time.time()
        reach = _endpoint_services(run, t0)
        plan = _write_plan(run, t0, reach)
        _start_agent(run, plan, reach.key, out)
        _start_services(run, t0)
        status = _await_agent(run)
    except KeyboardInterrupt:
        if run.agent is not None:
            run.agent.terminate()
        raise
    finally:
        _tear_down(run, out)
    return _judge(run, status)


@dataclasses.dataclass
class _Run:
    """One run's state, handed from each step of run_one to the next."""
    spec: RunSpec
    scn: scenario_mod.Scenario
    duration: float
    conversation: Path          # the run folder's copy of what the twin's model plays
    secrets: Path               # CA key, TLS keylog: never in results
    keylog: Path | None
    topo: object
    capture: Capture
    app_cmd: str | None         # a user's app as it starts on the client node, and where
    app_cwd: str
    phases: _Phases
    services: list = dataclasses.field(default_factory=list)
    agent: subprocess.Popen | None = None
    relay: threading.Thread | None = None

    @property
    def run_dir(self) -> Path:
        return self.spec.run_dir

    @property
    def go_file(self) -> Path:
        return self.spec.run_dir / GO_FILE


@dataclasses.dataclass(frozen=True)
class _Reach:
    """How the client reaches its endpoint: the URL, the CA, the key; the twin's control channel and
    the proxy when the run has them."""
    base_url: str | None
    ca: str | Path | None
    key: str
    twin_control: str | None = None
    proxy: Proxy | None = None


def expect_of(spec: RunSpec) -> dict:
    """The scenario's `expect:` rows for the client the run stands for; none when that client speaks
    another protocol than the run (an OpenAI app beside the study's Gemini client: its resume refusals
    and close codes are not the app's protocol's)."""
    return spec.scn.expect_for(spec.client) if speaks(spec.client, spec.protocol) else {}


def held_to(spec: RunSpec) -> str:
    """What the run is held to (lab.report.verdict): reproducing the study when its client is the
    scenario's own (the study's), else its user's outcomes. An app stands in for the study's client
    only when the user said so with --client."""
    study = spec.client == spec.scn.client and (not spec.client_cmd or spec.app_judged_as)
    return REPRODUCTION if study and expect_of(spec) else USER


def _prepare_folder(spec: RunSpec, out) -> _Run:
    """The run folder (run.json, the scenario and conversation as run), its secrets' folder outside
    the results, and the topology, not yet up."""
    scn, run_dir = spec.scn, spec.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = run_dir.name
    duration = spec.duration or scn.duration
    conv_copy = _record_conversation(spec.conversation, run_dir)
    meta = {"run_id": run_id, "scenario": scn.to_json(), "client": spec.client, "topology": spec.topology,
            "endpoint": spec.endpoint, "protocol": spec.protocol, "duration": duration,
            "params": scn.params_for(spec.client),
            "expect": expect_of(spec), "held_to": held_to(spec),
            "started": datetime.now(timezone.utc).isoformat()}
    if spec.client_cmd:
        meta["client_cmd"] = spec.client_cmd
        if spec.client not in FRAMEWORKS:   # a user's app: judged by the client it stands in for
            meta.update(client="command", judged_as=spec.client)
    if spec.framework is not None:      # which release (and build) of the framework ran
        meta["framework"] = spec.framework
    if scn.lines_from:                  # the user said a conversation's lines, not the script's
        meta["user_lines"] = {"from": scn.lines_from, "lines": scn.script}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))
    # the scenario as run, next to its results: provenance, and a path the agent can read in any
    # topology (a container sees the run folder, not the host's source tree)
    shutil.copyfile(scn.path, run_dir / "scenario.yaml")
    secrets = Path(tempfile.mkdtemp(prefix=f"livelab-{run_id}-"))
    # TLS secrets: a twin run's go into its pcapng (throw-away CA, nothing to protect); a live run's
    # only with --keylog-live, and then to a private file outside the results, never into the pcapng
    keylog = None
    if spec.endpoint == "twin":
        keylog = secrets / "keys.log"
    elif spec.keylog_live:
        keydir = Path.home() / ".cache" / "livelab" / "keylogs"
        keydir.mkdir(parents=True, exist_ok=True, mode=0o700)
        keylog = keydir / f"{run_id}.keys.log"
        out(f"  live TLS key log (kept out of the results): {keylog}")
    # a user's app starts where they ran `lab run`; in Compose that folder is mounted in the client
    app_cmd, app_cwd, topo_kw = spec.client_cmd, str(spec.app_dir), {}
    if spec.client_cmd and spec.topology == "compose":
        topo_kw["extra_files"] = [app_mount_file(spec.app_dir, secrets / "compose.app.yaml")]
        app_cwd = APP_DIR
        if spec.framework is not None:      # its command is the image's already (IMAGE_REPO); its image holds its venv
            topo_kw["env"] = framework_image_environment(spec.framework["framework"])
        else:
            app_cmd = app_command(spec.client_cmd, spec.app_dir)
    # a router scenario (topology: {router: true, links}) puts a router between the nodes
    if scn.router_links:
        topo_kw["links"] = scn.router_links
    # live mode: the client's node gets an uplink through the host (NAT) to reach the endpoint.
    # The seed and the records keep the plain run id, so a run id still replays the same draws.
    topo = get_topology(spec.topology)(run_id=topology_id(run_dir), run_dir=run_dir, secrets_dir=secrets,
                                       uplink=spec.endpoint == "live", log=out, **topo_kw)
    run = _Run(spec=spec, scn=scn, duration=duration, conversation=conv_copy, secrets=secrets, keylog=keylog,
               topo=topo, capture=Capture.of(topo, run_dir), app_cmd=app_cmd, app_cwd=app_cwd, phases=_Phases())
    run.go_file.unlink(missing_ok=True)     # a stale go (a re-used folder) must not start the agent early
    return run


def _endpoint_services(run: _Run, t0: float) -> _Reach:
    """What the client dials, made ready to start: the twin (its seed, names, script and profile) or
    the live endpoint, and the freeze proxy in front of it when the scenario asks for one."""
    spec, scn, topo = run.spec, run.scn, run.topo
    twin_control = None
    if spec.endpoint == "twin":
        # a seed per run: the twin's drawn delays differ between runs but replay the same for a run id
        seed = int(hashlib.sha1(run.run_dir.name.encode()).hexdigest(), 16) % 100000
        # an unmodified app dials the real names on 443: the twin answers there, with a
        # certificate naming them (lab/topology/hostnames.py)
        port = ENDPOINT_PORT if spec.client_cmd else topo.endpoint_port
        sans = tuple(a for n in endpoint_names(spec.protocol) for a in ("--san", n)) if spec.client_cmd else ()
        # the twin reads a spoken turn against the script's lines (by its words, or by position where
        # it cannot hear): the orchestrator (which knows the scenario) tells the twin the lines, never the client
        script: tuple[str, ...] = ()
        if conversations.load(str(run.conversation)).source != conversations.SOURCE_LINES:
            script = ("--set", "script=" + json.dumps(scn.script))     # a lines file is its own script
        # the twin the scenario asks for (validated with the scenario): its profile and overrides
        twin_spec = scn.twin_for(spec.protocol)
        script += ("--profile", twin_spec["profile"],
                   *(a for k, v in twin_spec["set"].items() for a in ("--set", f"{k}={json.dumps(v)}")))
        twin = Twin(topo.endpoint, cert_dir=topo.cert_dir, api_key=TWIN_KEY, log_path=run.run_dir / "twin.jsonl",
                    t0=t0, seed=seed, port=port, extra=sans + script, conversation=run.conversation,
                    protocol=spec.protocol)
        run.services.append(twin)
        # the endpoint in the form the protocol's client takes it (Gemini's https base, OpenAI's wss .../v1)
        base_url, ca, key = endpoint_url(spec.protocol, twin.base_url), topo.ca_path, TWIN_KEY
        twin_control = twin.control_url
    else:
        base_url, ca = spec.base_url, spec.ca
        if spec.endpoint_hook is not None:
            base_url, ca = spec.endpoint_hook(topo)
        # --base-url in the form the protocol's client takes it; none: the real endpoint (lab.protocols)
        base_url = endpoint_url(spec.protocol, base_url) if base_url else LIVE_BASE_URL[spec.protocol]
        key = spec.live_key
    proxy = None
    if scn.endpoint.get("via") == "proxy":
        # an app dials the API by its real names: through the proxy they must reach the twin
        names = ({n: topo.endpoint.ip for n in endpoint_names(spec.protocol)}
                 if spec.client_cmd and spec.endpoint == "twin" else None)
        proxy = Proxy(topo.endpoint, idle_timeout_s=scn.endpoint.get("idle_timeout_s"), resolve=names)
        run.services.append(proxy)
    return _Reach(base_url=base_url, ca=ca, key=key, twin_control=twin_control, proxy=proxy)


def _write_plan(run: _Run, t0: float, reach: _Reach) -> Path:
    """The agent's settings, once, into the run folder (lab/plan.py); returns the file. Its paths
    are as the client node sees them (a container mounts the run and secrets folders elsewhere)."""
    spec, topo = run.spec, run.topo
    at = topo.client.path
    twin = spec.endpoint == "twin"
    return RunPlan(
        scenario=at(run.run_dir / "scenario.yaml"), client=spec.client, run_dir=at(run.run_dir),
        script=tuple(run.scn.script), t0=t0, duration=run.duration, go_file=at(run.go_file), model=spec.model,
        protocol=spec.protocol,
        base_url=reach.base_url or None, ca=at(reach.ca) if reach.ca else None,
        keylog=at(run.keylog) if run.keylog else None,
        budget_ledger=at(spec.budget_ledger) if spec.budget_ledger else None,
        endpoint_ip=topo.endpoint.ip if twin else None, twin_control=reach.twin_control if twin else None,
        proxy=reach.proxy.url if reach.proxy else None,
        proxy_control=reach.proxy.control_url if reach.proxy else None,
        router=topo.router_part.describe() if run.scn.router_links else None,
        client_cmd=run.app_cmd if spec.client_cmd else None, client_cwd=run.app_cwd if spec.client_cmd else None,
        client_owns_files=bool(spec.client_cmd and topo.client.own_files),
    ).write(run.run_dir)


_KEY_VAR_NAMES = frozenset(v for vs in KEY_VARS.values() for v in vs)


def _start_agent(run: _Run, plan: Path, key: str, out) -> None:
    """Start the agent now, while the services start (its imports are most of a run's start-up); it
    waits for the go file and opens nothing before the twin and capture are ready."""
    # the key goes in $LAB_API_KEY alone: no protocol's key variable of the lab's own environment
    # (a real key, in a twin run too) reaches the agent, which passes its key to the SDK explicitly
    env = {**{k: v for k, v in os.environ.items() if k not in _KEY_VAR_NAMES}, KEY_ENV: key, "PYTHONUNBUFFERED": "1"}
    run.agent = run.topo.client.popen([_python(), "-m", "lab", "agent", str(plan)], role="agent", env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run.relay = _relay(run.agent, "  ", out)


def _start_services(run: _Run, t0: float) -> None:
    """The endpoint's services and the capture, all at once; then the agent's go."""
    _start_together([svc.start for svc in run.services] + [run.capture.start])
    run.phases.mark("services_ready")
    run.go_file.write_text(repr(t0) + "\n")
    _preload_report()


def _await_agent(run: _Run) -> str:
    """The agent's run, to its end (or a timeout past the scenario's duration); the run's status."""
    try:
        rc = run.agent.wait(timeout=run.duration + 120)
    except subprocess.TimeoutExpired:
        run.agent.terminate()
        rc = run.agent.wait(timeout=15)
    run.relay.join(timeout=5)
    run.phases.mark("agent")
    return "ok" if rc == 0 else f"agent exit {rc}"


def _tear_down(run: _Run, out) -> None:
    """Whatever happened: the agent stopped, the capture collected and merged, the services and the
    topology down, the secrets gone."""
    agent = run.agent
    if agent is not None and agent.poll() is None:   # a service failed: the agent never got its go
        agent.terminate()
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
    run.go_file.unlink(missing_ok=True)     # a handshake, not a result
    raw = []
    try:
        raw = run.capture.stop()
    except Exception as e:
        out(f"  capture stop failed: {e}")
    for svc in reversed(run.services):
        svc.stop()
    run.topo.down()
    _finish(run.capture, raw, run.keylog if run.spec.endpoint == "twin" else None, out)
    shutil.rmtree(run.secrets, ignore_errors=True)
    run.phases.mark("teardown")


def _judge(run: _Run, status: str) -> dict:
    """The run's verdict from its folder (lab.report), with how the run itself ended."""
    from lab.report import build_run      # here, not at the top: the report loads matplotlib
    verdict = build_run(run.run_dir, batch=run.run_dir.parent)     # a run's folder is in its batch's
    verdict["run_status"] = status
    run.phases.mark("report")
    run.phases.write(run.run_dir / PHASES_FILE)
    return verdict


GO_FILE = ".agent-go"    # written once the services are ready; the started-early agent waits for it


def _preload_report() -> None:
    """Import the timeline's drawing (matplotlib: seconds, once per process) and report.html's page
    in the background while the scenario plays, so the report after it does not wait for the import.
    Failures are left to the report, which notes a picture it could not draw."""
    def load():
        try:
            # here, not at the top: matplotlib must not load for `lab` itself (see lab/report/__init__.py)
            import lab.report.timeline  # noqa: F401
            import lab.report.run_page  # noqa: F401  (report.html's page)
        except Exception:
            pass
    threading.Thread(target=load, daemon=True).start()


def _start_together(starts) -> None:
    """Call each start (a service's, the capture's) at once in its own thread and wait for all;
    re-raise the first failure. Each waits for its own process to say it is ready, so together they
    take as long as the slowest, not the sum."""
    errors: list[BaseException] = []

    def call(start):
        try:
            start()
        except BaseException as e:  # handed to the caller below
            errors.append(e)
    threads = [threading.Thread(target=call, args=(s,), daemon=True) for s in starts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class _Phases:
    """How long each phase of a run took, on the monotonic clock, for `lab bench overhead`:
    {"topology_up": s, "services_ready": s, "agent": s, "teardown": s, "report": s} (a phase the run
    did not reach is absent)."""

    def __init__(self):
        self._last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._last, 4)
        self._last = now

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.seconds, indent=2))


def _record_conversation(name: str, run_dir: Path) -> Path:
    """The run's conversation in its folder: conversation.json (what the report reads) and the file
    itself, which the twin loads from there (a container sees the run folder, not the source tree)."""
    src = conversations.resolve(name)
    conv = conversations.load(str(src))
    copy = run_dir / ("conversation" + (src.suffix if src.suffix in (".yaml", ".yml") else ".txt"))
    shutil.copyfile(src, copy)
    (run_dir / semantics.JSON_FILE).write_text(json.dumps(conv.to_json(), indent=2))
    return copy


def _finish(capture: Capture, raw: list[Path], keylog: Path | None, out) -> None:
    """Merge the raw captures into one pcapng with comments and secrets; keep going on failure."""
    try:
        if any(p.exists() for p in raw):
            capture.finish(keylog)
    except Exception as e:
        out(f"  capture finalize failed: {type(e).__name__}: {e} (raw pcaps kept)")


def run_batch(scenarios: list[str], n: int = 1, client: str | None = None, topology: str = "netns",
              endpoint: str = "twin", out_dir: Path | None = None, duration: float | None = None,
              base_url: str | None = None, budget=None, model: str = DEFAULT_MODEL, out=print,
              keylog_live: bool = False, ca: str | None = None, endpoint_hook=None,
              client_cmd: str | None = None, jobs: int | str = 1, conversation: str | None = None,
              requirements: str | None = None, protocol: str = DEFAULT_PROTOCOL) -> Path:
    scns = preflight(scenarios, client, topology, endpoint, client_cmd, requirements, out, conversation, protocol)
    live_key = None
    if endpoint == "live":
        from lab.live.key import load_key     # here: lab.live's soak imports this module
        live_key = load_key(protocol=protocol)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    batch = Path(out_dir) if out_dir else Path.cwd() / "captures" / f"{stamp}-{scns[0].name if len(scns) == 1 else 'batch'}"
    batch.mkdir(parents=True, exist_ok=True)
    if budget is not None:
        budget.attach(batch)
    cells = batch_cells(scns, batch, n=n, client=client, topology=topology, endpoint=endpoint, duration=duration,
                        base_url=base_url, budget=budget, model=model, live_key=live_key, keylog_live=keylog_live,
                        ca=ca, endpoint_hook=endpoint_hook, client_cmd=client_cmd, conversation=conversation,
                        requirements=requirements, out=out, protocol=protocol)
    parallel.run_cells(cells, parallel.resolve_jobs(jobs, cells, out), out=out)
    from lab.report import summarize      # here: matplotlib, as above
    summarize(batch)
    out(f"== results: {batch} (summary.md, report.html; per run: report.html, events.jsonl, capture.pcapng, "
        "verdict.json, timeline.png)")
    return batch


def batch_cells(scns: list[scenario_mod.Scenario], batch: Path, n: int = 1, client: str | None = None,
                topology: str = "netns", endpoint: str = "twin", duration: float | None = None,
                base_url: str | None = None, budget=None, model: str = DEFAULT_MODEL, live_key=None,
                keylog_live: bool = False, ca: str | None = None, endpoint_hook=None,
                client_cmd: str | None = None, conversation: str | None = None,
                requirements: str | None = None, out=print, protocol: str = DEFAULT_PROTOCOL) -> list[parallel.Cell]:
    """The batch's runs as cells for lab.parallel (in order: scenario by scenario, run 1..n), each
    into its own folder under `batch`; the scenarios are preflight's."""
    cells = []
    for scn in scns:
        cl = client or scn.client
        # a framework client is an app run like --client-cmd, in its own venv (lab/clients/frameworks);
        # it is judged (params, expect) by its plain name, whatever release runs
        build = None if client_cmd else (resolve_framework(cl) if topology == "compose"
                                          else framework_build(cl, requirements, out))
        label = build.label if build else cl
        if build is not None:
            cl = build.name
        # in Compose the framework runs from the client image's copy (lab/topology/framework_image.py)
        where = IMAGE_REPO if topology == "compose" else REPO
        cmd = client_cmd or (build.command(where, scn.params_for(cl)) if build else None)
        for i in range(1, n + 1):
            run_dir = batch / f"{scn.name}-{'cmd' if client_cmd else label}-{i:02d}"
            # an app stands in for a client only when named with --client; else its user's outcomes judge it
            who = (f"command, judged as {cl}" if client else "command") if client_cmd else label
            spec = RunSpec(scn, cl, topology, endpoint, run_dir, duration, base_url, model, live_key, keylog_live,
                           ca=ca, endpoint_hook=endpoint_hook, client_cmd=cmd,
                           framework=build.describe() if build else None, conversation=conversation,
                           app_judged_as=bool(client_cmd and client), protocol=protocol)
            title = f"{scn.name} ({who}, {topology}, {endpoint}, {protocol}) run {i}/{n}"
            cells.append(parallel.Cell(
                f"{scn.name} x {who} {i:02d}", functools.partial(_run_cell, spec, title, budget),
                expected_s=duration or scn.duration, log=run_dir / CELL_LOG,
                start_cpu_s=parallel.APP_START_CPU_S if cmd else parallel.CELL_START_CPU_S, group=client or None,
                describe=functools.partial(_said, run_dir)))
    return cells


CELL_LOG = "lab.log"     # a cell's lines, when cells run side by side (lab/parallel.py)


def _run_cell(spec: RunSpec, title: str, budget, out=print) -> dict:
    """One run of a batch: the budget's ledger, the run, its verdict's lines."""
    run_dir = spec.run_dir
    # the run's ledger: reserved before anything starts, charged per connection by the agent
    spec.budget_ledger = budget.start_run(run_dir.name) if budget is not None else None
    out(f"== {title} -> {run_dir}")
    v = run_one(spec, out=out)
    why = _client_start_error(run_dir) if spec.client_cmd else None
    if why:    # the app never ran: a verdict would judge nothing, and every next run fails alike
        raise LabError(why)
    why = v.get("lab_stopped")
    if why:    # the lab's own configuration (the twin found it at the setup): every next run fails alike
        raise LabError(f"{run_dir.name}: {why}")
    if budget is not None:
        settled = budget.settle(run_dir, run_dir.name)   # the cross-check: every opened connection charged
        if settled.note:
            out(f"   budget: {settled.note}")
    from lab.report.advice import failures     # here: the report loads lazily, as below
    from lab.report.arguments import describe as describe_defaulted
    rows = v.get("checks", [])
    out(f"   verdict: {headline(v)}"
        + "".join(f"\n     {_mark(_held(o))} {name}: {o.get('observed')}" for name, o in (v.get("outcomes") or {}).items())
        + (f"\n   reproduction rows ({', '.join(_reproduced_for(v))}):" if rows else _no_rows(spec))
        + "".join(f"\n     {_mark(c.get('held'))} {c.get('name')}: expected "
                  f"{c.get('expected')!r}, saw {c.get('observed')!r}" + (f" ({c['note']})" if c.get("held") is None
                                                                          and c.get("note") else "")
                  for c in rows)
        + "".join(f"\n     FAIL {what}: {text}" for what, text in failures(v))
        + "".join(f"\n   note: {text}" for text in describe_defaulted(v.get("defaulted_args") or [])))
    if spec.endpoint == "live":
        from lab.live.errors import stop_reason   # here: as load_key above
        why = stop_reason(run_dir)
        if why:
            raise LabError(f"stopping the batch: {why}")
    return v


def _held(o: dict) -> bool | None:
    """A user outcome's status as a row's held: pass True, fail False, n/a None."""
    return {"pass": True, "fail": False}.get(str(o.get("status")))


def _reproduced_for(v: dict) -> list[str]:
    """What the reproduction rows stand for, in the terminal."""
    return (["the study's client: what this run is held to"] if v.get("held_to") == REPRODUCTION
            else ["what the study's client saw; shown for comparison, not what this run is held to"])


def _no_rows(spec: RunSpec) -> str:
    """For a client the scenario's `expect:` does not name: whose rows the study's figures are."""
    if not spec.scn.expect:
        return ""
    who = f"your {spec.protocol} app" if spec.client_cmd and not speaks(spec.client, spec.protocol) else spec.client
    return (f"\n   reproduction rows: none for {who}; the study's rows are {spec.scn.client}'s "
            f"(lab run {spec.scn.name} --client {spec.scn.client})")


def _mark(held: bool | None) -> str:
    """A check's mark in the terminal: held, not held, or not judged (held None: the reason follows)."""
    return "ok " if held else "n/a" if held is None else "NO "


def _said(run_dir: Path, verdict: dict) -> str:
    return f"{headline(verdict)} -> {run_dir}"


# ---- CLI -------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run scenarios and write result folders under captures/")
    p.add_argument("scenarios", nargs="*", help="scenario names or files (lab list)")
    p.add_argument("--all", action="store_true", help="every scenario in the catalogue that applies to --protocol")
    p.add_argument("-n", type=int, default=1, help="runs per scenario")
    p.add_argument("--client", default=None,
                   help=f"probe, recovery, naive, a framework ({', '.join(FRAMEWORKS)}; NAME@RELEASE[+BUILD] for "
                        "another release, e.g. livekit@1.8.0+pr003), your agent in a framework "
                        "(adk:MODULE[:ATTR], livekit:MODULE:CLASS, pipecat:MODULE[:FUNC]; docs/agents.md), "
                        "or module:Class")
    p.add_argument("--requirements", default=None, metavar="FILE",
                   help="your agent's own requirements, installed into a copy of its framework's venv")
    p.add_argument("--client-cmd", default=None, metavar="CMD",
                   help="run your own unmodified app as the client (stdin: the user's lines; "
                        "$LAB_BACKEND_URL: the backend); judged by its user's outcomes, or as the client "
                        "--client names (held to the study's rows when that is the scenario's own)")
    p.add_argument("--topology", default=AUTO, choices=[AUTO, *sorted(TOPOLOGIES)],
                   help="auto (default): netns where network namespaces can be made, else compose")
    p.add_argument("--endpoint", default="twin", choices=["twin", "live"])
    add_protocol_argument(p)
    p.add_argument("--base-url", default=None, help="live mode: point at any endpoint (the twin, in tests)")
    p.add_argument("--ca", default=None, help="live mode: CA file the client trusts (default: the system's)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--duration", type=float, default=None, help="override the scenario's duration (s)")
    p.add_argument("--out", default=None, help="batch folder (default captures/<time>-<scenario>)")
    p.add_argument("--budget", type=int, default=None, help="live mode: most sessions this batch may open")
    p.add_argument("--keylog-live", action="store_true", help="live mode: write TLS secrets (kept out of results)")
    p.add_argument("--conversation", default=None, metavar="FILE",
                   help="what the twin's model plays, for every scenario: a conversation name or .yaml, or a "
                        "text file of the user's lines (docs/conversations.md)")
    p.add_argument("-j", "--jobs", type=parallel.parse_jobs, default=1, metavar="N",
                   help="runs side by side (each in its own namespaces or Compose project; the live budget is "
                        "shared); auto: from the cores, the load and the memory")
    p.add_argument("--junit-xml", default=None, metavar="FILE", help="also write the verdicts as JUnit XML (for a CI)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("list", help="list the scenario catalogue")
    p.set_defaults(func=_cmd_list)


def _cmd_run(args) -> int:
    # --all: every scenario of the catalogue that applies to the run's protocol
    names = scenario_mod.names_for(args.protocol) if args.all else args.scenarios
    if not names:
        raise LabError("name at least one scenario (lab list), or --all")
    if args.n < 1:
        raise LabError("-n must be at least 1")
    budget = None
    if args.endpoint == "live":
        from lab.live.budget import Budget    # here: lab.live's soak imports this module
        budget = Budget.for_batch(args.budget)
    topology = choose_topology(args.topology)
    batch = run_batch(names, n=args.n, client=args.client, topology=topology, endpoint=args.endpoint,
                      out_dir=Path(args.out) if args.out else None, duration=args.duration,
                      base_url=args.base_url, budget=budget, model=args.model, keylog_live=args.keylog_live,
                      ca=args.ca, client_cmd=args.client_cmd, jobs=args.jobs, conversation=args.conversation,
                      requirements=args.requirements, protocol=args.protocol)
    from lab.report.junit import publish      # here: the report loads matplotlib, as above
    publish(batch, args.junit_xml)
    # exit 1 when a run errored or did not do what it is held to (its user's outcomes; the study's own
    # client: reproducing the study): `lab run` is a check a CI can gate on
    return 0 if batch_passed(batch) else 1


def batch_passed(batch: Path) -> bool:
    """Every run of the batch folder has a verdict and each met what it is held to (what `lab run` exits 0 on)."""
    verdicts = [json.loads(p.read_text()) for p in batch.glob("*/verdict.json")]
    return bool(verdicts) and all(verdict_met(v) for v in verdicts)


def _cmd_list(args) -> int:
    for n in scenario_mod.names():
        s = scenario_mod.load(n)
        print(f"{n:26s} {s.title}  [{s.client}, {s.duration:g}s, {'/'.join(s.protocols)}]")
    return 0
