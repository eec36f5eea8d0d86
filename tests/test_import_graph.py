"""The code's layers (README, developers' guide): data flows one way, cost -> formulations ->
solver, and no module imports itself back through others. Imports inside functions count: a
deferred import hides a cycle from Python, not from the design."""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

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


@functools.lru_cache(maxsize=None)
def _graph() -> Mapping[str, frozenset[str]]:
    """Module -> the modules it imports, deferred imports included. Parsed once per test process
    and read only (a frozen view): five tests read it, each parse of the source tree about 1 s of
    CPU (issue 32)."""
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
        graph[mod] = frozenset(d for d in deps if d in files and d != mod)
    return MappingProxyType(graph)


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


def _room(module: str) -> str:
    """The room a module lives in: its sub-folder (solver.commands.cli -> solver.commands,
    cost.docs.schema -> cost.docs), or the module itself where it sits at a package's top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        rooms.setdefault(_room(mod), set()).update(_room(d) for d in deps if _room(d) != _room(mod))
    return rooms


def _tangles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The sets of nodes that reach each other (strongly connected components of more than
    one node): every cycle lies inside one (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: set[frozenset[str]] = set()

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if d not in index:
                visit(d)
                low[n] = min(low[n], low[d])
            elif d in stack:
                low[n] = min(low[n], index[d])
        if low[n] == index[n]:
            part = {stack.pop()}
            while n not in part:
                part.add(stack.pop())
            if len(part) > 1:
                out.add(frozenset(part))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


# Tangles left to the branch that owns them: the bounds read the declared space and the
# partition tables (bounds.memory -> space, bounds.unpriced -> partition_plans), which read the
# bounds back (space -> class_partitions -> bounds.one_class, partition_plans -> bounds.one_class).
# The test fails when one of them is untangled, so that the entry goes with it.
KNOWN_TANGLES = {frozenset({"solver.bounds", "solver.space", "solver.class_partitions",
                            "solver.partition_plans"})}


def test_no_cycles_between_rooms():
    """A sub-folder is one room (solver.commands, solver.report, solver.export, solver.sweep,
    solver.bench, solver.bounds, cost.docs), each top-level module its own; no two rooms import
    each other, directly or around a circle: report/, export/ and sweep/ render and drive, and
    commands/ sits above them (docs/python-api.md, Code layout)."""
    rooms = _rooms(_graph())
    assert {"solver.commands", "solver.report", "solver.export", "cost.docs"} <= set(rooms)
    assert _tangles(rooms) == KNOWN_TANGLES


RENDER_ROOMS = ("solver.report", "solver.export", "solver.sweep", "solver.bench")


def _imports_of_commands(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in graph.items() if _room(m) in RENDER_ROOMS
                  for d in deps if _room(d) == "solver.commands")


def test_render_rooms_never_import_commands():
    """report/, export/, sweep/ and bench/ render and drive only; commands/ sits above them and
    passes them what they need (the sweep's per-job JSON is solver/result_json.py, below both),
    so none of their modules imports a command module, deferred imports included."""
    graph = _graph()
    assert {m for m in graph if _room(m) == "solver.sweep"}  # the rooms are seen at all
    assert _imports_of_commands(graph) == []


def test_commands_import_finder_finds_a_planted_one():
    assert _imports_of_commands({"solver.sweep.run": {"solver.commands.planning", "solver.format"},
                                 "solver.commands.cli": {"solver.sweep.run"}}) == \
        ["solver.sweep.run imports solver.commands.planning"]


def test_tangle_finder_finds_planted_tangles():
    # a -> b -> c -> a and d <-> e are two tangles; f hangs off c and is in none
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "f"}, "d": {"e"}, "e": {"d"}, "f": set()}
    assert _tangles(graph) == {frozenset("abc"), frozenset("de")}
    assert _rooms({"solver.commands.cli": {"solver.report.page", "solver.format"},
                   "solver.report.page": {"solver.commands.outputs"}}) == \
        {"solver.commands": {"solver.report", "solver.format"}, "solver.report": {"solver.commands"}}
