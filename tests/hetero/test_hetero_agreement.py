"""CP-SAT, MILP and exhaustive search agree on random small heterogeneous instances, for the
nominal, robust and expected objectives; the exhaustive optimum is the independent reference
(solver/hetero_exhaustive.py enumerates every micro-batch vector, split and recompute count)."""

from __future__ import annotations

import math

import pytest
from randinst import random_hetero_instance

from paraplan.solver.hetero_exhaustive import hetero_exhaustive
from paraplan.solver.hetero_planner import plan_hetero

SEEDS = range(40)


def _close(a, b, tol) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol + 1e-9 * max(1.0, b)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("objective", ["nominal", "robust", "expected"])
def test_solvers_match_exhaustive(seed, objective):
    inst = random_hetero_instance(seed)
    ex = hetero_exhaustive(inst, objective)
    for backend in ("cpsat", "milp"):
        res = plan_hetero(inst, backend, time_limit_s=30, objective=objective)
        assert res.status in ("optimal", "infeasible"), (backend, res.status)
        assert _close(res.objective_s, ex.objective_s, res.tolerance_s), (backend, res.objective_s, ex.objective_s)
        if res.objective_s is not None:
            assert res.bound_s <= res.objective_s + 1e-12
            # the objective aggregates the re-simulated per-scenario times
            per = res.per_scenario_s
            if objective == "robust":
                assert math.isclose(res.objective_s, max(per), rel_tol=1e-9)
            if objective == "expected":
                w = [s.probability for s in inst.scenarios]
                assert math.isclose(res.objective_s, sum(a * b for a, b in zip(w, per)), rel_tol=1e-9)


def test_random_instances_exercise_the_space():
    """The seeds cover both families, multi-class plans, recompute and infeasibility, so the
    agreement above is not vacuous."""
    seen = {"stage": 0, "replica": 0, "recompute": 0, "infeasible": 0, "two_groups": 0}
    for seed in SEEDS:
        ex = hetero_exhaustive(random_hetero_instance(seed))
        if ex.plan is None:
            seen["infeasible"] += 1
            continue
        seen[ex.plan.family] += 1
        seen["recompute"] += any(any(c.full_recompute_layers) for c in ex.plan.classes)
        seen["two_groups"] += len({g for c in ex.plan.classes for g in c.stage_groups}) == 2
    assert all(v > 0 for v in seen.values()), seen
