"""fill_drain._distinct_rows finds pipeline_sync_bounds_s' distinct rows by one lexsort of their
columns, in place of np.unique(axis=0), which views each row as one structured element (issue 33:
the three-type, two-site row's 936 calls of ~4 rows). It must give np.unique's first indices and
inverse, index for index, on random rows drawn from few values (ties, -0.0 beside 0.0, inf,
-inf, tiny and nan entries; no rows, one row, one column), and pipeline_sync_bounds_s the floats
it gave with np.unique. A lexsort that reads the last column first, or rows told apart by all
their columns differing rather than any (planted faults), fails the comparison."""

from __future__ import annotations

import numpy as np
import pytest
from test_row1k_as_kinds import _stages

from paraplan.solver.bounds import fill_drain

VALUES = np.array([0.0, -0.0, 1.0, 2.5, 3.0, np.inf, -np.inf, 1e-300])


def _rows(rng: np.random.Generator) -> np.ndarray:
    n, cols = int(rng.integers(0, 14)), int(rng.integers(1, 12))
    values = np.append(VALUES, np.nan) if rng.random() < 0.2 else VALUES
    x = rng.choice(values[: int(rng.integers(2, len(values) + 1))], (n, cols))
    for _ in range(int(rng.integers(0, 4))):  # rows again, further down
        if n > 1:
            x[rng.integers(n)] = x[rng.integers(n)]
    return x


def _by_unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first, back = np.unique(x, axis=0, return_index=True, return_inverse=True)
    return first, back.ravel()


def _mismatches(distinct, seeds) -> int:
    bad = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            x = _rows(rng)
            (f0, b0), (f1, b1) = _by_unique(x), distinct(x)
            bad += not (np.array_equal(f0, f1) and np.array_equal(b0, b1) and b1.dtype == np.intp)
    return bad


@pytest.mark.parametrize("seed", range(5))
def test_distinct_rows_are_np_uniques(seed):
    assert _mismatches(fill_drain._distinct_rows, [seed]) == 0


def test_the_pipeline_bound_reads_the_same_floats(monkeypatch):
    rng = np.random.default_rng(33)
    cases = []
    for _ in range(16):
        n, pp = int(rng.integers(1, 24)), int(rng.integers(2, 12))
        a, t, caps, d, g = _stages(rng, n, pp)
        layers = int(rng.integers(pp, 80))
        rows = rng.integers(0, n, n)  # rows again, as a pipeline's stage orders give
        cases.append((a[rows], t[rows], np.zeros((n, pp)), np.minimum(caps, layers)[rows], d[rows], g[rows],
                      rng.choice([1.0, 2.0], n), rng.choice([4.0, 8.0], n), layers))
    got = [fill_drain.pipeline_sync_bounds_s(*c) for c in cases]
    monkeypatch.setattr(fill_drain, "_distinct_rows", _by_unique)
    for c, x in zip(cases, got):
        assert np.array_equal(x, fill_drain.pipeline_sync_bounds_s(*c), equal_nan=True)
    assert np.isfinite(np.concatenate(got)).sum() > 50


def _planted(columns_first_last: bool, any_column: bool):
    """_distinct_rows with its lexsort's column order and its test of a new row chosen: the
    module's is (True, True)."""
    def distinct(x):
        order = np.lexsort(x.T[::-1] if columns_first_last else x.T)
        s = x[order]
        new = np.ones(len(x), bool)
        differ = s[1:] != s[:-1]
        new[1:] = differ.any(axis=1) if any_column else differ.all(axis=1)
        back = np.empty(len(x), np.intp)
        back[order] = np.cumsum(new) - 1
        return order[new], back
    return distinct


_last_column_first, _all_columns_differ = _planted(False, True), _planted(True, False)


@pytest.mark.parametrize("fault", (_last_column_first, _all_columns_differ))
def test_each_check_fails_on_a_planted_fault(fault):
    assert _mismatches(fault, range(2)) > 50
