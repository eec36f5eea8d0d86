"""Determinism and honest failure: the same instance and options give the same plan and the
same numbers, run after run and with 1 or N threads; a crashing backend is a clear
SolverError while the other backend keeps working."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundled_plans import bundled_instance, bundled_optimum, same_worker

from paraplan.formulations.result import SolverError
from paraplan.solver.solve import solve
from paraplan.solver.commands import cli

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = ["tiny-gpt-8xA100", "small-gpt-16xA100", "llama3-70b-512xH100"]
# a guard against a hang, not part of the checks: beside about fifteen other jobs on two cores
# Llama-3 70B's DP search (3.5 s of CPU) ran out the 60 s default and stopped unproved (status
# feasible, a false failure on main and on this branch alike)
GUARD_LIMIT_S = 600.0


def _instance(name: str):
    """The bundled instance, read once per test process (a frozen record, shared)."""
    return bundled_instance(name)


def _first_solve(name: str, backend: str):
    """solve(inst, backend) on one thread, once per test process: the determinism cases' first
    run and the backends' agreement below are the same call (issue 32: the agreement test
    planned Llama-3 70B with the DP again, ~3.5 s of CPU), and Llama-3 70B's DP solve is its
    golden's too (tests/bundled_plans.py). Read only."""
    return bundled_optimum(name, backend)


def _key(res):
    return (res.status, res.plan, res.iter_time_s, res.bound_s, res.solved, res.pruned_by_bound)


# every backend on the small instances; the large one on the default backend (three runs of it
# on the class route, which prices afresh each time, take ~10 s per backend)
RUNS = [(n, b) for n in INSTANCES for b in ("dp", "cpsat", "milp") if b == "dp" or n != INSTANCES[-1]]
# the large instance takes over 5 s: slow (CI runs it; -m "not slow" leaves it out)
RUNS = [pytest.param(n, b, marks=[pytest.mark.slow, same_worker(n)]) if n == INSTANCES[-1] else (n, b)
        for n, b in RUNS]


@pytest.mark.parametrize(("name", "backend"), RUNS)
def test_same_answer_every_run_and_any_thread_count(name, backend):
    # `paraplan plan`'s route (solver/solve.py: the class planner, which prices afresh
    # on every call)
    inst = _instance(name)
    first = _first_solve(name, backend)
    again = solve(inst, backend=backend, threads=1, time_limit_s=GUARD_LIMIT_S)
    parallel = solve(inst, backend=backend, threads=3, time_limit_s=GUARD_LIMIT_S)
    assert first.status == "optimal"
    assert _key(first) == _key(again)
    # with threads the visiting order within a batch changes how many solves run, never the answer
    assert (parallel.status, parallel.plan, parallel.iter_time_s) == (first.status, first.plan, first.iter_time_s)


@pytest.mark.slow
@same_worker(INSTANCES[-1])
def test_backends_agree_on_bundled_instances():
    for name in INSTANCES:
        a = _first_solve(name, "cpsat")
        b = _first_solve(name, "milp")
        d = _first_solve(name, "dp")
        assert a.iter_time_s == pytest.approx(b.iter_time_s, rel=1e-9, abs=a.tolerance_s + b.tolerance_s)
        assert d.iter_time_s == pytest.approx(a.iter_time_s, rel=1e-9, abs=a.tolerance_s + d.tolerance_s)


def test_crashing_backend_is_a_clear_error_and_the_other_still_works(monkeypatch, capsys):
    """`paraplan plan` with the MILP crashing where the class planner calls it."""
    from paraplan.solver import search

    def crash(*args, **kwargs):
        raise SolverError("backend 'cbc' failed: simulated crash")

    real_inner = search._solve_inner
    monkeypatch.setattr(search, "_solve_inner",
                        lambda p, b, *a, **k: crash() if b == "milp" else real_inner(p, b, *a, **k))
    # the tight bound and the DP's cutoff would settle it without a MILP solve
    monkeypatch.setattr(search, "_cannot_win_alone", lambda *a, **k: False)
    path = str(ROOT / "instances" / "llama3-70b-512xH100.yaml")
    code = cli.main(["plan", path, "--backend", "milp"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == cli.EXIT_SOLVER
    assert len(err) == 1 and "simulated crash" in err[0] and "--backend cpsat" in err[0]
    monkeypatch.undo()
    assert cli.main(["plan", path, "--backend", "cpsat", "--json"]) == 0
