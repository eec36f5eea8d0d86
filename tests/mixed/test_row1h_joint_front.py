"""What joint_keys reads of a tp choice before the bar (solver/bounds/stage_families.
FamilyBounds._fronts, _front_syncs) is kept per grid position, so a choice whose front was read
ahead (_joint_rows: the next opened choices read with a popped one) is not set up again when it
is popped (issue 33: 8 types x 8 nodes read 1,577 fronts for 1,461 popped choices). Popped
choice by popped choice, the kept keys are the floats of a FamilyBounds that reads each popped
choice alone, its memos cleared; a planted fault (fronts read ahead given their neighbour's
pipeline) makes the comparison fail, so it can. And the ring several classes share
(unpriced_memory._shared_rings) is read once per configuration, each class's key its own."""

from __future__ import annotations

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance
from test_row1f_joint_ahead import _families

from paraplan.cost.identity_cache import IdentityCache
from paraplan.solver.bounds import unpriced_memory
from paraplan.solver.bounds.stage_families import StageFamily
from paraplan.solver.space import declared_outers


def _popped(monkeypatch, fault: bool) -> tuple[int, int, int]:
    """(choices popped, of them with a kept front, keys that differ from the recomputed ones)
    over three slow-sync instances, every family that reads syncs, a bar above its choices."""
    popped = kept = differ = 0
    for seed in range(3):
        ahead, alone = _families(monkeypatch, seed)
        if fault:
            real = ahead.fb._pipelines
            rolled = lambda fam, k, terms: np.roll(real(fam, k, terms), 1, axis=0)  # noqa: E731
            monkeypatch.setattr(ahead.fb, "_pipelines", rolled)
        for fam in ahead.families:
            if not isinstance(fam, StageFamily) or not ahead.fb.reads_syncs(fam):
                continue
            every = ahead.fb.choices(fam, lambda lb: True)
            if len(every) < 2:
                continue
            bar = float(np.quantile([lb for _, lb in every if np.isfinite(lb)], 1.0)) * 1.01
            can_win = lambda lb: lb < bar  # noqa: E731
            for index, _ in sorted(ahead.fb.choices(fam, can_win), key=lambda x: x[1]):
                pos = int(ahead.fb._positions(fam, [index])[0])
                kept += pos in ahead.fb.fronts.get(fam, {})
                got = ahead.fb.joint_keys(fam, [index], can_win)
                for memo in (alone.fb.fronts, alone.fb.front_syncs, alone.fb.joint_memo):
                    memo.clear()  # (each popped choice recomputed)
                want = alone.fb.joint_keys(fam, [index], can_win)
                differ += not np.array_equal(got, want)
                popped += 1
    return popped, kept, differ


def test_kept_fronts_give_each_popped_choice_its_own_key(monkeypatch):
    popped, kept, differ = _popped(monkeypatch, fault=False)
    assert differ == 0 and popped > 20 and kept > popped / 2, (popped, kept, differ)


def test_a_front_kept_at_the_wrong_position_is_caught(monkeypatch):
    popped, kept, differ = _popped(monkeypatch, fault=True)
    assert kept and differ, (popped, kept, differ)


def _others_keys(seed: int, stale: bool) -> tuple[int, int]:
    """(classes of several-class configurations read, keys unlike a fresh memo's) over the
    declared configurations of small random clusters, each class's _others_key read through one
    memo, as memory_floor_bounds_s reads a configuration's classes one after another; `stale`:
    a planted fault, every configuration given the first one's kept rings."""
    read = differ = 0
    for inst in (random_cluster_instance(seed), group_tp_instance(seed)):
        idx, memo, first = list(range(len(inst.scenarios))), {}, None
        for o in declared_outers(inst):
            if len(o.classes) < 2:
                continue
            for k, c in enumerate(o.classes):
                groups = sorted(set(c.stage_groups))
                if stale and first is not None:
                    memo["shared rings"] = IdentityCache(1)
                    memo["shared rings"].entries[id(o), tuple(idx)] = (o, first)
                got = unpriced_memory._others_key(inst, o, k, groups, idx, memo)
                first = got[-1] if first is None else first
                differ += got != unpriced_memory._others_key(inst, o, k, groups, idx, {})
                read += 1
    return read, differ


@pytest.mark.parametrize("seed", range(4))
def test_the_rings_kept_per_configuration_are_its_own(seed):
    read, differ = _others_keys(seed, stale=False)
    assert differ == 0, (read, differ)


def test_stale_kept_rings_are_caught():
    tried = [_others_keys(seed, stale=True) for seed in range(4)]
    assert sum(r for r, _ in tried) > 50 and any(d for _, d in tried), tried
