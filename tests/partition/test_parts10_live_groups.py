"""The root's plans left out where the re-key proved their groups unable to win
(solver/class_partitions.OuterChoices._least_and_live, _root; issue 33).

A plan whose group by replicated parameters is in no combination of groups the re-key read at
most its bar (or that may fit) is in no combination of plans that can win at that bar: each such
combination lies in a combination of groups whose bound is at most its own. Checked against the
full listing (the same outer expanded to the end with no re-key read, so no plan left out): on
test_plan_bottleneck's cases (tiny-2types at tp 4, the same with memory binding), every third
outer, at bars a little above the least candidate
key, the same candidates (keys float for float and combination indices) and the same count of
combinations in all; some outer leaves plans out. A planted fault (each choice's first live
group dropped as well) loses some candidate.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_plan_bottleneck import CASES  # noqa: E402
from test_partitions_lazy import _choices_of  # noqa: E402

from oracles.class_partitions import expand_all  # noqa: E402
from paraplan.solver import class_partitions as CP  # noqa: E402


def _fresh(ch, o):
    got = CP.OuterChoices(ch.inst, o, ch.scenarios, ch.placed, ch.co, ch.problem_of)
    return got if got.optimistic(stop_unfit=True) is not None else None


def _listed(lst) -> tuple:
    counted = len(lst.candidates) + lst.pruned_by_bound + lst.pruned_by_memory + lst.pruned_by_dominance
    return [(lb, j) for lb, j, *_ in lst.candidates], counted


def _compare(case):
    """(outers checked, outers that left plans out, candidates lost) over every third outer."""
    checked = left_out = lost = 0
    for o, ch in _choices_of(CASES[case]())[::3]:
        full = _fresh(ch, o)
        if full is None:
            continue
        every = [lb for lb, *_ in expand_all(full, math.inf).candidates]
        if not every:
            continue
        for bar in (min(every) * 1.005, min(every) * 1.02):
            want = expand_all(_fresh(ch, o), bar)
            mine = _fresh(ch, o)
            mine.optimistic_bound()
            if mine.root_key_again(bar) > bar * (1 + CP.REL_TOL):
                assert not [lb for lb, *_ in want.candidates if lb <= bar]
                continue
            got = expand_all(mine, bar)
            plans = sum(len(p) for p in mine.plans.values())
            left_out += mine.live_groups is not None and _listed(got)[1] == _listed(want)[1] and \
                sum(len(s) for s in mine._root(CP.Listing(), bar).sets) < plans
            lost += _listed(got)[0] != _listed(want)[0]
            assert _listed(got)[1] == _listed(want)[1] == full.total - 1
            checked += 1
    return checked, left_out, lost


@pytest.mark.slow  # 10-40 s each on a loaded 2-core machine: outers expanded to the end
@pytest.mark.parametrize("case", CASES)
def test_left_out_plans_lose_no_candidate(case):
    checked, left_out, lost = _compare(case)
    assert lost == 0
    assert checked >= 4 and left_out > 0


@pytest.mark.slow
def test_a_live_group_dropped_is_caught(monkeypatch):
    mine = CP.OuterChoices._least_and_live

    def faulty(self, kept, store, cut):
        got = mine(self, kept, store, cut)
        if self.live_groups is not None:
            bar, groups = self.live_groups
            self.live_groups = bar, {x: set(sorted(g)[1:]) for x, g in groups.items()}
        return got
    monkeypatch.setattr(CP.OuterChoices, "_least_and_live", faulty)
    lost = sum(_compare(case)[2] for case in CASES)
    assert lost > 0
