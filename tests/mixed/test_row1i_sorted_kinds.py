"""fill_drain._block sorts each row's kinds cheapest first once a block (_sorted_kinds), not
once a pass: _least_sum reads the pairs' kinds from the sorted rows, and _held, read kind by
kind, is computed on them directly. The same floats as the reading before, which sorted and
gathered each pass's pairs (kept here as _least_sum_before): on random rows with tied floors
(the stable sort's order), absent kinds, rows read several times and caps below a layer, and
through fill_drain_s / fill_drain_sync_s against brute force over every split. A planted
fault (the first layers' sum taken in the sorted order: a sum's rounding reads its order) is
caught. The same for _lower (reduceat in place of minimum.at) and fill_drain_relaxed_s'
_taken_s (its operations written in place), each against the expressions they replace."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from paraplan.solver.bounds import fill_drain


def _least_sum_before(a, t, count, held, layers: int) -> np.ndarray:
    """fill_drain._least_sum as it read before (issue 33, row1h): held in the kinds' own order."""
    order = np.argsort(t, axis=1, kind="stable")
    rows = np.arange(len(order))[:, None]
    cnt = count[rows, order][:, None, :]
    room = cnt * (held[rows[:, :, None], np.arange(held.shape[1])[None, :, None], order[:, None, :]] - 1)
    ts = t[rows, order][:, None, :]
    extra = (layers - count.sum(axis=1))[:, None, None]
    before = np.cumsum(room, axis=2) - room
    take = np.clip(extra - before, 0, np.maximum(room, 0))
    feasible = ((room >= 0) | (cnt == 0)).all(axis=2) & (room.sum(axis=2) >= extra[..., 0])
    G = (count * (a + t)).sum(axis=1)[:, None] + (take * ts).sum(axis=2)
    return np.where(feasible, G, np.inf)


def _rows(rng: random.Random, n: int, kinds: int):
    """(a, t, count, cap) of n random rows: floors drawn from a few values (ties), some kinds
    absent, a few caps of 0."""
    floors = [rng.uniform(0.01, 0.3) for _ in range(3)]
    t = np.array([[rng.choice(floors) if rng.random() < 0.4 else rng.uniform(0.01, 0.3) for _ in range(kinds)]
                  for _ in range(n)])
    a = np.array([[rng.uniform(-0.05, 0.2) for _ in range(kinds)] for _ in range(n)])
    count = np.array([[rng.choice((0, 1, 1, 2, 3)) for _ in range(kinds)] for _ in range(n)], float)
    cap = np.array([[rng.choice((0, 1, 3, 7, 20, 60)) for _ in range(kinds)] for _ in range(n)], float)
    return a, t, count, cap


@pytest.mark.parametrize("kinds", [1, 2, 5, 9, 17])
def test_least_sum_reads_the_same_floats(kinds):
    rng = random.Random(kinds)
    for layers in (12, 40, 97):
        a, t, count, cap = _rows(rng, 60, kinds)
        kind_rows = fill_drain._sorted_kinds(a, t, count, cap, layers)
        # G(inf): every row, its caps
        before = _least_sum_before(a, t, count, cap[:, None, :], layers)
        assert np.array_equal(fill_drain._least_sum(kind_rows, np.arange(len(t)), kind_rows.cap[:, None, :]), before)
        # a pass: rows read again, each at its own level
        r = np.array([rng.randrange(len(t)) for _ in range(300)])
        z = np.array([rng.uniform(0.0, 4.0) for _ in r])
        held = fill_drain._held(a[r], t[r], cap[r], z)
        sorted_held = fill_drain._held(kind_rows.a[r], kind_rows.t[r], kind_rows.cap[r], z)
        got = fill_drain._least_sum(kind_rows, r, sorted_held[:, None, :])
        assert np.array_equal(got, _least_sum_before(a[r], t[r], count[r], held[:, None, :], layers))
        assert np.isfinite(got).any() and np.isinf(got).any()  # not vacuous: both kinds of pairs


def test_a_planted_fault_is_caught(monkeypatch):
    """The first layers' sum in the sorted order: the same terms, another rounding."""
    plain = fill_drain._sorted_kinds

    def resummed(a, t, count, cap, layers):
        k = plain(a, t, count, cap, layers)
        return fill_drain._Kinds(k.a, k.t, k.cap, k.count, (k.count * (k.a + k.t)).sum(axis=1), k.extra)
    monkeypatch.setattr(fill_drain, "_sorted_kinds", resummed)
    with pytest.raises(AssertionError):
        test_least_sum_reads_the_same_floats(9)


def _brute_s(a, t, count, layers: int, m: float, caps, d, g) -> tuple[float, float]:
    """(J, the least J + slowest sync) over every split of one row's stages (kinds expanded)."""
    stages = [j for j in range(len(t)) for _ in range(int(count[j]))]
    best, joint = np.inf, np.inf
    for n in itertools.product(range(1, layers + 1), repeat=len(stages)):
        if sum(n) != layers or any(k > caps[j] for k, j in zip(n, stages)):
            continue
        T = [a[j] + k * t[j] for k, j in zip(n, stages)]
        J = (m - 1) * max(T) + sum(T)
        best = min(best, J)
        joint = min(joint, J + max(d[j] + k * g[j] for k, j in zip(n, stages)))
    return best, joint


def test_pipelines_against_every_split():
    rng = random.Random(7)
    hit = 0
    for _ in range(40):
        K, layers = rng.choice((1, 2, 3)), rng.randrange(3, 11)
        a, t, count, cap = _rows(rng, 1, K)
        count = np.maximum(count, 1.0) if count.sum() == 0 else count
        count = np.minimum(count, 2.0)
        d = np.array([[rng.uniform(0, 0.1) for _ in range(K)]])
        g = np.array([[rng.uniform(0, 0.02) for _ in range(K)]])
        m = float(rng.randrange(1, 9))
        J, joint = _brute_s(a[0], t[0], count[0], layers, m, cap[0], d[0], g[0])
        got = fill_drain.fill_drain_s(a, t, count, layers, np.array([m]), cap)[0]
        sync = fill_drain.fill_drain_sync_s(a, t, count, layers, np.array([m]), cap, d, g, np.ones(1))[0]
        assert got == pytest.approx(J, rel=1e-12, abs=0) if np.isfinite(J) else np.isinf(got)
        assert sync <= joint * (1 + 1e-12) if np.isfinite(joint) else np.isinf(sync)
        hit += bool(np.isfinite(J))
    assert hit >= 10


def _lower_before(best, r, F):
    np.minimum.at(best, r, F)


@pytest.mark.parametrize("lower", [fill_drain._lower, pytest.param(
    lambda best, r, F: best.__setitem__(r, np.minimum(best[r], F)), marks=pytest.mark.xfail(strict=True))])
def test_lower_is_minimum_at(lower):
    """_block's and fill_drain_sync_s' update of the least so far (reduceat over np.nonzero's
    runs) against minimum.at, the reading before, on rows read several times with ties, infs
    and a nan; the planted fault (a plain scatter: a repeated row keeps its last value) fails."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        todo = rng.random((12, 9)) < 0.3
        r, c = np.nonzero(todo)
        if not len(r):
            continue
        F = np.round(rng.uniform(0, 2, len(r)), 1)
        F[rng.random(len(r)) < 0.1] = np.inf
        best = np.round(rng.uniform(0, 2, 12), 1)
        best[rng.random(12) < 0.2] = np.inf
        if rng.random() < 0.1:
            F[0] = np.nan
        want, got = best.copy(), best.copy()
        with np.errstate(invalid="ignore"):  # the nan's
            _lower_before(want, r, F)
            lower(got, r, F)
        assert np.array_equal(want, got, equal_nan=True)


def _taken_before(c, rate, t, Z, extra) -> np.ndarray:
    """fill_drain_relaxed_s' sum of take_j t_j as it read before (issue 33, row1h)."""
    room = np.where(c[:, None, :] > 0, rate[:, None, :] * Z[:, :, None] - c[:, None, :], 0.0)
    before = np.cumsum(room, axis=2) - room
    take = np.clip(extra[:, :, None] - before, 0, room)
    return np.where(c[:, None, :] > 0, take * t[:, None, :], 0.0).sum(axis=2)


def _relaxed_case(rng: np.random.Generator, n: int, K: int):
    """(c, rate, t, Z, extra) as fill_drain_relaxed_s reads them: absent kinds (c 0, t inf,
    rate 0), levels with infs and nans (nan_to_num's), a few levels below every room."""
    c = rng.integers(0, 4, (n, K)).astype(float)
    t = np.where(c > 0, rng.uniform(0.01, 0.4, (n, K)), np.inf)
    rate = np.where(c > 0, c / np.where(c > 0, t, 1.0) * rng.choice((1.0, 1.3), (n, K)), 0.0)
    Z = rng.uniform(0.0, 6.0, (n, K + 1))
    Z[rng.random((n, K + 1)) < 0.05] = np.inf
    Z[rng.random((n, K + 1)) < 0.02] = np.nan
    extra = rng.integers(-2, 60, (n, 1)).astype(float)
    return c, rate, t, Z, extra


@pytest.mark.parametrize("K", [1, 3, 8, 13])
def test_taken_reads_the_same_floats(K):
    rng = np.random.default_rng(K)
    for n in (1, 7, 500):
        case = _relaxed_case(rng, n, K)
        with np.errstate(invalid="ignore"):
            want = _taken_before(*case)
        assert np.array_equal(fill_drain._taken_s(*case), want, equal_nan=True)
        assert (want > 0).any()  # not vacuous: layers taken


def test_taken_planted_fault_is_caught(monkeypatch):
    """The absent kinds' 0 x inf left in the sum (nan where the plain reading had 0)."""
    def unmasked(c, rate, t, Z, extra):
        with np.errstate(invalid="ignore"):
            room = np.where(c[:, None, :] > 0, rate[:, None, :] * Z[:, :, None] - c[:, None, :], 0.0)
            take = np.clip(extra[:, :, None] - (np.cumsum(room, axis=2) - room), 0, room)
            return (take * t[:, None, :]).sum(axis=2)
    monkeypatch.setattr(fill_drain, "_taken_s", unmasked)
    with pytest.raises(AssertionError):
        test_taken_reads_the_same_floats(8)
