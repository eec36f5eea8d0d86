"""Issue 33, "a start-up that does not dominate": `paraplan plan` with the default backend (the
exact split DP) loads neither OR-Tools nor PuLP. OR-Tools' CP-SAT module imports pandas with it:
about 0.2 s of a fresh process's start-up that the default backend never uses (GPT-3 175B on
1,024 A100, the whole command: 2.19 -> 1.72 s of CPU, median of 5, once it moved into the
functions that solve with it). The solvers' own backends still load them, which the second
case checks, so the first cannot pass by checking the wrong module names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CODE = """
import contextlib, io, json, sys
from paraplan.solver.commands.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["plan", {path!r}, "--quiet", *{argv!r}])
print(json.dumps({{"code": code, "loaded": sorted({{m.split(".")[0] for m in sys.modules}}
                                                & {{"ortools", "pulp", "pandas"}})}}))
"""


def _loaded(path: Path, argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CODE.format(path=str(path), argv=argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["tiny-gpt-8xA100.yaml", "mixtral-8x7b-64xH100.yaml"])
def test_the_default_backend_imports_no_solver_library(name):
    got = _loaded(ROOT / "instances" / name, [])
    assert got == {"code": 0, "loaded": []}, got


@pytest.mark.parametrize("backend,library", [("dp", "ortools"), ("cpsat", "ortools"), ("milp", "pulp")])
def test_a_solver_backend_still_imports_its_library(backend, library):
    # a mixed cluster: its configurations of several replica classes are solved by CP-SAT (the
    # split DP takes a lone class only, so "dp" hands them to CP-SAT) or by the MILP; on the
    # bundled one-GPU-type instances the tight bound and the DP's cutoff prune every
    # configuration before a solver runs, whatever the backend
    got = _loaded(ROOT / "instances" / "hetero" / "tiny-2types.yaml", ["--backend", backend])
    assert got["code"] == 0 and library in got["loaded"], got
