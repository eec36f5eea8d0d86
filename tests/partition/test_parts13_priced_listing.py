"""A layer-plan listing's lone-class candidates dropped by their priced bound as they are listed
(solver/search._priced_may_win; issue 33).

_cannot_win_alone prunes a lone class of the worst-case objective whose fill_drain.
priced_bounds_s is above its cutoff, at most bar * (1 + REL_TOL) with the bar then, and the bar
only falls: so the listing drops, at the bar it is listed at, those whose priced bound is above
that. Checked against an independent number, each candidate's optimum by the exact split DP
(formulations/split_dp.py): on test_plan_bottleneck's cases, at bars between the least and the
largest optimum, no candidate whose optimum is at most the bar is dropped, and some candidate is
(so the test can fail); the kept ones keep their order. A planted fault (priced bounds read 5%
high) drops a candidate that can win.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_plan_bottleneck import CASES  # noqa: E402
from test_partitions_lazy import _choices_of  # noqa: E402
from oracles.class_partitions import expand_all  # noqa: E402

from paraplan.formulations.split_dp import solve_split_dp  # noqa: E402
from paraplan.solver import search as S  # noqa: E402
from paraplan.solver.planner import REL_TOL  # noqa: E402

# the planted-fault test reads tp4's candidates again: solved once per process (about 8 s of DP),
# its tests side by side on one worker (tests/conftest.py's xdist_group ordering)
pytestmark = pytest.mark.xdist_group("parts13-priced-listing")
_SOLVED: dict[str, list] = {}


def _candidates(case) -> list[tuple[S._Candidate, float]]:
    """Every lone-class candidate of every fourth outer of `case` (expand_all at no bar) with its
    optimum by the exact DP (inf: no split fits), computed once per process (read only)."""
    if case not in _SOLVED:
        _SOLVED[case] = _solved(case)
    return _SOLVED[case]


def _solved(case) -> list[tuple[S._Candidate, float]]:
    out = []
    for i, (o, ch) in enumerate(_choices_of(CASES[case]())[::4]):
        if len(o.classes) != 1 or ch.optimistic(stop_unfit=True) is None:
            continue
        for lb, j, coeffs, parts in expand_all(ch, math.inf).candidates[::3]:
            p = ch.problem_of(coeffs)
            c = p.coeffs[0][0]
            sr = solve_split_dp(c, allow_full_recompute=p.allow_full_recompute, time_limit_s=30.0,
                                pattern=p.recompute_pattern)
            best = sr.objective_s if sr.layers_per_stage is not None else math.inf
            out.append((S._Candidate(o, p, (lb, i, j), False, parts), best))
    return out


def _check(cands: list, bar: float) -> int:
    """Candidates _priced_may_win drops at `bar`; asserts none of them can win there."""
    kept = S._priced_may_win([c for c, _ in cands], bar)
    ids = {id(c) for c in kept}
    assert [c for c, _ in cands if id(c) in ids] == kept  # the order kept
    for c, best in cands:
        if id(c) not in ids:
            assert best > bar * (1 + REL_TOL), (c.key, best, bar)
    return len(cands) - len(kept)


@pytest.mark.slow  # about 10 s each: every candidate solved by the DP
@pytest.mark.parametrize("case", CASES)
def test_dropped_candidates_cannot_win(case):
    cands = _candidates(case)
    assert len(cands) >= 20 and all(c.problem.objective != "weighted" for c, _ in cands)
    finite = sorted(b for _, b in cands if math.isfinite(b))
    dropped = sum(_check(cands, bar) for bar in np.quantile(finite, [0.0, 0.1, 0.3, 0.6]).tolist())
    assert dropped > 0
    assert _check(cands, math.inf) == 0


@pytest.mark.slow
def test_a_bound_read_high_is_caught(monkeypatch):
    cands = _candidates("tp4")
    real = S.priced_bounds_s
    monkeypatch.setattr(S, "priced_bounds_s", lambda cs, full: real(cs, full) * 1.05)
    finite = sorted(b for _, b in cands if math.isfinite(b))
    with pytest.raises(AssertionError):
        for bar in np.quantile(finite, [0.0, 0.1, 0.3, 0.6]).tolist():
            _check(cands, bar)
