"""A popped mixed root's stage-wise class read whole only at the v whose plain reading can still
win (solver/option_families.OptionBounds._whole, issue 33), on random clusters of three or four
toy GPU types (test_many_types_agreement.many_types_instance) with interleaving, ZeRO 0-1 and
full recompute in the space, so that memory binds and several v are read.

- Against the same root read whole at every v, for bars drawn among the root's per-v readings:
  at each v the key reads either the whole reading (every v whose plain reading can win, and
  no other is read) or the plain one, each a bound at that v; some bar leaves a v out (the
  saving is real). The whole reading is not always above the plain one at a v (Z = L (M +
  B / v) / D falls with a class's rate only while the other classes' bubbles and rates leave
  it so), so the key may differ from the whole reading's either way: which is why the next
  check prices.
- Against every layout's priced optimum (test_option_bound_admissible.py's reference, CP-SAT on
  each outer configuration): each family expanded under a bar that keeps some roots and drops
  others, every layout a root read so sets up is bounded by its node's key.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from test_many_types_agreement import many_types_instance
from test_option_bound_admissible import optimum_s

from paraplan.solver import search as search_mod
from paraplan.solver.option_families import OptionBounds, OptionFamily

SPACE = {"virtual_stages": (1, 2, 3, 4), "zero": (0, 1), "full_recompute": True}


def _instance(seed: int):
    inst = many_types_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, **SPACE))


def _mixed(lazy) -> list[OptionFamily]:
    return [fam for fam in lazy.families if isinstance(fam, OptionFamily) and fam.family == "mixed"]


@pytest.mark.parametrize("seed", (1, 2, 13))
def test_a_popped_mixed_root_reads_its_class_whole_at_each_v_that_can_win_and_no_other(seed):
    inst = _instance(seed)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    assert _mixed(lazy)
    compared = skipped = 0
    for fam in _mixed(lazy):
        full = OptionBounds(lazy.fb)
        for i, root in enumerate(full._roots(fam)):
            plain = full._relaxed(root, root.state, 0, per_v=True)
            whole = full._whole(root)
            whole_v = full._relaxed(whole, whole.state, 0, per_v=True)
            for bar in sorted(set(plain.tolist()))[:4]:
                def can_win(lb, bar=bar):
                    return lb < bar
                ob = OptionBounds(lazy.fb)  # nothing memoised: the class read only as the bar asks
                got = ob._whole(ob._roots(fam)[i], can_win)
                got_v = ob._relaxed(got, got.state, 0, per_v=True)
                live = plain < bar
                assert np.array_equal(got_v[live], whole_v[live]), (fam, root.stage, bar)
                assert np.array_equal(got_v[~live], plain[~live]), (fam, root.stage, bar)
                assert got.bound == float(got_v.min())
                compared += 1
                skipped += bool((~live).any() and (whole_v[~live] != plain[~live]).any())
    assert compared > 0 and skipped > 0, (compared, skipped)


@pytest.mark.slow
def test_layouts_under_a_root_read_against_a_bar_are_bounded_by_its_keys():
    # seed 2's mixed families, expanded under a bar at the median of their roots' whole keys;
    # every layout set up is priced (CP-SAT on each configuration): 20-40 s of CPU
    inst = _instance(2)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    checked = 0
    for f, fam in enumerate(lazy.families):
        if fam not in _mixed(lazy):
            continue
        keys = [r.bound for r in OptionBounds(lazy.fb)._roots(fam)]
        bar = float(np.median(keys)) * 1.5

        def can_win(lb, bar=bar):
            return lb < bar
        nodes = lazy.open_family(f, can_win)
        while nodes:
            kids = []
            for ch in nodes:
                start = len(lazy.partials)
                kids += [n for n in lazy.set_up([ch], can_win) if isinstance(n, search_mod._Choice)]
                for part in lazy.partials[start:]:
                    best = optimum_s(inst, part)
                    if math.isfinite(best):
                        checked += 1
                        assert lazy.ob._keyed_at[ch.index] <= best * (1 + 1e-9), (fam, best)
            nodes = kids
    assert checked > 0
