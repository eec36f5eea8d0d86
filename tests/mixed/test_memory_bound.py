"""The memory proof before pricing (solver/bounds/memory.py): every configuration it refuses is
one that pricing refuses too (build's no_split_fits, problems_for's None), on mixed clusters,
one-group instances and MoE models; it refuses some (not vacuous); and the planner's answer is
the same with it and without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance, random_instance
from test_moe_mixed import moe_cluster_instance

from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.instance import load_instance
from paraplan.solver import search as search_module
from paraplan.solver.bounds.memory import proved_infeasible
from paraplan.solver.search import problems_for, search
from paraplan.solver.space import declared_outers

ROOT = Path(__file__).resolve().parents[2]


def _instances():
    for seed in range(4):
        yield f"random {seed}", random_cluster_instance(seed)
    for seed in (19, 41):
        yield f"group tp {seed}", group_tp_instance(seed)
    for seed in (1, 2, 5):  # ZeRO 2 and 3 in the space
        yield f"one group {seed}", random_instance(seed, variant=True)
    for seed in (3, 11):
        yield f"moe {seed}", moe_cluster_instance(seed)
    yield "tiny-2types", load_instance(ROOT / "instances/mixed/tiny-2types.yaml")


@pytest.mark.parametrize("name,inst", list(_instances()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_configuration_refused_before_pricing_fits_no_split(name, inst):
    outers = declared_outers(inst)
    refused = [o for o, r in zip(outers, proved_infeasible(inst, outers)) if r]
    for o, p in zip(refused, problems_for(inst, refused, "nominal")):
        assert p is None, (name, o)


def test_the_proof_refuses_most_of_what_pricing_refuses_on_gpt3():
    """GPT-3 175B on 1,024 A100 (the README's first plan), its 1,528 configurations with the
    lowest bound before pricing (as the planner prices them): pricing finds 1,055 of them fit
    no split (measured when this proof was added); the proof refuses the most of those, and
    none that fits."""
    from paraplan.solver.bounds.unpriced import floor_bounds_s
    inst = load_instance(ROOT / "instances/gpt3-175b-1024xA100.yaml")
    outers = declared_outers(inst)
    floor = floor_bounds_s(inst, outers, [0], "max", ())
    first = [outers[j] for j in np.argsort(floor, kind="stable")[:1528]]
    refused = proved_infeasible(inst, first)
    # pricing only what the proof refuses, and a sample of the rest, keeps the test short
    assert all(p is None for p in problems_for(inst, [o for o, r in zip(first, refused) if r], "nominal"))
    kept = [o for o, r in zip(first, refused) if not r]
    priced = problems_for(inst, kept, "nominal")
    infeasible = int(refused.sum()) + sum(p is None for p in priced)
    assert infeasible > 500 and refused.sum() >= 0.9 * infeasible  # measured: 1,033 of 1,055
    assert any(p is not None for p in priced)


def test_the_planner_answers_the_same_without_the_proof(monkeypatch):
    """The search with the proof against the search that prices every configuration its bound
    reaches (the proof replaced by "refuses nothing"): the same status, plan and objective,
    every configuration accounted for, and fewer priced somewhere. The bound before pricing that
    reads memory (test_unpriced_memory.py) proves what the proof does and more: it is left out of
    both, so that the proof is what differs."""
    monkeypatch.setattr(search_module, "memory_floor_bounds_s", lambda inst, outers, *a: np.zeros(len(outers)))
    fewer = 0
    cases = [random_cluster_instance(s) for s in range(4)] + [random_instance(s, variant=True) for s in (1, 2)]
    for inst in cases:
        objective = "robust" if len(inst.scenarios) > 1 else "nominal"
        with_proof = search(inst, objective=objective)
        with monkeypatch.context() as mp:
            mp.setattr(search_module.memory_bound, "proved_infeasible", lambda inst, outers: np.zeros(len(outers), bool))
            without = search(inst, objective=objective)
        assert (with_proof.status, with_proof.plan, with_proof.objective_s) == (without.status, without.plan, without.objective_s)
        assert with_proof.outer_configs == (with_proof.pruned_by_memory + with_proof.pruned_by_bound
                                            + with_proof.solved + with_proof.unresolved)
        assert with_proof.priced <= without.priced
        fewer += with_proof.priced < without.priced
    assert fewer


def test_the_per_stage_sum_refuses_what_pricing_refuses_on_three_gpu_types():
    """The three-type growth instance (solver/bench/growth.py: H100, A100-80GB and H200, 4 nodes
    each), its 1,585 configurations with the lowest bound before pricing (those the planner
    prices: their bound lies below the optimum). Pricing finds that 614 of them fit no split
    (measured; 613 before the refit of Megatron-LM's release-dated gradient reduction, 617 before the memory-aware p90 re-levelled the quantile factors, 608 before the attention-per-kernel model and 606 before the dense refit: each
    re-ordered the bounds, which picks a slightly different 1,585); the test before issue 33 (the last stage's one layer, the fullest stage's
    ceil(L / pp) on some group, one micro-batch in flight) refused 380 of those (the search
    priced 1,205), the per-stage sum with build's in-flight counts and the embedding state
    refuses all of them (979 priced), and none that fits."""
    from paraplan.solver.bench.growth import growth_instance
    from paraplan.solver.bounds.unpriced import floor_bounds_s
    inst = growth_instance(3)
    outers = declared_outers(inst)
    floor = floor_bounds_s(inst, outers, [0], "max", ())
    first = [outers[j] for j in np.argsort(floor, kind="stable")[:1585]]
    refused = proved_infeasible(inst, first)
    priced = problems_for(inst, first, "nominal")
    no_fit = np.array([p is None for p in priced])
    assert no_fit.sum() == 614
    assert (refused == no_fit).all()
