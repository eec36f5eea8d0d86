"""fill_drain._block reads no level below _room_level, the least level at which the kinds'
stages, each within its cap, can hold every layer (issue 33, 8 x 8 row: under the caps a sync
level sets, 2.0 of the 2.2 million levels fill_drain_sync_s' pipelines read had G = inf), and a
row whose least level from there has its bound past its cut reads none.

Checked on random rows whose caps bind (as a sync level's do): the room level is at most every
level whose G is finite, each level's G computed as _block computes it (_held, _least_sum: an
independent reading, level by level); fill_drain_s and fill_drain_sync_s give the same floats
as with the room level dropped (the reading before), and on small rows the least over every
split, enumerated; the room level bites (fewer levels read). A room level raised by 2% of a
row's stage time (a planted fault) fails the first check and changes the second's floats."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_fill_drain import _enumerated, _enumerated_with_sync

from paraplan.solver.bounds import fill_drain


def _rows(rng: random.Random, n: int, layers: int, kinds: int) -> tuple:
    """`n` random pipelines of `kinds` kinds (0-3 stages each, the first present), stage terms
    some negative (a slot-relaxed first stage), floors with ties, caps binding on most kinds
    (1 to a few layers past an even share, as a sync level's), micro-batches, syncs and v."""
    count = np.array([[rng.randint(1 if j == 0 else 0, 3) for j in range(kinds)] for _ in range(n)], float)
    pick = lambda xs: np.array([[rng.choice(xs) for _ in range(kinds)] for _ in range(n)], float)  # noqa: E731
    t = pick([0.013, 0.02, 0.02, 0.05, 0.11, 0.3])
    a = pick([0.0, 0.0, 0.04, 0.4, -0.01])
    share = layers / np.maximum(count.sum(1, keepdims=True), 1)
    caps = np.where(pick([0, 1, 1, 1]) > 0, np.floor(share) + pick([-1, 0, 1, 2, 5]), layers)
    caps = np.clip(caps, 1, layers)
    m = np.array([float(rng.randint(1, 17)) for _ in range(n)])
    d, g = pick([0.0, 0.01, 0.1]), pick([0.0, 0.002, 0.01, 0.03])
    v = np.array([float(rng.choice([1, 1, 2])) for _ in range(n)])
    return a, t, count, layers, m, caps, d, g, v


def _least_finite_level(a, t, count, cap, layers: int) -> np.ndarray:
    """Per row, the least level a + k t (1 <= k <= cap) of any present kind whose G is finite,
    each level's G read as _block reads it; inf where none."""
    kinds = fill_drain._sorted_kinds(a, t, count, cap, layers)
    out = np.full(len(t), np.inf)
    for r in range(len(t)):
        levels = sorted({a[r, j] + k * t[r, j] for j in range(t.shape[1]) if count[r, j]
                         for k in np.arange(1.0, cap[r, j] + 1)})
        for z in levels:
            row = np.array([r])
            held = fill_drain._held(kinds.a[row], kinds.t[row], kinds.cap[row], np.array([z]))
            if np.isfinite(fill_drain._least_sum(kinds, row, held[:, None, :])[0, 0]):
                out[r] = z
                break
    return out


def _fitting(case) -> tuple:
    """fill_drain_s' own view of a case's rows that fit (kinds padded as it pads them)."""
    a, t, count, layers, _, caps, _, _, _ = case
    present = count > 0
    cap = np.where(present, np.minimum(caps, layers - count.sum(1, keepdims=True) + 1), 0.0)
    ok = ((count.sum(1) <= layers) & (np.where(present, cap, 1) >= 1).all(1) & ((cap * count).sum(1) >= layers))
    return (np.where(present, a, 0.0)[ok], np.where(present, t, 1.0)[ok], count[ok], cap[ok], layers)


def test_no_level_below_the_room_level_has_a_finite_least_sum(monkeypatch):
    rng = random.Random(3)
    checked = 0
    for _ in range(12):
        a, t, count, cap, layers = _fitting(_rows(rng, 30, rng.randint(6, 40), rng.randint(1, 9)))
        least = _least_finite_level(a, t, count, cap, layers)
        room = fill_drain._room_level(a, t, count, cap, layers)
        assert (room <= least).all()
        checked += int(np.isfinite(least).sum())
        # the planted fault: raised by 2% of the row's stage time, the level passes a feasible one
        with monkeypatch.context() as mp:
            plain = fill_drain._room_level
            mp.setattr(fill_drain, "_room_level", lambda a, t, c, cap, L: plain(a, t, c, cap, L) + 0.02 * (a + t).max(1))
            assert len(room) == 0 or (fill_drain._room_level(a, t, count, cap, layers) > least).any()
    assert checked > 200


def _both(case) -> tuple:
    a, t, count, layers, m, caps, d, g, v = case
    return (fill_drain.fill_drain_s(a, t, count, layers, m, caps),
            fill_drain.fill_drain_sync_s(a, t, count, layers, m, caps, d, g, v))


def test_the_room_level_reads_the_same_floats_and_fewer_levels(monkeypatch):
    rng = random.Random(4)
    cases = [_rows(rng, rng.randint(1, 60), rng.randint(6, 60), rng.randint(1, 11)) for _ in range(30)]
    read = {"levels": 0}
    least_sum = fill_drain._least_sum

    def counted(kinds, r, held):  # held: (rows, levels, kinds)
        read["levels"] += held.shape[0] * held.shape[1]
        return least_sum(kinds, r, held)

    monkeypatch.setattr(fill_drain, "_least_sum", counted)
    got = [_both(c) for c in cases]
    with_room = read["levels"]
    plain = fill_drain._room_level
    with monkeypatch.context() as mp:  # the reading before: every level of the window read
        mp.setattr(fill_drain, "_room_level", lambda a, *_: np.full(len(a), -np.inf))
        read["levels"] = 0
        want = [_both(c) for c in cases]
        without = read["levels"]
    finite = 0
    for x, y in zip(got, want):
        for p, q in zip(x, y):
            assert np.array_equal(p, q, equal_nan=True)
            finite += int(np.isfinite(q).sum())
    assert finite > 300 and with_room < 0.7 * without  # rows that fit, and the room level bites
    with monkeypatch.context() as mp:  # the planted fault moves some float
        mp.setattr(fill_drain, "_room_level", lambda a, t, c, cap, L: plain(a, t, c, cap, L) + 0.02 * (a + t).max(1))
        assert any(not np.array_equal(p, q, equal_nan=True) for c, y in zip(cases, want) for p, q in zip(_both(c), y))


def test_under_binding_caps_the_readings_are_the_least_over_every_split():
    rng = random.Random(5)
    seen = 0
    for _ in range(150):
        a, t, count, layers, m, caps, d, g, v = (x[0] if isinstance(x, np.ndarray) else x
                                                 for x in _rows(rng, 1, rng.randint(2, 8), rng.randint(1, 3)))
        count = np.minimum(count, 2)
        if count.sum() > layers:
            continue
        n, cap = count.astype(int), caps.astype(int)
        want = _enumerated(a, t, n, layers, m, cap)
        got = fill_drain.fill_drain_s(a[None], t[None], count[None], layers, np.array([m]), caps[None])[0]
        assert got == pytest.approx(want, rel=1e-12) if np.isfinite(want) else got == np.inf
        want = _enumerated_with_sync(a, t, n, layers, m, cap, d, g, v)
        got = fill_drain.fill_drain_sync_s(a[None], t[None], count[None], layers, np.array([m]), caps[None],
                                           d[None], g[None], np.array([v]))[0]
        assert got == pytest.approx(want, rel=1e-12) if np.isfinite(want) else got == np.inf
        seen += int(np.isfinite(want))
    assert seen > 60
