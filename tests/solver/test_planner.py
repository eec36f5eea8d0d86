"""Cross-checks of the exact planner: on seeded random small instances, CP-SAT, MILP and
exhaustive search (which enumerates every split and recompute count with no pruning) must find
the same optimal iteration time; every returned plan re-simulates to its objective and fits.

The expected optimum of each instance is derived independently, by the exhaustive search."""

from __future__ import annotations

import functools
from itertools import islice
from pathlib import Path

import pytest

from oracles.space import one_group_plans_total
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Cluster, GpuSpec, Instance
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import INFEASIBLE, OPTIMAL
from randinst import random_instance

ROOT = Path(__file__).resolve().parents[2]
N_RANDOM = 36


def _small_enough(inst: Instance) -> bool:
    return one_group_plans_total(inst) <= 300_000


@pytest.fixture(scope="module")
def seeds() -> list[int]:
    """The first N_RANDOM seeds small enough, the search stopped there (seed 35; the 164 seeds
    after it cost ~0.5 s of CPU), searched once per test process that runs a test reading
    them, not at every worker's collection (issue 32)."""
    return list(islice((s for s in range(200) if _small_enough(random_instance(s))), N_RANDOM))


# one xdist group: the interesting-cases check reads every seed's exhaustive optimum, which the
# agreement cases on its worker already listed (tests/conftest.py puts a group on one worker)
pytestmark = pytest.mark.xdist_group("planner-exhaustive-optima")


@functools.lru_cache(maxsize=None)
def _case(seed: int) -> Instance:
    """random_instance(seed), one object per test process: pricing keeps what it computed per
    instance object (cost/coefficients), so exhaustive search and both backends share it."""
    return random_instance(seed)


@functools.lru_cache(maxsize=None)
def _exhaustive(seed: int):
    """exhaustive(_case(seed)), listed once per test process: the agreement case and the
    interesting-cases check below read the same optimum (issue 32). Read only."""
    return exhaustive(_case(seed))


def test_enough_random_instances(seeds):
    assert len(seeds) == N_RANDOM


@pytest.mark.parametrize("case", range(N_RANDOM))
def test_cpsat_milp_exhaustive_agree(seeds, case):
    seed = seeds[case]
    inst = _case(seed)
    ex = _exhaustive(seed)
    rc = plan(inst, backend="cpsat", time_limit_s=60)
    rm = plan(inst, backend="milp", time_limit_s=60)
    if ex.plan is None:
        assert rc.status == INFEASIBLE and rm.status == INFEASIBLE
        assert rc.plan is None and rm.plan is None
        return
    assert rc.status == OPTIMAL and rm.status == OPTIMAL
    tol = 1e-6 * ex.iter_time_s + rc.tolerance_s
    assert rc.iter_time_s == pytest.approx(ex.iter_time_s, abs=tol)
    assert rm.iter_time_s == pytest.approx(ex.iter_time_s, abs=tol)
    for res in (rc, rm):
        assert res.bound_s <= res.iter_time_s + tol
        bd = simulate(inst, res.plan, reserve_bytes=inst.search.memory_reserve_bytes)
        assert bd.iter_time_s == pytest.approx(res.iter_time_s, abs=tol)
        assert bd.fits


def test_random_instances_exercise_the_interesting_cases(seeds):
    """The agreement test is only strong if some optima use non-uniform splits or recompute
    and some instances are infeasible; check the seeds cover these."""
    kinds = set()
    for seed in seeds:
        ex = _exhaustive(seed)
        if ex.plan is None:
            kinds.add("infeasible")
            continue
        if len(set(ex.plan.layers_per_stage)) > 1:
            kinds.add("non-uniform split")
        if any(ex.plan.full_recompute_layers):
            kinds.add("recompute")
        if ex.plan.pp > 1:
            kinds.add("pipeline")
    assert {"infeasible", "recompute", "pipeline"} <= kinds


def test_model_that_fits_nowhere_reports_infeasible_with_numbers():
    inst = load_instance(ROOT / "instances" / "tiny-gpt-8xA100.yaml")
    tiny_gpu = GpuSpec(name="toy-256MiB", peak_flops_per_s=1e14, hbm_bytes=256 * 2**20,
                       hbm_bw_bytes_per_s=1e12)
    from dataclasses import replace
    inst = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, gpu=tiny_gpu)))
    res = plan(inst, backend="cpsat")
    assert res.status == INFEASIBLE and res.plan is None
    assert "GiB" in res.reason and "toy-256MiB" in res.reason


def test_time_limited_run_never_claims_optimal():
    inst = load_instance(ROOT / "instances" / "gpt3-175b-1024xA100.yaml")
    res = plan(inst, backend="cpsat", time_limit_s=1e-9)
    assert res.status != OPTIMAL
    if res.plan is not None:
        assert res.bound_s < res.iter_time_s


def test_bundled_instances_plan_and_resimulate():
    for name in ("tiny-gpt-8xA100", "small-gpt-16xA100"):
        inst = load_instance(ROOT / "instances" / f"{name}.yaml")
        res = plan(inst, backend="cpsat")
        assert res.status == OPTIMAL
        assert res.breakdown.iter_time_s == pytest.approx(res.iter_time_s, rel=1e-9, abs=res.tolerance_s)
