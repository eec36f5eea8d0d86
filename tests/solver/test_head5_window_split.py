"""batched.balanced_splits' window selection of theta (_window_counts) against the selection
it stands in for (every value partitioned, _all_value_counts) and against the greedy it
computes, layer by layer: the split must be the same integers, not only the same min-max.

The greedy (balanced_splits' docstring): start from one layer per stage and add each further
layer to the stage whose next value a_s + k t_s (k = its count + 1) is least, ties to the
lower stage. It reads the same floats (a + k * t with k a float), so the splits agree exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.solver.bounds import batched


def _greedy_split(a: np.ndarray, t: np.ndarray, layers: int) -> np.ndarray:
    n = np.ones(len(a))
    for _ in range(layers - len(a)):
        n[int(np.argmin(a + (n + 1) * t))] += 1  # argmin: the first (lowest) stage of a tie
    return n


def _rows(rng, kind: str, N: int, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, t) of N rows of pp stages: one group (equal layer times, the output layer on the
    last stage), several groups (layer times of other scales), or small integers (many ties)."""
    if kind == "one group":
        t = np.repeat(rng.random((N, 1)) + 0.05, pp, axis=1)
        a = np.zeros((N, pp))
        a[:, -1] = rng.random(N) * 3 * t[:, 0]
    elif kind == "groups":
        t = rng.choice([0.3, 1.0, 2.7, 9.0], (N, pp)) * (1 + 0.01 * rng.random((N, pp)))
        a = rng.random((N, pp)) * rng.choice([0.0, 1.0, 20.0], (N, 1))
    else:  # ties: values of a few integers, many equal across stages
        t = rng.integers(1, 4, (N, pp)).astype(float)
        a = rng.integers(0, 6, (N, pp)).astype(float)
    return a, t


@pytest.mark.parametrize("kind", ["one group", "groups", "ties"])
def test_window_split_is_the_greedy_and_the_partitions(kind, monkeypatch):
    rng = np.random.default_rng({"one group": 1, "groups": 2, "ties": 3}[kind])
    settled = rows = 0
    for _ in range(40):
        pp = int(rng.integers(1, 12))
        layers = pp + int(rng.integers(1, 90))
        a, t = _rows(rng, kind, int(rng.integers(1, 30)), pp)
        monkeypatch.setattr(batched, "WINDOW_MIN_VALUES", 0)  # the window on every call
        got = batched.balanced_splits(a, t, layers)
        window = batched._window_counts(a, t, layers - pp)
        if window is not None:
            settled += int(window[2].sum())
        rows += len(a)
        monkeypatch.setattr(batched, "WINDOW_MIN_VALUES", 10**12)  # every value read
        assert (got == batched.balanced_splits(a, t, layers)).all()
        for i in range(len(a)):
            assert (got[i] == _greedy_split(a[i], t[i], layers)).all(), (kind, i)
    # the window settles rows of each kind (else this compares the fallback with itself)
    assert settled > rows / 4, (settled, rows)


@pytest.mark.parametrize("kind", ["one group", "groups", "ties"])
def test_window_rows_it_cannot_settle_fall_back(kind, monkeypatch):
    """Windows started above theta (WINDOW_BELOW below 0: the continuous count's floor moved
    up) miss it on many rows: the check must find each (a stage's last value below its window
    not < theta) and read those rows from all their values; a stage of no layer time sends
    the whole call there."""
    monkeypatch.setattr(batched, "WINDOW_MIN_VALUES", 0)
    monkeypatch.setattr(batched, "WINDOW_BELOW", -3)
    rng = np.random.default_rng(5)
    missed = 0
    for _ in range(20):
        pp = int(rng.integers(2, 10))
        layers = pp + int(rng.integers(20, 90))
        a, t = _rows(rng, kind, 25, pp)
        window = batched._window_counts(a, t, layers - pp)
        missed += 0 if window is None else int((~window[2]).sum())
        got = batched.balanced_splits(a, t, layers)
        for i in range(len(a)):
            assert (got[i] == _greedy_split(a[i], t[i], layers)).all(), (kind, i)
    assert missed > 0
    t[::2, 1] = 0.0
    assert batched._window_counts(a, t, layers - pp) is None
    got = batched.balanced_splits(a, t, layers)
    assert all((got[i] == _greedy_split(a[i], t[i], layers)).all() for i in range(len(a)))


@pytest.mark.parametrize("kind", ["one group", "groups", "ties"])
def test_window_check_on_any_window(kind):
    """Windows placed anywhere (random starts j_s and widths): a row the check settles has
    exactly the counts of every value read (_all_value_counts), wherever its windows lie;
    the others are left to it. Stages' windows started at random miss theta in every way
    (too high, too low, one stage of several), so this reads the check, not the level."""
    rng = np.random.default_rng({"one group": 11, "groups": 12, "ties": 13}[kind])
    settled = missed = 0
    for _ in range(60):
        pp = int(rng.integers(1, 8))
        extra = int(rng.integers(1, 40))
        a, t = _rows(rng, kind, 30, pp)
        below, ties = batched._all_value_counts(a, t, extra)
        # half the rows' windows around the true counts (off by up to 2), half anywhere
        near = np.clip(below - rng.integers(-2, 3, below.shape), 0, extra)
        anywhere = rng.integers(0, extra + 1, below.shape)
        j = np.where(rng.random((len(a), 1)) < 0.5, near, anywhere).astype(float)
        got_below, got_ties, ok = batched._window_select(a, t, extra, j, int(rng.integers(1, 6)))
        assert (got_below[ok] == below[ok]).all() and (got_ties[ok] == ties[ok]).all()
        settled += int(ok.sum())
        missed += int((~ok).sum())
    assert settled > 0 and missed > 0
