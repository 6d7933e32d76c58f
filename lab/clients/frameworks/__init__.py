"""Framework clients: a real framework's Live client as the client under test, run black-box.

`lab run control --client livekit` (or pipecat, adk) runs lab/peers/<name>_app.py in the framework's own venv
(scripts/peers-setup.sh builds it, with the framework's pins; the project's venv cannot hold them)
through lab/clients/command.py, so it is an unmodified app by hostname like any `--client-cmd`:
faults hit the framework's real sockets in the client's namespace, and it is judged from the twin's
record, the backend and the packets (command.py's docstring says what that can and cannot judge).

    FRAMEWORKS["livekit"].command(repo)   the --client-cmd line for it
    FRAMEWORKS["livekit"].check(repo)     LabError (one line) when its venv is missing
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError


@dataclass(frozen=True)
class Framework:
    name: str
    venv: str          # relative to the repo
    app: str           # the framework-side app, relative to the repo
    setup: str         # the command that builds the venv

    def python(self, repo: Path) -> Path:
        return repo / self.venv / "bin" / "python"

    def check(self, repo: Path) -> None:
        if not self.python(repo).is_file():
            raise LabError(f"client {self.name!r} needs its venv {self.venv}, which is missing: run {self.setup}")

    def command(self, repo: Path) -> str:
        return shlex.join([str(self.python(repo)), str(repo / self.app)])


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("livekit", ".venv-livekit", "lab/peers/livekit_app.py", "make peers-setup (scripts/peers-setup.sh livekit)"),
    Framework("pipecat", ".venv-pipecat", "lab/peers/pipecat_app.py", "make peers-setup (scripts/peers-setup.sh pipecat)"),
    Framework("adk", ".venv-adk", "lab/peers/adk_app.py", "make peers-setup (scripts/peers-setup.sh adk)"),
)}


def names() -> list[str]:
    return list(FRAMEWORKS)
