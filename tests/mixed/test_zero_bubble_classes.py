"""torch's zero-bubble schedules on plans of several replica classes (solver/space.zero_bubble_modes;
formulations/multiclass.py C6z/C9z): on random small torchtitan jobs on two node groups, every
backend (dp hands several classes to CP-SAT) proves the optimum exhaustive search finds by
pricing every class count, split and schedule (solver/exhaustive.py), and that optimum
re-simulates through cost/simulate."""

from __future__ import annotations

import random

import pytest

from agreement_support import assert_mixed_backends_agree_with_exhaustive, pricing_in_small_chunks
from paraplan.cost.specs import Cluster, Instance, NodeGroup
from paraplan.cost.releases import Framework
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import NodeGroup, GpuSpec, JobSpec, Link, Mlp, ModelSpec, ZeroBubble
from paraplan.solver import search
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.space import declared_outers
from randinst import Space


def zero_bubble_classes_instance(seed: int) -> Instance:
    """Two single-node groups of 3, 4 or 6 toy GPUs, 6 or 8 layers, v = 2 and FSDP (torchtitan
    runs plain data parallelism only alone, and ZeRO-3 inside a pipeline): replica classes of
    pp 2-4 on each group, whose counts are multiples of pp_k from 2 pp_k, beside one pipeline
    through both groups. Small enough for exhaustive search."""
    rng = random.Random(3400 + seed)
    heads = 4
    hidden = heads * rng.choice([32, 64])
    model = ModelSpec(name=f"zbk{seed}", layers=rng.choice([6, 8]), hidden=hidden, heads=heads,
                      kv_heads=heads, ffn=4 * hidden, vocab=rng.choice([1000, 8000]),
                      seq_len=rng.choice([128, 512]), mlp=rng.choice([Mlp.GELU, Mlp.SWIGLU]))
    groups = []
    for g in range(2):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.6, 1.0, 2.75]) * 2**30, hbm_bw_bytes_per_s=1e12)
        groups.append(NodeGroup(name=f"g{g}", site="s", gpu=gpu, nodes=1, gpus_per_node=rng.choice([3, 4, 6]),
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5)))
    link = Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
    hc = Cluster(groups=tuple(groups), between=((groups[0].inter_node, link),
                                                (link, groups[1].inter_node)))
    return Instance(name=f"zbk{seed}", model=model, cluster=hc,
                           job=JobSpec(global_batch=rng.choice([14, 18, 20, 24, 28]), framework=Framework.TORCHTITAN),
                           search=Space(micro_batch=(1,), zero=(3,), virtual_stages=(2,), cp=(1,), tp=(1,)))


# Seeds listed (exhaustive optimum, from a scan of the first 30): 3 InterleavedZeroBubble on
# two classes (2 x pp 2 on g0 at m 4, pp 3 on g1 at m 6); 8 ZBVZeroBubble on two classes (pp 4
# on g0, pp 3 on g1, m 12 each); 10 InterleavedZeroBubble on two classes (m 4 and 12); 16
# InterleavedZeroBubble on two classes (pp 3 and 2 x pp 2, m 6 each); 7 no plan fits
SEVERAL = {3: ZeroBubble.INTERLEAVED, 8: ZeroBubble.V, 10: ZeroBubble.INTERLEAVED, 16: ZeroBubble.INTERLEAVED}


@pytest.mark.parametrize("seed", sorted(SEVERAL) + [7])
def test_backends_agree_with_exhaustive_on_several_classes(seed):
    inst = zero_bubble_classes_instance(seed)
    ex = exhaustive(inst)
    if seed in SEVERAL:  # the seed covers what the list says
        assert len(ex.plan.classes) == 2 and ex.plan.zero_bubble is SEVERAL[seed]
        bd = simulate(inst, ex.plan, reserve_bytes=inst.search.memory_reserve_bytes)
        assert bd.iter_time_s == pytest.approx(ex.objective_s, rel=1e-9)
    else:
        assert ex.plan is None
    with pricing_in_small_chunks():
        assert_mixed_backends_agree_with_exhaustive(inst)


def test_several_classes_are_offered_both_schedules():
    # seed 8's space lists two-class configurations under each schedule (ZBVZeroBubble where
    # every class sits on one group, pp_k >= 3); Interleaved1F1B is left out where
    # InterleavedZeroBubble runs (space.with_zero_bubble)
    outers = declared_outers(zero_bubble_classes_instance(8))
    several = {o.zero_bubble for o in outers if len(o.classes) > 1}
    assert several == {ZeroBubble.INTERLEAVED, ZeroBubble.V}


def test_the_dp_backend_proves_the_two_class_zbv_optimum():
    inst = zero_bubble_classes_instance(8)
    ex = exhaustive(inst)
    res = search.search(inst, "dp", time_limit_s=30)
    assert res.status == "optimal"
    assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s
    assert res.plan.zero_bubble is ZeroBubble.V and len(res.plan.classes) == 2
