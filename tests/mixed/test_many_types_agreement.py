"""The planner's optimum equals exhaustive search's on random mixed clusters of three and four
GPU types with the three layout options on (search.classes_per_group 2, search.idle_gpus,
search.mixed_families): the case whose layouts grow tenfold per added GPU type (issue 33).
Exhaustive search lists every configuration, micro-batch vector, split and recompute count
with no bound, memory proof or dominance (solver/exhaustive.py), so it is the check that every
pruning of layouts and configurations the planner does (bounds before pricing, the memory
proof, the tight bound and the DP's cutoff, and any pruning of partial layouts) is exact on
more than two groups, where the other agreement tests (two groups) cannot see an order of
three groups in a pipeline or a group a mixed layout leaves to replica classes. The seeds are
6 of the 16 whose space holds at most MAX_CANDIDATES plans: those whose cases together reach
every line and branch of the planner that the 16 reached (SEEDS says how they were chosen)."""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest
from randinst import Space, drawn_between, toy_model

from paraplan.cost.specs import Cluster, GpuSpec, Instance, JobSpec, Link, NodeGroup

from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

pytestmark = pytest.mark.usefixtures("small_price_chunks")

MAX_CANDIDATES = 300_000


def many_types_instance(seed: int) -> Instance:
    """Three or four groups of 1 to 4 toy GPUs, each its own GPU type (speed and memory drawn:
    0.7-3 GiB, so memory binds), links within and between groups drawn, one tp, and a global
    batch that the groups' counts do not all divide; every layout option on."""
    rng = random.Random(seed)
    model = toy_model(f"types{seed}", rng.choice([4, 6]))
    groups = []
    for g in range(rng.choice([3, 4])):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.7, 0.8, 1.0, 1.5, 3.0]) * 2**30, hbm_bw_bytes_per_s=1e12)
        groups.append(NodeGroup(name=f"g{g}", site="s",
                                gpu=gpu, nodes=rng.choice([1, 2]), gpus_per_node=rng.choice([1, 2]),
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5)))
    between = drawn_between(rng, groups)
    return Instance(name=f"types{seed}", model=model, cluster=Cluster(groups=tuple(groups), between=between),
                           job=JobSpec(global_batch=rng.choice([6, 8, 12])),
                           search=Space(micro_batch=(1, 2), zero=(0,), virtual_stages=(1,), cp=(1,), tp=(1,),
                                        classes_per_group=2, idle_gpus=True, mixed_families=True,
                                        full_recompute=False))


# The first 16 seeds whose space holds at most MAX_CANDIDATES plans (0, 6, 8, 14, 16 and 17 hold
# more). Listed rather than found by trying seeds in the test: exhaustive's refusals of the
# others took a fifth of its time (issue 32).
CANDIDATE_SEEDS = (1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 13, 15, 18, 19, 20, 21)
# The cases run: two seeds whose optimum runs on three groups (11, 13, below) and a cover of the
# other candidates by branch coverage, cheapest first (issue 32): each of the 16 cases run under
# its own coverage context (coverage.py, branch=True, over cost/, formulations/ and solver/), the
# seed adding the most lines and arcs not yet reached per second of its case taken next, until
# these 6 reach every line and arc the 16 reached (13,305; 4 and 13 alone reach some; run alone,
# the 6 reach all of them). The 10 left out (3, 7, 9, 10, 12, 15, 18, 19, 20, 21) drove no line
# or branch of the planner, exhaustive search or pricing that these do not; under coverage the
# file took 156.6 -> 54.1 s of CPU. A seed whose space outgrows the cap fails with SpaceTooLarge
# instead of being skipped: re-measure the lists then. One case per seed, so the suite's workers
# share them.
SEEDS = (1, 2, 4, 5, 11, 13)
assert set(SEEDS) <= set(CANDIDATE_SEEDS)
# of those, the seeds whose optimum ran on three groups or more when the list was measured (10
# and 18 did too)
ON_THREE_GROUPS_OR_MORE = (11, 13)
# the seeds whose case takes over about 5 s on an idle core, marked slow: per-test CPU in a
# whole-suite run at 32a2953 (issue 32, load 12-14), 4: 10.9 s, 5: 4.9; the other four 0.03-2.3 s
SLOW_SEEDS = (4, 5)


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
