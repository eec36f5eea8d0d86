"""The framework's recompute pattern (cost/recompute_patterns.py) in every backend: on random
small instances whose free per-stage optimum the framework cannot run, the DP, CP-SAT and MILP
each prove exhaustive search's optimum over the counts the framework runs.

The seeds were found by scanning random_instance(seed, variant=True) with the job's framework
set (seeds 1000-1500 for Megatron-LM, 1000-1300 for torchtitan): the ones where exhaustive
search with each stage's count free (the pattern replaced by PER_STAGE) finds a faster plan
than with the framework's pattern. That the free optimum is faster is asserted again here, so
each case keeps testing the pattern rather than agreeing trivially."""

from __future__ import annotations

import dataclasses

import pytest

from agreement_support import assert_backends_agree_with_exhaustive
from randinst import random_instance
from paraplan.cost import recompute_patterns
from paraplan.cost.framework_rules import recompute_pattern
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.specs import Framework
from paraplan.solver import search, space
from paraplan.solver.exhaustive import exhaustive

CASES = [(Framework.MEGATRON, s) for s in (1028, 1198, 1386, 1393, 1474)] + \
        [(Framework.TORCHTITAN, s) for s in (1153, 1198, 1219)]


def instance(framework: Framework, seed: int):
    inst = random_instance(seed, variant=True)
    return dataclasses.replace(inst, job=dataclasses.replace(inst.job, framework=framework))


def free_optimum(inst, monkeypatch):
    """Exhaustive search with every stage's count free: the relaxation the pattern narrows."""
    with monkeypatch.context() as m:
        free = lambda framework, recompute, partial=True: RecomputePattern.PER_STAGE  # noqa: E731
        m.setattr(search, "recompute_pattern", free)
        m.setattr(space, "recompute_pattern", free)
        return exhaustive(inst)


@pytest.mark.parametrize("framework, seed", CASES)
def test_backends_agree_under_the_frameworks_pattern(framework, seed, monkeypatch):
    inst = instance(framework, seed)
    ex = assert_backends_agree_with_exhaustive(inst)
    p = ex.plan
    pattern = recompute_pattern(framework, p.recompute)
    assert recompute_patterns.runs(pattern, [p.layers_per_stage], [p.full_recompute_layers],
                                   p.virtual_stages, p.embedding_in_split, p.loss_in_split)
    free = free_optimum(inst, monkeypatch)
    assert free.iter_time_s < ex.iter_time_s * (1 - 1e-9)
    f = free.plan
    assert not recompute_patterns.runs(pattern, [f.layers_per_stage], [f.full_recompute_layers],
                                       f.virtual_stages, f.embedding_in_split, f.loss_in_split)


def test_what_torchtitans_pattern_costs_on_one_stage(monkeypatch):
    """Seed 1153 under torchtitan: one stage of 7 layers (tp 4, 16 micro-batches). torchtitan
    runs 0, 1, 2, 3 or 7 recomputed layers (every k-th block: k = 8, 4..7, 3, 2, 1); the four
    below 7 do not fit, so every layer is recomputed. The free choice stops at 6, one recomputed
    layer fewer: the pattern costs one layer's recompute over the 16 micro-batches, the step
    between the times of 0 and 1 recomputed layers (on one stage the time is linear in r)."""
    from paraplan.cost.simulate import simulate
    inst = instance(Framework.TORCHTITAN, 1153)
    ex = exhaustive(inst)
    p = ex.plan
    assert (p.pp, p.layers_per_stage, p.full_recompute_layers) == (1, (7,), (7,))
    reserve = inst.search.memory_reserve_bytes
    sim = {r: simulate(inst, p.replace_flat(full_recompute_layers=(r,)), reserve_bytes=reserve)
           for r in (0, 1, 2, 3, 7)}
    assert [sim[r].fits for r in (0, 1, 2, 3, 7)] == [False] * 4 + [True]
    assert sim[7].iter_time_s == pytest.approx(ex.iter_time_s, rel=1e-12)
    step_s = sim[1].iter_time_s - sim[0].iter_time_s  # one more recomputed layer
    free = free_optimum(inst, monkeypatch)
    assert free.plan.full_recompute_layers == (6,)
    assert free.iter_time_s == pytest.approx(ex.iter_time_s - step_s, rel=1e-9)
