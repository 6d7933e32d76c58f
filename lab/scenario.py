"""Scenarios as data: load a YAML file, validate it, and say exactly which line is wrong.

A scenario is the user's story (script lines), the network's story (faults on a timeline anchored
to protocol events), and what must hold afterwards (expectations, per client). It names no code
path: the agent interprets it. Validation happens before anything runs or is recorded, so a
malformed file costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any


from netem import faults as fault_registry
from netem.errors import NetemError

from lab import actions, anchors, expectations, yamlines
from lab.conversation import format as conversation_format
from lab import clients as client_registry
from lab.clients import frameworks
from lab.errors import LabError, ScenarioError
from lab.protocols import GEMINI, PROTOCOLS
from lab.topology.router import parse_links
from lab.twin.params import DEFAULT_PROFILE
from lab.twin.profile import load_profile

END_MODES = {"duration", "answered"}
TOP_KEYS = {"name", "title", "source", "shows", "client", "client_params", "backend", "endpoint",
            "input", "duration", "script", "timeline", "end", "expect", "twin", "topology", "conversation",
            "protocols"}
STEP_KEYS = {"id", "at", "plus", "say", "fault", "heal", "action", "note", "unless_client", "only_client"}
BACKEND_KEYS = {"commit_after_s", "dedup"}
ENDPOINT_KEYS = {"via", "idle_timeout_s"}  # idle_timeout_s: the proxy closes an idle tunnel (via: proxy)
TWIN_KEYS = {"profile", "set"}      # the twin's profile (lab/twin/profiles) and parameter overrides
TOPOLOGY_KEYS = {"router", "links"}   # topology: {router: true, links: [wifi, cell]} (lab/topology/router.py)
FAULT_NODES = ("client", "router")    # a fault's `node` (YAML reads a bare `on:` as true): the client's namespace (default) or the router's
FAULT_TARGETS = ("flow", "endpoint")  # a fault's `target`: the client's open connection, or the whole endpoint
ALL_CLIENTS = "all"     # client_params / expect for every client


_Lined, _Loader = yamlines.Lined, yamlines.Loader


@dataclass(frozen=True)
class Fault:
    """A timeline step's fault: netem's spec (its kind and parameters) in the lab's envelope, where
    it runs (`node`) and what it targets (`target`, the lab's concept; addresses only at run time)."""
    spec: dict                # netem's spec without the envelope: {"kind": ..., its parameters}
    node: str = "client"
    target: str = "flow"

    @property
    def kind(self) -> str:
        return self.spec["kind"]

    def netem_spec(self, flow: tuple | None, endpoint_ip: str | None = None) -> dict:
        """The spec netem builds, `target` made addresses: `flow` is the client's open connection
        (src, sport, dst, dport; None: it has none), `endpoint_ip` the endpoint's address when it has
        none. Validation asks this too, with netem's documentation-range placeholder."""
        spec = dict(self.spec)
        if not fault_registry.REGISTRY[self.kind].needs_target:
            return spec
        if self.target == "flow":
            if not flow:
                raise LabError("the fault targets the client's open connection, but it has none")
            src, sport, dst, dport = flow
            spec["target"] = {"src": src, "sport": sport, "dst": dst, "dport": dport}
        else:
            dst, dport = (flow or (None, None, endpoint_ip, None))[2:]
            spec["target"] = {"dst": dst, **({"dport": dport} if dport else {})}
        return spec


_PLACEHOLDER_FLOW = tuple(fault_registry.PLACEHOLDER_TARGET[k] for k in ("src", "sport", "dst", "dport"))


@dataclass
class Step:
    at: str
    plus: float = 0.0
    id: str | None = None
    say: int | None = None
    fault: Fault | None = None
    heal: bool = False
    action: str | None = None
    note: str | None = None
    only_client: list[str] | None = None
    unless_client: list[str] | None = None
    line: int = 0
    ats: list[str] = field(default_factory=list)   # every anchor that must have happened

    def __post_init__(self):
        if not self.ats:
            self.ats = [self.at]

    def applies_to(self, client: str) -> bool:
        if self.only_client and client not in self.only_client:
            return False
        if self.unless_client and client in self.unless_client:
            return False
        return True

    def plays_in(self, protocol: str) -> bool:
        """Whether a run of `protocol` plays this step: every step but an action the protocol lacks
        (lab.actions: a resume with a handle, goAway, ... are the Live API's)."""
        return self.action is None or protocol in actions.ACTIONS[self.action].protocols

    def describe(self) -> str:
        what = (f"say line {self.say}" if self.say is not None else f"fault {self.fault.kind}"
                if self.fault else "heal" if self.heal else f"action {self.action}")
        return f"{what} at {self.at}+{self.plus:g}s"


@dataclass
class Scenario:
    name: str
    title: str
    source: str
    shows: str
    client: str
    script: list[str]
    timeline: list[Step]
    duration: float
    end: str = "duration"
    client_params: dict[str, dict] = field(default_factory=dict)
    backend: dict = field(default_factory=lambda: {"commit_after_s": 4.0})
    endpoint: dict = field(default_factory=dict)
    input: str = "text"
    expect: dict[str, dict] = field(default_factory=dict)
    path: str = ""
    twin: dict = field(default_factory=dict)     # {profile (absent: the protocol's default), set}: the twin it needs
    protocols: tuple[str, ...] = (GEMINI,)       # the realtime protocols it applies to (lab.protocols)
    topology: dict = field(default_factory=dict)   # {} (two nodes, one link) or {router, links}
    conversation: str = conversation_format.DEFAULT   # what the twin's model plays: a name or a path
    lines_from: str = ""    # the conversation whose lines the user says instead of the script (played)

    @property
    def router_links(self) -> list:
        """The access links of a router scenario (empty: no router)."""
        return list(self.topology.get("links", [])) if self.topology.get("router") else []

    def twin_for(self, protocol: str) -> dict:
        """The twin a run of `protocol` serves: the scenario's profile, else the protocol's default
        (lab.twin.params.DEFAULT_PROFILE), with the scenario's overrides."""
        return {"profile": self.twin.get("profile") or DEFAULT_PROFILE[protocol], "set": dict(self.twin.get("set", {}))}

    def params_for(self, client: str) -> dict:
        merged = dict(self.client_params.get("all", {}))
        merged.update(self.client_params.get(client, {}))
        return merged

    def expect_for(self, client: str | None) -> dict:
        """The reproduction rows for `client`: `all:` and the client's own block, for the scenario's
        own (the study's) client or a client the block names; none for any other client, which is
        judged by its user's outcomes alone (lab.report.outcomes)."""
        if client is None or (client != self.client and client not in self.expect):
            return {}
        merged = dict(self.expect.get("all", {}))
        merged.update(self.expect.get(client, {}))
        return merged

    def to_json(self) -> dict:
        return {"name": self.name, "title": self.title, "source": self.source, "client": self.client,
                "duration": self.duration, "end": self.end, "input": self.input, "script": self.script,
                "endpoint": self.endpoint, "backend": self.backend, "twin": self.twin, "protocols": list(self.protocols),
                "topology": self.topology, "conversation": self.conversation,
                "timeline": [s.describe() for s in self.timeline]}


def catalogue_dir() -> Path:
    return Path(str(resources.files("lab.scenarios")))


def names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir().glob("*.yaml"))


def names_for(protocol: str) -> list[str]:
    """The catalogue's scenarios that apply to `protocol` (their protocols: key)."""
    return [n for n in names() if protocol in load(n).protocols]


def resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    cand = catalogue_dir() / f"{name_or_path}.yaml"
    if cand.exists():
        return cand
    raise ScenarioError(f"unknown scenario {name_or_path!r}; known: {', '.join(names())}")


def load(name_or_path: str) -> Scenario:
    path = resolve(name_or_path)
    return parse(yamlines.load(path), str(path))


_errs, _near, _refuse_unknown = yamlines.errs, yamlines.near, yamlines.refuse_unknown


def parse(raw: Any, path: str = "<scenario>") -> Scenario:
    err = _errs(path)
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}:1: a scenario is a mapping of keys (name, script, timeline, ...)")
    _refuse_unknown(err, raw, TOP_KEYS, "key")
    for k in ("name", "script", "timeline"):
        if k not in raw:
            raise err(raw, None, f"missing required key {k!r}")

    script = raw["script"]
    if not isinstance(script, list) or not script or not all(isinstance(s, str) and s.strip() for s in script):
        raise err(raw, "script", "script must be a non-empty list of the user's lines (strings)")

    duration = raw.get("duration", 60)
    if not isinstance(duration, (int, float)) or duration <= 0:
        raise err(raw, "duration", f"duration must be a positive number of seconds, got {duration!r}")
    end = raw.get("end", "duration")
    if end not in END_MODES:
        raise err(raw, "end", f"end must be one of {sorted(END_MODES)}, got {end!r}")
    inp = raw.get("input", "text")
    if inp not in ("text", "speech"):
        raise err(raw, "input", f"input must be 'text' or 'speech', got {inp!r}")

    topology = _topology(err, raw)
    timeline = raw["timeline"]
    if not isinstance(timeline, list) or not timeline:
        raise err(raw, "timeline", "timeline must be a non-empty list of steps")
    steps: list[Step] = []
    ids: set[str] = set()
    for node in timeline:
        step = _step(err, raw, node, script, ids, topology)
        if step.id:
            ids.add(step.id)
        steps.append(step)

    client = raw.get("client", "probe")
    if not isinstance(client, str) or not _client_name_ok(client):
        raise err(raw, "client", f"client must be a client name ({_known_clients()}), got {client!r}")
    cp = _per_client(err, raw, "client_params", "its parameters")
    for who, params in cp.items():
        declared = _declared_params(err, cp, who)
        for k in params:
            if k not in declared:
                owner = "any built-in client" if who == ALL_CLIENTS else f"client {who!r}"
                raise err(params, k, f"unknown client parameter {k!r} for {owner}{_near(k, declared)}; "
                                     f"known: {', '.join(sorted(declared))}")
    exp = _per_client(err, raw, "expect", "expectations")
    for who, checks in exp.items():
        for k, v in checks.items():
            if k in expectations.SETTINGS:
                continue
            checker = expectations.resolve(k)
            if checker is None:
                raise err(checks, k, f"unknown expectation {k!r}{_near(k, expectations.NAMED)}; "
                                     f"known: {expectations.known_summary()}")
            if not checker.valid(v):
                raise err(checks, k, f"expectation {k} takes {checker.takes}, got {v!r}")
    backend = raw.get("backend", {}) or {}
    if (not isinstance(backend, dict) or not isinstance(backend.get("commit_after_s", 4.0), (int, float))
            or not isinstance(backend.get("dedup", True), bool)):
        raise err(raw, "backend", "backend takes commit_after_s (seconds) and dedup (true or false)")
    _refuse_unknown(err, backend, BACKEND_KEYS, "backend key")
    endpoint = raw.get("endpoint", {}) or {}
    if not isinstance(endpoint, dict) or endpoint.get("via", "direct") not in ("direct", "proxy"):
        raise err(raw, "endpoint", "endpoint.via must be direct or proxy")
    _refuse_unknown(err, endpoint, ENDPOINT_KEYS, "endpoint key")
    protocols = _protocols(err, raw)
    twin = _twin(err, raw, protocols)
    idle = endpoint.get("idle_timeout_s")
    if idle is not None and (endpoint.get("via") != "proxy" or isinstance(idle, bool)
                             or not isinstance(idle, (int, float)) or idle <= 0):
        raise err(endpoint, "idle_timeout_s", "endpoint.idle_timeout_s is seconds > 0 and needs via: proxy")
    conversation = _conversation(err, raw, path)
    _check_protocol_steps(err, raw, steps, protocols)
    for step in steps:
        if step.action and actions.ACTIONS[step.action].by == actions.NETWORK and not topology:
            raise err(raw, "timeline", f"action {step.action} moves the client between access links: "
                                       "it needs topology: {router: true, links: [wifi, cell]}")

    return Scenario(
        name=str(raw["name"]), title=str(raw.get("title", raw["name"])), source=str(raw.get("source", "")),
        shows=str(raw.get("shows", "")).strip(), client=client, script=list(script), timeline=steps,
        duration=float(duration), end=end, client_params={k: dict(v) for k, v in cp.items()},
        backend={"commit_after_s": 4.0, **backend}, endpoint=dict(endpoint), input=inp,
        expect={k: dict(v) for k, v in exp.items()}, path=path, twin=twin, protocols=protocols, topology=topology,
        conversation=conversation)


def played(scn: Scenario, conversation: str | None = None) -> Scenario:
    """The scenario as a run plays it: the one place a user's lines take the script's place. With
    `conversation` (`lab run --conversation NAME`) the user says its lines (a scenario's script is
    the booking story's; an agent's conversation brings its own user), and so with the scenario's
    own conversation when that is lines only; line N at the timeline's `say: N`. ScenarioError
    (one line) when the timeline says a line the conversation does not have."""
    if scn.lines_from:      # already played: its lines stay whoever's they are
        return scn
    name = conversation or scn.conversation
    conv = conversation_format.load(name)
    if conversation is None and conv.source != conversation_format.SOURCE_LINES:
        return scn
    said = [st.say for st in scn.timeline if st.say is not None]
    if said and max(said) >= len(conv.lines):
        raise ScenarioError(f"scenario {scn.name} says line {max(said)} of the user's lines, and the "
                            f"conversation {name} has {len(conv.lines)}")
    return replace(scn, script=list(conv.lines), lines_from=name)


def _conversation(err, raw: dict, path: str) -> str:
    """`conversation: NAME | PATH` (a relative path from the scenario's folder), loaded and checked
    now: its own errors name its file and line, and this line says which scenario asked for it."""
    name = raw.get("conversation", conversation_format.DEFAULT)
    if not isinstance(name, str) or not name.strip():
        raise err(raw, "conversation", "conversation: a name in lab/conversations or a file path")
    cand = Path(path).parent / name
    ref = str(cand) if not Path(name).is_absolute() and cand.is_file() else name
    try:
        conversation_format.load(ref)
    except ScenarioError as e:
        raise err(raw, "conversation", f"conversation {name!r}: {e}") from None
    return ref


def _protocols(err, raw: dict) -> tuple[str, ...]:
    """`protocols: [gemini, openai]` (or one name): the realtime protocols the scenario applies to
    (lab.protocols); absent: gemini only."""
    val = raw.get("protocols", [GEMINI])
    val = [val] if isinstance(val, str) else val
    if not isinstance(val, list) or not val or not all(isinstance(p, str) for p in val):
        raise err(raw, "protocols", f"protocols takes a list of protocol names ({', '.join(PROTOCOLS)})")
    bad = [p for p in val if p not in PROTOCOLS]
    if bad:
        raise err(raw, "protocols", f"unknown protocol {bad[0]!r}{_near(bad[0], PROTOCOLS)}; "
                                    f"known: {', '.join(PROTOCOLS)}")
    return tuple(dict.fromkeys(val))


def _check_protocol_steps(err, raw: dict, steps: list[Step], protocols: tuple[str, ...]) -> None:
    """For each protocol the scenario applies to, a step it plays must not wait for one it skips
    (an action that protocol lacks: lab.actions)."""
    for protocol in protocols:
        skipped = {st.id for st in steps if st.id and not st.plays_in(protocol)}
        for node, st in zip(raw["timeline"], steps):
            waits = {a[len("step:"):] for a in st.ats if a.startswith("step:")} & skipped
            if st.plays_in(protocol) and waits:
                raise err(node, "at", f"step:{sorted(waits)[0]} is an action {protocol} lacks, so a run of "
                                      f"{protocol} skips it and this step would never play (protocols: lists {protocol})")


def _twin(err, raw: dict, protocols: tuple[str, ...]) -> dict:
    """`twin: {profile: vertex, set: {name: value}}`, checked as the twin of each protocol the scenario
    applies to will load it (an unknown profile or parameter, a value of the wrong shape, or a profile
    of another protocol is one line here, before anything starts)."""
    twin = raw.get("twin", {}) or {}
    if not isinstance(twin, dict) or not isinstance(twin.get("set", {}) or {}, dict):
        raise err(raw, "twin", "twin takes profile (a profile name) and set (a mapping of twin parameters)")
    _refuse_unknown(err, twin, TWIN_KEYS, "twin key")
    out = {**({"profile": str(twin["profile"])} if twin.get("profile") else {}), "set": dict(twin.get("set") or {})}
    for protocol in protocols:
        try:
            load_profile(out.get("profile") or DEFAULT_PROFILE[protocol], out["set"], protocol=protocol)
        except LabError as e:
            raise err(raw, "twin", f"twin ({protocol}): {e}") from None
    return out


def _topology(err, raw: dict) -> dict:
    """`topology: {router: true, links: [...]}`, checked by the router's own link parser; {} if absent."""
    topo = raw.get("topology", {}) or {}
    if not isinstance(topo, dict):
        raise err(raw, "topology", "topology must be {router: true, links: [wifi, cell]}")
    _refuse_unknown(err, topo, TOPOLOGY_KEYS, "topology key")
    if not topo:
        return {}
    if topo.get("router") is not True:
        raise err(topo, "router", "topology.router must be true (without a router, leave topology out)")
    try:
        parse_links(topo.get("links", ["wifi"]))
    except LabError as e:
        raise err(topo, "links", str(e)) from None
    return {"router": True, "links": list(topo.get("links", ["wifi"]))}


def _step(err, raw: dict, node: Any, script: list[str], ids: set[str], topology: dict) -> Step:
    """One timeline step, validated against the anchors, actions and fault kinds defined elsewhere."""
    if not isinstance(node, dict):
        raise err(raw, "timeline", f"each timeline step is a mapping, got {node!r}")
    _refuse_unknown(err, node, STEP_KEYS, "step key")
    at = node.get("at")
    if at is None:
        raise err(node, None, "step has no 'at' (an anchor such as tool_call, or step:<id>)")
    # `at` is one anchor, or a list of anchors that must all have happened (the step then waits
    # `plus` after the last of them)
    ats = at if isinstance(at, list) else [at]
    if not ats:
        raise err(node, "at", "at needs at least one anchor")
    for a in ats:
        if not anchors.is_known(a, ids):
            raise err(node, "at", f"unknown anchor {a!r}; known: {', '.join(anchors.known_names(ids))} "
                                  "(a step:<id> must name an earlier step)")
    plus = node.get("plus", 0)
    if not isinstance(plus, (int, float)) or plus < 0:
        raise err(node, "plus", f"plus must be a non-negative number of seconds, got {plus!r}")
    kinds = [k for k in ("say", "fault", "heal", "action") if k in node]
    if len(kinds) != 1:
        raise err(node, None, f"a step does exactly one of say, fault, heal, action (found {kinds or 'none'})")
    step = Step(at="+".join(ats), plus=float(plus), id=node.get("id"), note=node.get("note"), line=getattr(node, "line", 0),
                ats=list(ats))
    if "say" in node:
        n = node["say"]
        if not isinstance(n, int) or not 0 <= n < len(script):
            raise err(node, "say", f"say must be a line index 0..{len(script) - 1} of the script, got {n!r}")
        step.say = n
    elif "fault" in node:
        step.fault = _fault(err, node, node["fault"], topology)
    elif "heal" in node:
        if node["heal"] is not True:
            raise err(node, "heal", "heal takes true")
        step.heal = True
    else:
        a = node["action"]
        if a not in actions.ACTIONS:
            raise err(node, "action", f"unknown action {a!r}; known: {', '.join(actions.known_names())}")
        step.action = a
    for k in ("only_client", "unless_client"):
        if k in node:
            v = node[k]
            v = [v] if isinstance(v, str) else v
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise err(node, k, f"{k} takes a client name or a list of them")
            bad = [x for x in v if not _client_name_ok(x)]
            if bad:
                raise err(node, k, f"unknown client {bad[0]!r} in {k}; known: {_known_clients()}")
            setattr(step, k, v)
    if step.id and step.id in ids:
        raise err(node, "id", f"duplicate step id {step.id!r}")
    return step


def _fault(err, node: dict, f: Any, topology: dict) -> Fault:
    """A fault step's envelope, parsed once, and its spec, checked by netem itself."""
    if not isinstance(f, dict) or f.get("kind") not in fault_registry.REGISTRY:
        raise err(node, "fault", f"fault needs a kind, one of {sorted(fault_registry.REGISTRY)}")
    target = f.get("target", "flow")
    if target not in FAULT_TARGETS:
        raise err(f, "target", f"target must be flow (the open connection) or endpoint, got {target!r}")
    where = f.get("node", "client")
    if where not in FAULT_NODES:
        raise err(f, "node", f"node must be one of {list(FAULT_NODES)} (where the fault runs), got {f.get('node')!r}")
    if where == "router" and not topology:
        raise err(f, "node", "a fault on the router needs topology: {router: true, links: [...]}")
    if where == "router" and any(isinstance(link, dict) for link in topology["links"]):
        # the links' delay/loss live in the orchestrator's table of the router's chains, the
        # step's fault in the agent's: two owners of one chain set would overwrite each other
        raise err(f, "node", "a fault on the router cannot yet go with links that have rtt_ms/loss")
    fault = Fault(spec={k: v for k, v in f.items() if k not in ("target", "node")}, node=where, target=target)
    try:
        fault_registry.check_spec(fault.netem_spec(_PLACEHOLDER_FLOW))
    except (NetemError, LabError) as e:
        raise err(node, "fault", str(e)) from None
    return fault


def _known_clients() -> str:
    return ", ".join(client_registry.names() + frameworks.names()) + ", or a module path pkg.mod:Class"


def _client_name_ok(name: str) -> bool:
    mod, sep, cls = name.partition(":")
    return name in client_registry.names() or name in frameworks.FRAMEWORKS or bool(sep and mod and cls)


def _per_client(err, raw: dict, key: str, what: str) -> dict:
    """client_params / expect: a mapping of client name (or all) to a mapping."""
    val = raw.get(key, {}) or {}
    if not isinstance(val, dict) or not all(isinstance(v, dict) for v in val.values()):
        raise err(raw, key, f"{key} maps a client name (or '{ALL_CLIENTS}') to {what}")
    for who in val:
        if not isinstance(who, str) or not (who == ALL_CLIENTS or _client_name_ok(who)):
            raise err(val, who, f"unknown client {who!r} in {key}; known: {ALL_CLIENTS}, {_known_clients()}")
    return val


def _declared_params(err, cp: dict, who: str) -> set[str]:
    """The parameters `who` declares; for `all`, those any built-in client declares."""
    names = client_registry.names() if who == ALL_CLIENTS else [who]
    declared: set[str] = set()
    for n in names:
        if n in frameworks.FRAMEWORKS:      # an app in its own venv: the parameters its app reads
            declared |= set(frameworks.FRAMEWORKS[n].declared_params())
            continue
        try:
            cls = client_registry.get(n)
        except LabError as e:
            raise err(cp, who, str(e)) from None
        ask = getattr(cls, "declared_params", None)
        if ask is None:
            raise err(cp, who, f"client {n!r} declares no parameters (subclass lab.clients.base.Client and "
                               "list them in DEFAULTS)")
        declared |= set(ask())
    return declared
