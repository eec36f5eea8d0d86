"""fill_drain._as_kinds groups every row's stages into kinds in one lexsort (issue 33, 8 x 8
row: np.unique a row at a time was 0.5 s of pipeline_sync_bounds_s' 41 calls). It must give
the arrays the reading a row at a time gave (kept here as _as_kinds_before: each row's
np.unique over its (a, t, cap, d, g) stages, padded with absent kinds), kind for kind, on
random rows with many tied stages, and pipeline_sync_bounds_s the same floats. A grouping that
ignores the syncs (a planted fault) merges stages that differ and fails the comparison."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.solver.bounds import fill_drain


def _as_kinds_before(a, t, caps, d, g) -> tuple:
    N, pp = t.shape
    kinds = [np.unique(np.stack([a[i], t[i], caps[i], d[i], g[i]], axis=1), axis=0, return_counts=True)
             for i in range(N)]
    K = max(len(c) for _, c in kinds)
    out = [np.zeros((N, K)), np.ones((N, K)), np.zeros((N, K)), np.zeros((N, K)), np.zeros((N, K)), np.zeros((N, K))]
    for i, (rows, c) in enumerate(kinds):
        k = len(c)
        for x, col in zip(out, (rows[:, 0], rows[:, 1], c, rows[:, 2], rows[:, 3], rows[:, 4])):
            x[i, :k] = col
    return tuple(out)


def _stages(rng: np.random.Generator, n: int, pp: int) -> tuple:
    """(a, t, caps, d, g), (n, pp) each, drawn from few values so that stages tie (a pipeline
    through a few GPU types, its end stages apart)."""
    def pick(xs):
        return rng.choice(np.asarray(xs, float), (n, pp))
    return (pick([0.0, 0.01, 0.3]), pick([0.02, 0.05, 0.05, 0.11]), pick([3, 9, 80, 80]),
            pick([0.0, 0.1, 0.25]), pick([0.001, 0.004, 0.004]))


@pytest.mark.parametrize("seed", range(6))
def test_kinds_in_one_sort_are_the_kinds_a_row_at_a_time(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        stages = _stages(rng, int(rng.integers(1, 40)), int(rng.integers(1, 30)))
        for x, y in zip(fill_drain._as_kinds(*stages), _as_kinds_before(*stages)):
            assert x.shape == y.shape and np.array_equal(x, y)


def test_the_pipeline_bound_reads_the_same_floats(monkeypatch):
    rng = np.random.default_rng(9)
    cases = []
    for _ in range(12):
        n, pp = int(rng.integers(1, 30)), int(rng.integers(2, 12))
        a, t, caps, d, g = _stages(rng, n, pp)
        layers = int(rng.integers(pp, 80))
        cases.append((a, t, np.zeros((n, pp)), np.minimum(caps, layers), d, g, rng.choice([1.0, 2.0], n),
                      rng.integers(1, 17, n).astype(float), layers))
    got = [fill_drain.pipeline_sync_bounds_s(*c) for c in cases]
    monkeypatch.setattr(fill_drain, "_as_kinds", _as_kinds_before)
    for c, x in zip(cases, got):
        assert np.array_equal(x, fill_drain.pipeline_sync_bounds_s(*c), equal_nan=True)
    assert np.isfinite(np.concatenate(got)).sum() > 50


def test_a_grouping_blind_to_the_syncs_is_caught():
    rng = np.random.default_rng(3)
    stages = _stages(rng, 30, 12)
    a, t, caps, d, g = stages
    blind = fill_drain._as_kinds(a, t, caps, np.zeros_like(d), np.zeros_like(g))  # the planted fault
    assert any(x.shape != y.shape or not np.array_equal(x, y)
               for x, y in zip(blind[:3], _as_kinds_before(*stages)[:3]))
