"""Twin profiles: every behavioural parameter with its value and the seed finding it comes from.

A profile is a YAML file in lab/twin/profiles/ (or any path). Each parameter is
`name: {value: ..., source: "..."}`; `extends: other` inherits another profile's parameters.
A value [lo, hi] (two numbers) is a range, drawn uniformly per event with `draw()`.

Overrides (`--set name=value`) are parsed as YAML scalars/lists and must match the type of the
parameter they replace; an unknown name or a wrong type raises LabError (one line in the CLI).
Pure: reads files, no network, no clocks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from lab.errors import LabError

PROFILE_DIR = Path(__file__).with_name("profiles")


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

    def __getitem__(self, name: str) -> Any:
        try:
            return self.params[name].value
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no parameter {name!r}") from None

    def get(self, name: str, default: Any = None) -> Any:
        p = self.params.get(name)
        return default if p is None else p.value

    def draw(self, name: str, rng: random.Random) -> float:
        """A number from the parameter: a range [lo, hi] is drawn uniformly, a number is itself."""
        v = self[name]
        if is_range(v):
            lo, hi = float(v[0]), float(v[1])
            return lo if hi <= lo else rng.uniform(lo, hi)
        if v is None:
            raise KeyError(f"parameter {name!r} is null")
        return float(v)

    def source(self, name: str) -> str:
        return self.params[name].source

    def as_dict(self) -> dict[str, Any]:
        return {k: p.value for k, p in self.params.items()}

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str] | None) -> "Profile":
        """A copy with overrides applied: a mapping name -> value, or 'name=value' strings."""
        out = Profile(self.name, self.description,
                      {k: Param(p.name, p.value, p.source, p.overridden) for k, p in self.params.items()})
        for name, value in _override_items(overrides):
            if name not in out.params:
                raise LabError(f"unknown twin parameter {name!r} (profile {self.name}); "
                               f"known: {', '.join(sorted(out.params))}")
            old = out.params[name]
            value = _coerce(name, old.value, value)
            out.params[name] = Param(name, value, f"override (was {old.value!r}; {old.source})", True)
        return out


def is_range(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and len(v) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))


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


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _coerce(name: str, old: Any, new: Any) -> Any:
    """Check an override against the default's type; numbers and ranges are interchangeable."""
    if old is None or new is None:
        return new  # a null default (a switch that is off) accepts any value, and anything can be nulled
    if _is_num(old) or is_range(old):
        if _is_num(new) or is_range(new):
            return list(new) if isinstance(new, tuple) else new
        if isinstance(new, str):
            try:
                return float(new)
            except ValueError:
                pass
        raise LabError(f"bad value for {name}: {new!r} (expected a number or [lo, hi])")
    if isinstance(old, bool):
        if isinstance(new, bool):
            return new
        raise LabError(f"bad value for {name}: {new!r} (expected true or false)")
    if isinstance(old, str):
        if isinstance(new, (str, int, float)) and not isinstance(new, bool):
            return str(new)
        raise LabError(f"bad value for {name}: {new!r} (expected a string)")
    if isinstance(old, list):
        if isinstance(new, list):
            return new
        if isinstance(new, str):
            return [x.strip() for x in new.split("|")]
        raise LabError(f"bad value for {name}: {new!r} (expected a list)")
    return new


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
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


def load_profile(name_or_path: str = "developer-api", overrides=None, _seen: tuple = ()) -> Profile:
    path = _resolve(name_or_path)
    if path in _seen:
        raise LabError(f"twin profile {path}: 'extends' loops")
    data = _read(path)
    params: dict[str, Param] = {}
    if data.get("extends"):
        base = load_profile(str(data["extends"]), None, _seen + (path,))
        params.update(base.params)
    for name, spec in data["params"].items():
        if not isinstance(spec, dict) or "value" not in spec or not spec.get("source"):
            raise LabError(f"twin profile {path}: parameter {name!r} needs 'value' and 'source'")
        params[name] = Param(name, spec["value"], str(spec["source"]))
    prof = Profile(str(data.get("name") or path.stem), str(data.get("description") or ""), params)
    return prof.with_overrides(overrides)
