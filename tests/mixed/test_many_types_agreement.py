"""The planner's optimum equals exhaustive search's on random mixed clusters of three and four
GPU types with the three layout options on (search.classes_per_group 2, search.idle_gpus,
search.mixed_families): the case whose layouts grow tenfold per added GPU type (issue 33).
Exhaustive search lists every configuration, micro-batch vector, split and recompute count
with no bound, memory proof or dominance (solver/exhaustive.py), so it is the check that every
pruning of layouts and configurations the planner does (bounds before pricing, the memory
proof, the tight bound and the DP's cutoff, and any pruning of partial layouts) is exact on
more than two groups, where the other agreement tests (two groups) cannot see an order of
three groups in a pipeline or a group a mixed layout leaves to replica classes. The seeds are
those whose space holds at most MAX_CANDIDATES plans."""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest
from randinst import Space

from paraplan.cost.specs import Instance

from paraplan.cost.specs import Cluster, NodeGroup
from paraplan.cost.specs import NodeGroup, GpuSpec, JobSpec, Link, Mlp, ModelSpec
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

pytestmark = pytest.mark.usefixtures("small_price_chunks")

INSTANCES = 16
MAX_CANDIDATES = 300_000


def many_types_instance(seed: int) -> Instance:
    """Three or four groups of 1 to 4 toy GPUs, each its own GPU type (speed and memory drawn:
    0.7-3 GiB, so memory binds), links within and between groups drawn, one tp, and a global
    batch that the groups' counts do not all divide; every layout option on."""
    rng = random.Random(seed)
    heads = 8
    hidden = heads * 64
    model = ModelSpec(name=f"types{seed}", layers=rng.choice([4, 6]), hidden=hidden, heads=heads,
                      kv_heads=heads, ffn=4 * hidden, vocab=8000, seq_len=512, mlp=Mlp.GELU)
    groups = []
    for g in range(rng.choice([3, 4])):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.7, 0.8, 1.0, 1.5, 3.0]) * 2**30, hbm_bw_bytes_per_s=1e12)
        groups.append(NodeGroup(name=f"g{g}", site="s",
                                gpu=gpu, nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([1, 2]),
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5)))
    G = len(groups)
    pair = {(a, b): Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
            for a in range(G) for b in range(a + 1, G)}
    between = tuple(tuple(groups[a].inter_node if a == b else pair[min(a, b), max(a, b)]
                          for b in range(G)) for a in range(G))
    return Instance(name=f"types{seed}", model=model, cluster=Cluster(groups=tuple(groups), between=between),
                           job=JobSpec(global_batch=rng.choice([6, 8, 12])),
                           search=Space(micro_batch=(1, 2), zero=(0,), virtual_stages=(1,), cp=(1,), tp=(1,),
                                        classes_per_group=2, idle_gpus=True, mixed_families=True,
                                        full_recompute=False))


# The first 16 seeds whose space holds at most MAX_CANDIDATES plans (0, 6, 8, 14, 16 and 17 hold
# more). Listed rather than found by trying seeds in the test: exhaustive's refusals of the
# others took a fifth of its time (issue 32). A listed seed whose space outgrows the cap fails with
# SpaceTooLarge instead of being skipped: re-measure the list then. One case per seed, so the
# suite's workers share them.
SEEDS = (1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 13, 15, 18, 19, 20, 21)
# of those, the seeds whose optimum ran on three groups or more when the list was measured
ON_THREE_GROUPS_OR_MORE = (10, 11, 13, 18)
# the seeds whose case takes over about 5 s on an idle core, marked slow: per-test CPU in a
# whole-suite run at 32a2953 (issue 32, load 12-14), 3: 6.0 s, 4: 10.9, 5: 4.9, 12: 6.6,
# 20: 9.6, 21: 4.5; the other ten 0.03-2.3 s (the module was marked slow whole)
SLOW_SEEDS = (3, 4, 5, 12, 20, 21)


@functools.lru_cache(maxsize=None)
def _planned(seed: int):
    """A seed's CP-SAT search, once per test process: the three-groups check below reads the
    optima the agreement cases on its worker already proved (issue 32). The limit is a guard
    against a hang, not part of the check: at load 12 on two cores, seed 4's search had 2.5 s of
    CPU in 30 s of wall and stopped unproved (status feasible, a false failure); 120 s leaves a
    slowdown of ten or more room to prove it."""
    return search(many_types_instance(seed), "cpsat", time_limit_s=120)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SEEDS else s
                                  for s in SEEDS])
def test_planner_proves_the_exhaustive_optimum_on_three_and_four_gpu_types(seed):
    inst = many_types_instance(seed)
    ex = exhaustive(inst, max_candidates=MAX_CANDIDATES)
    res = _planned(seed)
    assert res.status in ("optimal", "infeasible"), res.status
    if ex.objective_s is None:
        assert res.objective_s is None
    else:
        assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s, (
            res.objective_s, ex.objective_s)


def test_some_checked_optima_run_on_three_groups_or_more():
    # not vacuous: the agreement above covers plans over three groups or more, not only the
    # one- and two-group plans the other agreement tests see
    sizes = set()
    for seed in ON_THREE_GROUPS_OR_MORE:
        res = _planned(seed)
        assert res.status == "optimal", (seed, res.status)
        sizes.add(len({g for c in res.plan.classes for g in c.stage_groups}))
    assert max(sizes) >= 3, sizes
