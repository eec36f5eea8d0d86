"""solver/bounds/layouts._one_group_split_max against the split it replaces: for an MoE row
through one group (every stage the floor m, a = (a_0, 0, ..., 0, h)), the floats of
(a + balanced_splits(a, t, L) * t).max(axis=1), bit for bit, on random rows (a_0 of either
sign, ties from integer-valued floors, pp from 1 to L, non-finite floors split as before); and
a planted fault (the count of values at or below a level one short) is caught."""

import numpy as np
import pytest

from paraplan.solver.bounds import layouts
from paraplan.solver.bounds.batched import balanced_splits


def _reference(a0: np.ndarray, h: np.ndarray, m: np.ndarray, pp: int, L: int) -> np.ndarray:
    """What _one_group_rows computed before: the split itself, then the largest stage."""
    t = np.repeat(m[:, None], pp, axis=1)
    a = np.zeros_like(t)
    a[:, -1] += h
    a[:, 0] += a0
    return (a + balanced_splits(a, t, L) * t).max(axis=1)


def _rows(rng: np.random.Generator, N: int, integer: bool) -> tuple:
    if integer:  # small integers: many values tie across stages
        m = rng.integers(1, 5, N).astype(float)
        return rng.integers(-8, 9, N).astype(float), rng.integers(0, 9, N).astype(float), m
    m = rng.uniform(1e-3, 2.0, N)
    return rng.normal(0, 3, N), rng.uniform(0, 5, N) * rng.integers(0, 2, N), m


def _mismatches(seed: int) -> int:
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 130))
    bad = 0
    for pp in sorted({1, 2, 3, L, *rng.integers(1, L + 1, 4).tolist()}):
        a0, h, m = _rows(rng, 64, bool(seed % 2))
        if seed % 5 == 0:  # floors the closed form leaves to balanced_splits
            m[:3] = (np.inf, 0.0, np.nan)[: min(3, len(m))]
        got, want = layouts._one_group_split_max(a0, h, m, pp, L), _reference(a0, h, m, pp, L)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        bad += int((~same | (np.signbit(got) != np.signbit(want))).sum())
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_same_floats_as_the_split(seed):
    assert _mismatches(seed) == 0


def test_a_count_one_short_is_caught(monkeypatch):
    real = layouts._values_at_or_below

    def short(a, m, extra, level):  # planted: the last value at the level not counted
        got = real(a, m, extra, level)
        return np.maximum(got - (a + (got + 1) * m == level), 0)

    monkeypatch.setattr(layouts, "_values_at_or_below", short)
    assert sum(_mismatches(seed) for seed in range(40)) > 0
