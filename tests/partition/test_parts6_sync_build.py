"""The optimistic builds' second build read as its two sync arrays only (issue 33, rows 3 and 4).

class_partitions.OuterChoices._below bounds the plans of a group by the elementwise minimum of
two builds whose layer terms differ only in the backward (partition_plans.optimistic_terms: one
with every term least, one with bwd_s at its largest). Where
coefficients.backward_lowers_only_syncs holds, the larger backward lowers no array but the two
syncs, so only those are read of the second build (coefficients.build_syncs). Checked here:
- build_syncs returns build_plans' layer_sync_time_s and stage_sync_time_s bit for bit, on
  random small instances (ZeRO 0-3, pipelines with and without interleaving, multi-token
  prediction, tied embeddings, torch's zero-bubble schedules, ZBVZeroBubble's V included) under
  Megatron's plan, a per-operator plan and both optimistic terms, and on an MoE model with a
  dense prefix; a build_syncs that read the other plan's terms is caught (the sync arrays of the
  two optimistic terms differ on some draws);
- build_and_backward_syncs (the second plan's layer costs re-read of the first's at its
  backward) returns build_plans' first build in every array and build_syncs' second syncs bit
  for bit on the same draws where the guard holds, and its layer costs equal _layer_costs' in
  every field; one that kept the first plan's costs for the second is caught;
- where the guard fails (ZeRO-3 outside a pipeline) a larger backward can lower another array
  (the recompute term, by an ulp), so the guard is needed for float-for-float bounds;
- _below equals the elementwise minimum of the two full builds in every array, float for float,
  on every group of every open choice of the layer-plan outers of two small mixed instances
  (ZeRO 0-3, a pipeline or none); the guard is read both ways there, and _below without the
  second build's syncs is caught (the larger backward lowers a sync on some group).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from partition_support import small_instance  # noqa: E402
from test_partitions_lazy import _choices_of, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402

from paraplan.cost import partition as P  # noqa: E402
from paraplan.cost import coefficients as C  # noqa: E402
from paraplan.cost.coefficients import (backward_lowers_only_syncs, build_and_backward_syncs,  # noqa: E402
                                        build_plans, build_syncs, homogeneous_placement, megatron_layer)
from paraplan.cost.comm import NetEfficiency  # noqa: E402
from paraplan.cost.readers.instance import load_instance  # noqa: E402
from paraplan.cost.releases import Framework  # noqa: E402
from paraplan.cost.specs import Outer, Recompute, SearchSpace, ZeroBubble  # noqa: E402
from paraplan.solver.class_partitions import OuterChoices, _const  # noqa: E402
from paraplan.solver.partition_plans import elementwise_min, optimistic_terms, plan_rows, stage_arrays  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SYNCS = ("layer_sync_time_s", "stage_sync_time_s")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (shape and every float's bytes)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _random_case(seed: int):
    """(instance, outer) of a small random instance on 2 x 4 GPUs and one outer of it drawn."""
    rng = random.Random(seed)
    layers = rng.choice([4, 6, 8, 8])
    tp = rng.choice([1, 2, 4, 4])
    pp = rng.choice([p for p in (1, 2, 4) if tp * p <= 8 and layers % p == 0])
    dp = 8 // (tp * pp)
    v = rng.choice([w for w in (1, 2) if pp > 1 and layers % (pp * w) == 0] or [1])
    zb = None
    titan = v > 1 and rng.random() < 0.4  # torch's zero-bubble schedules run under torchtitan
    if titan:
        zb = rng.choice([ZeroBubble.INTERLEAVED] + ([ZeroBubble.V] * 3 if pp >= 3 else []))
    mb = rng.choice([1, 2])
    hidden = rng.choice([512, 1024])
    inst = small_instance(nodes=2, gpus_per_node=4, layers=layers, hidden=hidden, heads=16,
                          ffn=rng.choice([2, 4]) * hidden, seq_len=rng.choice([512, 1024]),
                          global_batch=dp * mb * rng.choice([2, 4, 8]), hbm_gib=rng.choice([8, 32]),
                          search=SearchSpace(memory_reserve_bytes=0.0))
    model = dataclasses.replace(inst.model, tied_embeddings=rng.random() < 0.5,
                                mtp_layers=rng.choice([0, 0, 1]))
    job = dataclasses.replace(inst.job, framework=Framework.TORCHTITAN) if titan else inst.job
    inst = dataclasses.replace(inst, model=model, job=job)
    o = Outer(tp=tp, pp=pp, dp=dp, micro_batch=mb, num_micro_batches=inst.job.global_batch // (dp * mb),
              sequence_parallel=tp > 1 and (titan or rng.random() < 0.5),
              recompute=rng.choice([Recompute.NONE, Recompute.SELECTIVE]), zero=rng.choice([0, 1, 2, 3]),
              virtual_stages=v, zero_bubble=zb)
    return inst, o


def _layer_fns(inst, o, rng: random.Random, net: NetEfficiency) -> list:
    """Megatron's layer, and where tp offers plans beyond it a drawn plan and the optimistic
    terms (lowest, largest backward) of a drawn subset of the table's plans."""
    fns = [megatron_layer]
    if not P.spatial_temporal_allowed(o):
        return fns
    site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
    table = P.table_for(inst, o, site, net)
    idx, _ = P.all_plans(table)
    rows = plan_rows(table, P.token_split_allowed(o))
    plan = P.plan_from_indices(table, idx[rng.randrange(len(idx))])
    if P.plan_allowed(plan, o):
        fns.append(P.partition_layer_fn(plan))
    some = rows[sorted(rng.sample(range(len(rows)), min(len(rows), rng.choice([2, 8, 64]))))]
    lo, hi = optimistic_terms(table, some)
    return fns + [_const(lo), _const(hi)]


def test_build_syncs_are_the_builds_syncs():
    net = NetEfficiency()
    checked = zero3 = v_shaped = mtp = optimistic = differ = 0
    for seed in range(150):
        inst, o = _random_case(seed)
        rng = random.Random(1000 + seed)
        fns = _layer_fns(inst, o, rng, net)
        full = build_plans(inst, o, fns, net, 0.0)
        syncs = build_syncs(inst, o, fns, net, 0.0)
        for c, (layer_sync, stage_sync) in zip(full, syncs):
            assert _same(layer_sync, c.layer_sync_time_s) and _same(stage_sync, c.stage_sync_time_s), (seed, o)
            checked += 1
        if len(fns) == 4:  # the optimistic pair: the larger backward's syncs are its own
            optimistic += 1
            (lo_layer, lo_stage), = build_syncs(inst, o, fns[2:3], net, 0.0)
            differ += not (_same(lo_layer, full[3].layer_sync_time_s) and _same(lo_stage, full[3].stage_sync_time_s))
        zero3 += o.zero == 3
        v_shaped += o.zero_bubble is ZeroBubble.V
        mtp += bool(inst.model.mtp_layers)
    # the draws cover what the sync arrays read
    assert checked >= 250 and zero3 and v_shaped and mtp and optimistic >= 30
    # planted fault: build_syncs reading the other optimistic plan's terms would be caught
    assert differ > 0


def _build_and_backward_matches(inst, o, lo_fn, hi_fn, net) -> tuple[bool, bool]:
    """(build_and_backward_syncs equals build_plans of lo_fn and build_syncs of hi_fn bit for
    bit, its second plan's syncs differ from the first's)."""
    want = build_plans(inst, o, [lo_fn], net, 0.0)[0]
    (want_layer, want_stage), = build_syncs(inst, o, [hi_fn], net, 0.0)
    got, (layer_sync, stage_sync) = build_and_backward_syncs(inst, o, lo_fn, hi_fn, net, 0.0)
    fields = stage_arrays(want) + ("capacity_bytes", "in_flight")
    same = (all(_same(getattr(got, f), getattr(want, f)) for f in fields)
            and _same(layer_sync, want_layer) and _same(stage_sync, want_stage))
    return same, not (_same(layer_sync, want.layer_sync_time_s) and _same(stage_sync, want.stage_sync_time_s))


def test_build_and_backward_syncs_are_the_two_builds(monkeypatch):
    net = NetEfficiency()
    checked = differ = costs = 0
    pairs = []
    for seed in range(150):
        inst, o = _random_case(seed)
        fns = _layer_fns(inst, o, random.Random(1000 + seed), net)
        if len(fns) < 4 or not backward_lowers_only_syncs(inst, o):
            continue
        pairs.append((inst, o, fns[-2], fns[-1]))
        same, moved = _build_and_backward_matches(inst, o, fns[-2], fns[-1], net)
        assert same, (seed, o)
        checked += 1
        differ += moved
        # the record itself: every field as _layer_costs prices the larger backward
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        so = C.stage_outer(o, site)
        u = C._layer_costs(inst, so, site, o.dp, net, fns[-2])
        assert C._costs_at_backward(u, fns[-1](inst, so, site, net), net) == \
            C._layer_costs(inst, so, site, o.dp, net, fns[-1]), (seed, o)
        costs += 1
    assert checked >= 20 and costs == checked and differ > 0
    # planted fault: the second plan's layer costs kept as the first's would be caught
    monkeypatch.setattr(C, "_costs_at_backward", lambda u, lt, net: u)
    assert not all(_build_and_backward_matches(*p, net)[0] for p in pairs)


def test_build_syncs_of_an_moe_model_with_a_dense_prefix():
    # DeepSeek-V3's shape: three dense layers first (their sync on stage 0), multi-token
    # prediction on the last stage; not offered partitions, read through the same functions
    inst = load_instance(ROOT / "instances/deepseek-v3-shaped-2048xH800.yaml")
    assert inst.model.moe.dense_layers and inst.model.mtp_layers
    for zero in (1, 2):
        o = Outer(tp=4, pp=16, dp=32, micro_batch=1, num_micro_batches=inst.job.global_batch // 32,
                  zero=zero, ep=32, sequence_parallel=True)
        c, = build_plans(inst, o, [megatron_layer])
        (layer_sync, stage_sync), = build_syncs(inst, o, [megatron_layer])
        assert _same(layer_sync, c.layer_sync_time_s) and _same(stage_sync, c.stage_sync_time_s)
        assert not backward_lowers_only_syncs(inst, o)


def _instances():
    """Two small mixed instances with layer plans, ZeRO 0-3 and pipelines (tp 4 on 8 + 8 GPUs)."""
    return [tiny2((8, 8), (4,), 8, 32, zero=[0, 1, 2, 3], micro_batch=[1, 2]),
            two_sites((8, 8), (4,), 4, 16, 100, None, zero=[0, 3])]


def test_below_is_the_two_builds_minimum():
    shortcut = full = lowered = 0
    for inst in _instances():
        for n, (o, ch) in enumerate(_choices_of(inst)):
            if n % 3:  # every third outer: one class or two, ZeRO 0-3, pp 1 or more
                continue
            for si, i in enumerate(ch.scenarios):
                for k, g in ch.open:
                    ginst, site, _ = ch._where(k, g)[si]
                    table = P.table_for(ginst, ch.cg[k, g], site, ch.net)
                    rows = plan_rows(table, P.token_split_allowed(ch.cg[k, g]))
                    rep = rows[:, P.VECTOR.index("replicated_params")]
                    for value in np.unique(rep)[:3]:  # a few of _kept_groups' groups
                        lo_t, hi_t = optimistic_terms(table, rows[rep == value])
                        want = elementwise_min(*ch._build_plans(i, k, [ch._layer_fn(i, k, {g: _const(t)})
                                                                       for t in (lo_t, hi_t)]))
                        got = ch._below(i, k, {g: _const(lo_t)}, {g: _const(hi_t)})
                        for f in stage_arrays(want) + ("capacity_bytes", "in_flight"):
                            assert _same(getattr(got, f), getattr(want, f)), (o, k, g, f)
                        if backward_lowers_only_syncs(inst, ch.co[k]):
                            shortcut += 1
                            lo, = ch._build_plans(i, k, [ch._layer_fn(i, k, {g: _const(lo_t)})])
                            lowered += not all(_same(getattr(lo, f), getattr(want, f)) for f in SYNCS)
                        else:
                            full += 1
    assert shortcut >= 20 and full >= 5
    # planted fault: _below without the second build's syncs (the first build alone) is caught
    assert lowered > 0


def test_the_guard_reads_zero3_outside_a_pipeline():
    # ZeRO-3 gathers per micro-batch only outside a pipeline: there its windows read the
    # backward (coefficients._layer_costs), and the full pair is built
    inst = small_instance()
    for zero, pp, want in ((0, 1, True), (2, 2, True), (3, 2, True), (3, 1, False)):
        o = Outer(tp=4, pp=pp, dp=8 // (4 * pp), micro_batch=1, num_micro_batches=4, zero=zero)
        assert backward_lowers_only_syncs(inst, o) is want
    # and there a larger backward lowers the recompute term by an ulp or two (z3_b_rc - z3_b
    # rounds so): the elementwise minimum would take it from the second build, so the guard
    # is what keeps _below float for float
    net = NetEfficiency()
    o = Outer(tp=1, pp=1, dp=8, micro_batch=1, num_micro_batches=2, zero=3)
    lt = megatron_layer(inst, o, homogeneous_placement(inst.cluster.one_group, o).sites[0], net)
    builds = build_plans(inst, o, [_const(dataclasses.replace(lt, bwd_s=lt.bwd_s * x))
                                   for x in np.geomspace(0.01, 100, 40)], net)
    assert any((b.recompute_time_s < a.recompute_time_s).any() for a, b in zip(builds, builds[1:]))
