"""A stage family's tp choices' syncs gathered per (group, tp, per-group flag)
(solver/bounds/stage_families.FamilyBounds._choice_syncs) are, choice by choice and group by
group, the floats of one FamilyBounds.syncs call with that choice's own tp on the group and
its own per-group flag (whether its tp differs between its groups: ClassOuter.group_tp, as
space.shape_blocks sets it), read here one call at a time, in any order of the choices asked
(issue 33: 8 types x 8 nodes opened 217,102 choices in 20 s of CPU, 1.4 million calls)."""

from __future__ import annotations

import math

import numpy as np
from test_choice_sync_admissible import slow_sync_instance

from paraplan.solver import search as search_mod
from paraplan.solver.bounds.stage_families import StageFamily


def test_gathered_syncs_are_each_choice_s_own(monkeypatch):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)  # every stage family deferred
    inst = slow_sync_instance(0)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    fb = lazy.fb
    checked = choices = mixed = 0
    for fam in lazy.families:
        if not isinstance(fam, StageFamily) or len(fam.used) < 2:
            continue
        sizes = [len(x) for x in fam.tps]
        k = np.arange(math.prod(sizes))[::-1]  # every choice, last first
        gs, ds = fb._choice_syncs(fam, k)
        for r, pos in enumerate(k.tolist()):
            at = np.unravel_index(pos, sizes)
            tpg = [fam.tps[x][int(at[x])][1] for x in range(len(fam.used))]
            per_group = len(set(tpg)) > 1
            choices += 1
            mixed += per_group
            for x, (g, t) in enumerate(zip(fam.used, tpg)):
                g_, d_ = fb.syncs(g, t, fam.cp, fam.dp, per_group)
                assert np.array_equal(gs[r, x], g_) and np.array_equal(ds[r, x], d_), (fam, pos, x)
                checked += 1
    # some choices run one tp on every group and some not: both flags are read (on these
    # clusters the two read the same floats: a choice's ring lies in its group either way)
    assert checked and 0 < mixed < choices
