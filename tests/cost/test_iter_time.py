"""cost/simulate.iter_time_s, the iteration time without simulate's breakdown (what
cost/moe_fit's grid reads), is simulate's own iteration time to the bit on the plans the
planner returns: random small homogeneous instances (one class) and random mixed clusters
(several classes across node groups), their exhaustive optima."""

from __future__ import annotations

import pytest

from agreement_support import random_cluster_case, random_cluster_optimum
from paraplan.cost.errors import ConfigError
from paraplan.cost.simulate import iter_time_s, simulate
from paraplan.solver.exhaustive import exhaustive
from randinst import random_instance


def _plans():
    for seed in range(8):
        inst = random_instance(seed)
        yield inst, exhaustive(inst).plan
    # optima of two classes (7, 18, 28) and of one class whose stages span both groups (16, 21)
    for seed in (7, 16, 18, 21, 28):
        yield random_cluster_case(seed), random_cluster_optimum(seed).plan


def test_iter_time_is_the_simulated_time_to_the_bit():
    compared = classes = spans = 0
    for inst, plan in _plans():
        if plan is None:
            continue
        for reserve_bytes in (None, 0.0):
            assert iter_time_s(inst, plan, reserve_bytes=reserve_bytes) == \
                simulate(inst, plan, reserve_bytes=reserve_bytes).iter_time_s, inst.name
        compared += 1
        classes = max(classes, len(plan.classes))
        spans += any(len(set(k.stage_groups)) > 1 for k in plan.classes)
    # not vacuous: several classes, and classes across groups, too
    assert compared >= 8 and classes >= 2 and spans >= 2, (compared, classes, spans)


def test_iter_time_checks_the_plan_unless_told_it_is_checked():
    inst = random_instance(0)
    plan = exhaustive(inst).plan
    other = random_instance(1)
    with pytest.raises(ConfigError, match="layers_per_stage sums to"):
        iter_time_s(other, plan)  # as simulate(other, plan) refuses it
