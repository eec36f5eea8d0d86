"""The stage-wise partial layouts' bounds read the slowest stage's gradient sync, per ZeRO stage and v
(solver/bounds/layouts.stage_bound_rows' per_mode, kept by partial_bounds_s's per_block under the
representative's key with (ZeRO stage, v) appended where it is given a layer memo, as the search
does for each layout through several groups it pops; the search prunes each listed configuration
by it, issue 33). Such a bound is above the configurations' bound before pricing, so it is checked
against what it claims to bound: the exact optimum (the split DP) of every configuration of that
ZeRO stage and v in every block the representative stands for (every order of the stages before
the last). And it is not vacuous: on some configurations it is above their bound before pricing
(unpriced.floor_bounds_s), which reads no sync."""

from __future__ import annotations

import pytest
from test_many_types_agreement import many_types_instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver import search as search_mod
from paraplan.solver.bounds.layouts import partial_bounds_s, representative_key
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.space import declared_partials

# many_types_instance seeds as tests/mixed/test_partial_layouts.py's (several ZeRO stages; 10 and
# 11 run pipelines through three groups or more), and the bundled two-type toy file
SEEDS = (1, 2, 11)


def _instances():
    return [many_types_instance(s) for s in SEEDS] + [load_instance("instances/mixed/tiny-2types.yaml")]


@pytest.mark.parametrize("inst", _instances(), ids=lambda i: i.name)
def test_each_zero_and_v_bound_is_at_most_its_configurations_optimum(inst):
    partials = declared_partials(inst)
    per_block: dict = {}
    partial_bounds_s(inst, partials, [0], "max", (), per_block=per_block, layer_memo={})
    checked = raised = 0
    for i, part in enumerate(partials):
        if part.dp is None:
            continue
        for blk in part.blocks():
            key = representative_key(i, blk)
            outers = blk.outers()
            floors = floor_bounds_s(inst, outers, [0], "max", ())
            for o, p, fl in zip(outers, search_mod.problems_for(inst, outers, "nominal"), floors.tolist()):
                lb = per_block[(*key, o.zero, o.virtual_stages)]
                assert lb >= per_block[key]  # the block's bound is the least over its modes
                if p is None:
                    continue
                sr = search_mod._solve_lone_dp(p, 60.0, None, None)
                if sr.objective_s is None:
                    continue
                assert lb <= sr.objective_s * (1 + 1e-12), (o, lb, sr.objective_s)
                checked += 1
                raised += lb > fl * (1 + 1e-9)
    assert checked
    assert raised  # the syncs lift some above the bound before pricing


def test_the_search_reads_syncs_only_for_layouts_through_several_groups(monkeypatch):
    # through one group the syncs' bound is at most the bound that reads memory, which every
    # listed configuration gets before pricing (search._Partial.tighten): a one-type plan
    # reads none; the bundled two-type file reads some, each through both groups
    read: list = []
    real = search_mod._Partials.read_syncs
    monkeypatch.setattr(search_mod._Partials, "read_syncs",
                        lambda self, inst, idx, *a: read.append([self.partials[i].used for i in idx]) or real(self, inst, idx, *a))
    search_mod.search(load_instance("instances/llama3-8b-64xH100.yaml"), time_limit_s=60)
    assert not read
    search_mod.search(load_instance("instances/mixed/tiny-2types.yaml"), time_limit_s=60)
    assert read and all(len(used) > 1 for batch in read for used in batch)
