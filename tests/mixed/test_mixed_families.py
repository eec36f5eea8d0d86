"""search.mixed_families: a stage-wise class (one pipeline across node groups) beside replica-wise
classes on the GPUs it leaves (solver/space.py, the "mixed" family).

The optimum over the larger space is checked against exhaustive search, the family's size
against its count without listing (mixed_layouts, which the planner's refusal reads)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from agreement_support import (assert_mixed_backends_agree_with_exhaustive, assert_plan_file_round_trip,
                               option_case, option_optimum)
from randinst import mixed_family_instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search
from paraplan.solver.class_layouts import class_shapes, cp_values, mixed_layouts, tp_choices
from paraplan.solver.space import declared_outers, not_covered

pytestmark = pytest.mark.usefixtures("small_price_chunks")

TINY = "instances/mixed/tiny-2types.yaml"
THREE = "instances/mixed/llama3-70b-3types-2sites.yaml"


def _with(inst, **search):
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, **search))


def _listed(inst) -> int:
    G = len(inst.cluster.groups)
    return sum(1 for n in range(1, G + 1) for used in itertools.combinations(range(G), n)
               for tpg in tp_choices(inst, used, "mixed") for cp in cp_values(inst, used, tpg)
               for _ in class_shapes(inst, tpg, used, "mixed", cp))


@pytest.mark.parametrize("per_group", [1, 2])
@pytest.mark.parametrize("idle", [False, True])
def test_mixed_layouts_counts_what_the_family_lists(per_group, idle):
    inst = _with(load_instance(TINY), tp=(1, 2, 4, 8), mixed_families=True,
                 classes_per_group=per_group, idle_gpus=idle)
    assert mixed_layouts(inst) == _listed(inst) > 0


def test_mixed_layouts_counts_three_groups():
    # three groups of 128, 256 and 128 GPUs, narrowed to tp 8 and at most 6 stages
    inst = _with(load_instance(THREE), tp=(8,), max_pp=6, mixed_families=True)
    assert mixed_layouts(inst) == _listed(inst) > 0


def test_the_family_adds_a_pipeline_across_groups_beside_replica_classes():
    inst = load_instance(TINY)
    before, after = declared_outers(inst), declared_outers(_with(inst, mixed_families=True))
    assert set(before) < set(after)
    for o in set(after) - set(before):
        first, *rest = o.classes
        assert len(set(first.stage_groups)) >= 2 and rest
        assert all(len(set(c.stage_groups)) == 1 for c in rest)


# where the mixed family wins (exhaustive, below): on seed 191 (3 + 1 one-GPU nodes) a pipeline
# of 2 stages across both groups beside a 2-stage replica on the 2 GPUs it leaves is 7.5% faster
# than any plan of one family (11.32 -> 10.47 ms). Seeds 138 and 154 won too while two classes'
# gradient ring on a shared group was priced as if their GPUs were adjacent (cost/
# class_coefficients._spread_link): with the ring priced where its GPUs are, they no longer do
WINS = [191]


# seeds 6, 9 and 12 are left out: exhaustive search there lists more than 20 million plans
# one xdist group: the check that the mixed family wins reads WINS' optima, which their
# agreement cases on its worker already listed (tests/conftest.py)
SAME_OPTIMA = pytest.mark.xdist_group("mixed-families-optima")


@SAME_OPTIMA
@pytest.mark.parametrize("seed", WINS + [0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 13, 14])
def test_solvers_match_exhaustive_with_mixed_families(seed):
    assert_mixed_backends_agree_with_exhaustive(option_case(mixed_family_instance, seed),
                                                option_optimum(mixed_family_instance, seed))


@SAME_OPTIMA
def test_a_pipeline_beside_replica_classes_wins_on_some_random_instances():
    for seed in WINS:
        inst = mixed_family_instance(seed)
        one, mixed = exhaustive(_with(inst, mixed_families=False)), option_optimum(mixed_family_instance, seed)
        assert mixed.plan.family == "mixed", seed
        assert one.objective_s is None or mixed.objective_s < one.objective_s * (1 - 1e-6), seed


def test_a_mixed_plan_round_trips_and_resimulates(tmp_path):
    inst = mixed_family_instance(191)
    res = search(inst)
    assert res.plan.family == "mixed"
    assert_plan_file_round_trip(inst, res, tmp_path)


def test_not_covered_stops_naming_mixed_families():
    inst = load_instance(THREE)
    mixed = "a stage-wise class beside replica-wise classes (search.mixed_families)"
    assert mixed in not_covered(inst)
    assert mixed not in not_covered(_with(inst, mixed_families=True))
