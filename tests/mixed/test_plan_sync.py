"""The layer plans' least sync (solver/bounds/plan_sync.py), which raises the keys of an outer's
layer-plan node and of its all-Megatron candidate (search._PlanNode.tighten, _price_chunk),
on tiny-2types with its two groups on two sites joined by a slow link (the instance of
test_partitions_lazy.tiny2, made two-site here).

Checked against what is computed without it:
- per stage, the floors of its per-layer and per-iteration sync are at most those build prices
  under Megatron's layer and under every layer plan of its tp group (cost/partition.all_plans,
  each priced by cost/coefficients.build on the class's own placement, its rings across the
  sites), on the two groups at tp 4, where every group offers plans beyond Megatron's;
- every outer's floor bound raised by its least sync is at most the priced bound
  (batched.lower_bounds_s, which reads each combination's own gradient syncs) of every one of its
  layer-plan combinations, all-Megatron's included, each priced by cost/ (class_partitions.
  all_partitions: every plan of every class and group, no dominance, no pruning);
- the raise is read: on a slow link some outer's key rises above its floor bound;
- each partial layout of another family than the stage-wise one (one class layout), its bound
  before listing raised by its configurations' least sync, is at most the priced bound of every
  layer-plan combination of every one of its configurations, and some is raised;
- the search's optimum is exhaustive search's (solver/exhaustive.py), with and without the
  layout options.
"""

from __future__ import annotations

import pytest
from test_partitions_lazy import OPTIONS, TINY2

from oracles.search import problem_for
from paraplan.cost import partition as P
from paraplan.cost.class_coefficients import class_layer_fn, class_outers, on_group
from paraplan.cost.coefficients import build, stage_outer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import instance_from_mapping
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.solver import search as search_mod
from paraplan.solver.bounds import plan_sync
from paraplan.solver.bounds.batched import lower_bounds_s
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.class_partitions import all_partitions
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.space import declared_outers, declared_partials

pytestmark = pytest.mark.usefixtures("small_price_chunks")


def two_sites(gpus_per_node, tps, layers, batch, gbit_per_s, model=None, **search_keys):
    """test_partitions_lazy.tiny2's instance (micro-batch 2, ZeRO-1, no sequence parallelism, partitions on) with the
    A100 group on site west, the H100 group on site east, `gbit_per_s` per GPU between them."""
    d = read_yaml(TINY2)
    d["model"]["layers"] = layers
    d["model"].update(model or {})
    for g, n, site in zip(d["cluster"]["groups"], gpus_per_node, ("west", "east")):
        g["gpus_per_node"] = n
        g["site"] = site
    d["cluster"]["links"] = [{"between": ["west", "east"], "gbit_per_s": gbit_per_s, "latency_us": 1000}]
    d["job"]["global_batch"] = batch
    d["search"] = {"micro_batch": [2], "tp": list(tps), "tp_per_group": True, "zero": [1],
                   "sequence_parallel": [False], "tensor_partitions": ["megatron", "spatial_temporal"],
                   **search_keys}
    d["name"] = f"tiny2-two-sites-{gpus_per_node}-{tps}-{layers}-{batch}-{gbit_per_s}-{len(search_keys)}"
    return instance_from_mapping(d, "<two sites>")


# (GPUs per node of each group, tp values, layers, batch, Gbit/s between the sites): tp 4 on the
# 4-GPU group offers plans beyond Megatron's (cost/partition_names.spatial_temporal_allowed); the
# first with tiny-2types' own layer, the second with a Llama-3 70B-wide one
# (test_plan_bound_admissible.WIDE), whose gradients make the sync count
WIDE = dict(hidden=8192, heads=64, ffn=32768, seq_len=4096)
CASES = (((4, 2), (1, 4), 8, 32, 10, None), ((4, 2), (1, 4), 4, 16, 100, WIDE))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}gbit-{'wide' if c[5] else 'tiny'}")
def test_raised_keys_are_at_most_every_combinations_priced_bound(case):
    inst = two_sites(*case)
    outers = declared_outers(inst)
    floors = {lp: floor_bounds_s(inst, outers, [0], "max", (), layer_plans=lp) for lp in (False, True)}
    memo: dict = {}
    raised_any = 0
    for j, o in enumerate(outers):
        plans_key, megatron_key = (float(x) for x in plan_sync.raised_keys(
            inst, [o, o], [floors[True][j], floors[False][j]], [0], "max", (), memo))
        raised_any += plans_key > floors[True][j]
        placements: dict = {}
        for parts in all_partitions(inst, o, search_mod.placer(inst, o, placements),
                                    class_outers(inst.job, o)):
            p = problem_for(inst, o, "nominal", placements, parts if any(parts) else None)
            lb = lower_bounds_s([p], None)[0]
            assert plans_key <= lb * (1 + 1e-12), (o, parts, plans_key, lb)
            if not any(parts):  # all-Megatron: its own floor (Megatron's layer) raised too
                assert megatron_key <= lb * (1 + 1e-12), (o, megatron_key, lb)
    assert raised_any > 0


# with the options exhaustive search takes ~30 s (measured): marked slow
def _least_priced_bound(inst, o) -> float:
    """The least priced bound (batched.lower_bounds_s) over every layer-plan combination of `o`."""
    placements: dict = {}
    return min(lower_bounds_s([problem_for(inst, o, "nominal", placements, parts if any(parts) else None)],
                              None)[0]
               for parts in all_partitions(inst, o, search_mod.placer(inst, o, placements), class_outers(inst.job, o)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}gbit-{'wide' if c[5] else 'tiny'}")
def test_raised_partial_bounds_are_at_most_every_combinations_priced_bound(case):
    inst = two_sites(*case)
    partials = [p for p in declared_partials(inst) if p.dp is None]
    bounds = partial_bounds_s(inst, partials, [0], "max", ())
    raised = plan_sync.raised_partial_bounds(inst, partials, bounds, [0], "max", (), {})
    checked = 0
    for part, lb, up in zip(partials, bounds.tolist(), raised.tolist()):
        outers = [o for blk in part.blocks() for o in blk.outers()]
        if outers:
            assert up <= min(_least_priced_bound(inst, o) for o in outers) * (1 + 1e-12)
            checked += up > lb
    assert checked > 0


@pytest.mark.parametrize("options", (False, pytest.param(True, marks=pytest.mark.slow)), ids=("plain", "options"))
def test_search_with_the_sync_keys_proves_the_exhaustive_optimum(options):
    inst = two_sites(*CASES[0][:5], **(OPTIONS if options else {}))
    res = search(inst)
    ex = exhaustive(inst)
    assert ex.complete and ex.objective_s is not None and res.status == "optimal"
    assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-12)


# tp 4 on both groups of 4 GPUs, two layers (test_partitions_lazy.TP4's second case) with the
# wide layer; every group offers plans beyond Megatron's
TP4 = ((4, 4), (4,), 2, 4, 100, WIDE)


@pytest.mark.parametrize("zero", (0, 1))
def test_sync_floors_are_at_most_every_layer_plans_priced_syncs(zero):
    # one replica class per group, so each layer's ring crosses the sites (all-reduce at ZeRO-0,
    # reduce-scatter and all-gather at ZeRO-1): 768 plans per group, each priced
    inst = two_sites(*TP4, zero=[zero])
    net, memo, checked = NetEfficiency(), {}, 0
    for o in declared_outers(inst):
        placed = search_mod.placer(inst, o, {})
        for k, co in enumerate(class_outers(inst.job, o)):
            pl, groups = placed(0, k), o.classes[k].stage_groups
            for g in sorted(set(groups)):
                g_floor, d_floor = plan_sync.layer_sync_floors(inst, o, co, 0, g, memo, net)
                site = pl.sites[groups.index(g)]
                so = stage_outer(co, site)
                ginst = inst.group_alone(g, inst.cluster)
                table = P.table_for(ginst, so, site, net)
                fns = [None] + [P.partition_layer_fn(P.plan_from_indices(table, row)) for row in P.all_plans(table)[0]
                                if P.plan_allowed(P.plan_from_indices(table, row), so)]
                assert len(fns) > 1  # plans beyond Megatron's
                for fn in fns:
                    layer_fn = None if fn is None else class_layer_fn(pl, groups, {g: on_group(fn, ginst)})
                    c = build(inst, co, net, placement=pl, **({} if layer_fn is None else {"layer_fn": layer_fn}))
                    on_g = [s for s, x in enumerate(groups) if x == g]
                    assert g_floor <= c.layer_sync_time_s[on_g].min() * (1 + 1e-12)
                    assert d_floor <= c.stage_sync_time_s[on_g].min() * (1 + 1e-12)
                    checked += 1
    assert checked > 0
