"""A layer-plan root's or node's priced floor (solver/class_partitions.OuterChoices.priced_floors),
by which the search drops it before its re-key or linked key (search._LayerPlans._priced_out;
issue 33).

The floor is fill_drain.priced_bounds_s at coefficients below each combination's, so it is at
most the optimum of every combination the root or node holds. Checked against an independent
number, each combination's optimum by the exact split DP (formulations/split_dp.py), on
test_plan_bottleneck's cases: the root's floor and every node's met on the way down (expand at
no bar, to the candidates) at most each of its candidates' optimum; some floor is finite and
above the node's own key (so it can drop what the key does not). A planted fault (floors read
0.1% high) goes above some optimum (on the memory-bound case the closest floor is within 0.003%
of its least optimum, measured).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_plan_bottleneck import CASES  # noqa: E402
from test_partitions_lazy import _choices_of  # noqa: E402

from paraplan.formulations.split_dp import solve_split_dp  # noqa: E402
from paraplan.solver import class_partitions as CP  # noqa: E402


def _optimum(ch, coeffs) -> float:
    p = ch.problem_of(coeffs)
    sr = solve_split_dp(p.coeffs[0][0], allow_full_recompute=p.allow_full_recompute, time_limit_s=30.0,
                        pattern=p.recompute_pattern)
    return sr.objective_s if sr.layers_per_stage is not None else math.inf


def _walk(ch, optima: dict) -> list[tuple[float, float, float]]:
    """(floor, key, least optimum of its candidates) of the root and of every node met expanding
    it to the end at no bar (optimum per combination index kept in `optima`)."""
    seen, todo = [], [None]
    while todo:
        node = todo.pop()
        floor = float(ch.priced_floors([node])[0])
        below, got = [node], []
        while below:  # every candidate under `node`
            lst = ch.expand(math.inf, below.pop())
            below += [sub for _, sub in lst.nodes]
            got += lst.candidates
            if node is None or node.level == 0:
                todo += [sub for _, sub in lst.nodes if sub.level == 1][:4]
        for _, j, coeffs, _ in got:
            if j not in optima:
                optima[j] = _optimum(ch, coeffs)
        key = -math.inf if node is None else node.bound
        seen.append((floor, key, min((optima[j] for _, j, *_ in got), default=math.inf)))
    return seen


def _floors(case) -> list[tuple[float, float, float]]:
    out = []
    for o, ch in _choices_of(CASES[case]())[::6]:
        if len(o.classes) == 1 and ch.optimistic(stop_unfit=True) is not None:
            ch.optimistic_bound()
            out += _walk(ch, {})
    return out


@pytest.mark.slow  # 10-30 s each: every candidate met solved by the DP
@pytest.mark.parametrize("case", CASES)
def test_floors_are_at_most_every_optimum(case):
    seen = _floors(case)
    assert len(seen) >= 10
    for floor, _, least in seen:
        assert floor <= least, (floor, least)
    assert any(math.isfinite(f) and f > key for f, key, _ in seen)


@pytest.mark.slow
def test_floors_read_high_are_caught(monkeypatch):
    real = CP.OuterChoices.priced_floors
    monkeypatch.setattr(CP.OuterChoices, "priced_floors", lambda self, nodes: real(self, nodes) * 1.001)
    assert any(floor > least for floor, _, least in _floors("memory"))
