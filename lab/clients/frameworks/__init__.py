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
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError

SETUP = "scripts/peers-setup.sh"
REPO = Path(__file__).resolve().parents[3]
FIXTURES = "tests/fixtures"       # where a build's patch lives
# a release as pip spells one (1.8.9, 1.14.0, 2.0.0rc1); a build tag is a word
_SPEC = re.compile(r"^(?P<name>[a-z]+)(?:@(?P<version>[0-9][0-9A-Za-z.]*)(?:\+(?P<build>[a-z0-9]+))?)?$")


@dataclass(frozen=True)
class Framework:
    name: str
    package: str        # the distribution whose release `@version` picks (pip's name)
    pinned: str         # the release the plain name runs
    app: str            # the framework-side app, relative to the repo
    # the client_params its app reads (name -> default); the app gets them as --params JSON
    params: dict[str, Any] = field(default_factory=dict)

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
class Build:
    """One framework at one release, optionally patched: what a `--client` name stands for."""
    framework: Framework
    version: str
    build: str | None = None
    pinned: bool = True     # the plain name: the venv scripts/peers-setup.sh builds by default

    @property
    def name(self) -> str:
        return self.framework.name

    @property
    def label(self) -> str:
        """The name as a run folder and its venv carry it: livekit, livekit-1.8.9, livekit-1.8.0-pr003
        (a run id allows no '+': it names the run's namespaces)."""
        if self.pinned:
            return self.name
        return f"{self.name}-{self.version}" + (f"-{self.build}" if self.build else "")

    @property
    def venv(self) -> str:
        return f".venv-{self.label}"

    @property
    def setup(self) -> str:
        return f"{SETUP} {self.spec}"

    @property
    def spec(self) -> str:
        if self.pinned:
            return self.name
        return f"{self.name}@{self.version}" + (f"+{self.build}" if self.build else "")

    def python(self, repo: Path) -> Path:
        return repo / self.venv / "bin" / "python"

    def check(self, repo: Path) -> None:
        if not self.python(repo).is_file():
            raise LabError(f"client {self.spec!r} needs its venv {self.venv}, which is missing: run {self.setup}")

    def describe(self) -> dict[str, Any]:
        """What run.json records of the framework: its package, release and build."""
        return {"framework": self.name, "package": self.framework.package, "version": self.version,
                "build": self.build, "patch": self.framework.patch(self.build) if self.build else None,
                "venv": self.venv}

    def command(self, repo: Path, params: dict[str, Any] | None = None) -> str:
        argv = [str(self.python(repo)), str(repo / self.framework.app)]
        told = self.framework.app_params(params or {})
        if told:
            argv += ["--params", json.dumps(told, sort_keys=True)]
        return shlex.join(argv)


# what the livekit app does on cue (seed 003, livekit/agents#6479): its book_slot tool, once the
# booking is made, changes the agent's tools (update_tools(), which restarts the plugin's websocket)
# and returns its result while that restart is under way; lab/peers/livekit_app.py reads these
LIVEKIT_PARAMS = {
    "update_tools_in_tool": False,   # the tool calls update_tools() just before it returns
    "result_after_update_s": 0.0,    # ... and returns this long after update_tools() (the PR's repro: 0.5)
}

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("livekit", "livekit-plugins-google", "1.8.9", "lab/peers/livekit_app.py", LIVEKIT_PARAMS),
    Framework("pipecat", "pipecat-ai", "1.14.0", "lab/peers/pipecat_app.py"),
    Framework("adk", "google-adk", "2.13.0", "lab/peers/adk_app.py"),
)}


def names() -> list[str]:
    return list(FRAMEWORKS)


def resolve(spec: str | None) -> Build | None:
    """The framework build a --client name stands for; None when it names no framework; LabError
    (one line) for a framework name with a version or build that cannot be."""
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
