"""Twin profiles: every behavioural parameter with its value and the seed finding it comes from.

A profile is a YAML file in lab/twin/profiles/ (or any path). Each parameter is
`name: {value: ..., source: "..."}`; `extends: other` inherits another profile's parameters.
`protocol:` (gemini, the default, or openai) says which wire the profile is for and so which names
it carries (lab.twin.params.declared_for). A profile that extends one of another protocol inherits
only the names both share, each source marked an assumption: a figure measured on one service
stands in for the other until someone measures it.
A delay's value [lo, hi] (two numbers) is a range, drawn uniformly per event with `draw()`; a
mapping {min: .., pNN: .., max: ..} is a recorded distribution (lab.stats.quantiles), sampled per
event by inverse CDF.

Every name and value is checked against the twin's declarations (lab.twin.params) as the profile
loads: an unknown name, a value of the wrong shape, or a declared parameter the profile lacks
raises LabError (one line and exit 2 in the CLI), before anything listens. Overrides
(`--set name=value`) are parsed as YAML scalars/lists and checked the same way.

This room reads files; it knows nothing of sockets, clocks or sessions.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

import yaml

from lab.errors import LabError
from lab.stats.distributions import bounds, draw, is_range
from lab.twin.params import DECLARED, GEMINI, PROTOCOLS, UnknownParameter, declared_for, read_view, spec_of

PROFILE_DIR = Path(__file__).with_name("profiles")

__all__ = ["Param", "Profile", "available_profiles", "bounds", "is_range", "load_profile", "PROFILE_DIR"]

V = TypeVar("V")


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


@dataclass
class Param:
    name: str
    value: Any
    source: str
    overridden: bool = False


@dataclass
class Profile:
    name: str
    description: str = ""
    params: dict[str, Param] = field(default_factory=dict)
    protocol: str = GEMINI

    def __getitem__(self, name: str) -> Any:
        try:
            return self.params[name].value
        except KeyError:
            raise UnknownParameter(f"profile {self.name!r} has no parameter {name!r}") from None

    def get(self, name: str, default: Any = None) -> Any:
        p = self.params.get(name)
        return default if p is None else p.value

    def draw(self, name: str, rng: random.Random) -> float:
        """A number from the parameter: a quantile table is sampled, a range [lo, hi] is drawn
        uniformly, a number is itself (lab.stats.distributions.draw)."""
        v = self[name]
        if v is None:
            raise KeyError(f"parameter {name!r} is null")
        return draw(v, rng)

    def source(self, name: str) -> str:
        return self.params[name].source

    def as_dict(self) -> dict[str, Any]:
        return {k: p.value for k, p in self.params.items()}

    def view(self, cls: type[V]) -> V:
        """A room's frozen dataclass of the parameters it reads (lab.twin.params.read_view)."""
        return read_view(cls, self.as_dict())

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str] | None) -> "Profile":
        """A copy with overrides applied: a mapping name -> value, or 'name=value' strings."""
        out = Profile(self.name, self.description,
                      {k: Param(p.name, p.value, p.source, p.overridden) for k, p in self.params.items()},
                      self.protocol)
        for name, value in _override_items(overrides):
            spec = spec_of(name)        # UnknownParameter (a LabError) lists the known names
            if name not in out.params:
                raise UnknownParameter(f"twin parameter {name!r} is not one of the {self.protocol} protocol's "
                                       f"(profile {self.name!r})")
            old = out.params[name]
            out.params[name] = Param(name, spec.check(name, value), f"override (was {old.value!r}; {old.source})",
                                     True)
        return out


def _override_items(overrides) -> list[tuple[str, Any]]:
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        return list(overrides.items())
    items = []
    for s in overrides:
        if not isinstance(s, str) or "=" not in s:
            raise LabError(f"bad --set {s!r}: expected name=value")
        name, _, raw = s.partition("=")
        name = name.strip()
        if not name:
            raise LabError(f"bad --set {s!r}: empty name")
        try:
            value = yaml.safe_load(raw) if raw.strip() != "" else ""
        except yaml.YAMLError as e:
            raise LabError(f"bad --set {s!r}: {str(e).splitlines()[0]}")
        items.append((name, value))
    return items


# libyaml's parser where PyYAML has it: the same safe documents, ~7x faster (a profile is read at
# every twin start, twice; 0.1-0.2 s each on a loaded machine with the pure-Python one)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(), Loader=_SAFE_LOADER)
    except OSError as e:
        raise LabError(f"cannot read twin profile {path}: {e.strerror}")
    except yaml.YAMLError as e:
        raise LabError(f"twin profile {path} is not valid YAML: {str(e).splitlines()[0]}")
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise LabError(f"twin profile {path}: expected a mapping with 'params'")
    return data


def _resolve(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    cand = PROFILE_DIR / f"{name_or_path}.yaml"
    if cand.exists():
        return cand
    raise LabError(f"unknown twin profile {name_or_path!r} (available: {', '.join(available_profiles())})")


def _protocol(path: Path, data: dict) -> str:
    protocol = str(data.get("protocol") or GEMINI)
    if protocol not in PROTOCOLS:
        raise LabError(f"twin profile {path}: unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return protocol


def _load(path: Path, seen: tuple) -> tuple[dict, dict[str, Param]]:
    """The file's data and its parameters merged over the ones it extends, each name and value checked."""
    if path in seen:
        raise LabError(f"twin profile {path}: 'extends' loops")
    data = _read(path)
    protocol = _protocol(path, data)
    own = set(declared_for(protocol))
    params: dict[str, Param] = {}
    if data.get("extends"):
        parent_path = _resolve(str(data["extends"]))
        parent_data, parent = _load(parent_path, seen + (path,))
        if _protocol(parent_path, parent_data) == protocol:
            params.update(parent)
        else:
            # another service's figure: kept, but said to be an assumption for this one
            who = parent_data.get("name") or parent_path.stem
            params.update({n: Param(n, p.value, f"assumption: {who}'s value, unmeasured here ({p.source})")
                           for n, p in parent.items() if n in own})
    for name, spec in data["params"].items():
        if not isinstance(spec, dict) or "value" not in spec or not spec.get("source"):
            raise LabError(f"twin profile {path}: parameter {name!r} needs 'value' and 'source'")
        if name not in DECLARED:
            raise UnknownParameter(f"twin profile {path}: unknown parameter {name!r}; "
                                   f"known: {', '.join(sorted(DECLARED))}")
        if name not in own:
            raise UnknownParameter(f"twin profile {path}: parameter {name!r} is not one of the {protocol} protocol's")
        try:
            value = DECLARED[name].check(name, spec["value"])
        except LabError as e:
            raise LabError(f"twin profile {path}: {e}") from None
        params[name] = Param(name, value, str(spec["source"]))
    return data, params


def load_profile(name_or_path: str = "developer-api", overrides=None, protocol: str | None = GEMINI) -> Profile:
    """`protocol`: the one the caller serves (a profile of another is refused with one line);
    None takes a profile of either (`lab twin serve` checks it against --protocol itself)."""
    path = _resolve(name_or_path)
    data, params = _load(path, ())
    own = _protocol(path, data)
    if protocol is not None and own != protocol:
        raise LabError(f"twin profile {path.stem!r} is for the {own} protocol, not {protocol}"
                       + (" (lab twin serve --protocol openai)" if own != GEMINI else ""))
    names = declared_for(own)
    missing = sorted(set(names) - set(params))
    if missing:
        raise LabError(f"twin profile {path}: missing parameters {', '.join(missing)}")
    # the declared order, so --list-params and the twin's logs read the same for every profile
    ordered = {n: params[n] for n in names}
    prof = Profile(str(data.get("name") or path.stem), str(data.get("description") or ""), ordered, own)
    return prof.with_overrides(overrides)
