"""One run's plan: every setting the orchestrator hands the agent, defined once.

The orchestrator (lab/run.py) decides a run's settings, writes them into the run folder once
(`plan.json`), and starts the agent with that file's path; the agent (lab/agent.py) reads the plan
and nothing else. A new setting is one field here: the orchestrator sets it where it is decided,
the agent reads `plan.<field>`; no flag, no argument list, no constructor parameter repeats it.
The file lives in the run folder because every topology's client node sees that folder (a
container does not see the host's source tree), and it is provenance for the run.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path

from lab.errors import LabError
from lab.model_id import DEFAULT_MODEL
from lab.protocols import DEFAULT as DEFAULT_PROTOCOL

FILE = "plan.json"
KEY_ENV = "LAB_API_KEY"     # the agent's key comes in the environment, never in the plan (it is a result)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What one run's agent does, and with what. Paths are as the client node sees them."""
    scenario: str                       # the scenario file the agent plays (the run folder's copy)
    client: str                         # the client under test (a user's app: the client it is judged as)
    run_dir: str                        # where events.jsonl goes
    script: tuple[str, ...] | None = None   # what the user says, line N at `say: N` (scenario.played);
                                            # None: the scenario file's own script
    t0: float | None = None             # the run's clock (epoch s): every service counts from it
    duration: float | None = None       # seconds; None: the scenario's
    go_file: str | None = None          # started early: wait for this file before opening anything
    model: str = DEFAULT_MODEL          # the model the client asks for
    protocol: str = DEFAULT_PROTOCOL    # the realtime protocol the twin and the client speak (lab.protocols)
    base_url: str | None = None         # the endpoint in its protocol's form (lab.protocols.endpoint_url:
                                        # https://host:port, wss://host:port/v1); None: the SDK's default
    ca: str | None = None               # CA certificate the client trusts (the twin's); None: the system's
    keylog: str | None = None           # TLS secrets go here (twin runs; live only when asked)
    budget_ledger: str | None = None    # live: the batch's session ledger, charged before each connection
    endpoint_ip: str | None = None      # the endpoint's address (a fault on `target: endpoint`, an app's names)
    twin_control: str | None = None     # the twin's control channel URL (twin actions)
    proxy: str | None = None            # the CONNECT proxy the client goes through (endpoint: {via: proxy})
    proxy_control: str | None = None    # that proxy's control URL (freeze, thaw)
    router: dict | None = None          # a router scenario's router (lab.topology.router.Router.describe())
    client_cmd: str | None = None       # a user's own app as the client (lab/clients/command.py)
    client_cwd: str | None = None       # the directory that app starts in
    client_owns_files: bool = False     # the node is the run's container: its /etc/hosts and CA store may be
                                        # extended (a shared namespace: the app gets a private /etc/hosts)

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / FILE
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        return path


def read(path: str | Path) -> RunPlan:
    """The plan in `path`; LabError (one line, naming the file) when it is missing, not JSON, or
    has a setting this lab does not know or a value of the wrong shape."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise LabError(f"{path}: not a run plan ({type(e).__name__}: {e})") from None
    if not isinstance(raw, dict):
        raise LabError(f"{path}: a run plan is a JSON object of settings")
    hints = typing.get_type_hints(RunPlan)
    known = {f.name: f for f in dataclasses.fields(RunPlan)}
    for name, value in raw.items():
        if name not in known:
            raise LabError(f"{path}: unknown setting {name!r} in the run plan; known: {', '.join(known)}")
        if not _fits(value, hints[name]):
            raise LabError(f"{path}: setting {name!r} is {value!r}, which is not a {_spell(hints[name])}")
    missing = [n for n, f in known.items() if n not in raw and f.default is dataclasses.MISSING]
    if missing:
        raise LabError(f"{path}: the run plan lacks {', '.join(missing)}")
    if raw.get("script") is not None:
        raw["script"] = tuple(raw["script"])
    return RunPlan(**raw)


def _fits(value, hint) -> bool:
    """Whether a JSON value has the field's type (str, float, bool, dict, tuple[str, ...], or None)."""
    if isinstance(hint, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is tuple:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint in (str, dict):
        return isinstance(value, hint)
    if hint is bool:
        return isinstance(value, bool)
    raise TypeError(f"the plan reader has no check for {hint!r}: add one with the field")


def _spell(hint) -> str:
    hints = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return " or ".join("null" if h is type(None) else "list of strings" if typing.get_origin(h) is tuple
                       else h.__name__ for h in hints)
