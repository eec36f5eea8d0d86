"""The stage families' bound with the slowest stage that memory and the recompute it forces
allow (issue 33; solver/bounds/stage_recompute.py, read by stage_families.FamilyBounds._combos)
against every tp choice's priced optimum over its configurations and their layer-plan
combinations, on small clusters where memory binds and plans beyond Megatron's exist
(tiny-2types at tp 1 or 4 per group with a Llama-3 70B-wide layer, as test_plan_bound_admissible
.py; with search.idle_gpus and without).

Every stage family is deferred (search.DEFER_TP_CHOICES 0) and opened with no cutoff, and each
of its tp choices set up. Where a choice's bound is at most the least bound before pricing of
its configurations on the layer plans' floors (unpriced.floor_bounds_s with layer_plans, which
test_partitions_lazy.py checks against exhaustive search) it is admissible there; elsewhere the
reference is the choice's priced optimum itself (test_plan_bound_admissible.layout_optimum_s:
every configuration and each layer-plan combination whose priced bound is at most the choice's
bound, all-Megatron's included, solved by CP-SAT; a combination priced above the bound has its
optimum above it), and the choice's bound must not exceed it. The family's key is at most its
choices' bounds. The test also asserts that the new term is read: some choice's bound is above
its bound with the term taken out (StageRecompute.slowest_s read as 0)."""

from __future__ import annotations

import math
import numpy as np
import pytest
from test_partitions_lazy import OPTIONS, tiny2
from test_plan_bound_admissible import WIDE, layout_optimum_s

from paraplan.solver import search as search_mod
from paraplan.solver.bounds.stage_families import StageFamily
from paraplan.solver.bounds.stage_recompute import StageRecompute
from paraplan.solver.bounds.unpriced import floor_bounds_s

# (GPUs per node of each group, tp values, layers, global batch, the layout options on); those
# over 5 s of CPU marked slow (-n 0, measured: 10.9 s, 6.0 s; the case without options 3.2 s)
CASES = (pytest.param(((4, 4), (1, 4), 8, 16, True), marks=pytest.mark.slow), ((4, 4), (1, 4), 8, 16, False),
         pytest.param(((8, 4), (1, 4), 6, 8, True), marks=pytest.mark.slow))


def _choice_bounds(inst) -> dict:
    """Per (stage family, tp choice): (its bound, its configurations), every family opened."""
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    out = {}
    for f, fam in enumerate(lazy.families):
        if not isinstance(fam, StageFamily):
            continue
        for ch in lazy.open_family(f, lambda lb: True):
            start = len(lazy.partials)
            lazy.set_up([ch])
            outers = [o for part in lazy.partials[start:] for blk in part.blocks() for o in blk.outers()]
            out[fam, ch.index] = (ch.key[0], lazy.family_bounds[f], outers)
    return out


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_stage_familys_bound_with_forced_recompute_is_at_most_each_choices_priced_optimum(case, monkeypatch):
    *shape, options = case
    inst = tiny2(*shape, model=WIDE, **(OPTIONS if options else {}))
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)
    got = _choice_bounds(inst)
    with monkeypatch.context() as m:  # the same bounds without the term
        m.setattr(StageRecompute, "slowest_s", lambda self, used, tps, *a: np.zeros((len(tps), len(self.fb.mbs),
                                                                                     len(self.fb.idx))))
        plain = {k: v[0] for k, v in _choice_bounds(inst).items()}
    assert got and set(got) == set(plain)
    raised = checked = 0
    for key, (bound, family_key, outers) in got.items():
        assert family_key <= bound * (1 + 1e-12), key
        if bound > plain[key] * (1 + 1e-9):
            raised += 1
        if not outers:
            continue
        if not np.isfinite(bound):  # refused: none of its configurations fits, where the term refused it
            assert not np.isfinite(plain[key]) or not np.isfinite(layout_optimum_s(inst, outers, math.inf)), key
            continue
        least = float(np.min(floor_bounds_s(inst, outers, [0], "max", (), layer_plans=True)))
        if bound <= least * (1 + 1e-9) and bound <= plain[key] * (1 + 1e-9):
            continue  # (a raised bound is checked against the optimum itself, below its floor too)
        best = layout_optimum_s(inst, outers, bound)
        assert bound <= best * (1 + 1e-9), (key, bound, best)
        checked += 1
    assert raised > 0 and checked > 0
