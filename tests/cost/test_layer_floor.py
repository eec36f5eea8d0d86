"""What a dense layer's pricing reads of the outer configuration (coefficients.
DENSE_LAYER_FIELDS), on which the planner's bound before pricing keys its layer-time floors
(solver/bounds/unpriced.py), and the floor itself (coefficients.layer_time_floor_s) against the
layer time build prices."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost.coefficients import (DENSE_LAYER_FIELDS, build, homogeneous_placement, layer_time_floor_s,
                                        megatron_layer)
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Outer, Recompute

ROOT = Path(__file__).resolve().parents[2]


def _outers():
    for tp, cp, b, sp, rc in itertools.product((1, 2, 8), (1, 2), (1, 2), (False, True), (Recompute.NONE, Recompute.SELECTIVE)):
        if sp and tp == 1:
            continue
        yield Outer(tp=tp, pp=4, dp=64 // (tp * cp * 4) or 1, cp=cp, micro_batch=b, num_micro_batches=8,
                    sequence_parallel=sp, recompute=rc)


@pytest.mark.parametrize("name", ["gpt3-175b-1024xA100", "llama3-70b-512xH100"])
def test_a_dense_layer_reads_only_its_listed_fields(name):
    # pp, dp, micro-batch count, ZeRO and interleaving changed one at a time: the same terms
    inst = load_instance(ROOT / "instances" / f"{name}.yaml")
    others = {"pp": 8, "dp": 3, "num_micro_batches": 64, "zero": 3, "virtual_stages": 2}
    assert not set(others) & set(DENSE_LAYER_FIELDS)
    for o in _outers():
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        base = megatron_layer(inst, o, site, NetEfficiency())
        for field, value in others.items():
            changed = megatron_layer(inst, replace(o, **{field: value}), site, NetEfficiency())
            assert changed == base, (o, field)


def test_the_floor_is_the_layer_time_without_zero3_and_below_it_with():
    # ZeRO 0-2: build's layer time is forward + backward + the overlap slowdown, the floor
    # exactly; ZeRO-3 adds its exposed gathers and reduce-scatters (>= 0), so the floor is below;
    # inside a pipeline ZeRO-3 gathers once per step (memory.gathered_per_step), outside the
    # micro-batches: the floor exactly again
    inst = load_instance(ROOT / "instances" / "gpt3-175b-1024xA100.yaml")
    below = 0
    for o in _outers():
        for zero, pp in ((1, 4), (3, 4), (3, 1)):
            oz = replace(o, zero=zero, pp=pp, dp=o.dp * o.pp // pp)
            pl = homogeneous_placement(inst.cluster.one_group, oz)
            t = build(inst, oz, placement=pl).layer_time_s[0]
            f = layer_time_floor_s(inst, oz, pl.sites[0])
            if zero < 3 or pp > 1:
                assert f == pytest.approx(t, rel=1e-12)
            else:
                assert f <= t
                below += f < t * (1 - 1e-9)
    assert below  # ZeRO-3's ring terms show somewhere


def test_an_moe_layer_reads_only_its_listed_fields():
    # Mixtral 8x7B (ep, etp folding): dp, micro-batch count and ZeRO 0-2 changed one at a time
    # give the same terms; pp and v are listed (they decide the all-to-all overlaps)
    from paraplan.cost.coefficients import MOE_LAYER_FIELDS
    inst = load_instance(ROOT / "instances" / "mixtral-8x7b-64xH100.yaml")
    others = {"dp": 3, "num_micro_batches": 64, "zero": 2}
    assert not set(others) & set(MOE_LAYER_FIELDS)
    checked = 0
    for o in _outers():
        for ep, etp in ((1, None), (8, None), (8, 1)):
            if o.tp * o.cp * o.dp % (ep * (etp or o.tp)):
                continue
            oe = replace(o, ep=ep, etp=etp)
            site = homogeneous_placement(inst.cluster.one_group, oe).sites[0]
            base = megatron_layer(inst, oe, site, NetEfficiency())
            for field, value in others.items():
                assert megatron_layer(inst, replace(oe, **{field: value}), site, NetEfficiency()) == base, (oe, field)
            checked += 1
    assert checked


def test_an_moe_layers_attention_view_is_kept_by_its_dense_fields():
    # coefficients._expert_free keeps an MoE layer's attention view (megatron_layer of the
    # view model) by DENSE_LAYER_FIELDS: the terms priced with that cache warm (configurations
    # differing in pp, v, ZeRO, dp and the expert layout share a view) equal those priced with
    # it emptied before each layer (DeepSeek-V3-shaped: latent attention, a shared expert)
    from paraplan.cost import coefficients
    inst = load_instance(ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml")
    variants = [dict(pp=4), dict(pp=8, virtual_stages=2), dict(pp=1, zero=2), dict(dp=3), dict(ep=8),
                dict(ep=16, etp=1)]
    outers = [replace(o, **v) for o in _outers() for v in variants]
    coefficients._EXPERT_FREE.clear()
    warm = []
    for o in outers:
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        warm.append(megatron_layer(inst, o, site, NetEfficiency()))
    views = sum(1 for key in coefficients._EXPERT_FREE.entries if key[0] == "view")
    assert views < len(outers)  # shared, so the comparison below is not vacuous
    for o, w in zip(outers, warm):
        coefficients._EXPERT_FREE.clear()
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        assert megatron_layer(inst, o, site, NetEfficiency()) == w, o
