"""Every extreme supported point of a finite set of time vectors, found by weighted solves only
(weight-space decomposition; Przybylski, Gandibleux and Ehrgott, "A recursive algorithm for
finding all nondominated extreme points in the outcome set of a multiobjective integer
programme", INFORMS J. Computing 22(3), 2010).

Setting. X is the set of plans, t(x) in R^S their times on S networks, and an oracle returns,
for weights lam >= 0 with sum 1, a plan minimising lam . t(x) (solver/search.py with the
"expected" objective, proved optimal). P = conv(t(X)) + R^S_+.

Why the extreme points are enough. A plan kept through a run of periods does
f(t) = sum_s W_s / t_s iterations (W_s >= 0: the run's time in scenario s less any switch), a
convex function, non-increasing in every t_s. P contains no line, f is bounded above on every
half-line in P (it does not increase along R^S_+) and attains its maximum over P (at a point of
t(X)), so it attains it at an extreme point of P (Rockafellar, Convex Analysis, Cor. 32.3.1).
So whatever the durations and switches, the best plan of every run is an extreme point of P.

Algorithm. For each found point p, its weight region W(p) = {lam in the simplex : lam . p <=
lam . q for every found q} is a polytope (its vertices: every S - 1 of its inequalities active,
with sum lam = 1). Solve the oracle at every vertex not yet checked: a plan strictly better
there is a new point (then the regions shrink); otherwise the vertex is confirmed. When every
vertex of every region is confirmed, phi_found(lam) = min over found q of lam . q equals
phi(lam) = min over X of lam . t(x): on W(p), phi_found is linear (lam . p) and phi is concave,
phi <= phi_found, with equality at the vertices, so phi >= their interpolation = phi_found.
An extreme point e of P is the unique minimiser for lam in an open set, so lam . e = phi(lam)
= phi_found(lam) there forces a found point equal to e. "Strictly better" means by more than
the oracle's own tolerance, so the result is exact up to that tolerance.
"""

from __future__ import annotations

import itertools

import numpy as np

# relative tolerance of the geometry (a weight vertex feasible, two vertices equal)
GEOM_TOL = 1e-9


def region_vertices(p: np.ndarray, others: list[np.ndarray]) -> list[np.ndarray]:
    """Vertices of W(p) = {lam >= 0, sum lam = 1, lam . (p - q) <= 0 for q in others}."""
    S = len(p)
    # rows a with a . lam <= 0: -lam_s <= 0, then (p - q) . lam <= 0
    rows = [-np.eye(S)[s] for s in range(S)] + [p - q for q in others]
    scale = max(1.0, float(np.abs(p).max()))
    out: list[np.ndarray] = []
    for active in itertools.combinations(range(len(rows)), S - 1):
        a = np.vstack([np.ones(S)] + [rows[i] for i in active])
        if abs(np.linalg.det(a)) < GEOM_TOL:
            continue
        lam = np.linalg.solve(a, np.eye(S)[0])
        if (lam < -GEOM_TOL).any():
            continue
        if any(float(r @ lam) > GEOM_TOL * scale for r in rows[S:]):
            continue
        lam = np.clip(lam, 0.0, None)
        lam /= lam.sum()
        if not any(np.abs(lam - x).max() <= 1e-7 for x in out):
            out.append(lam)
    return out


def extreme_points(solve, S: int, start=None, progress=None):
    """The extreme points of P (module docstring) found through `solve(lam)` -> (item, t, tol)
    or None when the solve cannot proceed (its limit, or no proof): the minimiser `item`, its
    time vector t (length S) and how far lam . t may be above the true minimum. `start`:
    (item, t) pairs already known (minimisers of some weights). Returns (items, times,
    complete): complete is False when a solve gave None (then the points found so far)."""
    items: list = []
    pts: list[np.ndarray] = []

    def add(item, t) -> bool:
        t = np.asarray(t, float)
        if any(np.abs(t - q).max() <= GEOM_TOL * max(1.0, float(np.abs(q).max())) for q in pts):
            return False
        items.append(item)
        pts.append(t)
        return True
    for item, t in start or ():
        add(item, t)
    if not pts:
        got = solve(np.full(S, 1.0 / S))
        if got is None:
            return items, pts, False
        add(got[0], got[1])
    confirmed: list[np.ndarray] = []
    while True:
        new = False
        for i in range(len(pts)):
            for lam in region_vertices(pts[i], pts[:i] + pts[i + 1:]):
                if any(np.abs(lam - x).max() <= 1e-7 for x in confirmed):
                    continue
                got = solve(lam)
                if got is None:
                    return items, pts, False
                item, t, tol = got
                best = min(float(lam @ q) for q in pts)
                if float(lam @ np.asarray(t, float)) < best - tol and add(item, t):
                    if progress:
                        progress(f"extreme point {len(pts)} at weights {np.round(lam, 4).tolist()}")
                    new = True
                    break
                confirmed.append(lam)
            if new:
                break
        if not new:
            return items, pts, True
