"""The product never imports from tests/: the full readings that tests check the fast ones
against live in tests/oracles/ (issue 32), and cost/, formulations/ and solver/ must run where
tests/ is not installed. Deferred imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cost", "formulations", "solver")


def _test_modules() -> set[str]:
    """The top-level names a test can import from tests/ (its sys.path entry, conftest.py's
    folder): its modules and packages, and the folder itself as `tests`."""
    here = ROOT / "tests"
    return {"tests"} | {p.stem for p in here.glob("*.py")} | {p.name for p in here.iterdir()
                                                             if (p / "__init__.py").is_file()}


def _imports_from(source: str, names: set[str]) -> list[str]:
    """The imports of `source` whose top-level module is one of `names`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods = [node.module]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        out += [f"line {node.lineno}: {m}" for m in mods if m.split(".")[0] in names]
    return out


def test_the_check_sees_an_import_from_tests():
    names = _test_modules()
    assert {"oracles", "randinst", "tests"} <= names
    planted = "import numpy\n\ndef f():\n    from oracles.bounds import least_levels\n    import randinst\n"
    assert _imports_from(planted, names) == ["line 4: oracles.bounds", "line 5: randinst"]


def test_the_product_never_imports_from_tests():
    names = _test_modules()
    found = [f"{path.relative_to(ROOT)} {hit}" for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             for hit in _imports_from(path.read_text(), names)]
    assert not found, found
