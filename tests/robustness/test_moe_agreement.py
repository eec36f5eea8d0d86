"""CP-SAT = MILP = the exact DP = exhaustive search on small random mixture-of-experts
instances: the random models of tests/randinst.py given an MoE layer (2 to 8 experts, top-1 or
top-2, an optional shared MLP, a dense first layer sometimes, a random imbalance), searched
over every expert-parallel degree the space admits. Every returned plan re-simulates to its
objective and fits memory; infeasible instances are infeasible for every method."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest

from paraplan.cost import moe_params
from paraplan.cost.moe_params import FITTED, MoeParams
from paraplan.cost.specs import Cluster, MoeSpec
from paraplan.solver.exhaustive import exhaustive
from agreement_support import assert_backends_agree_with_exhaustive, small_seeds
from randinst import random_instance

# The agreement cases and the not-vacuous checks read the same exhaustive optima, listed once per
# test process (the _*_case functions; each check listed all its seeds again), and the module is
# one xdist group, so that the checks run where the cases listed them (tests/conftest.py; issue 32)
pytestmark = pytest.mark.xdist_group("moe-agreement-optima")

N_INSTANCES = 40


def moe_instance(seed: int):
    base = random_instance(seed, variant=True)
    rng = random.Random(seed * 7919)
    m = base.model
    experts = rng.choice([2, 4, 8])
    moe = MoeSpec(experts=experts, top_k=rng.choice([1, 2]), expert_ffn=m.hidden * rng.choice([2, 4]),
                  shared_ffn=rng.choice([0, m.hidden]),
                  dense_layers=rng.choice([0, 1]) if m.layers > 1 else 0,
                  imbalance=rng.choice([1.0, 1.1, 1.3]))
    # expert weights multiply the state: give the GPU room for them (the draw keeps memory binding)
    gpu = replace(base.cluster.gpu, hbm_bytes=base.cluster.gpu.hbm_bytes * rng.choice([0.75, 1.0, 1.5]))
    zero = tuple(z for z in base.search.zero if z < 3) or (0, 1)
    return replace(base, name=f"moe{seed}", model=replace(m, moe=moe),
                   cluster=Cluster.of(replace(base.cluster.one_group, gpu=gpu)),
                   search=replace(base.search, zero=zero))


@pytest.fixture(scope="module")
def seeds() -> list[int]:
    """The first N_INSTANCES seeds from 5000 whose space offers ep > 1, searched once per test
    process that runs a test reading them, not at every worker's collection (issue 32)."""
    return small_seeds(moe_instance, 5000, N_INSTANCES, 20_000, accept=lambda outers: any(o.ep > 1 for o in outers))


def moe_params_for(seed: int) -> MoeParams:
    """The MoE parameters an instance is priced with: the fitted ones, with the host time to
    issue each expert's GEMM at its fitted value for one seed in three and 0 (a framework whose
    grouped GEMM is one launch) for the others. The random models are small, so at the fitted
    issue time every expert GEMM is issue-bound and sharding the experts nearly always pays
    (all 40 at the fitted value: 32 optima with ep > 1, none with ep = 1); at 0 some optima keep
    them whole, which the coverage test below needs."""
    issue = 0.0 if seed % 3 else FITTED.expert_gemm_issue_s
    return replace(FITTED, expert_gemm_issue_s=issue)


@functools.lru_cache(maxsize=None)
def _moe_case(seed: int):
    """(moe_instance(seed), its exhaustive optimum under moe_params_for(seed)), once per test
    process. One instance object for the brute force and the backends' searches, as when the
    case built it. Read only."""
    with moe_params.using(moe_params_for(seed)):
        inst = moe_instance(seed)
        return inst, exhaustive(inst)


@pytest.mark.parametrize("case", range(N_INSTANCES))
def test_all_methods_agree_on_moe(seeds, case):
    seed = seeds[case]
    inst, ex = _moe_case(seed)
    with moe_params.using(moe_params_for(seed)):
        assert_backends_agree_with_exhaustive(inst, ex=ex)


def test_the_random_moe_instances_choose_expert_parallelism(seeds):
    """Agreement means little unless some optima shard the experts (ep > 1) and some do not,
    and some instances are infeasible or pipelined (seen: 30 with ep > 1, 2 with ep = 1, 9
    infeasible or pipelined of 40, 13 of them priced with the fitted issue time)."""
    seen = {"ep>1": 0, "ep=1": 0, "infeasible or pipelined": 0}
    for seed in seeds:
        ex = _moe_case(seed)[1]
        if ex.plan is None or ex.plan.pp > 1:
            seen["infeasible or pipelined"] += 1
        if ex.plan is not None:
            seen["ep>1" if ex.plan.ep > 1 else "ep=1"] += 1
    assert min(seen.values()) >= 2, seen


def fold_instance(seed: int):
    """moe_instance with tensor parallelism forced (tp 2 or 4, sequence parallel on), so that
    the space offers parallel folding (expert tensor parallel etp = 1 beside etp = tp, the ep
    group folded over the tp ranks; cost/space_rules.expert_layouts)."""
    inst = moe_instance(seed)
    return replace(inst, name=f"fold{seed}",
                   search=replace(inst.search, tp=(2, 4), sequence_parallel=(True,)))


N_FOLD = 16


@pytest.fixture(scope="module")
def fold_seeds() -> list[int]:
    """The first N_FOLD seeds from 9000 whose space offers parallel folding (as `seeds`)."""
    return small_seeds(fold_instance, 9000, N_FOLD, 20_000, accept=lambda outers: any(o.etp is not None for o in outers))


@functools.lru_cache(maxsize=None)
def _fold_case(seed: int):
    """(fold_instance(seed), its exhaustive optimum), once per test process. Read only."""
    inst = fold_instance(seed)
    return inst, exhaustive(inst)


@pytest.mark.parametrize("case", range(N_FOLD))
def test_all_methods_agree_with_parallel_folding(fold_seeds, case):
    inst, ex = _fold_case(fold_seeds[case])
    assert_backends_agree_with_exhaustive(inst, ex=ex)


def test_the_folding_instances_choose_both_expert_layouts(fold_seeds):
    """The folding agreement means something only if exhaustive search's optima pick etp != tp
    on some instances and etp = tp on others (seen: 10 with etp = 1 < tp, 2 with etp = tp, 4
    infeasible of 16)."""
    seen = {"etp!=tp": 0, "etp=tp": 0, "infeasible": 0}
    for seed in fold_seeds:
        plan = _fold_case(seed)[1].plan
        seen["infeasible" if plan is None else "etp!=tp" if plan.etp is not None else "etp=tp"] += 1
    assert min(seen.values()) >= 2, seen


def moe_zero3_instance(seed: int):
    """moe_instance with ZeRO-3 in its space beside ZeRO-1: the experts sharded over their
    expert-data-parallel group (tests/cost/test_moe_zero3.py)."""
    inst = moe_instance(seed)
    return replace(inst, name=f"moez3-{seed}", search=replace(inst.search, zero=(1, 3)))


N_ZERO3 = 30


@pytest.fixture(scope="module")
def zero3_seeds() -> list[int]:
    """The first N_ZERO3 seeds from 9000 whose space offers ZeRO-3 with ep > 1 (as `seeds`)."""
    return small_seeds(moe_zero3_instance, 9000, N_ZERO3, 20_000,
                       accept=lambda outers: any(o.ep > 1 and o.zero == 3 for o in outers))


@functools.lru_cache(maxsize=None)
def _zero3_case(seed: int):
    """(moe_zero3_instance(seed), its exhaustive optimum), once per test process. Read only."""
    inst = moe_zero3_instance(seed)
    return inst, exhaustive(inst)


@pytest.mark.parametrize("case", range(N_ZERO3))
def test_all_methods_agree_on_moe_with_zero3(zero3_seeds, case):
    inst, ex = _zero3_case(zero3_seeds[case])
    assert_backends_agree_with_exhaustive(inst, ex=ex)


def test_some_random_moe_optima_run_zero3(zero3_seeds):
    """Not vacuous: exhaustive search picks ZeRO-3 (with ep > 1) on some of these instances
    and ZeRO-1 on others (seen: ZeRO-3 on 2 of 30, seeds 9022 and 9023, both ep 2; ZeRO-1 on
    22; 6 infeasible)."""
    zeros = [ex.plan.zero for ex in (_zero3_case(s)[1] for s in zero3_seeds) if ex.plan is not None]
    assert zeros.count(3) >= 2 and zeros.count(1) >= 2, zeros
