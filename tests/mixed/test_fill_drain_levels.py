"""fill_drain_s reads each window's levels least first and skips a level whose lower bound,
(m - 1) Z + G(inf), passes the least F so far by LEVEL_SKIP_REL (solver/bounds/fill_drain._block;
issue 33, the 8 x 8 row's settling bound). Skipping must not move the result by one bit: with no
level skipped (LEVEL_SKIP_REL = inf) and every level read in one pass (LEVELS_AT_ONCE past the
window), the same rows give the same floats, bound with and without the gradient sync, with
up to 11 kinds a row (numpy sums 8 or more terms pairwise, so the rows' kind counts matter)."""

from __future__ import annotations

import numpy as np

from paraplan.solver.bounds import fill_drain


def _rows(rng: np.random.Generator):
    """A block of random pipelines as fill_drain_sync_s reads them: stage kinds of 0-3 stages
    (the first present), stage terms and floors on the scale of priced layers (0-0.5 s,
    0.01-0.2 s; some floors equal, so kinds tie), caps below the layers on ~40% of kinds,
    micro-batches 1-19, syncs 0-0.1 s a stage and 0-0.01 s a layer (some 0), v 1 or 2."""
    N, K = int(rng.integers(1, 40)), int(rng.integers(1, 12))
    count = rng.integers(0, 4, (N, K)).astype(float)
    count[:, 0] = np.maximum(count[:, 0], 1)
    layers = int(count.sum(1).max() + rng.integers(0, 60))
    a = rng.uniform(0, 0.5, (N, K)) * (rng.random() < 0.7)
    t = rng.uniform(0.01, 0.2, (N, K))
    if rng.random() < 0.3:
        t = np.round(t, 2) + 0.01
    caps = np.where(rng.random((N, K)) < 0.4, rng.integers(1, layers + 1, (N, K)), layers).astype(float)
    m = rng.integers(1, 20, N).astype(float)
    d = rng.uniform(0, 0.1, (N, K))
    g = rng.uniform(0, 0.01, (N, K)) * (rng.random((N, K)) < 0.9)
    v = rng.integers(1, 3, N).astype(float)
    return a, t, count, layers, m, caps, d, g, v


def _both(case):
    a, t, count, layers, m, caps, d, g, v = case
    return (fill_drain.fill_drain_s(a, t, count, layers, m, caps),
            fill_drain.fill_drain_sync_s(a, t, count, layers, m, caps, d, g, v))


def test_skipping_levels_that_cannot_lower_the_least_gives_the_same_floats(monkeypatch):
    rng = np.random.default_rng(0)
    cases = [_rows(rng) for _ in range(40)]
    skipping = [_both(c) for c in cases]
    monkeypatch.setattr(fill_drain, "LEVEL_SKIP_REL", np.inf)
    monkeypatch.setattr(fill_drain, "LEVELS_AT_ONCE", 10**6)
    finite = 0
    for case, got in zip(cases, skipping):
        want = _both(case)
        for x, y in zip(got, want):
            assert np.array_equal(x, y, equal_nan=True)
            finite += int(np.isfinite(y).sum())
    assert finite  # rows with a split that fits, whose levels were read


def test_the_pipeline_read_once_gives_the_same_bound_with_its_sync():
    # priced_bounds_s hands fill_drain_s's J to fill_drain_sync_s rather than have it recompute it
    rng = np.random.default_rng(1)
    for _ in range(20):
        a, t, count, layers, m, caps, d, g, v = _rows(rng)
        alone = fill_drain.fill_drain_sync_s(a, t, count, layers, m, caps, d, g, v)
        given = fill_drain.fill_drain_sync_s(a, t, count, layers, m, caps, d, g, v,
                                             fill_drain.fill_drain_s(a, t, count, layers, m, caps))
        assert np.array_equal(alone, given, equal_nan=True)
