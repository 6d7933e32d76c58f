"""The import rules of docs/DESIGN.md, checked on the source (no module is imported here).

- netem imports nothing from lab (it stands alone);
- no import circle among the project's modules (module-level imports);
- the rooms never import the orchestration above them (agent, run, soak, bench, deploy, cli);
- a function-level import of the project's own modules says why, in a comment on the line or
  just above it.

A module loaded by name is an import too, and these checks see it: importlib.import_module("x"),
__import__("x") and runpy.run_module("x") with a literal name (a package runs its __main__), a process
started as `-m x` (adjacent "-m", "x" in an argv, or "-m x" inside a string), and a string that is
exactly one of the project's dotted module names (a registry the code imports from by name, such as
the CLI's subcommand list). Docstrings are prose, not loads. `-m lab COMMAND` is the lab's command
line, what a user types, dispatched by the CLI by name: starting it is not an arrow to a module.
"""
import ast
import collections
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("lab", "netem")
# The orchestration, top down. A module may import those below it in this list, never above.
# lab.deploy's shard and fan-in are entry points of their own (`python -m lab.deploy.shard`), above the CLI.
# The pytest plugin (lab.pytest_plugin) drives lab.run from a user's tests: above the orchestrator, like the CLI.
# A tuple is one level. The top: the program's two entry points, `python -m lab` (lab.__main__) and the
# fork server it becomes as `python -m lab fork-server SOCKET` (lab.forkserver.server), which
# pre-imports the CLI and the agent and runs `python -m lab` in its children. The fork server's client
# and protocol (the rest of lab.forkserver) are what lab.run imports to start it: the bottom of the
# orchestration, above the rooms whose processes it starts.
ORCHESTRATION = [("lab.__main__", "lab.forkserver.server"), "lab.pytest_plugin", "lab.deploy", "lab.cli",
                 "lab.matrix", "lab.bench", "lab.soak", "lab.run", "lab.agent", "lab.forkserver"]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (REPO / pkg).rglob("*.py"):
            parts = list(f.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


MODULES = _modules()


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return []


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


LOADERS = {"import_module", "__import__", "run_module"}     # importlib's, the builtin, runpy's
DASH_M = re.compile(r"(?:^|\s)-m\s+((?:lab|netem)(?:\.\w+)+)")


def _as_loaded(name: str, runs_main: bool) -> str:
    """The module a by-name load executes: a package run as a program runs its __main__."""
    if runs_main and f"{name}.__main__" in MODULES:
        return f"{name}.__main__"
    return name


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _string_loads(tree: ast.AST):
    """(node, module) for every module of ours the source loads or starts by name (see the docstring)."""
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if fn in LOADERS:
                yield node, _as_loaded(node.args[0].value, fn == "run_module")
        elif isinstance(node, (ast.List, ast.Tuple)):
            elts = node.elts
            for a, b in zip(elts, elts[1:]):
                if isinstance(a, ast.Constant) and a.value == "-m" and isinstance(b, ast.Constant) \
                        and isinstance(b.value, str) and "." in b.value:
                    yield node, _as_loaded(b.value, True)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            for m in DASH_M.finditer(node.value):
                yield node, _as_loaded(m.group(1), True)
            if "." in node.value and node.value in MODULES:
                yield node, node.value


def _imports(f: Path, module_level_only: bool):
    tree = ast.parse(f.read_text())
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        for t in _targets(node):
            if _ours(t):
                yield node, t
    if not module_level_only:       # a load by name is lazy: no part of an import circle
        for node, t in _string_loads(tree):
            if _ours(t):
                yield node, t


def _rank(mod: str) -> int | None:
    for i, level in enumerate(ORCHESTRATION):
        for top in (level if isinstance(level, tuple) else (level,)):
            if mod == top or mod.startswith(top + "."):
                return i
    return None


def test_netem_imports_nothing_from_lab():
    bad = [f"{m}: {t}" for m, f in MODULES.items() if m.startswith("netem")
           for _, t in _imports(f, module_level_only=False) if t.startswith("lab")]
    assert not bad, bad


def test_no_import_circle():
    graph = collections.defaultdict(set)
    for m, f in MODULES.items():
        for _, t in _imports(f, module_level_only=True):
            if t in MODULES and t != m:
                graph[m].add(t)
    state: dict[str, int] = {}
    circles = []

    def visit(u, path):
        state[u] = 1
        path.append(u)
        for v in graph[u]:
            if state.get(v) == 1:
                circles.append(path[path.index(v):] + [v])
            elif not state.get(v):
                visit(v, path)
        path.pop()
        state[u] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [])
    assert not circles, circles


def test_rooms_never_import_the_orchestration_above_them():
    bad = []
    for m, f in MODULES.items():
        mine = _rank(m)
        for _, t in _imports(f, module_level_only=False):
            theirs = _rank(t)
            if theirs is not None and (mine is None or theirs < mine) and not t.startswith(m):
                bad.append(f"{m} imports {t}")
    assert not bad, bad


def test_function_level_imports_of_our_modules_say_why():
    bad = []
    for m, f in MODULES.items():
        lines = f.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if any(_ours(t) for t in _targets(node)):
                    near = lines[max(0, node.lineno - 4):node.lineno]
                    if not any("#" in line for line in near):
                        bad.append(f"{f.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not bad, "\n".join(bad)


def test_the_checks_see_the_tree():
    assert "lab.run" in MODULES and "netem.faults" in MODULES and len(MODULES) > 50


def test_the_checks_see_loads_by_name():
    src = '''"""python -m lab.agent in a docstring is prose."""
import importlib, runpy, subprocess, sys
importlib.import_module("lab.cli")
runpy.run_module("lab", run_name="__main__")
subprocess.Popen([sys.executable, "-m", "lab.agent", "--run-dir", "x"])
subprocess.Popen([sys.executable, "-m", "lab", "twin", "serve"])
CMD = f"exec python -m lab.deploy.shard {1}"
REGISTRY = ["lab.soak"]
'''
    found = sorted({t for _, t in _string_loads(ast.parse(src))})
    assert found == ["lab.__main__", "lab.agent", "lab.cli", "lab.deploy.shard", "lab.soak"]
    assert _rank("lab.forkserver.server") == _rank("lab.__main__") < _rank("lab.cli") < _rank("lab.forkserver")


def test_the_lab_enters_namespaces_one_way():
    # netem.kernel.in_netns (a thread, for netlink and sockets) or lab.topology.nsenter (a forked
    # process, as `ip netns exec`), never pyroute2's forking helpers: in_netns says why
    helpers = {"NetNS", "create", "setns", "pushns"}     # pyroute2's, and its netns module
    bad = []
    for m, f in MODULES.items():
        if not m.startswith("lab"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pyroute2"):
                bad += [f"{m}: from {node.module} import {a.name}" for a in node.names
                        if a.name in helpers or a.name == "netns"]
    assert not bad, bad
