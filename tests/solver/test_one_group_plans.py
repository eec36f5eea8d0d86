"""A homogeneous cluster is a one-group cluster (issue 12): the class planner plans it.

Until the homogeneous planner was deleted, the one-group class space was checked here against
the homogeneous space enumerated independently (solver/space.py), outer configuration for
outer configuration and plan for plan, on every bundled and random agreement instance,
mixture-of-experts ones included (ep > 1 in both); the goldens (tests/goldens) keep the space
sizes, optima and plans the homogeneous planner gave. What stays here: random instances whose
optimum runs fewer micro-batches than pipeline stages, which the class space refused before (a
lone class now runs the count the batch gives it), against CP-SAT, the MILP, the DP and
exhaustive search, and against the homogeneous simulator.
"""

from __future__ import annotations

import pytest
from randinst import random_instance

from paraplan.cost.specs import Instance
from paraplan.cost.simulate import simulate
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search


# Agreement seeds whose optimum has fewer micro-batches than stages (found by the homogeneous
# planner at the commit that made the class space equal; re-checked below by exhaustive search,
# so a change that moves them fails here rather than silently testing m >= pp).
FEW_MICRO_BATCH_SEEDS = (1014, 1019, 1020, 1034, 1045, 1059)


@pytest.mark.parametrize("seed", FEW_MICRO_BATCH_SEEDS)
def test_one_group_plans_fewer_micro_batches_than_stages(seed):
    inst = random_instance(seed, variant=True)
    het_inst = inst
    ex = exhaustive(het_inst)
    (c,) = ex.plan.classes
    assert c.num_micro_batches < len(c.stage_groups)
    for backend in ("dp", "cpsat", "milp"):
        het = search(het_inst, backend=backend)
        assert het.status == "optimal"
        tol = het.tolerance_s + 1e-9 * ex.objective_s
        assert het.objective_s == pytest.approx(ex.objective_s, abs=tol)
        # the plan the homogeneous simulator prices at the same time (cost/simulate.py)
        bd = simulate(inst, het.plan, reserve_bytes=inst.search.memory_reserve_bytes)
        assert bd.fits and bd.iter_time_s == pytest.approx(het.objective_s, rel=1e-9)
