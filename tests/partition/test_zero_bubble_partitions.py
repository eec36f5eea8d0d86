"""torch's zero-bubble schedules with per-operator layer plans (solver/space.zero_bubble_modes,
solver/class_partitions.py): the layer-plan bounds take each plan's drain credit (the sum term
reads the passes T_s - k W_s, at least the 1F1B sum less L max_s k w t_s), the assembled
coefficients carry each plan's saving (partition_plans.stage_arrays), and the planner proves the
optimum exhaustive search finds over every layer plan, split and schedule."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from agreement_support import assert_backends_agree_with_exhaustive
from partition_support import small_instance
from oracles.class_partitions import expand_all
from paraplan.cost.releases import Framework
from paraplan.cost.specs import Cluster
from paraplan.cost.specs import Link, Mlp, SearchSpace, ZeroBubble
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.space import declared_outers, not_covered


def zero_bubble_partition_instance(seed: int):
    """A 6-layer model on 2 x 4 GPUs of tp 4 (pp 2, v 2: splits (2, 4) and (4, 2)) for
    torchtitan (sequence parallel always on with tp) with per-operator partitions: every
    configuration runs InterleavedZeroBubble, 768 layer plans per configuration."""
    rng = np.random.default_rng(seed)
    hidden = int(rng.choice([512, 1024, 2048]))
    inst = small_instance(nodes=2, gpus_per_node=4, layers=6, hidden=hidden, heads=16,
                          ffn=int(rng.choice([2, 4])) * hidden, seq_len=int(rng.choice([512, 2048])),
                          global_batch=int(rng.choice([6, 8, 12])),
                          mlp=Mlp.SWIGLU if rng.random() < 0.5 else Mlp.GELU,
                          hbm_gib=float(rng.choice([2, 8, 32])),
                          search=SearchSpace(tp=(4,), pp=(2,), micro_batch=(1, 2), cp=(1,),
                                             sequence_parallel=(True,), zero=(0,), objective="mean",
                                             memory_reserve_bytes=0.0, virtual_stages=(2,),
                                             tensor_partitions=("megatron", "spatial_temporal")))
    link = Link(bw_bytes_per_s=float(rng.choice([16e9, 150e9])), latency_s=5e-6)
    return dataclasses.replace(inst, cluster=Cluster.of(dataclasses.replace(inst.cluster.one_group, intra_node=link)),
                               job=dataclasses.replace(inst.job, framework=Framework.TORCHTITAN))


def test_layer_plans_are_offered_the_zero_bubble_schedules():
    inst = zero_bubble_partition_instance(1)
    assert {o.zero_bubble for o in declared_outers(inst)} == {ZeroBubble.INTERLEAVED}
    assert "per-operator" not in " ".join(not_covered(inst))


# Seeds listed (exhaustive optimum, 30,720 plans each): InterleavedZeroBubble on the split
# (4, 2) with a spatial-temporal or token-split layer plan, not Megatron's
SEEDS = (1, 5)


@functools.lru_cache(maxsize=None)
def _case(seed: int):
    """zero_bubble_partition_instance(seed), one object per test process: pricing keeps its layer
    costs per instance object (agreement_support.random_cluster_case). Frozen."""
    return zero_bubble_partition_instance(seed)


@functools.lru_cache(maxsize=None)
def _optimum(seed: int):
    """exhaustive(_case(seed)), listed once per test process for both tests below (issue 32).
    Read only: the result is shared."""
    return exhaustive(_case(seed))


@pytest.mark.parametrize("seed", SEEDS)
def test_backends_agree_with_exhaustive_over_layer_plans(seed):
    ex = assert_backends_agree_with_exhaustive(_case(seed), ex=_optimum(seed))
    assert ex.plan.zero_bubble is ZeroBubble.INTERLEAVED and ex.plan.partitions
    assert ex.plan.layers_per_stage == (4, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_layer_plan_bound_is_below_its_optimum(seed):
    # the optimal combination is one of the candidates of its outer configuration, so the least
    # candidate bound is at most the exhaustive optimum. Read in 1F1B's form (no drain credit)
    # it was not: seed 1 0.0860 s against 0.0846 s, seed 5 0.0990 s against 0.0970 s
    from paraplan.solver.search import SolveResult, _layer_plans
    inst = _case(seed)
    best = _optimum(seed)
    ci = inst
    p = best.plan
    (i, o), = [(i, o) for i, o in enumerate(declared_outers(ci))  # the optimum's configuration
               if (o.micro_batch, o.recompute, o.zero_bubble) == (p.micro_batch, p.recompute, p.zero_bubble)]
    res = SolveResult(status="", plan=None, objective="nominal", objective_s=None, bound_s=None,
                      solve_time_s=0.0, backend="dp", outer_configs=0, plans_total=0)
    node = _layer_plans(ci, o, i, "nominal", {}, False, res)
    bounds = [lb for lb, _, _, _ in expand_all(node.choices, float("inf")).candidates]
    assert node.key[0] <= best.iter_time_s and min(bounds) <= best.iter_time_s
