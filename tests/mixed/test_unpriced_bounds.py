"""The bound before pricing (solver/bounds/unpriced.py): each stage's layer-time floor against the
layer time its configuration is priced with, each configuration's bound against its priced
bound (solver/bounds/batched.py, itself checked against enumerated optima in
test_batched_bounds.py), and the planner's answer with and without it. Mixed clusters with
network scenarios, a tp per group, ZeRO 2/3, context parallelism and interleaving, one-group
instances, and an MoE model with expert parallelism and folding."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance, random_instance
from test_moe_mixed import moe_cluster_instance

from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.solver import search as search_module
from paraplan.solver.bench.growth import growth_instance
from paraplan.solver.bounds import unpriced
from paraplan.solver.bounds.batched import lower_bounds_s
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.search import search, problems_for, scenario_weights
from paraplan.solver.space import declared_outers, micro_batch_vectors

ROOT = Path(__file__).resolve().parents[2]


def _instances():
    for seed in range(4):
        yield f"random {seed}", random_cluster_instance(seed), ("nominal", "robust", "expected")
    for seed in (19, 41):  # their optima run a tp per group (test_group_tp.py)
        yield f"group tp {seed}", group_tp_instance(seed), ("nominal",)
    for seed in (1, 2, 5):  # one group; ZeRO 2 and 3 in the space (randinst variant)
        yield f"one group {seed}", random_instance(seed, variant=True), ("nominal",)
    yield "tiny-gpt", load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml"), ("nominal",)
    yield "tiny-2types", load_instance(ROOT / "instances/mixed/tiny-2types.yaml"), ("nominal",)
    # MoE with dense prefixes: the first stage's extra d x (dense - MoE layer) is negative where
    # the dense layers are the cheaper (seed 19: bounding it by 0 pruned the optimum)
    for seed in (3, 11, 19):
        yield f"moe {seed}", moe_cluster_instance(seed), ("nominal", "robust")


def _moe():
    """Mixtral on 64 H100: ep up to 8 and etp 1 in the space; every 7th configuration keeps
    the test short."""
    inst = load_instance(ROOT / "instances/mixtral-8x7b-64xH100.yaml")
    return inst, declared_outers(inst)[::7]


def _checked(inst, outers, objective: str) -> int:
    idx, agg, weights = scenario_weights(inst, objective)
    floor = floor_bounds_s(inst, outers, idx, agg, weights)
    problems = problems_for(inst, outers, objective)
    live = [j for j, p in enumerate(problems) if p is not None]
    mv = [micro_batch_vectors(outers[j].classes, problems[j].total_micro_batches, False,
                              outers[j].virtual_stages) for j in live]
    priced = lower_bounds_s([problems[j] for j in live], lambda i: mv[i])
    for i, j in enumerate(live):
        assert floor[j] <= priced[i] * (1 + 1e-12), (objective, outers[j], floor[j], priced[i])
    return len(live)


@pytest.mark.parametrize("name,inst,objectives", list(_instances()), ids=lambda x: x if isinstance(x, str) else "")
def test_each_bound_before_pricing_is_at_most_the_priced_bound(name, inst, objectives):
    # (some instances fit no configuration: the stage test below is the non-vacuous one)
    for objective in objectives:
        _checked(inst, declared_outers(inst), objective)


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
def test_the_moe_bound_before_pricing_is_at_most_the_priced_bound():
    inst, outers = _moe()
    assert any(o.ep > 1 for o in outers) and any(o.etp is not None for o in outers)
    assert _checked(inst, outers, "nominal")


def test_each_stage_floor_is_at_most_its_priced_layer_time():
    """Stage by stage, the floors the bound reads (cost/coefficients.layer_time_floor_s) against
    the priced layer times: equal without ZeRO-3 (nothing else in a layer's time reads the
    data-parallel ring), below with it (its gathers)."""
    from paraplan.cost.coefficients import layer_time_floor_s, stage_outer
    from paraplan.cost.class_coefficients import class_outers, group_site
    equal = below = 0
    for name, inst, _ in _instances():
        outers = declared_outers(inst)
        for o, p in zip(outers, problems_for(inst, outers, "nominal")):
            if p is None:
                continue
            co = class_outers(inst.job, o)
            for k, (c, cs) in enumerate(zip(o.classes, p.coeffs[0])):
                for s, g in enumerate(c.stage_groups):
                    site = group_site(inst.cluster, o, g, rings=False)
                    f = layer_time_floor_s(inst, stage_outer(co[k], site), site)
                    t = cs.layer_time_s[s]
                    assert f <= t * (1 + 1e-12), (name, o, k, s)
                    equal += f == pytest.approx(t, rel=1e-12)
                    below += f < t * (1 - 1e-9)
    assert equal and below  # both cases met (ZeRO-3 configurations among them)


def test_the_last_stage_floor_is_the_priced_output_layer():
    """The last stage's term the bound reads (cost/coefficients.output_layer_floor_s) against
    its configuration's priced coefficients: equal to build's "output_layer" part times the
    slowest-rank wait build puts on every stage term (the same formula, so the bound loses
    nothing there), and at most the priced last-stage time, of which that part is one
    non-negative term (a one-stage class with an MoE dense prefix excepted: that stage's
    negative prefix is bounded apart, dense_prefix_floor_s)."""
    from paraplan.cost import scale
    from paraplan.cost.coefficients import output_layer_floor_s, stage_outer
    from paraplan.cost.comm import NetEfficiency
    from paraplan.cost.class_coefficients import class_outers, group_site
    checked = 0
    for name, inst, _ in _instances():
        slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, NetEfficiency().rank_jitter_rel)
        outers = declared_outers(inst)[::4]  # every 4th keeps the test short
        for o, p in zip(outers, problems_for(inst, outers, "nominal")):
            if p is None:
                continue
            co = class_outers(inst.job, o)
            for k, (c, cs) in enumerate(zip(o.classes, p.coeffs[0])):
                site = group_site(inst.cluster, o, c.stage_groups[-1], rings=False)
                f = output_layer_floor_s(inst, stage_outer(co[k], site), site)
                assert f == pytest.approx(cs.stage_parts[-1]["output_layer"] * (1 + slow), rel=1e-12), (name, o, k)
                if c.pp > 1 or "dense_prefix" not in cs.stage_parts[0]:
                    assert f <= cs.stage_time_s[-1] * (1 + 1e-12), (name, o, k)
                checked += 1
    assert checked


def test_the_planner_prices_fewer_configurations_for_the_same_answer(monkeypatch):
    """The search with the bound before pricing, one configuration priced at a time (these
    instances have fewer configurations than a chunk), against the search that prices every
    configuration before solving any (the bound replaced by zeros, so every chunk pops first):
    the same status, plan and objective, every configuration accounted for, and fewer of them
    priced on most instances (not vacuous)."""
    fewer = 0
    cases = [random_cluster_instance(s) for s in range(6)] + [group_tp_instance(s) for s in (19, 41, 57)]
    for inst in cases:
        with monkeypatch.context() as mp:
            mp.setattr(search_module, "PRICE_CHUNK", 1)
            with_floor = search(inst, objective="robust" if len(inst.scenarios) > 1 else "nominal")
        with monkeypatch.context() as mp:
            mp.setattr(search_module, "floor_bounds_s", lambda inst, outers, *a, **k: np.zeros(len(outers)))
            # and every configuration priced, none refused by the memory proof (test_memory_bound.py)
            mp.setattr(search_module.memory_bound, "proved_infeasible", lambda inst, outers: np.zeros(len(outers), bool))
            # nor by the bound that reads memory (test_unpriced_memory.py)
            mp.setattr(search_module, "memory_floor_bounds_s", lambda inst, outers, *a: np.zeros(len(outers)))
            # nor keyed by their stage-wise representative's bound when listed (_list_layouts)
            mp.setattr(search_module, "representative_key", lambda i, blk: None)
            # nor pruned by their stage-wise layouts' syncs as they are popped (_Partial.tighten)
            mp.setattr(search_module._Partials, "read_syncs", lambda self, inst, idx, *a: [0.0] * len(idx))
            every = search(inst, objective=with_floor.objective)
        assert every.priced == every.outer_configs
        assert (with_floor.status, with_floor.plan, with_floor.objective_s) == (every.status, every.plan, every.objective_s)
        assert with_floor.priced <= every.priced
        fewer += with_floor.priced < every.priced
        assert with_floor.outer_configs == (with_floor.pruned_by_memory + with_floor.pruned_by_bound
                                            + with_floor.solved + with_floor.unresolved)
    assert fewer >= len(cases) // 2


def test_the_layer_plan_bound_before_pricing_is_at_most_each_outers_optimistic_bound():
    """With per-operator partitions the planner sets up an outer's layer-plan combinations in
    the order of floor_bounds_s(layer_plans=True); it must be at most the outer's optimistic
    bound (solver/class_partitions.OuterChoices.optimistic_bound, itself at most every
    combination's bound), and below the Megatron-only floor somewhere (the plans' optimistic
    terms are faster there: not vacuous)."""
    from paraplan.solver.class_partitions import OuterChoices
    from paraplan.cost.class_coefficients import class_outers
    from paraplan.solver.search import placer, problem_of
    from paraplan.solver.bounds.one_class import FLOAT_SAFETY
    from paraplan.solver.partition_plans import SPATIAL_TEMPORAL
    inst = load_instance(ROOT / "instances/mixed/tiny-2types.yaml")
    inst = replace(inst, search=replace(inst.search, tensor_partitions=("megatron", SPATIAL_TEMPORAL)))
    outers = declared_outers(inst)
    plans = floor_bounds_s(inst, outers, [0], "max", (), layer_plans=True) * (1 - FLOAT_SAFETY)
    megatron = floor_bounds_s(inst, outers, [0], "max", ())
    checked = 0
    for o, f in zip(outers, plans):
        ch = OuterChoices(inst, o, [0], placer(inst, o), class_outers(inst.job, o),
                          lambda coeffs, o=o: problem_of(inst, o, "nominal", coeffs, prescaled=True))
        if ch.total == 1:
            continue
        ch.optimistic()
        assert f <= ch.optimistic_bound(), o
        checked += 1
    assert checked and (plans < megatron * (1 - 1e-6)).any()


@pytest.mark.parametrize("a2a_overlap", [False, True])
def test_moe_floors_shared_across_stage_counts_equal_each_alone(a2a_overlap):
    """unpriced._pipelined: the floors of an MoE model are shared between configurations whose
    stage counts are both > 1 (its price reads only whether there is a pipeline). The bounds of
    every configuration at once (one shared cache) equal each configuration's bound alone (its
    own cache, keyed by nothing but itself). With the all-to-all overlap on, pp = 1 and pp > 1
    price differently, so a key that merged them fails here."""
    inst, outers = _moe()
    inst = replace(inst, job=replace(inst.job, moe_a2a_overlap=a2a_overlap))
    outers = [o for o in outers if o.ep > 1]
    assert {o.classes[0].pp == 1 for o in outers} == {True, False}
    idx, agg, weights = scenario_weights(inst, "nominal")
    together = floor_bounds_s(inst, outers, idx, agg, weights)
    alone = [floor_bounds_s(inst, [o], idx, agg, weights)[0] for o in outers]
    assert together.tolist() == alone


def test_interior_stage_order_leaves_every_floor_unchanged():
    """The bound before pricing keys a class's stage floors with its interior stages sorted
    (unpriced._canonical_row), so that a layout's group orders share one balanced split. That
    is exact only if the bound is symmetric in the interior stages, float for float: computed
    again with each class's floors in their own stage order, every outer's floor is the same.
    Llama-3 70B on one node of each of three GPU types (bench --mixed's growth instance):
    1,406 of its 4,322 outer configurations run a pipeline whose interior stages the key
    reorders (counted below, so the check is not vacuous)."""
    inst = growth_instance(3, nodes=1)
    outers = declared_outers(inst)
    sorted_key = unpriced.floor_bounds_s(inst, outers, [0], "max", ())
    canonical = unpriced._canonical_row
    reordered = sum(any(canonical(list(c.stage_groups)) != c.stage_groups for c in o.classes) for o in outers)
    assert reordered > 1000, reordered
    try:
        unpriced._canonical_row = tuple  # each class's floors in its own stage order
        own_order = unpriced.floor_bounds_s(inst, outers, [0], "max", ())
    finally:
        unpriced._canonical_row = canonical
    assert np.array_equal(sorted_key, own_order)


def test_dense_prefix_and_output_floors_shared_by_dense_fields_equal_each_alone():
    """stage_floor_terms keeps a stage's dense prefix layer floor and output layer by a dense
    layer's fields alone (tp, cp, micro-batch, sp, recompute), under the MoE floor's finer key.
    DeepSeek-V3-shaped on 2,048 H800 (3 dense layers, latent attention, ep up to 64): every
    41st configuration of its space bounded at once (one shared memo) equals each bounded alone
    (its own memo); a dense key missing one of the fields it needs would mix floors here. The
    outers sampled hold more distinct MoE keys than dense ones (counted), so the dense entries
    are shared, not each computed once."""
    inst = load_instance(ROOT / "instances/deepseek-v3-shaped-2048xH800.yaml")
    outers = declared_outers(inst)[::41]
    idx, agg, weights = scenario_weights(inst, "nominal")
    memo: dict = {}
    together = floor_bounds_s(inst, outers, idx, agg, weights, memo=memo)
    alone = [floor_bounds_s(inst, [o], idx, agg, weights)[0] for o in outers]
    assert together.tolist() == alone
    dense = sum(1 for key in memo if key[0] == "dense")
    assert 0 < dense < len(memo) - dense, (dense, len(memo))
