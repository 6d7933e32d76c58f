"""The import rules of docs/DESIGN.md, checked on the source (no module is imported here).

- netem imports nothing from lab (it stands alone);
- no import circle among the project's modules (module-level imports);
- the rooms never import the orchestration above them (agent, run, soak, bench, deploy, cli);
- a function-level import of the project's own modules says why, in a comment on the line or
  just above it.
"""
import ast
import collections
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("lab", "netem")
# The orchestration, top down. A module may import those below it in this list, never above.
# lab.deploy's shard and fan-in are entry points of their own (`python -m lab.deploy.shard`), above the CLI.
# The pytest plugin (lab.pytest_plugin) drives lab.run from a user's tests: above the orchestrator, like the CLI.
ORCHESTRATION = ["lab.__main__", "lab.pytest_plugin", "lab.deploy", "lab.cli", "lab.matrix", "lab.bench", "lab.soak", "lab.run", "lab.agent"]


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


def _imports(f: Path, module_level_only: bool):
    tree = ast.parse(f.read_text())
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        for t in _targets(node):
            if _ours(t):
                yield node, t


def _rank(mod: str) -> int | None:
    for i, top in enumerate(ORCHESTRATION):
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
