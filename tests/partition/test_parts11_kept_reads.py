"""Two memos of the layer-plan search read by what they read (issue 33, rows 3 and 4).

- class_partitions.partition_count keeps its count per (classes tuple identity, tp, group tps,
  ZeRO stage, sp): checked against _counted (the count read from the outer itself) on every
  declared outer of tiny-2types with the layout options (several class shapes and tp per
  group), in declared order and again reversed (so the kept counts are read by other outers);
  a key without the group tps (a planted fault) gives some outer another's count.
- coefficients._plan_layer_costs_kept keeps a layer plan's _LayerCosts per (instance, site,
  terms) identity and what megatron_layer's memo keys: every layer-plan combination of every
  outer priced with it (search.priced_for) has the arrays, float for float, of the same build
  with each layer's costs read afresh (_layer_costs); most reads hit (outers of one table that
  differ in pp, dp or micro-batch count share them). A key without the ring size (a planted
  fault) prices some stage's sync at another class's ring.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402

from paraplan.cost import coefficients as C  # noqa: E402
from paraplan.cost.class_coefficients import class_outers  # noqa: E402
from paraplan.cost.identity_cache import IdentityCache  # noqa: E402
from paraplan.solver import class_partitions as CP  # noqa: E402
from paraplan.solver import search as search_mod  # noqa: E402
from paraplan.solver.space import declared_outers  # noqa: E402


def _counts_agree(inst) -> bool:
    outers = declared_outers(inst)
    CP._BY_SHAPE.clear()
    return all(CP.partition_count(inst, o) == CP._counted(inst, o) for o in outers + outers[::-1])


def _zero_sp():
    """tiny-2types at tp 4 with ZeRO-1 and -3, sp on and off (token splits are not offered with
    ZeRO-3; sp changes the stream's plans): 126 outers of 16 counts on 37 classes tuples."""
    return tiny2((8, 8), (4,), 8, 32, zero=[1, 3], sequence_parallel=[False, True], **OPTIONS)


def test_partition_count_kept_by_shape_is_each_outers_own():
    inst = _zero_sp()
    outers = declared_outers(inst)
    counts = {CP._counted(inst, o) for o in outers}
    assert len(counts) > 2  # outers of different counts share class shapes
    assert len({id(o.classes) for o in outers}) < len(outers)  # and kept counts are read again
    assert _counts_agree(inst)


def test_partition_count_keyed_by_the_classes_alone_is_caught(monkeypatch):
    inst = _zero_sp()

    class ClassesOnly(IdentityCache):  # the planted fault: one count per classes tuple and tp
        def read(self, key, owner, make, /, *args):
            return super().read(key[:2], owner, make, *args)
    monkeypatch.setattr(CP, "_BY_SHAPE", ClassesOnly(4096))
    assert not _counts_agree(inst)


def _combinations(inst, per_outer: int = 6):
    """(outer, partitions per class) of up to `per_outer` layer-plan combinations of every
    outer with some, all-Megatron left out."""
    for o in declared_outers(inst):
        if CP.partition_count(inst, o) == 1:
            continue
        placed = search_mod.placer(inst, o)
        got = CP.all_partitions(inst, o, placed, class_outers(inst.job, o))
        for parts in itertools.islice(got, 1, per_outer + 1):
            yield o, parts


def _arrays(c) -> list:
    return [np.asarray(getattr(c, f.name)) for f in dataclasses.fields(c)
            if isinstance(getattr(c, f.name), np.ndarray)]


def _priced(inst, combos) -> list:
    C._PLAN_LAYER_COSTS.clear()
    C._OUTER_PARTS.clear()
    return [[_arrays(c) for cs in search_mod.priced_for(inst, o, "nominal", None, parts) for c in cs]
            for o, parts in combos]


def _afresh(inst, o, site, dp_n, net, lt):
    return C._layer_costs(inst, o, site, dp_n, net, lambda *_: lt)


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for p, q in zip(a, b) for u, v in zip(p, q) for x, y in zip(u, v))


INSTANCES = (_zero_sp,
             lambda: two_sites((8, 8), (4,), 4, 16, 100, dict(hidden=8192, heads=64, ffn=32768, seq_len=4096),
                               **OPTIONS))


@pytest.mark.parametrize("make", INSTANCES)
def test_plan_layer_costs_kept_are_the_builds_own(make, monkeypatch):
    inst = make()
    combos = list(_combinations(inst))
    assert len(combos) > 50
    reads = []
    kept = C._plan_layer_costs_kept

    def counted(inst, o, site, dp_n, net, lt):
        reads.append(C._PLAN_LAYER_COSTS.get(
            (id(inst), id(site), id(lt), C._dense_layer_view(o), C._reduce_overlaps(inst.job, o), dp_n, net),
            lt) is not None)
        return kept(inst, o, site, dp_n, net, lt)
    monkeypatch.setattr(C, "_plan_layer_costs_kept", counted)
    got = _priced(inst, combos)
    assert sum(reads) > len(reads) / 2  # most reads are kept ones
    monkeypatch.setattr(C, "_plan_layer_costs_kept", _afresh)
    assert _same(got, _priced(inst, combos))


def test_plan_layer_costs_keyed_without_the_ring_is_caught(monkeypatch):
    inst = INSTANCES[0]()
    combos = list(_combinations(inst))
    with monkeypatch.context() as m:
        m.setattr(C, "_plan_layer_costs_kept", _afresh)
        want = _priced(inst, combos)

    class NoRing(IdentityCache):  # the planted fault: the ring size left out of the key
        def get(self, key, owner):
            return super().get(key[:5] + key[6:], owner)

        def put(self, key, owner, value):
            super().put(key[:5] + key[6:], owner, value)
    monkeypatch.setattr(C, "_PLAN_LAYER_COSTS", NoRing(16384))
    assert not _same(want, _priced(inst, combos))
