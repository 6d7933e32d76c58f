"""The Compose topology: the lab in Docker containers on one internal network (compose.yaml).

The containers are the two nodes, `endpoint` (the network side's image), where the twin and the
freeze proxy run, and `client` (NET_ADMIN), where the agent and its faults run, and the client's
capture sidecar `capture`, in the client's network namespace, where its tcpdumps run (the client
node's `capture_node`), so a client container that dies does not take its capture with it. All idle
(`sleep infinity`) until the run starts its services in them with `docker compose exec`, the same
service objects and command lines as in the netns topology (lab/topology/services.py): the
containers carry no service command of their own, so nothing can drift between the topologies. With `links=[...]` a third container, `router`, sits between them
(compose.router.yaml, layered on compose.yaml; `topo.router`): client and endpoint share no network
and reach each other only by its forwarding. `topo.router_part` is the same Router as in netns
(lab/topology/router.py) on Docker's addresses: up() names each container's access-link devices
after their links (wifi, cell, as in netns), brings the client to the start state (`Router.settle`,
in the client container) and starts the router service in the router container, which holds the
router's FaultTable for the agent (lab/topology/router_service.py); the switch is played by the
agent on its own container's addresses. Lifecycle goes through the compose v2 CLI
(`docker compose -p <project> ...`); container inspection through the Docker SDK.
`up()` first runs scripts/docker-setup.sh when something is missing (dockerd, compose v2, and on the
offline image path the base image and the wheelhouse, or a project wheel older than its sources), so a
fresh machine works. The image path (LAB_IMAGE_BASE: public or offline, for Dockerfile.client and Dockerfile.proxy) comes from
the environment or the .env docker-setup.sh writes.

No host root: everything here needs only the Docker socket (a user in the `docker` group, Docker
Desktop). The faults run as root inside the client container (NET_ADMIN), so the files it writes into
the run folder belong to root; `down()` hands the run folder back to the calling user (chown inside
the container) so a non-root user can read, finalize and delete it. The kernel's fault features are
probed inside the client image too (`kernel_caps`): the faults run there, not on the host (on Docker
Desktop the host is not even Linux).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

from lab.topology import framework_image
from lab.errors import CapabilityError, LabError
from lab.topology.base import Node, Topology, require_tools
from lab.topology.router import LINKS, Assigned, Place, Router, parse_links
from lab.topology.services import RouterService
from netem import cleanup
from netem.kernel import Capabilities

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "compose.yaml"
ROUTER_FILE = REPO / "compose.router.yaml"   # the router overlay, for ComposeTopology(links=...)
SETUP_SCRIPT = REPO / "scripts" / "docker-setup.sh"
WHEELS = REPO / "docker" / "wheels"
BASE_IMAGE = os.environ.get("LIVELAB_BASE_IMAGE", "lab-base:bookworm")   # the offline path's base
PUBLIC_BASE_IMAGE = "python:3.11-slim-bookworm"                          # the images' default (Dockerfile.client, Dockerfile.proxy)
DOT_ENV = REPO / ".env"             # compose reads it; docker-setup.sh writes the image path into it
COMPOSE_VERSION = "v2.40.3"         # what docker-setup.sh installs; any compose v2 runs the lab
IMAGE_VARS = ("LAB_IMAGE_TAG", "LAB_IMAGE_BASE", "LAB_BASE_IMAGE", "LAB_FRAMEWORK")   # compose.yaml's image and build inputs
_BUILT_IN_PROCESS: set[tuple[str, ...]] = set()   # image keys (ComposeTopology._image_key) built by this process
NODES = ("endpoint", "client")          # the lab's two nodes; their services are started on them with popen
LAB_SERVICES = (*NODES, "capture")      # and the client's capture sidecar, in the client's network namespace
# runs side by side in one process (`lab matrix -j N`): the first to need an image set builds it and
# the others wait for it, then find it built, rather than N builds of the same tags at once
_BUILDING = threading.Lock()
UPLINK_MISSING = ("the compose topology has no way out (its network is internal): live mode runs in "
                  "--topology netns")
PROJECT_PREFIX = "livelab"
OWNER_LABEL = "livelab.owner"   # every container's: the orchestrator's owner token (netem.cleanup)


def _project_name(run_id: str, run_dir: Path | None = None) -> str:
    """livelab-<run id>[-<hash of the run folder>]: the same scenario run from two batches at once
    (two engineers, two worktrees) must not share a project, or one's up() takes the other's down."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", run_id.lower()).strip("-_")[:40] or "run"
    where = f"-{hashlib.sha1(str(run_dir).encode()).hexdigest()[:8]}" if run_dir is not None else ""
    return f"{PROJECT_PREFIX}-{slug}{where}"


def _run(argv: list[str], timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def compose_setting(name: str, env: dict[str, str] | None = None, dot_env: Path | None = None) -> str | None:
    """A variable as compose resolves it: from the environment, else from .env, else None."""
    env = os.environ if env is None else env
    if name in env:
        return env[name]
    dot_env = DOT_ENV if dot_env is None else dot_env
    if dot_env.exists():
        for line in dot_env.read_text().splitlines():
            if line.startswith(name + "="):
                return line.split("=", 1)[1].strip().strip("'\"")
    return None


def image_path(env: dict[str, str] | None = None, dot_env: Path | None = None) -> str:
    """`public` or `offline`: LAB_IMAGE_BASE from the environment, else from .env, else public
    (compose.yaml's own default)."""
    value = compose_setting("LAB_IMAGE_BASE", env, dot_env) or "public"
    if value not in ("public", "offline"):
        raise CapabilityError(f"LAB_IMAGE_BASE must be public or offline, not {value!r}")
    return value


def base_image() -> str:
    """The image the build starts from: LAB_BASE_IMAGE, else the image path's own base."""
    return compose_setting("LAB_BASE_IMAGE") or (BASE_IMAGE if image_path() == "offline" else PUBLIC_BASE_IMAGE)


def docker_missing() -> str | None:
    """Why Docker cannot be used by this user (one line), or None when `docker info` answers."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    try:
        r = _run(["docker", "info"], timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "`docker info` did not answer within 20 s"
    if r.returncode == 0:
        return None
    # docker info may print more after its error (warnings, "errors pretty printing info")
    if "permission denied" in r.stderr.lower():
        return f"no permission on the Docker socket (add {os.environ.get('USER', 'this user')} to the docker group)"
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()] or ["no output"]
    return f"no Docker daemon answers ({next((ln for ln in lines if 'connect' in ln.lower()), lines[-1])})"


def docker_ready() -> bool:
    return docker_missing() is None


def _compose_ok() -> bool:
    try:
        r = _run(["docker", "compose", "version"], timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and re.search(r"\bv?2\.\d+", r.stdout) is not None


def _image_present(image: str) -> bool:
    return _run(["docker", "image", "inspect", image], timeout=20).returncode == 0


def _images_ready() -> bool:
    """What the image path needs before a build: offline the base and a fresh wheelhouse; public
    its base image, or nothing when this is not root (the build pulls it; docker-setup.sh, which
    would probe the registry first, needs root)."""
    if image_path() == "offline":
        return _image_present(base_image()) and _wheels_fresh()
    return os.geteuid() != 0 or _image_present(base_image())


def _wheels_fresh() -> bool:
    """The wheelhouse exists and the project's wheel is newer than every source file."""
    whl = sorted((WHEELS / "project").glob("*.whl"))
    if not whl or not any((WHEELS / "deps").glob("*.whl")):
        return False
    built = whl[-1].stat().st_mtime
    srcs = [REPO / "pyproject.toml", REPO / "docker" / "requirements.txt"]
    for top in ("lab", "netem"):
        srcs += [p for p in (REPO / top).rglob("*") if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts]
    return all(p.stat().st_mtime <= built for p in srcs if p.exists())


def ensure_docker(setup: bool = True, log=print) -> None:
    """Make sure dockerd, compose v2, the base image and a fresh wheelhouse are there.

    Runs scripts/docker-setup.sh when something is missing (it needs root); raises CapabilityError
    with one line when it cannot.
    """
    missing = docker_missing()
    if missing is None and _compose_ok() and _images_ready():
        return
    if os.geteuid() != 0:
        # the setup script needs root (apt, dockerd, mmdebstrap): say what is missing instead
        if missing:
            raise CapabilityError(f"compose topology: {missing}; the netns topology needs root instead")
        if not _compose_ok():
            raise CapabilityError("compose topology: no `docker compose` v2 plugin (install it, or run "
                                  "scripts/docker-setup.sh as root)")
        raise CapabilityError("compose topology: the offline image path lacks its base image or a fresh "
                              "wheelhouse (run scripts/docker-setup.sh as root, or LAB_IMAGE_BASE=public)")
    if not setup:
        raise CapabilityError("compose topology: Docker is not ready (run scripts/docker-setup.sh as root)")
    if not SETUP_SCRIPT.exists():
        raise CapabilityError(f"compose topology: {SETUP_SCRIPT} is missing; run from a livelab checkout")
    t0 = time.monotonic()
    r = _run(["bash", str(SETUP_SCRIPT)], timeout=900, cwd=REPO)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["no output"])[-1]
        raise CapabilityError(f"compose topology: docker setup failed: {last}")
    if log:
        log(f"compose: docker-setup.sh done in {time.monotonic() - t0:.1f} s")
    if not docker_ready():
        raise CapabilityError("compose topology: cannot start dockerd (see /var/log/livelab-dockerd.log)")


def _docker_client():
    try:
        import docker  # the Docker SDK (docker>=7)
        return docker.from_env(timeout=30)
    except Exception:
        return None


class ContainerProcess(subprocess.Popen):
    """`docker compose exec -T SERVICE ...` whose signals reach the process inside the container.

    docker exec forwards no signals without a TTY, so the command is wrapped to write its pid into
    `pidfile` (inside the container) before it execs, and `send_signal` runs `kill` there. If that
    fails (the process has not written its pid yet, or the container is gone) the local exec client
    gets the signal instead.
    """

    def __init__(self, argv: list[str], *, node: "ComposeNode", pidfile: str, **popen_kw):
        self.node, self.pidfile = node, pidfile
        super().__init__(argv, **popen_kw)

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        script = f'kill -{int(sig)} "$(cat {self.pidfile})"'
        try:
            r = _run([*self.node.topo.exec_prefix(self.node.service), "sh", "-c", script], timeout=30,
                     env=self.node.topo._env(), cwd=REPO)
            if r.returncode == 0:
                return
        except (OSError, subprocess.TimeoutExpired):
            pass
        super().send_signal(sig)


class ComposeNode(Node):
    """A container of the Compose lab: `popen` is `docker compose exec -T <service>`, with the host's
    paths (the run folder, the secrets folder) and the host's Python translated to the container's."""

    own_files = True    # its /etc is the run's own (a --client-cmd app's names go into its /etc/hosts)

    # the wrapper that lets ContainerProcess signal the command: $0 is the pidfile, "$@" the argv
    WRAP = 'echo $$ > "$0" && exec "$@"'

    def __init__(self, topo: "ComposeTopology", name: str, service: str):
        super().__init__(name)
        self.topo, self.service = topo, service
        self._n = 0

    @property
    def host(self) -> str:
        return self.service                 # Docker's DNS on the lab network

    @property
    def ip(self) -> str:
        # behind a router the client is reached on wifi (the first access link), the router on core
        home = {"client": "wifi", "router": "core"}.get(self.service) if self.topo.links else None
        return self.address(home)[0]

    def address(self, network: str | None = None) -> tuple[str, int]:
        """(address, prefix length) on the project's `network` (None: the container's first one)."""
        c = self.topo.containers().get(self.service)
        nets = (c.attrs.get("NetworkSettings", {}).get("Networks", {}) if c is not None else {}) or {}
        for name, net in nets.items():
            if net.get("IPAddress") and (network is None or name == f"{self.topo.project}_{network}"):
                return net["IPAddress"], int(net.get("IPPrefixLen") or 32)
        on = f" on {network}" if network else ""
        raise LabError(f"compose topology: the {self.service} of {self.topo.project} has no address{on} (is the lab up?)")

    @property
    def dev(self) -> str:
        return "eth0"

    @property
    def capture_node(self) -> "ComposeNode":
        # the client's tcpdumps run in the sidecar sharing its namespace: a client container that
        # dies leaves the capture running, to be stopped and flushed like any other
        return self.topo.capture if self.service == "client" else self

    def exec_argv(self, argv: list[str], role: str = "proc", env: dict[str, str] | None = None) -> tuple[list[str], str]:
        """(the host command line that runs `argv` in this container, the pidfile it writes there).

        `env` sets variables inside the container; when it is a full environment (os.environ plus
        additions), only the variables that differ from this process's environment are passed."""
        extra: list[str] = []
        for k, v in (env or {}).items():
            if os.environ.get(k) != v:
                extra += ["-e", f"{k}={self.topo.container_path(v)}"]
        self._n += 1
        pidfile = f"/tmp/livelab-{re.sub(r'[^A-Za-z0-9_.-]', '_', role)}-{os.getpid()}-{self._n}.pid"
        return [*self.topo.exec_prefix(self.service, *extra), "sh", "-c", self.WRAP, pidfile,
                *self.topo.container_argv(argv)], pidfile

    def path(self, host_path: str | Path) -> str:
        return self.topo.container_path(str(host_path))

    def popen(self, argv: list[str], role: str = "proc", env: dict[str, str] | None = None,
              **popen_kw) -> subprocess.Popen:
        host_argv, pidfile = self.exec_argv(argv, role, env)
        popen_kw.setdefault("cwd", REPO)
        popen_kw["env"] = self.topo._env()
        return ContainerProcess(host_argv, node=self, pidfile=pidfile, **popen_kw)


class ComposeTopology(Topology):
    """`ComposeTopology(run_id, run_dir=None, secrets_dir=None, ...)`; see the module docstring.

    The run folder on the host is `captures_dir/run_id` (default ./captures/<run_id>), mounted in the
    containers at /captures/<run_id>. `extra_files` are more compose files layered on compose.yaml
    (e.g. a test's override); `env` adds variables for interpolation.
    """

    name = "compose"

    def __init__(self, run_id: str, project: str | None = None, captures_dir: Path | str | None = None,
                 run_dir: Path | str | None = None, extra_files: list[Path | str] | None = None,
                 env: dict[str, str] | None = None, setup: bool = True, wait_timeout: int = 120, log=print,
                 secrets_dir: Path | str | None = None, uplink: bool = False, links=None):
        if uplink:
            raise CapabilityError(UPLINK_MISSING)
        # links: a router container between the nodes (compose.router.yaml)
        self.links = parse_links(links) if links else ()
        self.run_id = run_id
        if run_dir is not None:
            run_dir = Path(run_dir).resolve()
            captures_dir = run_dir.parent
            self.run_id = run_dir.name
        self.captures_dir = Path(captures_dir or REPO / "captures").resolve()
        self.project = project or _project_name(self.run_id, run_dir)
        self.files = [COMPOSE_FILE, *([ROUTER_FILE] if self.links else []),
                      *(Path(f).resolve() for f in (extra_files or []))]
        self.secrets_dir = Path(secrets_dir).resolve() if secrets_dir else None
        self.extra_env = dict(env or {})
        if self.secrets_dir:
            self.extra_env["SECRETS_DIR"] = str(self.secrets_dir)
        self.setup = setup
        self.wait_timeout = wait_timeout
        self._log = log
        self.timings: dict[str, float] = {}
        self._ids: dict[str, str] = {}      # service -> container id, while the lab is up
        self.client = ComposeNode(self, "client", "client")
        self.endpoint = ComposeNode(self, "endpoint", "endpoint")
        self.capture = ComposeNode(self, "capture", "capture")     # in the client's network namespace
        self.router = ComposeNode(self, "router", "router") if self.links else None
        # its addresses and the router service's are Docker's: known once up() has the containers
        self.router_part = Router(Place(self.run_id, None, None, None), self.links) if self.links else None
        self._router_service: RouterService | None = None

    @classmethod
    def preflight(cls, client_tools: frozenset[str] = frozenset(), uplink: bool = False,
                  framework: str | None = None) -> None:
        """Docker ready (set up if it can be), and the client image holds `client_tools`: the image is
        built here (the run's `up --build` then finds it cached) and asked, before any run starts.
        `framework`: the image with that framework's venv (lab/topology/framework_image.py)."""
        if uplink:
            raise CapabilityError(UPLINK_MISSING)
        ensure_docker()
        if framework and image_path() == "offline":
            framework_image.wheelhouse(framework)
        if framework:
            cls.client_image(framework)     # the framework's layer, built once and cached
        if not client_tools:
            return
        image = cls.client_image(framework) if framework else cls.client_image()
        script = 'for t; do command -v "$t" >/dev/null || echo "$t"; done'
        r = _run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", script, "sh",
                  *sorted(client_tools)], timeout=120)
        if r.returncode != 0:
            raise CapabilityError(f"compose topology: cannot run the client image {image}: "
                                  f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}")
        have = set(client_tools) - set(r.stdout.split())
        require_tools(f"the client image {image}", client_tools, lambda t: t in have,
                      "install {} in Dockerfile.client")

    @classmethod
    def client_image(cls, framework: str | None = None) -> str:
        """Build the client image (the run's `up --build` then finds it cached); return its name."""
        probe = cls("preflight", log=None, setup=False,
                    env=framework_image.environment(framework) if framework else None)
        probe.compose("build", "client", timeout=1800 if framework else 900)
        return json.loads(probe.compose("config", "--format", "json").stdout)["services"]["client"]["image"]

    @classmethod
    def run_in_client_image(cls, argv: list[str], framework: str | None = None, app_dir: Path | None = None,
                            timeout: float = 120) -> subprocess.CompletedProcess:
        """`argv` in a throw-away client container with no network, the user's folder (read-only) at
        APP_DIR as its working folder: a check that must see what a run's client will see."""
        image = cls.client_image(framework)
        mount = ["-v", f"{Path(app_dir).resolve()}:{APP_DIR}:ro", "-w", APP_DIR] if app_dir else []
        return _run(["docker", "run", "--rm", "--network", "none", *mount, "--entrypoint", argv[0], image,
                     *argv[1:]], timeout=timeout)

    @classmethod
    def kernel_caps(cls, framework: str | None = None) -> Capabilities:
        """The fault features as the client container has them: `lab netem probe` in the client
        image with compose.yaml's NET_ADMIN, on a network of its own."""
        ensure_docker()
        image = cls.client_image(framework) if framework else cls.client_image()
        r = _run(["docker", "run", "--rm", "--network", "none", "--cap-add", "NET_ADMIN", image,
                  "lab", "netem", "probe", "--json"], timeout=120)
        try:
            found = json.loads(r.stdout)
        except json.JSONDecodeError:
            raise CapabilityError(f"compose topology: cannot probe the kernel in {image}: "
                                  f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}") from None
        caps = Capabilities(**{k: v for k, v in found.items() if k in Capabilities.__dataclass_fields__})
        if not caps.net_admin:
            raise CapabilityError(f"compose topology: the client container ({image}) got no CAP_NET_ADMIN, which "
                                  "the faults need (this Docker refuses --cap-add NET_ADMIN); on a Linux host "
                                  "with root, --topology netns works")
        return caps

    # -- plumbing
    def _env(self, run_dir: Path | None = None) -> dict[str, str]:
        run_dir = run_dir or self.run_dir
        env = dict(os.environ)
        env.update({"RUN_ID": run_dir.name, "CAPTURES_DIR": str(run_dir.parent),
                    "COMPOSE_BAKE": env.get("COMPOSE_BAKE", "false"),
                    # the containers' owner label: `lab down` leaves the project alone while we live
                    "LIVELAB_OWNER": cleanup.owner_token()})
        # the image path this module checked is the one compose builds (LAB_IMAGE_BASE=offline in the
        # environment alone, as CI sets it, must not build on the public base image)
        env.setdefault("LAB_IMAGE_BASE", image_path())
        env.setdefault("LAB_BASE_IMAGE", base_image())
        env.setdefault("LAB_FRAMEWORK", "")     # set, so compose does not warn of it
        env.update(self.extra_env)
        return env

    def compose_argv(self, *args: str) -> list[str]:
        argv = ["docker", "compose", "-p", self.project]
        for f in self.files:
            argv += ["-f", str(f)]
        return [*argv, *args]

    def compose(self, *args: str, timeout: float | None = 300, check: bool = True,
                run_dir: Path | None = None) -> subprocess.CompletedProcess:
        r = _run(self.compose_argv(*args), timeout=timeout, env=self._env(run_dir), cwd=REPO)
        if check and r.returncode != 0:
            last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()] or ["no output"]
            raise LabError(f"compose: `docker compose {' '.join(args[:3])}` failed: {last[-1].strip()}")
        return r

    @property
    def run_dir(self) -> Path:
        return self.captures_dir / self.run_id

    # -- Topology
    def up(self) -> None:
        t0 = time.monotonic()
        ensure_docker(self.setup, log=self._log)
        self.timings["setup_s"] = time.monotonic() - t0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.containers():
            self.down()                     # leftovers of an earlier run under the same project
        t1 = time.monotonic()
        # `--build` costs seconds even when every layer is cached (the build context is sent and
        # checked); the images one process built are current for its later runs (assumption: the
        # source tree does not change under a batch), so each image set is built once per process
        images = self._image_key()
        with _BUILDING if images not in _BUILT_IN_PROCESS else nullcontext():
            build = () if images in _BUILT_IN_PROCESS else ("--build",)
            r = self.compose("up", "-d", *build, "--wait", "--wait-timeout", str(self.wait_timeout),
                             *LAB_SERVICES, *(["router"] if self.router else []), timeout=self.wait_timeout + 300,
                             check=False)
            if r.returncode == 0 and build:
                _BUILT_IN_PROCESS.add(images)
        self.timings["up_s"] = time.monotonic() - t1
        if r.returncode != 0:
            detail = self._failure_detail(r)
            self.down()
            raise LabError(f"compose topology: up failed: {detail}")
        # from here on every exec goes in by container id (exec_prefix), the router's set-up included
        self._ids = {svc: c.id for svc, c in self.containers().items()}
        if self.router:
            try:
                self._bridge_rules("-I")
                self._route_through_router()
                self._router_up()
            except Exception:
                self.down()
                raise

    def exec_prefix(self, service: str, *opts: str) -> list[str]:
        """The host command line that runs a command in `service`'s container: `docker exec -i` by
        the container's id while the lab is up (0.2-0.4 s a call here), else `docker compose exec -T`
        (0.6 s: the compose CLI loads the project's files on every call). Both attach stdin and no
        TTY, and run as the service's user in its working directory."""
        cid = self._ids.get(service)
        if cid:
            return ["docker", "exec", "-i", *opts, cid]
        return self.compose_argv("exec", "-T", *opts, service)

    def _exec_checked(self, service: str, argv: list[str], what: str) -> None:
        """Run `argv` in `service`'s container (no stdin); a failure is one LabError line naming `what`."""
        p = _run([*self.exec_prefix(service), *argv], timeout=30, env=self._env(), cwd=REPO,
                 stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise LabError(f"compose topology: {what} failed: "
                           f"{(p.stderr.strip().splitlines() or ['rc=%d' % p.returncode])[-1]}")

    def _bridge_rules(self, verb: str) -> None:
        """Let each router network's bridge carry packets for other subnets (`-I`; `-D` takes it back).

        Docker drops, on an internal network's bridge, every packet whose source or destination is
        outside the network's subnet (DOCKER-ISOLATION-STAGE-1; the host's br_netfilter shows bridged
        packets to iptables), and a routed packet between client and endpoint is exactly that. The
        documented place for a user's exception is the host's DOCKER-USER chain; each rule is for one
        of this project's bridges, in and out by the same bridge, so nothing leaves the lab by it."""
        if os.geteuid() != 0:
            raise CapabilityError("compose topology: a router lab needs root (a DOCKER-USER rule per bridge)")
        client = _docker_client()
        for net in ("wifi", "cell", "core"):
            try:
                bridge = "br-" + client.networks.get(f"{self.project}_{net}").id[:12]
            except Exception:
                if verb == "-D":
                    continue                # down() after a failed up: the network may not exist
                raise LabError(f"compose topology: no network {self.project}_{net} (is the lab up?)")
            rule = ["DOCKER-USER", "-i", bridge, "-o", bridge, "-m", "comment", "--comment",
                    f"livelab {self.project} router", "-j", "ACCEPT"]
            while True:                    # -D: every copy (an up retried); -I: once
                r = _run(["iptables", "-w", verb, *rule], timeout=30)
                if verb == "-I" or r.returncode != 0:
                    break
            if verb == "-I" and r.returncode != 0:
                raise LabError(f"compose topology: iptables {verb} {' '.join(rule[:5])} failed: {r.stderr.strip()}")

    def _route_through_router(self) -> None:
        """The endpoint's routes back to the access networks by the router: Docker picks the subnets,
        so they are read from the containers once they are up (the client's way there is the
        Router's, set by _router_up)."""
        r = self.router
        routes = [("endpoint", _subnet(r, net), r.address("core")[0]) for net in LINKS]
        for service, dst, via in routes:
            self._exec_checked(service, ["ip", "route", "replace", dst, "via", via], f"route {dst} via {via} in {service}")

    def _router_up(self) -> None:
        """The router part on Docker's addresses: devices named after their links in client and
        router (what the Router and the capture name), the client at its start state, and the
        router service listening on the router's ctl address."""
        r, part = self.router, self.router_part
        part.assigned = Assigned(routed=_subnet(r, "core"), client={n: self.client.address(n) for n in LINKS},
                                 router={n: r.address(n)[0] for n in LINKS})
        for node in (self.client, r):
            pairs = [f"{node.address(n)[0]}={n}" for n in LINKS]
            self._exec_checked(node.service, ["sh", "-c", RENAME_SCRIPT, "rename", *pairs],
                               f"naming the {node.service}'s link devices")
        # Docker's DNS names only the containers of a network the client is on, and the endpoint is
        # on none of them: its name goes into the client's own /etc/hosts (what the twin's URL and
        # certificate name)
        ep = self.endpoint.ip
        self._exec_checked("client", ["sh", "-c", f'echo "{ep} {self.endpoint.host}" >> /etc/hosts'],
                           f"naming the endpoint ({ep}) in the client")
        settle = self.client.popen([sys.executable, "-m", "lab.topology.router", "settle",
                                    json.dumps(part.describe())], role="router-settle",
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _out, err = settle.communicate(timeout=60)
        if settle.returncode != 0:
            raise LabError(f"compose topology: the client's start state on {part.links[0].name} failed: "
                           f"{(err.strip().splitlines() or ['rc=%d' % settle.returncode])[-1]}")
        # the links' RTT and loss go into the router service's table before it answers the agent
        link_faults = tuple(spec for link in part.links for spec in part.link_faults(link))
        self._router_service = RouterService(r, r.address("ctl")[0], self.run_id, link_faults).start()
        part.control = self._router_service.address

    def _image_key(self) -> tuple[str, ...]:
        """What decides the images `up --build` makes: the compose files and the variables they read."""
        env = self._env()
        return (*map(str, self.files), *(env.get(k, "") for k in IMAGE_VARS))

    def _failure_detail(self, r: subprocess.CompletedProcess) -> str:
        lines = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        detail = lines[-1] if lines else f"exit {r.returncode}"
        for svc, health in self.health().items():
            if health not in ("healthy", "running"):
                logs = self.compose("logs", "--no-log-prefix", "--tail", "3", svc, check=False).stdout.strip()
                tail = logs.splitlines()[-1] if logs else "no log"
                detail += f"; {svc} is {health}: {tail}"
        return detail

    def give_back_run_dir(self) -> None:
        """chown the run folder (and the secrets folder) to the calling user, inside the client
        container: what root wrote there stays readable and removable without host root."""
        if os.geteuid() == 0 or "client" not in self.health():
            return
        paths = ["/captures/" + self.run_id] + (["/secrets"] if self.secrets_dir else [])
        try:
            self.compose("exec", "-T", "client", "chown", "-R", f"{os.getuid()}:{os.getgid()}", *paths,
                         timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired, LabError):
            pass

    def down(self) -> None:
        if shutil.which("docker") is None:
            return
        self.give_back_run_dir()
        if self._router_service is not None:
            self._router_service.stop()     # it heals its table on SIGTERM, before the containers go
            self._router_service = None
        self._ids = {}                      # the containers go: no exec by their ids any more
        if self.router and os.geteuid() == 0:
            try:
                self._bridge_rules("-D")    # before the networks go: their bridge names come from them
            except (OSError, subprocess.TimeoutExpired, LabError):
                pass
        try:
            self.compose("down", "-v", "--remove-orphans", "-t", "2", timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired, LabError):
            pass

    @property
    def cert_dir(self) -> Path:
        return Path("/certs")               # a volume: read-write in endpoint, read-only in client

    @property
    def ca_path(self) -> Path:
        return self.cert_dir / "ca.pem"

    @property
    def endpoint_ip(self) -> str:
        """The endpoint container's address on the lab network (for fault rules that match -d EP)."""
        return self.endpoint.ip

    def container_path(self, arg: str) -> str:
        """A host path under the run's captures dir or the secrets dir -> its path in the containers."""
        for host, inside in ((self.captures_dir, "/captures"), (self.secrets_dir, "/secrets")):
            if host is not None and (arg == str(host) or arg.startswith(str(host) + "/")):
                return inside + arg[len(str(host)):]
        return arg

    def container_argv(self, argv: list[str]) -> list[str]:
        """Translate a host command line: the host's Python becomes the image's, host paths container paths."""
        argv = [self.container_path(a) for a in argv]
        return [image_python(argv[0]), *argv[1:]] if argv else argv

    # -- inspection (Docker SDK, with the CLI as a fallback)
    def containers(self) -> dict[str, object]:
        """service -> SDK container object of this project (running or not)."""
        client = _docker_client()
        if client is None:
            return {}
        try:
            found = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={self.project}"})
        except Exception:
            return {}
        return {c.labels.get("com.docker.compose.service", c.name): c for c in found}

    def health(self) -> dict[str, str]:
        """service -> `healthy` | `unhealthy` | `starting` | `running` (no healthcheck) | `exited` ..."""
        out = {}
        for svc, c in self.containers().items():
            state = c.attrs.get("State", {})
            out[svc] = (state.get("Health") or {}).get("Status") or state.get("Status", "?")
        return out

    def container_id(self, service: str = "client") -> str:
        c = self.containers().get(service)
        if c is not None:
            return c.id
        r = self.compose("ps", "-q", service, check=False)
        cid = r.stdout.strip().splitlines()
        if not cid:
            raise LabError(f"compose topology: no {service} container in project {self.project}")
        return cid[0]

    def exec_latency_samples(self, n: int = 10) -> dict[str, list[float]]:
        """Seconds per `docker compose exec -T client true` and per `docker exec <client> iptables -S`."""
        cid = self.container_id("client")
        compose_argv = self.compose_argv("exec", "-T", "client", "true")
        env = self._env()
        out: dict[str, list[float]] = {"compose_exec_true": [], "docker_exec_iptables": []}
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run(compose_argv, env=env, cwd=REPO, capture_output=True, check=True)
            out["compose_exec_true"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run(["docker", "exec", cid, "iptables", "-S"], capture_output=True, check=True)
            out["docker_exec_iptables"].append(time.perf_counter() - t0)
        return out


def image_python(program: str) -> str:
    """A command's program as the image runs it: the host's Python (a path to python*, e.g. a
    venv's) is the image's `python`; anything else stays as it is."""
    return "python" if "/" in program and Path(program).name.startswith("python") else program


def _subnet(node: ComposeNode, network: str) -> str:
    return str(ipaddress.ip_interface("%s/%d" % node.address(network)).network)


# Runs in a container: each `ADDRESS=NAME` argument renames the device holding ADDRESS to NAME (two
# passes, so names Docker gave in another order can swap); the device comes back up with its address.
RENAME_SCRIPT = r"""
set -e
dev_of() { ip -o -4 addr show | awk -v a="$1" '{split($4, p, "/"); if (p[1] == a) {sub(/@.*/, "", $2); print $2}}'; }
for pair; do
  d=$(dev_of "${pair%%=*}"); [ -n "$d" ] || { echo "no device holds ${pair%%=*}" >&2; exit 1; }
  ip link set dev "$d" down; ip link set dev "$d" name "llr-${pair#*=}"
done
for pair; do n=${pair#*=}; ip link set dev "llr-$n" name "$n"; ip link set dev "$n" up; done
"""


def exec_latency_samples(n: int = 10, topology: ComposeTopology | None = None) -> dict[str, list[float]]:
    """The baseline of the faults benchmark: exec round trips into the client container, in seconds.

    Uses a running `topology`, or brings a throw-away one up (and down) around the measurement.
    Returns {"compose_exec_true": [...], "docker_exec_iptables": [...]}, n samples each.
    """
    if topology is not None:
        return topology.exec_latency_samples(n)
    topo = ComposeTopology(f"exec-latency-{os.getpid()}", log=None)
    try:
        topo.up()
        return topo.exec_latency_samples(n)
    finally:
        topo.down()


def down_all(prefix: str = PROJECT_PREFIX, owner_pids: set[int] | None = None) -> dict[str, list[str]]:
    """Remove every compose project whose name starts with `prefix` and whose owner is gone (for
    `lab down`), and the router rules of projects no longer there; never raises. A project is live
    while the process its containers' owner label names runs; `owner_pids`: only projects owned by
    one of these pids. Returns {"removed": projects, "spared": "<project> (pid N)"}."""
    done: dict[str, list[str]] = {"removed": [], "spared": []}
    if shutil.which("docker") is None or not docker_ready():
        return done
    try:
        r = _run(["docker", "ps", "-a", "--format",
                  f'{{{{.Label "com.docker.compose.project"}}}} {{{{.Label "com.docker.compose.service"}}}} '
                  f'{{{{.Label "{OWNER_LABEL}"}}}}'], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return done
    services: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    for line in r.stdout.splitlines():
        project, service, token = (line.split(" ") + ["", ""])[:3]
        if project.startswith(prefix):
            services.setdefault(project, set()).add(service.strip())
            owner[project] = owner.get(project) or token.strip()
    for p, svcs in sorted(services.items()):
        if owner_pids is not None and cleanup.token_pid(owner[p]) not in owner_pids:
            continue
        if cleanup.token_alive(owner[p]):
            done["spared"].append(f"{p} (pid {cleanup.token_pid(owner[p])})")
            continue
        # a router project's networks are the overlay's; a plain project's `default` is compose.yaml's
        # alone (layering the overlay on it would leave that network behind)
        files = [COMPOSE_FILE, *([ROUTER_FILE] if "router" in svcs else [])]
        try:
            if "router" in svcs:
                _drop_router_rules(p)
            _run(["docker", "compose", "-p", p, *(a for f in files for a in ("-f", str(f))), "down", "-v",
                  "--remove-orphans", "-t", "2"], timeout=120, cwd=REPO)
        except (OSError, subprocess.TimeoutExpired):
            pass
        done["removed"].append(p)
    if owner_pids is None:
        # a killed run's rules whose project is already gone (its containers removed by hand)
        for p in sorted(_router_rule_projects() - set(services)):
            if p.startswith(prefix):
                _drop_router_rules(p)
                done["removed"].append(p)
    return done


_ROUTER_RULE_RE = re.compile(r'--comment "?livelab (\S+) router"?')


def _router_rule_projects() -> set[str]:
    """The projects named by the DOCKER-USER rules router projects make (ComposeTopology._bridge_rules)."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return set()
    try:
        out = _run(["iptables", "-w", "-S", "DOCKER-USER"], timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {m.group(1) for m in map(_ROUTER_RULE_RE.search, out.splitlines()) if m}


def _drop_router_rules(project: str) -> None:
    """Delete the DOCKER-USER rules a router project's up() made (ComposeTopology._bridge_rules), by
    their comment: a killed run never reached its down()."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return
    mark = f'--comment "livelab {project} router"'
    for line in _run(["iptables", "-w", "-S", "DOCKER-USER"], timeout=30).stdout.splitlines():
        if line.startswith("-A DOCKER-USER ") and mark in line:
            _run(["iptables", "-w", "-D", *shlex.split(line)[1:]], timeout=30)


# ---- a user's app (--client-cmd) in the client container -------------------------------------------
APP_DIR = "/app"     # where the directory `lab run` was started from appears in the client container


def app_mount_file(app_dir: Path, path: Path) -> Path:
    """Write a compose override that mounts `app_dir` (read-only) at APP_DIR in the client container.

    A user's `--client-cmd "python my_agent.py"` names files relative to where they ran `lab run`;
    in a namespace the app simply runs there, in Compose that folder has to be in the container."""
    path.write_text("services:\n  client:\n    volumes:\n"
                    f"      - {json.dumps(str(Path(app_dir).resolve()) + ':' + APP_DIR + ':ro')}\n")
    return path


def app_command(cmd: str, app_dir: Path) -> str:
    """The app's command line as it runs in the container: the host's Python is the image's, and a
    path under `app_dir` is the same file under APP_DIR."""
    root = str(Path(app_dir).resolve())
    argv = []
    for i, a in enumerate(shlex.split(cmd)):
        if a == root or a.startswith(root + "/"):
            a = APP_DIR + a[len(root):]
        elif i == 0:
            a = image_python(a)
        argv.append(a)
    return shlex.join(argv)

