"""CP-SAT = MILP = DP = exhaustive search on 100 random two-group mixed clusters with the three
layout options on together: search.classes_per_group 2, search.idle_gpus and
search.mixed_families (tests/randinst.mixed_family_instance: toy GPUs of 0.7-3 GiB, so the
memory proof before pricing, solver/bounds/memory.py, refuses configurations on most of them).
Exhaustive search enumerates every configuration, micro-batch vector, split and recompute count
with no bound, memory proof or dominance (solver/exhaustive.py): the independent reference
for the planner's pruning (issue 33). The seeds are the first 100 whose space holds at most
MAX_CANDIDATES plans (about one in three), so that the 100 take about a minute on two cores."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from randinst import mixed_family_instance

from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("small_price_chunks")]

MAX_CANDIDATES = 2_000_000
# The first 100 seeds of mixed_family_instance whose space holds at most MAX_CANDIDATES plans
# (measured: the 216 others below 315 hold more). Listed rather than found by trying seeds in the
# test: exhaustive's refusals of the others took a sixth of its time (issue 32). A listed
# seed whose space outgrows the cap fails with SpaceTooLarge instead of being skipped: re-measure
# the list then.
SEEDS = (2, 3, 4, 8, 13, 15, 18, 19, 20, 21, 24, 30, 31, 34, 39, 40, 46, 49, 57, 59, 60, 62, 70,
         71, 77, 79, 82, 83, 87, 88, 89, 93, 96, 97, 100, 104, 111, 113, 121, 124, 125, 128, 129,
         131, 132, 140, 143, 144, 146, 149, 152, 157, 159, 160, 161, 164, 167, 169, 176, 177, 178,
         179, 180, 187, 189, 190, 197, 198, 202, 204, 207, 210, 215, 221, 222, 224, 227, 232, 233,
         235, 238, 239, 240, 243, 253, 266, 267, 273, 274, 277, 279, 281, 284, 292, 296, 297, 298,
         305, 314, 315)


@functools.lru_cache(maxsize=4)
def _options_on(seed: int):
    """mixed_family_instance(seed) with the three layout options on, one object per seed while
    its case runs: pricing keeps what it computed per instance object (agreement_support.
    random_cluster_case), so exhaustive search and the backends' searches of a seed share it,
    as they did when the case built the instance once (a few kept, not 100: each holds its
    pricing)."""
    inst = mixed_family_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True,
                                                                mixed_families=True))


@functools.lru_cache(maxsize=None)
def _exhaustive(seed: int):
    """exhaustive(_options_on(seed)), listed once per test process: the check that the options
    are reached reads the optima the agreement cases on its worker listed (issue 32). Read only."""
    return exhaustive(_options_on(seed), max_candidates=MAX_CANDIDATES)


def _uses(inst, plan) -> set[str]:
    """Which of the three options the plan needs: a pipeline across groups beside replica
    classes, two classes on one group, GPUs of a used group left idle."""
    used = set()
    spans = [len(set(c.stage_groups)) > 1 for c in plan.classes]
    if any(spans) and len(plan.classes) > 1:
        used.add("mixed_families")
    on_one = [c.stage_groups[0] for c, s in zip(plan.classes, spans) if not s]
    if len(on_one) != len(set(on_one)):
        used.add("classes_per_group")
    busy = [0] * len(inst.cluster.groups)
    for c in plan.classes:
        for g in c.stage_groups:
            busy[g] += c.replicas * plan.tp_of(g) * plan.cp
    if any(0 < b < grp.num_gpus for b, grp in zip(busy, inst.cluster.groups)):
        used.add("idle_gpus")
    return used


@pytest.mark.parametrize("seed", SEEDS)
def test_backends_prove_the_exhaustive_optimum_with_every_layout_option(seed):
    # one seed per case, so that xdist spreads the 100 (about 1-4 s each on two cores)
    inst = _options_on(seed)
    ex = _exhaustive(seed)
    for backend in ("cpsat", "milp", "dp"):
        res = search(inst, backend, time_limit_s=30)
        assert res.status in ("optimal", "infeasible"), (seed, backend, res.status)
        if ex.objective_s is None:
            assert res.objective_s is None, (seed, backend)
            continue
        assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s, (
            seed, backend, res.objective_s, ex.objective_s)


# seeds whose exhaustive optimum needs an option (measured over the 100 above, _uses on
# exhaustive's plan): two classes on one group, GPUs of a used group idle, a pipeline beside
# replica classes (178 leaves GPUs idle too)
WINS = {3: "classes_per_group", 24: "idle_gpus", 178: "mixed_families"}


@pytest.mark.parametrize("seed, option", sorted(WINS.items()))
def test_the_options_are_reached(seed, option):
    """Not vacuous: each option is what an optimum of the seeds above runs."""
    assert option in _uses(_options_on(seed), _exhaustive(seed).plan)
