"""The least of the root re-key's final grid read without bounding every combination
(solver/class_partitions.OuterChoices._grid_least, _pick_floors; issue 33).

Checked against the full listing (OuterChoices._grid: every combination of the groups each
choice keeps, each bounded): on tiny-2types at tp 4 (every group offers plans beyond
Megatron's), once with a model whose memory binds (test_plan_bottleneck's cases), and on
test_plan_sync's two-site instance with the three layout options (most outers of several
classes),
for every outer and at several bars (none, and around the least of the grid):
- each pick's floors (_pick_floors) are at most its own terms (_class_terms), and a pick that
  may fit has floors that may fit;
- _grid_least is the least of _grid's bound over the combinations that may fit, all-Megatron's
  left out, where that least is at most the bar, and above the bar where it is not;
- the floors are read: some pick's floors are below its terms, and some grid of 64 picks or
  more is settled having read fewer rows than its picks.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS, _choices_of  # noqa: E402
from test_plan_bottleneck import CASES as BOTTLENECK  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402

from oracles.class_partitions import kept_groups  # noqa: E402
from paraplan.solver.class_partitions import OuterChoices  # noqa: E402

# two sites of one 8-GPU node each, tp 4, four layers: 42 outers with plans beyond Megatron's, 30
# of them of several classes
CASES = {**BOTTLENECK, "two sites, options": lambda: two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS)}


def _split_grid(ch, cut: float):
    """(kept, store) of _split_bound at `cut`: each open choice's kept groups."""
    store, kept = {}, {x: [0] for x in ch.keys}
    for x in ch.open:
        for j, c in kept_groups(ch, x, cut):
            store[x[0], x[1], j + 1] = c
            kept[x].append(j + 1)
    return kept, store


def _listed_least(ch, kept, store, cut) -> float:
    _, _, fits, quick, megatron = ch._grid(kept, store, cut)
    alive = fits & ~megatron
    return float(quick[alive].min()) if alive.any() else math.inf


@pytest.mark.slow  # 5-20 s each on a loaded 2-core machine
@pytest.mark.parametrize("case", CASES)
def test_grid_least_is_the_listed_least(case, monkeypatch):
    inst = CASES[case]()
    reads = []
    mine = OuterChoices._class_terms

    def counted(self, k, members, kept, picks, priced, base):
        reads.append(len(picks))
        return mine(self, k, members, kept, picks, priced, base)
    checked = below = fewer = large = 0
    for o, ch in _choices_of(inst):
        if ch.optimistic(stop_unfit=True) is None:
            continue
        ch.optimistic_bound()
        kept, store = _split_grid(ch, math.inf)
        least = _listed_least(ch, kept, store, math.inf)
        if not np.isfinite(least):
            continue
        members = [[x for x in ch.keys if x[0] == k] for k in range(len(o.classes))]
        for k, mem in enumerate(members):  # the floors against every pick's own terms
            picks = np.array(np.meshgrid(*[np.arange(len(kept[x])) for x in mem], indexing="ij")).reshape(len(mem), -1).T
            floors = ch._pick_floors(k, mem, kept, picks, store)
            terms = ch._class_terms(k, mem, kept, picks, store, ch.meg)
            for lo, hi in zip(floors[:3], terms[:3]):
                assert (lo <= hi * (1 + 1e-12)).all()
                below += bool((lo < hi * (1 - 1e-9)).any())
            assert (floors[3] | ~terms[3]).all()
        for cut in (math.inf, least * 1.02, least, least * 0.99):
            kept, store = _split_grid(ch, cut)
            want = _listed_least(ch, kept, store, cut)
            picks_total = math.prod(len(kept[x]) for x in ch.keys)
            reads.clear()
            monkeypatch.setattr(OuterChoices, "_class_terms", counted)
            got = ch._grid_least(kept, store, cut)
            monkeypatch.setattr(OuterChoices, "_class_terms", mine)
            if want <= cut:
                assert got == want, (o, cut, got, want)
            else:
                assert got > cut, (o, cut, got, want)
            fewer += sum(reads) < picks_total
            large += picks_total >= 64
            checked += 1
    assert checked >= 8 and below > 0
    assert fewer > 0 or not large  # small grids: the floors' rows are as many as the grid's
