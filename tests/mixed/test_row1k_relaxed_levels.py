"""fill_drain.fill_drain_relaxed_s reads, past RELAXED_PAIRS_AT_ONCE (row, level) pairs, only
each row's first level Z0 and the levels that differ from it (_distinct_levels): a level
max(Z_j, Z0) equal to Z0 is the same float and gives the same F (issue 33, 8 x 8 row: 1.6 of
the 3.6 million levels). The bound must be the same floats as every level read (the threshold
raised past every call), on random kinds with ties, absent kinds and varied counts, and a
selection that keeps only Z0 (a planted fault) must change some row."""

from __future__ import annotations

import numpy as np

from paraplan.solver.bounds import fill_drain


def _kinds(rng: np.random.Generator, n: int, K: int):
    count = rng.integers(0, 4, (n, K)).astype(float)
    count[:, 0] = np.maximum(count[:, 0], 1)
    t = rng.choice([0.013, 0.02, 0.02, 0.05, 0.11, 0.3], (n, K))
    layers = int(count.sum(1).max() + rng.integers(0, 90))
    return t, count, layers, rng.integers(1, 33, n).astype(float)


def _cases():
    rng = np.random.default_rng(7)
    return [_kinds(rng, int(rng.integers(2100, 3000)), int(rng.integers(1, 10))) for _ in range(12)]


def _readings(cases) -> list:
    return [fill_drain.fill_drain_relaxed_s(t, count, layers, m) for t, count, layers, m in cases]


def test_reading_the_distinct_levels_gives_the_same_floats(monkeypatch):
    cases = _cases()
    assert all(len(c[0]) * (c[0].shape[1] + 1) > fill_drain.RELAXED_PAIRS_AT_ONCE for c in cases)
    got = _readings(cases)
    monkeypatch.setattr(fill_drain, "RELAXED_PAIRS_AT_ONCE", 10**12)  # every level read
    want = _readings(cases)
    assert all(np.array_equal(x, y) for x, y in zip(got, want))
    assert sum(int(np.isfinite(x).sum()) for x in got) > 3000


def test_reading_only_the_first_level_is_caught(monkeypatch):
    cases = _cases()
    want = _readings(cases)
    monkeypatch.setattr(fill_drain, "_distinct_levels", lambda Z: np.nonzero(np.arange(Z.shape[1])[None, :] == np.zeros((len(Z), 1))))
    assert any(not np.array_equal(x, y) for x, y in zip(_readings(cases), want))
