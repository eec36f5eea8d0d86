"""Per-operator partitions listed a partial layout at a time (issue 33; solver/search._Partials,
solver/bounds/layouts.py, stage_families.py and solver/option_families.py on the layer plans'
floors, search._Search._plan_nodes).

Checked against what is computed without that listing:
- the space's size read from the representatives (summarize_partials, which counts each
  outer's layer-plan combinations from its block) is summarize over the full listing;
- each partial layout's bound is at most the bound of every layer-plan combination of each of
  its configurations read before pricing (unpriced.floor_bounds_s with layer_plans, computed
  on the full listing), all-Megatron's included;
- the search's optimum is exhaustive search's (solver/exhaustive.py: every layer plan of every
  class and group, no bound, no dominance), and its plan and counts are those of the same
  search over the full listing (search._lists_partials off: the path partitions took before).

The exhaustive cases are tests/randinst.mixed_family_instance's two toy groups with the first
made one node of 4 GPUs, and instances/mixed/tiny-2types.yaml narrowed (SMALL), each at tp 1
or 4 per group (a tp group of 4 is the least that offers plans beyond Megatron's,
cost/partition_names.spatial_temporal_allowed), with the layout options on and off: every
family, the option families' bounds (solver/option_families.py) included. Their optima run
Megatron's plans (the toy GPUs' memory, tp 1's lack of traffic); where a layer plan wins
(tiny-2types at tp 4: token splits, 14.9% faster, test_mixed_partitions.py) the space is too
large to list plan by plan, and the reference is the full listing, whose answer
test_mixed_partitions.py checks against the other backend.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from option_layouts import layer_plan_problems, option_layout_bounds
from randinst import mixed_family_instance

from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.readers.instance import instance_from_mapping
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.solver import search as search_mod
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.class_partitions import OuterChoices
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search
from paraplan.solver.space import declared_outers, declared_partials, summarize, summarize_partials

pytestmark = pytest.mark.usefixtures("small_price_chunks")

ON = ("megatron", "spatial_temporal")
# seeds whose space (with the partitions) holds at most ~25,000 plans: exhaustive search lists
# each in a few seconds (measured: 410 to 23,869 plans, 14 to 42 outer configurations)
SEEDS = (0, 2, 4, 5, 7, 13, 20)


def partitioned(seed: int, options: bool = True):
    inst = mixed_family_instance(seed)
    inst = dataclasses.replace(inst, name=f"{inst.name}-{'options' if options else 'plain'}")
    groups = (dataclasses.replace(inst.cluster.groups[0], gpus_per_node=4, nodes=1),) + inst.cluster.groups[1:]
    inst = dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=groups), scenarios=())
    extra = dict(classes_per_group=2, idle_gpus=True) if options else dict(mixed_families=False)
    return dataclasses.replace(inst, search=dataclasses.replace(
        inst.search, tensor_partitions=ON, tp=(1, 4), tp_per_group=True, zero=(1,), sequence_parallel=(False,),
        **extra))


TINY2 = Path(__file__).resolve().parents[2] / "instances/mixed/tiny-2types.yaml"
OPTIONS = dict(classes_per_group=2, idle_gpus=True, mixed_families=True)
# (GPUs per node of each group, tp values, layers, global batch): 866 to 28,214 plans
SMALL = (((4, 2), (1, 4), 8, 32), ((4, 1), (1, 4), 8, 32), ((4, 2), (1, 4), 4, 32), ((4, 2), (1, 4), 8, 8))


def tiny2(gpus_per_node, tps, layers, batch, model=None, **search_keys):
    """tiny-2types with those nodes, tp per group, layers and batch (and `model`'s keys);
    micro-batch 2, ZeRO-1, no sequence parallelism, per-operator partitions on."""
    d = read_yaml(TINY2)
    d["model"]["layers"] = layers
    d["model"].update(model or {})
    for g, n in zip(d["cluster"]["groups"], gpus_per_node):
        g["gpus_per_node"] = n
    d["job"]["global_batch"] = batch
    d["search"] = {"micro_batch": [2], "tp": list(tps), "tp_per_group": True, "zero": [1],
                   "sequence_parallel": [False], "tensor_partitions": list(ON), **search_keys}
    d["name"] = f"tiny2-{gpus_per_node}-{tps}-{layers}-{batch}-{len(search_keys)}"
    return instance_from_mapping(d, "<tiny2>")


def _full_listing(inst, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(search_mod, "_lists_partials", lambda *a: False)
        return search(inst)


@pytest.mark.parametrize("seed", SEEDS)
def test_representatives_count_the_layer_plans(seed):
    inst = partitioned(seed, options=False)  # the options' families are not listed up front
    assert summarize_partials(inst, declared_partials(inst)) == summarize(inst, declared_outers(inst))


# tiny-2types at tp 4 on both groups: there the layer plans' floors lie below Megatron's (by up to
# 17%: token splits move no activations), so a bound read on Megatron's floors fails here
TP4 = (((8, 8), (4,), 8, 32), ((4, 4), (4,), 2, 4))


@pytest.mark.parametrize("inst", [partitioned(s, options=False) for s in SEEDS]
                         + [tiny2(*c) for c in TP4] + [tiny2(*TP4[0], classes_per_group=2)],
                         ids=lambda i: i.name)
def test_partial_bound_is_at_most_its_layer_plans_bound_before_pricing(inst):
    partials = declared_partials(inst)
    bounds = partial_bounds_s(inst, partials, [0], "max", ())
    outers = declared_outers(inst)
    plans = floor_bounds_s(inst, outers, [0], "max", (), layer_plans=True)
    # the partial layouts are consecutive in declared_outers, in order
    at = 0
    for part, lb in zip(partials, bounds.tolist()):
        n = len([o for blk in part.blocks() for o in blk.outers()])
        if n and lb > float(np.min(plans[at:at + n])) * (1 + 1e-12):
            # a stage-wise layout's bound reads its slowest stage and its stages' sum together
            # (solver/bounds/fill_drain.py): above its configurations' keys, never their optima
            assert part.dp is not None and lb <= _least_optimum(inst, part, lb / (1 + 1e-12)) * (1 + 1e-12)
        elif n:
            assert lb <= float(np.min(plans[at:at + n])) * (1 + 1e-12)
        else:
            assert lb == np.inf
        at += n
    assert at == len(outers)


def _least_optimum(inst, part, cutoff_s: float) -> float:
    """The least optimum over every layer-plan combination (all-Megatron's included) of the
    configurations of a stage-wise partial layout (a lone class on one network), each combination
    priced (class_partitions.OuterChoices, every one listed) and solved by the exact split DP with
    `cutoff_s` (test_stage_families._least_optimum says why the cutoff keeps the check)."""
    best = float("inf")
    for o in [o for blk in part.blocks() for o in blk.outers()]:
        for p in layer_plan_problems(inst, o, float("inf")):
            sr = search_mod._solve_lone_dp(p, 60.0, None, cutoff_s)
            if sr.objective_s is not None:
                best = min(best, sr.objective_s)
    return best


@pytest.mark.parametrize("options", (False, True), ids=("plain", "options"))
@pytest.mark.parametrize("seed", SEEDS)
def test_lazy_partitions_prove_the_exhaustive_optimum(seed, options, monkeypatch):
    inst = partitioned(seed, options)
    res = search(inst)
    ex = exhaustive(inst)
    assert ex.complete and res.status == ("optimal" if ex.objective_s is not None else "infeasible")
    if ex.objective_s is None:
        return
    assert res.plans_total == ex.candidates or options  # (options: the families set up are counted)
    assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-12)
    full = _full_listing(inst, monkeypatch)
    assert (res.plan, res.objective_s) == (full.plan, full.objective_s)
    if not options:  # with them the count is of the families set up (search._count_set_up)
        assert (res.outer_configs, res.plans_total) == (full.outer_configs, full.plans_total)


# with the options exhaustive search lists up to 2.3 million plans (the first case, measured): marked slow
@pytest.mark.parametrize("options", (False, pytest.param(True, marks=pytest.mark.slow)), ids=("plain", "options"))
@pytest.mark.parametrize("case", SMALL, ids=str)
def test_lazy_partitions_on_tiny2_prove_the_exhaustive_optimum(case, options, monkeypatch):
    inst = tiny2(*case, **(OPTIONS if options else {}))
    res = search(inst)
    ex = exhaustive(inst)
    assert ex.complete and ex.objective_s is not None and res.status == "optimal"
    assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-12)
    full = _full_listing(inst, monkeypatch)
    assert (res.plan, res.objective_s) == (full.plan, full.objective_s)
    if not options:
        assert res.plans_total == ex.candidates == full.plans_total


# tp 4 on both groups: a layer plan wins (measured: 24.58 ms on 8 + 8 GPUs, token splits; on 4 + 4
# with 2 layers, the H100 class's plan)
@pytest.mark.parametrize("options", (False, True), ids=("plain", "options"))
@pytest.mark.parametrize("case", (((8, 8), (4,), 8, 32), ((4, 4), (4,), 2, 4)), ids=str)
def test_lazy_partitions_find_the_full_listings_layer_plans(case, options, monkeypatch):
    inst = tiny2(*case, **(OPTIONS if options else {}))
    res = search(inst)
    full = _full_listing(inst, monkeypatch)
    assert res.status == full.status == "optimal" and any(c.partitions for c in res.plan.classes)
    assert (res.plan, res.objective_s) == (full.plan, full.objective_s)
    if not options:
        assert (res.outer_configs, res.plans_total) == (full.outer_configs, full.plans_total)


@pytest.mark.slow  # 5.1 s of CPU, -n 0 at load 16 (issue 32)
def test_option_family_bounds_are_at_most_their_layouts_layer_plans_bounds():
    # every option family expanded with no cutoff (as test_option_bound_admissible.py): each
    # layout it sets up lies above its node's and its family's bound, read against the least
    # bound before pricing of the layer-plan combinations of the layout's configurations, or
    # where the bound reads memory and sync above that, against the layout's priced optimum
    # (test_plan_bound_admissible.layout_optimum_s)
    from test_plan_bound_admissible import layout_optimum_s
    inst = tiny2(*TP4[0], **OPTIONS)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    checked = 0
    for f, node, outers, least, top in option_layout_bounds(inst, lazy):
        if top > least * (1 + 1e-9):
            # the memory and sync terms read at every layer plan's (plan_range.py) raise it:
            # against the layout's priced optimum instead
            assert top <= layout_optimum_s(inst, outers, top) * (1 + 1e-9)
        checked += 1
    assert checked >= 10


def _choices_of(inst):
    """OuterChoices of every outer of `inst` with layer plans beyond all-Megatron's."""
    out = []
    for o in declared_outers(inst):
        ch = OuterChoices(inst, o, [0], search_mod.placer(inst, o), class_outers(inst.job, o),
                          lambda coeffs, o=o: search_mod.problem_of(inst, o, "nominal", coeffs, prescaled=True))
        if ch.total > 1:
            out.append((o, ch))
    return out


def test_optimistic_stops_exactly_where_a_class_fits_no_split():
    # stop_unfit answers None iff the whole optimistic build has a class that fits no split
    # (search._layer_plans drops the outer's combinations on it); both answers occur here
    from paraplan.solver.bounds.one_class import memory_infeasible
    # a Llama-3 70B-wide model of 48 layers at tp 4 without full recompute: 37 of 159 outers
    # hold a class that fits no split (measured)
    inst = tiny2((8, 8), (4,), 48, 32, model=dict(hidden=8192, heads=64, ffn=32768, seq_len=4096),
                 micro_batch=[1, 2, 4], full_recompute=False)
    seen = set()
    for o, ch in _choices_of(inst):
        whole = ch.optimistic()
        unfit = any(memory_infeasible(c) for c in whole[0])
        fresh = _choices_of_one(inst, o)
        assert (fresh.optimistic(stop_unfit=True) is None) == unfit
        seen.add(unfit)
    assert seen == {False, True}


def _choices_of_one(inst, o):
    return OuterChoices(inst, o, [0], search_mod.placer(inst, o), class_outers(inst.job, o),
                        lambda coeffs: search_mod.problem_of(inst, o, "nominal", coeffs, prescaled=True))


def test_a_step_past_its_deadline_comes_back_whole():
    inst = tiny2(*TP4[0])
    o, ch = _choices_of(inst)[0]
    ch.optimistic()
    late = ch.expand(float("inf"), None, deadline=0.0)  # perf_counter() is past 0
    assert not late.candidates and len(late.nodes) == 1
    bound, node = late.nodes[0]
    assert bound == -np.inf and node.weight > 0
    # expanded later, it is the step not taken: as the root's, child for child
    again, fresh = ch.expand(float("inf"), node), ch.expand(float("inf"))
    assert [(b, n.weight) for b, n in again.nodes] == [(b, n.weight) for b, n in fresh.nodes]
    assert len(again.candidates) == len(fresh.candidates)
