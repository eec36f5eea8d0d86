"""CP-SAT = MILP = DP = exhaustive search on 100 random two-group mixed clusters with the three
layout options on together: search.classes_per_group 2, search.idle_gpus and
search.mixed_families (tests/randinst.mixed_family_instance: toy GPUs of 0.7-3 GiB, so the
memory proof before pricing, solver/bounds/memory.py, refuses configurations on most of them).
Exhaustive search enumerates every configuration, micro-batch vector, split and recompute count
with no bound, memory proof or dominance (solver/exhaustive.py): the independent reference
for the planner's pruning (issue 33). The seeds are the first 100 whose space holds at most
MAX_CANDIDATES plans (about one in three): 55 s of CPU for the 100, 0.03-3.9 s each."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from randinst import mixed_family_instance

from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

pytestmark = pytest.mark.usefixtures("small_price_chunks")

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
# the seed whose optimum runs a pipeline beside replica classes and leaves GPUs idle
USES_BOTH_OPTIONS = 178


def _options_on(seed: int):
    inst = mixed_family_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True,
                                                                mixed_families=True))


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


@functools.lru_cache(maxsize=None)
def _options_won(seed: int) -> frozenset[str]:
    """The seed's agreement check (every backend against exhaustive search), once per test
    process; the options its CP-SAT optimum uses. One case per seed, so that pytest-xdist
    shares the 100 among its workers (one test of 100 seeds ran alone on one worker: 42.5 s of
    CPU, issue 32)."""
    inst = _options_on(seed)
    ex = exhaustive(inst, max_candidates=MAX_CANDIDATES)
    won = set()
    for backend in ("cpsat", "milp", "dp"):
        res = search(inst, backend, time_limit_s=30)
        assert res.status in ("optimal", "infeasible"), (seed, backend, res.status)
        if ex.objective_s is None:
            assert res.objective_s is None, (seed, backend)
            continue
        assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s, (
            seed, backend, res.objective_s, ex.objective_s)
        if backend == "cpsat":
            won |= _uses(inst, res.plan)
    return frozenset(won)


@pytest.mark.parametrize("seed", SEEDS)
def test_backends_prove_the_exhaustive_optimum_with_every_layout_option(seed):
    _options_won(seed)


def test_the_optima_use_the_layout_options():
    # not vacuous: optima run a pipeline beside replica classes and leave GPUs idle. Measured
    # over the 100 seeds: seed 178's CP-SAT optimum uses both (6 others leave GPUs idle, no
    # other runs a pipeline beside replica classes); two classes on one group win none of them
    # (beside the other two options they never pay here): tests/hetero/test_classes_per_group.py
    # checks where they win alone
    assert {"mixed_families", "idle_gpus"} <= _options_won(USES_BOTH_OPTIONS)
