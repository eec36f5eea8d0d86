"""search.idle_gpus on one group (issue 33): the stage family on the group is deferred
(space.partials_and_families), each (cp, dp) a stage family keyed by its bound
(solver/bounds/stage_families.py), which reads the stages the group holds at dp replicas in
whole ones and the lone class's whole micro-batch count, so that a family of layouts that
leave many GPUs idle, or of replicas that split no batch, is never set up.

Checked against what is computed without the deferral, on a one-node group of 6 toy GPUs with
a global batch of 12 (so dp 5 splits no batch and dp 4 idles 2 GPUs at one stage each):
- the group's stage family is deferred, and the families set up hold every partial layout of
  the full listing that has a configuration, at the same ranks (the tie rule);
- every family's bound is at most each of its partial layouts' bound (layouts.partial_bounds_s)
  or, where the family's bound reads more than that one, at most the least optimum of its
  configurations (the exact split DP): the key is admissible;
- a family whose dp divides no micro-batch count of the batch is bounded inf (no configuration);
- the search with the deferral returns exhaustive search's optimum and the plan of the search
  that lists the group whole."""

from __future__ import annotations

import dataclasses

import pytest
from randinst import Space
from test_stage_families import _every_family_opened, _least_optimum

from paraplan.cost.specs import Cluster, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec, NodeGroup
from paraplan.solver import search as search_mod
from paraplan.solver import space as space_mod
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.bounds.stage_families import StageFamily
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search
from paraplan.solver.space import declared_partials

pytestmark = pytest.mark.usefixtures("small_price_chunks")

BATCH = 12
GPUS = 6


def one_group_instance(hbm_gib: float = 3.0) -> Instance:
    """One node of 6 toy GPUs (3 GiB: memory binds on some layouts), 6 layers, tp 1 or 2."""
    heads = 8
    hidden = heads * 64
    model = ModelSpec(name="idle1", layers=6, hidden=hidden, heads=heads, kv_heads=heads, ffn=4 * hidden,
                      vocab=8000, seq_len=512, mlp=Mlp.GELU)
    gpu = GpuSpec(name="toy", peak_flops_per_s=150e12, hbm_bytes=hbm_gib * 2**30, hbm_bw_bytes_per_s=1e12)
    group = NodeGroup(name="g0", site="s", gpu=gpu, nodes=1, gpus_per_node=GPUS,
                      intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                      inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5))
    return Instance(name="idle1", model=model, cluster=Cluster(groups=(group,), between=((group.inter_node,),)),
                    job=JobSpec(global_batch=BATCH),
                    search=Space(micro_batch=(1, 2), zero=(0,), virtual_stages=(1,), cp=(1,), tp=(1, 2),
                                 full_recompute=False, idle_gpus=True))


def test_the_group_is_deferred_and_its_families_set_up_the_full_listings_layouts_at_their_ranks():
    inst = one_group_instance()
    eager, _, deferred = space_mod.partials_and_families(inst, defer_stage=True)
    assert not [p for p in eager if p.family == "stage"]
    assert [d[2:] for d in deferred] == [("stage", (0,))]
    full = [p for p in declared_partials(inst) if any(blks for _, blks in p.reps)]
    lazy, _, _ = _every_family_opened(inst)
    assert all(isinstance(f, StageFamily) for f in lazy.families)
    got = {p.rank: p for p in lazy.partials if any(blks for _, blks in p.reps)}
    # the same layouts at the same ranks: (tp, dp) of each, in declared order
    assert sorted(got) == [p.rank for p in full]
    for p in full:
        q = got[p.rank]
        assert (q.tpg, q.cp, q.dp, repr(q.reps)) == (p.tpg, p.cp, p.dp, repr(p.reps))


def test_a_familys_bound_is_at_most_its_layouts_bound_or_their_least_optimum():
    inst = one_group_instance()
    lazy, _, spans = _every_family_opened(inst)
    checked = 0
    for f, a, b in spans:
        fam = lazy.families[f]
        own = partial_bounds_s(inst, lazy.partials[a:b], [0], "max", ())
        for part, lb in zip(lazy.partials[a:b], own.tolist()):
            if lb == float("inf"):
                continue
            if lazy.family_bounds[f] > lb * (1 + 1e-12):  # the family's S reads each stage's
                # floor: it may pass the partial layout's bound, not its optima
                lb = _least_optimum(inst, part, lazy.family_bounds[f] / (1 + 1e-12))
            assert lazy.family_bounds[f] <= lb * (1 + 1e-12), fam
            checked += 1
    assert checked


def test_a_family_of_replicas_that_split_no_batch_is_bounded_inf():
    inst = one_group_instance()
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    by_dp = {}
    for fam, lb in zip(lazy.families, lazy.family_bounds):
        by_dp.setdefault(fam.dp, []).append(lb)
    # micro-batch 1 or 2: 12 or 6 micro-batches, which dp 5 divides neither of; every dp up to
    # the 6 GPUs has a family, dp 4 at tp 1 idles 2 of them
    assert sorted(by_dp) == [1, 2, 3, 4, 5, 6]
    assert by_dp[5] == [float("inf")]
    assert all(lb < float("inf") for dp in (1, 2, 3) for lb in by_dp[dp])


@pytest.mark.slow  # exhaustive search of the space
def test_the_search_with_the_deferral_returns_the_exhaustive_optimum_and_the_whole_listings_plan(monkeypatch):
    inst = one_group_instance()
    ex = exhaustive(inst, max_candidates=2_000_000)
    res = search(inst, "cpsat", time_limit_s=120)
    monkeypatch.setattr(search_mod, "_defers_stage", lambda *a: False)
    whole = search(inst, "cpsat", time_limit_s=120)
    monkeypatch.undo()
    assert res.status == whole.status == search_mod.OPTIMAL and ex.objective_s is not None
    assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s
    assert res.plan == whole.plan and res.objective_s == whole.objective_s
    # not vacuous: the space holds a layout that idles GPUs
    assert any(p.dp is not None and p.dp * max(c.pp for _, blks in p.reps for b in blks for c in b.classes)
               * min(p.tpg.values()) < GPUS for p in declared_partials(inst) if any(blks for _, blks in p.reps))


def test_families_not_bounded_by_the_time_limit_are_left_open_and_the_answer_is_not_claimed_optimal(monkeypatch):
    inst = one_group_instance()
    # a deadline already past: every family keyed 0, a bound of every plan (none is pruned)
    late = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None, deadline=-float("inf"))
    assert late.families and late.family_bounds == [0.0] * len(late.families)
    # with no time (and no allowance for a first plan) the search stops at its first node,
    # families not set up: their configurations are not counted (weight 0), yet the space is
    # not proved, so no plan and no claim
    monkeypatch.setattr(search_mod, "FIRST_PLAN_ALLOWANCE_S", 0.0)
    res = search(inst, "cpsat", time_limit_s=0.0)
    assert res.status == search_mod.TIMEOUT and res.plan is None
    assert any("families left open" in x for x in res.log)
