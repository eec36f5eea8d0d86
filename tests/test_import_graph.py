"""The code's layers (README, developers' guide): data flows one way, cost -> formulations ->
solver, and no module imports itself back through others. Imports inside functions count: a
deferred import hides a cycle from Python, not from the design."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cost", "formulations", "solver")
LAYER = {"cost": 0, "formulations": 1, "solver": 2}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, sub-packages included (solver.commands.cli; a package's
    __init__.py is the package itself, solver.commands)."""
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _graph() -> dict[str, set[str]]:
    files = _modules()
    graph = {}
    for mod, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module.removeprefix("paraplan.")  # the installed namespace
                # from paraplan.solver.commands import cli: the name may be a module
                deps |= {f"{module}.{a.name}" for a in node.names} | {module}
            elif isinstance(node, ast.Import):
                deps |= {a.name.removeprefix("paraplan.") for a in node.names}
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def test_sub_packages_are_in_the_graph():
    assert {"solver.commands.cli", "solver.report.page", "solver.sweep.run",
            "solver.bench.ladder"} <= set(_graph())


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (depth-first search, colouring nodes)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycles():
    graph = _graph()
    assert sum(len(deps) for deps in graph.values()) > 100  # the walk sees the imports at all
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_data_flows_one_way():
    upward = sorted(f"{m} imports {d}" for m, deps in _graph().items() for d in deps
                    if LAYER[d.split(".")[0]] > LAYER[m.split(".")[0]])
    assert not upward, upward
