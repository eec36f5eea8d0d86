"""An MoE model's space listed a partial layout at a time (issue 33; solver/search._lists_partials,
solver/bounds/layouts.py): each block's bound is at most the bound before pricing
(unpriced.floor_bounds_s, which keys every configuration) of each configuration it stands for.

Why it must be: the search keys every listed configuration by at least its block's bound and
prunes a block whose bound passes the bar unlisted, so a block bound above one of its
configurations' floors could drop the optimum. An MoE layer's floor reads more than a dense
one's (ep, etp, whether the stage is pipelined and interleaved: coefficients.MOE_LAYER_FIELDS),
and the first stage carries the dense prefix a_0 (negative where the dense layers are the
cheaper), so the block's floors are the least over its expert layouts and v kinds, and a_0 is
read on the first stage through one group, as min(a_0, 0) on every stage through several
(layouts._dense_prefix_terms). The reference is independent of that code: floor_bounds_s of
every configuration of the full listing (solver/space.declared_outers), and exhaustive search
(solver/exhaustive.py: no bound, no pruning) for the search's answer."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_moe_mixed import moe_cluster_instance

from paraplan.cost.specs import Cluster
from paraplan.solver import search as search_mod
from paraplan.solver.bounds import layouts
from paraplan.solver.bounds.layouts import block_bounds_s, partial_bounds_s, representative_key
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search
from paraplan.solver.space import declared_outers, declared_partials, summarize, summarize_partials

pytestmark = pytest.mark.usefixtures("small_price_chunks")

# moe_cluster_instance seeds: two toy GPU types (stage-wise pipelines through both, the
# min(a_0, 0) reading), some with a dense prefix, most with ep > 1
SEEDS = (0, 1, 2, 3, 5, 6, 8, 9)
SLACK = 1e-12


def _instance(seed: int, idle: bool, one_group: bool = False):
    """moe_cluster_instance(seed), with search.idle_gpus (every replica count and depth on one
    group: pp = 1 and pipelined MoE layers side by side) and every expert layout the model
    divides; `one_group`: its first group alone (a_0 read on stage 0 exactly)."""
    inst = moe_cluster_instance(seed)
    if one_group:
        g = inst.cluster.groups[0]
        scen = tuple(replace(sc, cluster=Cluster.of(sc.cluster.groups[0])) for sc in inst.scenarios)
        inst = replace(inst, cluster=scen[0].cluster, scenarios=scen)
        assert len(inst.cluster.groups) == 1 and inst.cluster.groups[0].gpu == g.gpu
    return replace(inst, search=replace(inst.search, idle_gpus=idle, sequence_parallel=(False, True)))


def _violations(inst) -> list:
    """The blocks whose bound (layouts.partial_bounds_s' per representative, or block_bounds_s)
    passes the floor of one of the configurations it stands for, and the partial layouts whose
    bound passes one of theirs; every configuration's floor read from the full listing."""
    partials = declared_partials(inst)
    outers = declared_outers(inst)
    idx = list(range(len(inst.scenarios)))
    floors = floor_bounds_s(inst, outers, idx, "max", ())
    per_block: dict = {}
    bounds = partial_bounds_s(inst, partials, idx, "max", (), {}, per_block)
    bad, at = [], 0
    least_of_key: dict = {}  # representative key -> the least floor of every block it stands for
    for i, part in enumerate(partials):
        n_part = 0
        for blk in part.blocks():
            n = len(blk.outers())
            got = floors[at + n_part:at + n_part + n]
            n_part += n
            if not n:
                continue
            if part.dp is None:
                lb = block_bounds_s(inst, [blk], idx, "max", ())[0]
                if lb > got.min() * (1 + SLACK):
                    bad.append(("block", part.family, blk.classes, lb, got.min()))
            else:
                key = representative_key(i, blk)
                least_of_key[key] = min(least_of_key.get(key, np.inf), got.min())
        if n_part and bounds[i] > floors[at:at + n_part].min() * (1 + SLACK):
            bad.append(("partial", part.family, part.used, bounds[i], floors[at:at + n_part].min()))
        at += n_part
    assert at == len(outers)
    # a stage-wise representative stands for every order of its stages before the last: its
    # bound at most the least floor over all of them (an MoE model reads no fill_drain there)
    bad += [("representative", key, per_block[key], least) for key, least in least_of_key.items()
            if per_block[key] > least * (1 + SLACK)]
    return bad


@pytest.mark.parametrize("one_group", [False, True])
@pytest.mark.parametrize("idle", [False, True])
def test_moe_block_bound_is_at_most_each_configurations_floor(idle, one_group):
    checked = 0
    for seed in SEEDS:
        inst = _instance(seed, idle, one_group)
        assert search_mod._lists_partials(inst, False, 1, None, None)
        assert not _violations(inst), seed
        checked += 1
    assert checked == len(SEEDS)


@pytest.mark.parametrize("idle", [False, True])
def test_moe_representatives_count_the_space(idle):
    """The summary the lazy search reports (summarize_partials, from one layout per last group)
    is that of the full listing, expert layouts and the all-to-all's pairing included."""
    for seed in SEEDS:
        inst = _instance(seed, idle)
        assert summarize_partials(inst, declared_partials(inst)) == summarize(inst, declared_outers(inst)), seed


def test_the_moe_spaces_exercise_what_the_bound_reads():
    """Not vacuous: the spaces hold several expert layouts in one block, a dense prefix, blocks
    of both v kinds (v = 1 and interleaved), pipelines through both groups and pp = 1."""
    seen = {"several (ep, etp)": False, "dense prefix": False, "through both groups": False,
            "pp = 1": False, "both v kinds": False}
    for seed in SEEDS:
        inst = _instance(seed, True)
        seen["dense prefix"] |= inst.model.moe.dense_layers > 0
        for part in declared_partials(inst):
            for blk in part.blocks():
                if blk.tally.first is None:
                    continue
                seen["several (ep, etp)"] |= len(layouts.expert_layouts_of(blk)) > 1
                vs = tuple(dict.fromkeys(v for v, _, _ in blk.tally.vslots))
                seen["both v kinds"] |= len(layouts._moe_kinds(blk, vs)) == 2
                for c in blk.classes:
                    seen["through both groups"] |= len(set(c.stage_groups)) > 1
                    seen["pp = 1"] |= c.pp == 1
    assert all(seen.values()), seen


def test_a_planted_fault_in_the_moe_block_bound_is_caught(monkeypatch):
    """The check above fails where a block reads only its first expert layout (the dense
    model's reading, which the MoE lift had to widen): its floors then pass those of the
    block's other layouts."""
    monkeypatch.setattr(layouts, "expert_layouts_of", lambda b: (b.tally.first[4:6],))
    assert any(_violations(_instance(seed, True)) for seed in SEEDS)


@pytest.mark.parametrize("one_group", [False, True])
def test_a_planted_fault_in_the_dense_prefix_is_caught(monkeypatch, one_group):
    """The check above fails where the dense prefix is left out (a_0 = 0, the dense model's
    reading): where the MoE layer is the dearer a_0 < 0 lowers every configuration's floor."""
    real = layouts._least_terms

    def no_prefix(*args):
        t, _, h = real(*args)
        return t, 0.0, h
    monkeypatch.setattr(layouts, "_least_terms", no_prefix)
    assert any(_violations(_instance(seed, True, one_group)) for seed in SEEDS)


@pytest.mark.parametrize("seed", SEEDS)
def test_moe_search_with_idle_gpus_matches_exhaustive(seed):
    """The search listing partial layouts as it reaches them returns exhaustive search's
    optimum (no bound, no pruning) on MoE spaces with every replica count and depth."""
    inst = _instance(seed, True)
    ex = exhaustive(inst, "nominal")
    res = search(inst, "cpsat", time_limit_s=30)
    assert res.status in ("optimal", "infeasible")
    if ex.objective_s is None:
        assert res.objective_s is None
        return
    assert res.objective_s == pytest.approx(ex.objective_s, abs=res.tolerance_s + 1e-9 * ex.objective_s)
