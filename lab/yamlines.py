"""Line-aware YAML: load a data file so every error can name `file:line`.

Scenarios and conversations are both user-written YAML validated before anything runs; both report
a bad key or value at its line, and both refuse unknown keys with a near-miss suggestion. This is the
one loader and the one way of saying so.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable

import yaml

from lab.errors import ScenarioError


class Lined(dict):
    """A mapping that remembers the line of each key (1-based) and its own line."""
    line: int = 0
    lines: dict


class Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: Loader, node: yaml.MappingNode) -> Lined:
    loader.flatten_mapping(node)
    out = Lined()
    out.line = node.start_mark.line + 1
    out.lines = {}
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        if key in out:
            raise ScenarioError(f"line {knode.start_mark.line + 1}: duplicate key {key!r}")
        out[key] = loader.construct_object(vnode, deep=True)
        out.lines[key] = knode.start_mark.line + 1
    return out


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(path: Path, error: type[ScenarioError] = ScenarioError) -> Any:
    """The file's YAML with line-aware mappings; a syntax error or a duplicate key as `path:line: ...`."""
    try:
        return yaml.load(path.read_text(), Loader=Loader)
    except ScenarioError as e:
        raise error(f"{path}:{str(e).removeprefix('line ')}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise error(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None


def errs(path: str, error: type[ScenarioError] = ScenarioError) -> Callable[[Any, Any, str], ScenarioError]:
    """err(node, key, msg): an error at the line of `key` in `node` (or the node's own line)."""
    def err(node: Any, key: Any, msg: str) -> ScenarioError:
        line = getattr(node, "lines", {}).get(key) if key is not None else None
        line = line or getattr(node, "line", 0)
        return error(f"{path}:{line}: {msg}")
    return err


def near(name: Any, known) -> str:
    """' (did you mean x?)' for a near miss, else ''."""
    hit = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {hit[0]}?)" if hit else ""


def refuse_unknown(err, node: dict, known: set[str], what: str) -> None:
    for k in node:
        if k not in known:
            raise err(node, k, f"unknown {what} {k!r}{near(k, known)}; expected one of {', '.join(sorted(known))}")
