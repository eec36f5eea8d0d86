"""The bound that reads memory keeps a class's coefficients of a configuration of several
classes by what they read of the other classes (unpriced_memory._others_key: their shared ring
and where the class's stages sit among theirs), not by the whole configuration, so that the
configurations sharing a class read it once (issue 33, 8 x 8 row: 14,060 classes, 2,982 read).

Checked against the bound read with nothing kept: on random mixed clusters of two scenarios
(random_cluster_instance, one class per group and two per group: classes_per_group 2, where an
earlier class's stages sit before a class's on its group) and with a tp per group
(group_tp_instance), every configuration's bound read in one pass over all of them in a shuffled
order, its memos shared, equals its bound read alone with fresh memos, float for float; and
each class's coefficient arrays are equal too. Not vacuous: with two classes per group the pass
keeps fewer coefficient entries than it reads classes, and some bounds are finite."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance

from oracles.bounds import floor_coefficients
from paraplan.cost import scale
from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.comm import NetEfficiency
from paraplan.solver.bounds import unpriced_memory
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers


def _per_group(inst, k: int):
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=k))


def _cases():
    for seed in (1, 2, 3):  # (seed 0 fits no configuration)
        yield f"random {seed}", random_cluster_instance(seed)
        yield f"two per group {seed}", _per_group(random_cluster_instance(seed), 2)
    for seed in (19, 41):
        yield f"group tp {seed}", group_tp_instance(seed)


def _coefficients(inst, o, idx, memo, layer_memo) -> list:
    net = NetEfficiency()
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    return [floor_coefficients(inst, o, k, co, idx, memo, layer_memo, net, slow,
                                                inst.search.memory_reserve_bytes)
            for k, co in enumerate(class_outers(inst.job, o))]


ARRAYS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s", "stage_sync_time_s",
          "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes", "stage_mem_bytes", "capacity_bytes")


@pytest.mark.parametrize("name,inst", list(_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_shared_class_coefficients_are_those_read_alone(name, inst):
    outers = [o for o in declared_outers(inst) if unpriced_memory.applies(inst, o)]
    random.Random(7).shuffle(outers)
    several = sum(len(o.classes) for o in outers if len(o.classes) > 1)
    assert several
    bounded = False
    for objective in ("nominal", "robust"):  # one scenario; every scenario (two on the random clusters)
        idx, agg, weights = scenario_weights(inst, objective)
        memo, layer_memo = {}, {}
        together = unpriced_memory.memory_floor_bounds_s(inst, outers, idx, agg, weights, memo, layer_memo)
        alone = np.array([unpriced_memory.memory_floor_bounds_s(inst, [o], idx, agg, weights, {}, {})[0]
                          for o in outers])
        assert np.array_equal(together, alone)
        bounded |= bool((np.isfinite(together) & (together > 0)).any())
        kept = unpriced_memory._per_configuration(layer_memo, "floor coefficients")
        lone = sum(1 for o in outers if len(o.classes) == 1)
        if name.startswith("two per group"):  # (elsewhere two groups give few to share)
            assert len(kept) < lone + several  # several-class configurations shared some classes
        for o in outers[:40]:  # each class's arrays, kept against read alone
            for got, want in zip(_coefficients(inst, o, idx, memo, layer_memo), _coefficients(inst, o, idx, {}, {})):
                for c_got, c_want in zip(got, want):
                    for f in ARRAYS:
                        assert np.array_equal(getattr(c_got, f), getattr(c_want, f)), (o, f)
    assert bounded
