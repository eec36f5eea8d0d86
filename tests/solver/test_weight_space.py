"""solver/weight_space.py finds every plan that can be the best one to keep through a run of
periods: on random finite sets of time vectors (2-4 networks), with an exact oracle (argmin of
lam . t over the set), the best point of sum_s W_s / t_s over the whole set is always among the
points found, for many random W >= 0 (zeros included); in two dimensions the points found are
exactly the vertices of the lower-left convex hull, computed independently by a monotone chain."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.solver.weight_space import extreme_points, region_vertices


def oracle(points: np.ndarray, calls: list):
    def solve(lam):
        calls.append(lam)
        j = int(np.argmin(points @ lam))
        return j, points[j], 0.0
    return solve


@pytest.mark.parametrize("seed", range(30))
def test_best_kept_plan_is_always_found(seed):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(2, 5))
    n = int(rng.integers(1, 40))
    pts = rng.uniform(1.0, 3.0, (n, S))
    if seed % 3 == 0:  # duplicates and ties, as plans with equal times
        pts = np.round(pts, 1)
    calls: list = []
    items, found, complete = extreme_points(oracle(pts, calls), S)
    assert complete
    assert len(set(items)) == len(items)
    for _ in range(300):
        W = rng.uniform(0, 1, S) * (rng.random(S) < 0.8)
        f_all = (W / pts).sum(1).max()
        f_found = max((W / pts[j]).sum() for j in items)
        assert f_found == pytest.approx(f_all, rel=1e-12, abs=1e-12)


def lower_left_hull(points: np.ndarray) -> set[tuple[float, float]]:
    """Vertices of conv(points) + R^2_+ by Andrew's monotone chain: sort by x, keep the lower
    hull, then the part of it from the lowest-y point leftwards (the part where it falls)."""
    pts = sorted(set(map(tuple, points)))
    hull: list = []
    for p in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:  # not a left turn
                hull.pop()
            else:
                break
        hull.append(p)
    keep = [hull[0]]
    for p in hull[1:]:
        if p[1] < keep[-1][1]:
            keep.append(p)
    return set(keep)


@pytest.mark.parametrize("seed", range(20))
def test_two_networks_match_the_lower_left_hull(seed):
    rng = np.random.default_rng(100 + seed)
    pts = rng.uniform(1.0, 3.0, (int(rng.integers(1, 60)), 2))
    items, found, complete = extreme_points(oracle(pts, []), 2)
    assert complete
    assert {tuple(pts[j]) for j in items} == lower_left_hull(pts)


def test_hand_derived_regions():
    """Points (1, 3), (2, 2), (3, 1), lam = (l, 1 - l): lam . p is 3 - 2 l, 2 and 1 + 2 l. (2, 2)
    is at most (1, 3) iff l <= 1/2 and at most (3, 1) iff l >= 1/2: its region is the lone
    vertex l = 1/2 (it lies on the segment of the other two). (1, 3)'s region is l in [1/2, 1]."""
    p = [np.array(x, float) for x in ((1, 3), (2, 2), (3, 1))]
    v = region_vertices(p[1], [p[0], p[2]])
    assert len(v) == 1 and np.allclose(v[0], [0.5, 0.5])
    v0 = region_vertices(p[0], [p[1], p[2]])
    assert sorted(round(x[0], 9) for x in v0) == [0.5, 1.0]
