"""unpriced.floor_bounds_s reads its outers' rows a chunk at a time (issue 33, DeepSeek-V3 on
2,048 H800 with idle GPUs: 968,605 outers): each outer's entries by a modes key (tp, group_tp,
the layer fields but v, whether it interleaves, its classes' stage groups), looked up only
where the chunk meets a key first, and each entry's row by its slot (v, embedding and loss
slots, zero-bubble mode). The reading it replaces looked every (scenario, class) of every
outer up on its own; bounding each outer alone (a call of its own, so no key is shared with
another outer) is that reading. The two must be the same floats, outer by outer, on random
MoE instances with idle GPUs (outers of one layout at several replica counts share stage
groups), with zero-bubble schedules, and with embedding / loss slots. Checked: a modes key
that drops the expert layout (ep), the micro-batch size or cp fails this test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from randinst import slot_instance
from test_moe_mixed import moe_cluster_instance
from test_zero_bubble_classes import zero_bubble_classes_instance

from paraplan.solver.bounds import unpriced
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers

MOST_OUTERS = 400  # outers bounded alone per case (a call each)


def _idle_moe(seed: int):
    inst = moe_cluster_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, idle_gpus=True))


CASES = [(_idle_moe, s) for s in range(8)] + [(slot_instance, s) for s in (0, 1, 2)] + \
        [(zero_bubble_classes_instance, s) for s in (2, 4, 7, 8)]


def _spread(outers: list) -> list:
    """At most MOST_OUTERS of `outers`, evenly apart (every layout, not only the first)."""
    step = max(1, len(outers) // MOST_OUTERS)
    return outers[::step]


def _batched_and_alone(inst):
    outers = _spread(declared_outers(inst))
    idx, agg, weights = scenario_weights(inst, "nominal")
    batched = unpriced.floor_bounds_s(inst, outers, idx, agg, weights)
    memo: dict = {}  # the stage floors, keyed by all they read (stage_floor_terms)
    alone = np.array([unpriced.floor_bounds_s(inst, [o], idx, agg, weights, memo=memo)[0] for o in outers])
    return outers, batched, alone


@pytest.mark.parametrize("make, seed", CASES)
def test_rows_read_a_chunk_at_a_time_are_each_outers_own(make, seed):
    inst = make(seed)
    outers, batched, alone = _batched_and_alone(inst)
    assert np.isfinite(batched).any()
    assert len({(o.classes[0].stage_groups, o.classes) for o in outers}) > len({o.classes[0].stage_groups for o in outers})
    np.testing.assert_array_equal(batched, alone)


@pytest.mark.parametrize("dropped", ["ep", "micro_batch", "cp"])
def test_a_modes_key_missing_a_field_fails(monkeypatch, dropped):
    """The planted fault: the MoE modes key without `dropped`; some outer of the idle MoE cases
    then takes another's rows."""
    read = unpriced._READ_MODES[True]
    names = ["tp", "group_tp", *(f for f in unpriced.MOE_LAYER_FIELDS if f not in ("tp", "pp", "virtual_stages"))]
    kept = [f for f in names if f != dropped]
    some = declared_outers(_idle_moe(0))[0]
    assert read(some) == tuple(getattr(some, f) for f in names)  # the fault's base is the key
    monkeypatch.setitem(unpriced._READ_MODES, True, lambda o: tuple(getattr(o, f) for f in kept))
    differs = False
    for seed in (0, 1, 2, 3):
        _, batched, alone = _batched_and_alone(_idle_moe(seed))
        differs |= not np.array_equal(batched, alone)
        if differs:
            break
    assert differs
