"""Framework clients: a real framework's Live client as the client under test, run black-box.

`lab run control --client livekit` (or pipecat, adk) runs lab/peers/<name>_app.py in the framework's own venv
(scripts/peers-setup.sh builds it, with the framework's pins; the project's venv cannot hold them)
through lab/clients/command.py, so it is an unmodified app by hostname like any `--client-cmd`:
faults hit the framework's real sockets in the client's namespace, and it is judged from the twin's
record, the backend and the packets (command.py's docstring says what that can and cannot judge).

A client name may carry a version and a build: `livekit@1.8.9` runs that release of the framework's
package from `.venv-livekit-1.8.9`, `livekit@1.8.0+pr003` (`.venv-livekit-1.8.0-pr003`) the same release with a patch of ours
applied: a build B of framework N is the patch tests/fixtures/N-B.patch, the only list of builds
(scripts/peers-setup.sh finds it by the same name; tests/fixtures/livekit-pr003.patch is the approach
of livekit/agents PR #6481, seed 003, written from the PR's description). The plain name stays the
pinned venv. `scripts/peers-setup.sh livekit@1.8.0+pr003` builds the same name.

    resolve("livekit@1.8.9")          a Build, or None for a name that is no framework
    build.command(repo, params)       the --client-cmd line for it; the scenario's client_params go
                                      to the app as one JSON argument (--params), declared below
    build.check(repo)                 LabError (one line) when its venv is missing
    FRAMEWORKS["livekit"].declared_params()   the client_params a scenario may give it

**The user's own agent** (docs/agents.md): `NAME[@RELEASE]:MODULE[:ATTR]` names an agent where its
framework keeps it, in code that imports nothing of the lab: `adk:my_agent` (ADK's `root_agent`, run
with `run_live`), `livekit:agent:OrderSupport` (an `Agent` subclass, hosted in an `AgentSession`
with the Google realtime model), `pipecat:bot:run_bot` (the bot function, handed a transport the lab
provides). MODULE is a dotted module found from the folder `lab run` starts in, or a path to a .py
file or a package folder. Such a build runs lab/peers/<name>_host.py, which loads the agent
(lab/peers/entry.py) in the framework's venv; `build.check_entry(repo, cwd)` runs that same load
there first, so a module that does not import, a missing attribute or the wrong kind of object is
one line before anything starts. `build.with_requirements(file)` installs the user's own
requirements into a copy of the framework's venv keyed by the file's hash (lab/clients/frameworks/venvs.py).

In Compose the client image holds the pinned venv (lab/topology/framework_image.py):
`build.command(IMAGE_REPO)` is the same command line there, and the entry check runs in that image.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.protocols import GEMINI, OPENAI

SETUP = "scripts/peers-setup.sh"
REPO = Path(__file__).resolve().parents[3]
FIXTURES = "tests/fixtures"       # where a build's patch lives
# a release as pip spells one (1.8.9, 1.14.0, 2.0.0rc1); a build tag is a word
_SPEC = re.compile(r"^(?P<name>[a-z]+)(?:@(?P<version>[0-9][0-9A-Za-z.]*)(?:\+(?P<build>[a-z0-9]+))?)?$")
ENTRY_CHECK_TIMEOUT_S = 120      # importing a framework and the user's module, in its venv


@dataclass(frozen=True)
class Framework:
    name: str
    package: str        # the distribution whose release `@version` picks (pip's name)
    pinned: str         # the release the plain name runs
    app: str            # the framework-side app, relative to the repo
    # the client_params its app reads (name -> default); the app gets them as --params JSON
    params: dict[str, Any] = field(default_factory=dict)
    host: str = ""      # the framework-side host of a user's agent (NAME:MODULE:ATTR), relative to the repo
    default_attr: str | None = None    # the attribute the framework's convention names, if any
    kind: str = ""      # what ATTR must be, as the user reads it in an error line
    # the realtime protocols (lab.protocols) its app and its host speak: the app and the host pick the
    # framework's integration for the one whose key the lab gives them (lab/peers/app_io.py realtime_api)
    protocols: tuple[str, ...] = (GEMINI,)
    why_only: str = ""      # why it speaks no other, for the one line that refuses another protocol

    def patch(self, build: str) -> str:
        """A build's patch, relative to the repo (tests/fixtures/<name>-<build>.patch)."""
        return f"{FIXTURES}/{self.name}-{build}.patch"

    def builds(self) -> list[str]:
        return sorted(p.name[len(self.name) + 1:-len(".patch")] for p in (REPO / FIXTURES).glob(f"{self.name}-*.patch"))

    def declared_params(self) -> dict[str, Any]:
        return dict(self.params)

    def app_params(self, given: dict[str, Any]) -> dict[str, Any]:
        """What its app is told: every parameter it declares, the scenario's value over the default
        (`given` is the scenario's merged client_params; the `all` ones meant for the lab's own
        clients are not the app's)."""
        return {k: given.get(k, default) for k, default in self.params.items()}


@dataclass(frozen=True)
class Entry:
    """Where a user's agent is: a module (dotted, or a path to a .py file or a package folder) and
    the attribute in it."""
    module: str
    attr: str
    conventional: bool = False      # ATTR is the name the framework's convention gives it (root_agent)

    @property
    def spec(self) -> str:
        return f"{self.module}:{self.attr}"

    @property
    def label(self) -> str:
        """The part of a run folder's name that says whose agent ran: the module's last name, and
        the attribute unless it is the conventional one."""
        last = Path(self.module).stem if ("/" in self.module or self.module.endswith(".py")) else \
            self.module.rsplit(".", 1)[-1]
        text = last if self.conventional else f"{last}-{self.attr}"
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "agent"


@dataclass(frozen=True)
class Build:
    """One framework at one release, optionally patched: what a `--client` name stands for."""
    framework: Framework
    version: str
    build: str | None = None
    pinned: bool = True     # the plain name: the venv scripts/peers-setup.sh builds by default
    entry: Entry | None = None      # the user's own agent (NAME:MODULE:ATTR); None: the lab's app
    requirements: str | None = None     # the hash of the user's requirements: a venv copy of its own

    @property
    def name(self) -> str:
        return self.framework.name

    @property
    def label(self) -> str:
        """The name as a run folder and its venv carry it: livekit, livekit-1.8.9, livekit-1.8.0-pr003
        (a run id allows no '+': it names the run's namespaces)."""
        return self.venv_label + (f"-{self.entry.label}" if self.entry else "")

    @property
    def venv_label(self) -> str:
        """livekit, livekit-1.8.9, livekit-1.8.0-pr003: the framework build alone."""
        if self.pinned:
            return self.name
        return f"{self.name}-{self.version}" + (f"-{self.build}" if self.build else "")

    @property
    def base_venv(self) -> str:
        """The framework's own venv, as scripts/peers-setup.sh builds it."""
        return f".venv-{self.venv_label}"

    @property
    def venv(self) -> str:
        """The venv it runs in: the framework's own, or its copy with the user's requirements."""
        return self.base_venv + (f"-req-{self.requirements}" if self.requirements else "")

    @property
    def setup(self) -> str:
        return f"{SETUP} {self.spec}"

    @property
    def spec(self) -> str:
        """The framework part of the name (livekit, livekit@1.8.0+pr003): what peers-setup.sh builds."""
        if self.pinned:
            return self.name
        return f"{self.name}@{self.version}" + (f"+{self.build}" if self.build else "")

    @property
    def client_spec(self) -> str:
        """The whole --client name, the user's agent included."""
        return self.spec + (f":{self.entry.spec}" if self.entry else "")

    def python(self, repo: Path) -> Path:
        return repo / self.venv / "bin" / "python"

    def check(self, repo: Path) -> None:
        base = repo / self.base_venv / "bin" / "python"
        if not base.is_file():
            raise LabError(f"client {self.client_spec!r} needs its venv {self.base_venv}, which is missing: "
                           f"run {self.setup}")
        if not self.python(repo).is_file():
            raise LabError(f"client {self.client_spec!r}: the venv with your requirements ({self.venv}) is missing")

    def entry_check_argv(self, repo: Path) -> list[str]:
        """The load of the user's agent its host will do, as a check (lab/peers/entry.py check)."""
        return [str(self.python(repo)), str(repo / ENTRY_SCRIPT), "check", self.name, self.entry.module,
                self.entry.attr]

    def check_entry(self, repo: Path, cwd: Path, run=None) -> None:
        """Load the user's agent in the framework's venv, as its host will, from `cwd`: one LabError
        line when the module does not import, has no such attribute, or holds the wrong kind of object.
        `run(argv)` runs the check elsewhere (a client container) and returns its CompletedProcess."""
        if self.entry is None:
            return
        try:
            p = run(self.entry_check_argv(repo)) if run else \
                subprocess.run(self.entry_check_argv(repo), cwd=cwd, capture_output=True, text=True,
                               timeout=ENTRY_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL, env=venv_environment())
        except subprocess.TimeoutExpired:
            raise LabError(f"client {self.client_spec!r}: loading {self.entry.spec} took over "
                           f"{ENTRY_CHECK_TIMEOUT_S} s in {self.venv}") from None
        if p.returncode != 0:
            said = (p.stdout.strip().splitlines() or p.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabError(f"client {self.client_spec!r}: {said}")

    def with_requirements(self, digest: str) -> "Build":
        return replace(self, requirements=digest)

    def describe(self) -> dict[str, Any]:
        """What run.json records of the framework: its package, release and build."""
        out = {"framework": self.name, "package": self.framework.package, "version": self.version,
               "build": self.build, "patch": self.framework.patch(self.build) if self.build else None,
               "venv": self.venv}
        if self.entry is not None:
            out["agent"] = self.entry.spec
        return out

    def command(self, repo: Path, params: dict[str, Any] | None = None) -> str:
        if self.entry is not None:      # the user's agent, loaded by the framework's host
            return shlex.join([str(self.python(repo)), str(repo / self.framework.host), "--entry",
                               self.entry.module, self.entry.attr])
        argv = [str(self.python(repo)), str(repo / self.framework.app)]
        told = self.framework.app_params(params or {})
        if told:
            argv += ["--params", json.dumps(told, sort_keys=True)]
        return shlex.join(argv)


ENTRY_SCRIPT = "lab/peers/entry.py"
# what the lab's own environment must not hand a framework's venv (its own packages would shadow the venv's)
_VENV_DROPPED = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")


def venv_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _VENV_DROPPED}


# what the livekit app does on cue (seed 003, livekit/agents#6479): its book_slot tool, once the
# booking is made, changes the agent's tools (update_tools(), which restarts the plugin's websocket)
# and returns its result while that restart is under way; lab/peers/livekit_app.py reads these
LIVEKIT_PARAMS = {
    "update_tools_in_tool": False,   # the tool calls update_tools() just before it returns
    "result_after_update_s": 0.0,    # ... and returns this long after update_tools() (the PR's repro: 0.5)
}

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    # the app and a user's Agent: the Google realtime model, or livekit-plugins-openai's
    Framework("livekit", "livekit-plugins-google", "1.8.9", "lab/peers/livekit_app.py", LIVEKIT_PARAMS,
              host="lab/peers/livekit_host.py", kind="a livekit.agents.Agent subclass", protocols=(GEMINI, OPENAI)),
    # the app: GeminiLiveLLMService or OpenAIRealtimeLLMService; a user's bot builds its own service,
    # so it speaks the protocol its service does, which the lab cannot see before it runs: it is
    # taken at its word (--protocol), and given that protocol's key alone
    Framework("pipecat", "pipecat-ai", "1.14.0", "lab/peers/pipecat_app.py",
              host="lab/peers/pipecat_host.py", default_attr="run_bot",
              kind="an async function taking (transport, runner_args)", protocols=(GEMINI, OPENAI)),
    Framework("adk", "google-adk", "2.13.0", "lab/peers/adk_app.py",
              host="lab/peers/adk_host.py", default_attr="root_agent", kind="an ADK agent (BaseAgent)",
              why_only="ADK's live agents (run_live) run on Gemini Live models"),
)}


def names() -> list[str]:
    return list(FRAMEWORKS)


def resolve(spec: str | None) -> Build | None:
    """The framework build a --client name stands for; None when it names no framework; LabError
    (one line) for a framework name with a version or build that cannot be, or a user's agent
    (NAME:MODULE[:ATTR]) written wrong."""
    head, sep, rest = (spec or "").partition(":")
    if sep and _SPEC.match(head) and _SPEC.match(head)["name"] in FRAMEWORKS:
        build = resolve(head)
        return replace(build, entry=_entry(spec, build.framework, rest))
    m = _SPEC.match(spec or "")
    if not m or m["name"] not in FRAMEWORKS:
        if spec and "@" in spec and spec.split("@", 1)[0] in FRAMEWORKS:
            raise LabError(f"client {spec!r}: a version is written NAME@RELEASE[+BUILD], e.g. livekit@1.8.9 "
                           f"or livekit@1.8.0+pr003")
        return None
    fw = FRAMEWORKS[m["name"]]
    if m["version"] is None:
        return Build(fw, fw.pinned)
    if m["build"] and m["build"] not in fw.builds():
        known = ", ".join(f"+{b}" for b in fw.builds()) or "none"
        raise LabError(f"client {spec!r}: {fw.name} has no build {m['build']!r} (known: {known})")
    return Build(fw, m["version"], m["build"], pinned=False)


def _entry(spec: str, fw: Framework, rest: str) -> Entry:
    module, _, attr = rest.partition(":")
    attr = attr or fw.default_attr or ""
    if not module or not attr or ":" in attr:
        hint = f" (default {fw.default_attr})" if fw.default_attr else ""
        raise LabError(f"client {spec!r}: a user's agent is written {fw.name}:MODULE:ATTR{hint}, "
                       f"ATTR naming {fw.kind}")
    if not attr.isidentifier():
        raise LabError(f"client {spec!r}: {attr!r} is not a Python name")
    return Entry(module, attr, conventional=attr == fw.default_attr)
