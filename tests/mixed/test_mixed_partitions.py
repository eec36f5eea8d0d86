"""Per-operator tensor partitions per replica class and group in the class planner (issue 12,
solver/class_partitions.py).

The reference answers are independent of the planner's dominance and bounds: exhaustive
search over every layer plan of every class and group (solver/exhaustive.py), the other
backend (CBC instead of CP-SAT), and direct pricing (cost/coefficients.build) of the plans the
planner assembles row by row.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest

from oracles.class_partitions import expand_all
from paraplan.cost.coefficients import build
from paraplan.cost.class_coefficients import class_outers, partitions_layer_fn
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.objective import scaled_times
from paraplan.formulations.multiclass import solve_multiclass_cpsat
from paraplan.solver import class_partitions
from paraplan.solver.class_partitions import OuterChoices, partition_count
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import placer, search, problem_of
from paraplan.solver.space import declared_outers
from paraplan.solver.partition_plans import STAGE_ARRAYS


# small instances have fewer configurations than one chunk of the planner's pricing: price them
# 2 at a time, the path large instances take (tests/mixed/conftest.py)
pytestmark = pytest.mark.usefixtures("small_price_chunks")

ROOT = Path(__file__).resolve().parents[2]
TINY2 = ROOT / "instances/mixed/tiny-2types.yaml"
ON = ("megatron", "spatial_temporal")


def _with_partitions(inst, **search):
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, tensor_partitions=ON, **search))


def test_one_group_partitions_match_exhaustive_search():
    # tp 4 without sequence parallelism: 4^4 linear-op plans (K, N, P2x2, T) x 3 head
    # assignments = 768 layer plans, every one tried by exhaustive search
    inst = _with_partitions(load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml"),
                            tp=(4,), zero=(1,), sequence_parallel=(False,), micro_batch=(2,))
    res = search(inst)
    ex = exhaustive(inst)
    assert res.status == "optimal" and ex.objective_s is not None
    assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-12)
    assert res.plan.classes[0].partitions  # the optimum is not Megatron's plan here (token splits)
    assert res.plans_total == ex.candidates


@functools.lru_cache(maxsize=None)
def _tiny2_tp4(partitions: bool):
    """(tiny-2types at tp 4, with or without per-operator partitions; its CP-SAT search), once
    per test process: the agreement and the plan-file check below read the same optimum (the
    plan-file check searched it again, issue 32). Read only."""
    inst = load_instance(TINY2)
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, tp=(4,)))
    inst = _with_partitions(inst) if partitions else inst
    return inst, search(inst, "cpsat")


def test_two_groups_partitions_cpsat_equals_milp_and_beat_megatron():
    _, off = _tiny2_tp4(False)
    on, cpsat = _tiny2_tp4(True)
    milp = search(on, "milp")
    assert cpsat.status == milp.status == "optimal"
    tol = cpsat.tolerance_s + milp.tolerance_s + 1e-12
    assert cpsat.objective_s == pytest.approx(milp.objective_s, abs=tol)
    # the space with partitions contains Megatron's plans: never slower; here 14.9% faster
    # (measured: 21.26 against 24.98 ms; 24% before the dense refit moved matmul_half_flops off
    # its 1e8 FLOP bound, which makes the small GEMMs of both spaces dearer alike)
    assert cpsat.objective_s < off.objective_s * 0.87
    assert cpsat.plans_total > off.plans_total and cpsat.pruned_by_dominance > 0


def test_assembled_class_coefficients_equal_a_direct_build():
    """The planner prices each (class, group, plan) once and assembles combinations row by
    row; every assembled candidate must equal pricing its whole plan directly."""
    inst = _with_partitions(load_instance(TINY2))
    outers = [o for o in declared_outers(inst) if len({g for c in o.classes for g in c.stage_groups}) == 2]
    checked = 0
    for i, o in enumerate(outers[:6]):
        placed = placer(inst, o)
        ch = OuterChoices(inst, o, [0], placed, class_outers(inst.job, o),
                          lambda coeffs, o=o: problem_of(inst, o, "nominal", coeffs, prescaled=True))
        ch.optimistic()
        lst = expand_all(ch, float("inf"))
        for lb, _, coeffs, parts in lst.candidates[:: max(1, len(lst.candidates) // 5)]:
            for k, c in enumerate(coeffs[0]):
                pl = placed(0, k)
                direct = build(inst, class_outers(inst.job, o)[k], placement=pl,
                               reserve_bytes=inst.search.memory_reserve_bytes,
                               layer_fn=partitions_layer_fn(inst, inst.cluster, pl, o.classes[k].stage_groups,
                                                            parts[k]))
                direct = scaled_times(direct, ch.factor)  # OuterChoices builds at the objective's scale
                for f in STAGE_ARRAYS:
                    np.testing.assert_allclose(getattr(c, f), getattr(direct, f), rtol=1e-12, err_msg=f)
            checked += 1
    assert checked >= 10


def test_vectorised_class_bound_is_below_the_optimum():
    """The combination bound the planner keys candidates by never exceeds a candidate's optimum
    (solved by CP-SAT). (It is solver/bounds/one_class.tight_class_terms, which tight_lower_bound_s also
    computes, row by row: tests/solver/test_bounds.py checks that against brute force.)"""
    inst = _with_partitions(load_instance(TINY2))
    seen = 0
    for i, o in enumerate(declared_outers(inst)[::37]):
        ch = OuterChoices(inst, o, [0], placer(inst, o), class_outers(inst.job, o),
                          lambda coeffs, o=o: problem_of(inst, o, "nominal", coeffs))
        if ch.total == 1:
            continue
        ch.optimistic()
        for lb, _, coeffs, _ in expand_all(ch, float("inf")).candidates[:4]:
            p = problem_of(inst, o, "nominal", coeffs)
            sr = solve_multiclass_cpsat(p, time_limit_s=20)
            if sr.objective_s is not None:
                assert lb <= sr.objective_s * (1 + 1e-12)
            seen += 1
    assert seen >= 6


def test_plan_file_keeps_partitions_per_group():
    on, searched = _tiny2_tp4(True)
    plan = searched.plan
    mapping = plan_to_mapping(plan, on)
    assert set(mapping["classes"][0]["partitions"]) <= {"a100", "h100"}
    assert plan_from_mapping(mapping, on) == plan


def test_partitions_compose_with_robust_and_expected_objectives():
    """Two network scenarios (the link between the groups cut to a tenth in the second): per
    class and group only plans dominated on both networks' sites are dropped, and CP-SAT and
    CBC agree on the worst-case and the expected optimum; each is re-simulated on every
    scenario by the planner itself."""
    from paraplan.cost.specs import Cluster, Scenario
    from paraplan.cost.specs import Link

    inst = _with_partitions(load_instance(TINY2), tp=(4,), zero=(1,), sequence_parallel=(False,))
    hc = inst.cluster
    slow = tuple(tuple(x if a == b else Link(bw_bytes_per_s=x.bw_bytes_per_s / 10, latency_s=x.latency_s)
                       for b, x in enumerate(row)) for a, row in enumerate(hc.between))
    cut = Cluster(groups=hc.groups, between=slow)
    inst = dataclasses.replace(inst, scenarios=(Scenario(name="nominal", cluster=hc, probability=0.7),
                                                Scenario(name="cut", cluster=cut, probability=0.3)))
    for objective in ("robust", "expected"):  # the limit guards a hang: 60 s ran out at load 15
        cpsat = search(inst, "cpsat", time_limit_s=600, objective=objective)
        milp = search(inst, "milp", time_limit_s=600, objective=objective)
        assert cpsat.status == milp.status == "optimal"
        assert cpsat.objective_s == pytest.approx(milp.objective_s,
                                                  abs=cpsat.tolerance_s + milp.tolerance_s + 1e-12)
        assert len(cpsat.per_scenario_s) == 2


# Seeds 0-9, and the first seed past them whose optimum runs a partition (the check below keeps
# the cross-check from being vacuous): seed 7 did until Transformer Engine's attention was priced
# at its kernel's benchmark and the GEMM-size constant at cuBLAS's measured 6.05e9 FLOP; since
# then none of 0-30 does, and 31 (then 95, 109) is the first that does.
SEEDS = (*range(10), 31)


@functools.lru_cache(maxsize=None)
def _cpsat(seed: int):
    """A seed's CP-SAT search, once per test process: the not-vacuous check below reads the
    optima the agreement cases on its worker already searched (it searched all 11 again, issue
    32). Read only."""
    from randinst import partition_mixed_instance
    return search(partition_mixed_instance(seed), "cpsat")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_mixed_partitions_cpsat_equals_milp_equals_exhaustive(seed):
    """Two groups (4 + 2 GPUs of random catalogue types), a tp per group, per-operator
    partitions: CP-SAT and CBC prove exhaustive search's optimum, which tries every layer plan
    of the tp-4 group with no dominance or bound (solver/exhaustive.py); priced in chunks of 2."""
    from randinst import partition_mixed_instance
    inst = partition_mixed_instance(seed)
    ex = exhaustive(inst)
    for res in (_cpsat(seed), search(inst, "milp")):
        assert res.status == "optimal"
        assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-9 * ex.objective_s)


def test_some_random_mixed_partition_optimum_uses_a_partition():
    """Not vacuous: the seeds above include an optimum whose tp-4 group runs a layer plan
    beyond Megatron's (seed 7 when written; seed 31 now, SEEDS)."""
    assert any(any(c.partitions for c in _cpsat(s).plan.classes) for s in SEEDS)


def test_lazy_layer_plan_subsets_list_exactly_the_combinations_that_can_win(monkeypatch):
    """An outer's layer-plan combinations are listed lazily (OuterChoices.expand: a node per
    surviving bucket combination, split level by level): against a cut U they must give exactly
    the candidates that listing everything gives with lb <= U (a bucket's bound is at most each
    of its combinations', and a plan bounded alone with the other choices optimistic at most
    every combination holding it), and every combination must be counted once: candidates +
    pruned by bound, memory and dominance = every combination but all-Megatron."""
    inst = _with_partitions(load_instance(TINY2))
    # the outers of two groups with the fewest combinations (> 1): three of two classes (the
    # cut decides alone) and one lone class
    outers = sorted((o for o in declared_outers(inst) if len({g for c in o.classes for g in c.stage_groups}) == 2
                     and partition_count(inst, o) > 1), key=lambda o: partition_count(inst, o))
    two = [o for o in outers if len(o.classes) > 1]
    checked, first = 0, None
    for o in two[:3] + [o for o in outers if len(o.classes) == 1][:1]:
        def choices(o=o):
            ch = OuterChoices(inst, o, [0], placer(inst, o), class_outers(inst.job, o),
                              lambda coeffs: problem_of(inst, o, "nominal", coeffs, prescaled=True))
            ch.optimistic()
            return ch
        every = expand_all(choices(), float("inf"))
        if not every.candidates:
            continue
        ch = choices()
        assert (len(every.candidates) + every.pruned_by_bound + every.pruned_by_memory
                + every.pruned_by_dominance) == ch.total - 1
        lbs = sorted(lb for lb, _, _, _ in every.candidates)
        cut = lbs[len(lbs) // 2]  # half of them can win
        lazy = expand_all(ch, cut)
        want = {j for lb, j, _, _ in every.candidates if lb <= cut * (1 + 1e-9)}
        got = {j for _, j, _, _ in lazy.candidates}
        # a lone class's combinations may also be proved above the cut by coupling its slowest
        # stage and sync (one_class.coupled_above, which reads the cut): fewer, never others
        assert got == want if len(o.classes) > 1 else got <= want
        assert (len(lazy.candidates) + lazy.pruned_by_bound + lazy.pruned_by_memory
                + lazy.pruned_by_dominance) == ch.total - 1
        checked += len(o.classes) > 1
        first = first or (choices, cut, sorted(got), ch.total)
    assert checked >= 3
    # a node whose bucket combinations pass GRID_CAP is split on its choice of the most buckets,
    # unbounded: the same candidates and the same count (the smallest outer of two classes)
    choices, cut, got, total = first
    monkeypatch.setattr(class_partitions, "GRID_CAP", 3)
    small = expand_all(choices(), cut)
    assert sorted(j for _, j, _, _ in small.candidates) == got
    assert (len(small.candidates) + small.pruned_by_bound + small.pruned_by_memory
            + small.pruned_by_dominance) == total - 1
