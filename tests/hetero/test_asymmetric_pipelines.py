"""Asymmetric pipelines (a data-parallel degree per stage, issue 33): the branch and bound of
solver/asymmetric_search.py against exhaustive search of the same space
(solver/exhaustive.exhaustive_asymmetric), and against the symmetric planner's optimum."""

from __future__ import annotations

import dataclasses

import pytest
from randinst import mixed_family_instance

from paraplan.cost import asymmetric
from paraplan.cost.specs import Framework
from paraplan.solver.asymmetric_search import search_asymmetric
from paraplan.solver.exhaustive import exhaustive, exhaustive_asymmetric


def _framework(inst, fw):
    return inst if fw is None else dataclasses.replace(inst, job=dataclasses.replace(inst.job, framework=fw))


# megatron (one --recompute-num-layers for every stage) and deepspeed (any count per stage)
@pytest.mark.parametrize("fw", [None, Framework.DEEPSPEED])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 13, 15, 18, 19, 20, 24])
def test_branch_and_bound_matches_exhaustive(seed, fw):
    inst = _framework(mixed_family_instance(seed), fw)
    got = search_asymmetric(inst)
    best_s, plan, rows = exhaustive_asymmetric(inst)
    assert got.objective_s == pytest.approx(best_s, rel=1e-12)  # inf == inf where nothing fits
    if plan is not None:  # the search's plan re-simulates to its objective, and fits
        bd = asymmetric.simulate(inst, got.plan)
        assert bd.fits and bd.iter_time_s == pytest.approx(got.objective_s, rel=1e-12)


@pytest.mark.slow  # 5-11 s each on two cores: 120-792 pipelines priced
@pytest.mark.parametrize("seed", [6, 17])
def test_branch_and_bound_matches_exhaustive_larger(seed):
    inst = mixed_family_instance(seed)
    assert search_asymmetric(inst).objective_s == pytest.approx(exhaustive_asymmetric(inst)[0], rel=1e-12)


def test_an_incumbent_prunes_without_changing_the_answer():
    inst = mixed_family_instance(10)
    free = search_asymmetric(inst)
    cut = search_asymmetric(inst, incumbent_s=free.objective_s * (1 + 1e-9))
    assert cut.objective_s == free.objective_s and cut.solved <= free.solved
    # an incumbent no pipeline beats: nothing returned, proved by the bounds
    assert search_asymmetric(inst, incumbent_s=free.objective_s * 0.5).plan is None


def test_asymmetric_beats_every_symmetric_plan_on_seed_3():
    # 2 + 1 GPUs of one toy type (300 TFLOP/s, 3 GiB), 4 layers, batch 24: the symmetric
    # optimum over the whole declared space (mixed families included, by exhaustive search) is
    # a replica class of 2 on the pair beside 1 on the lone GPU, each holding the whole model,
    # 10.270 ms; the asymmetric pipeline puts 1 layer (and the embedding) on the lone GPU, d 1,
    # and 3 (and the output layer) on the pair as dp 2, each of its ranks 6 of the 12
    # micro-batches of 2: 10.013 ms, 2.5% faster
    inst = mixed_family_instance(3)
    sym = exhaustive(inst).objective_s
    got = search_asymmetric(inst)
    assert got.plan.outer.stage_dp == (1, 2) and got.plan.layers_per_stage == (1, 3)
    assert sym == pytest.approx(10.270e-3, abs=1e-6) and got.objective_s == pytest.approx(10.013e-3, abs=1e-6)


def test_equal_degree_optimum_is_a_symmetric_plan():
    # where no degree split pays (seed 8: 1 + 1 GPUs, a degree of 1 per stage is the only
    # one), the asymmetric optimum is the symmetric stage-wise pipeline's, which exhaustive
    # search of the symmetric space also finds
    inst = mixed_family_instance(8)
    got = search_asymmetric(inst)
    assert set(got.plan.outer.stage_dp) == {1}
    assert got.objective_s == pytest.approx(exhaustive(inst).objective_s, rel=1e-12)
