"""fill_drain._block lists only the window levels it can read (_window_levels: each kind's k
between the room level and the level whose bound (m - 1) Z + G(inf) reaches the row's tail or
cutoff), not the window's W levels a kind (issue 33, the 8 x 8 row's joint readings: 14.4
million levels in their windows, 0.35 million between the bars). A level left out is one the reading before skipped (past a cap, below the room, or
whose bound passes the tail or the cutoff), and which levels a pass reads moves only what is
read, so the result is the same float. The listed levels are sorted a row at a time, as the
window's were, so the passes read the same levels.

Checked against the reading before (every level of the window, sorted: _whole_window, as
_read_window built them) on random pipelines, bound with and
without the gradient sync and with cutoffs: the same floats, and fewer levels listed; a planted
fault (each row's least listed level dropped) moves some float, so the check can fail."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
from test_row0d_sync_cutoff import _batch
from test_row1k_room_level import _rows

from paraplan.solver.bounds import fill_drain


def _whole_window(a, t, cap, live, start, W: int, room, G_inf, m, bar) -> np.ndarray:
    """The levels _read_window read before _window_levels: every level of the window, W a kind
    from `start`, those past a cap, of an absent kind or below the room as inf, sorted a row at
    a time (the bar unread: the passes skip the levels past it)."""
    N = len(t)
    k = start[:, :, None] + np.arange(W, dtype=float)[None, None, :]
    vals = a[:, :, None] + k * t[:, :, None]
    vals = np.where((k <= cap[:, :, None]) & live[:, :, None] & (vals >= room[:, None, None]), vals, np.inf)
    return np.sort(vals.reshape(N, -1), axis=1)


def _cases() -> list[tuple]:
    """Random pipelines: binding caps and negative stage terms (test_row1k_room_level), plain
    ones of 1-4 stages a kind (test_row0d_sync_cutoff), 1 to 60 rows of 1 to 11 kinds."""
    rng = random.Random(33)
    cases = [_rows(rng, rng.randint(1, 60), rng.randint(6, 60), rng.randint(1, 11)) for _ in range(30)]
    cases += [_batch(rng, rng.randint(1, 40), rng.choice([24, 40, 80]), rng.randint(1, 6)) for _ in range(20)]
    return cases


def _readings(case) -> list[np.ndarray]:
    """fill_drain_s without and with cutoffs (rows' J scaled by 0.9-1.1), fill_drain_sync_s;
    where a row's J reaches its cutoff only that it does (any value past it may be returned)."""
    a, t, count, layers, m, caps, d, g, v = case
    exact = fill_drain.fill_drain_s(a, t, count, layers, m, caps)
    rng = np.random.default_rng(len(a) * 131 + layers)
    cut = exact * rng.choice([0.9, 0.999, 1.0, 1.001, 1.1], len(a))
    cutoff = fill_drain.fill_drain_s(a, t, count, layers, m, caps, cut)
    return [exact, np.where(cutoff >= cut, np.inf, cutoff),
            fill_drain.fill_drain_sync_s(a, t, count, layers, m, caps, d, g, v)]


def test_listing_the_levels_between_the_bars_gives_the_same_floats(monkeypatch):
    cases = _cases()
    listed = {"levels": 0}
    window_levels = fill_drain._window_levels

    def counted(*args):
        out = window_levels(*args)
        listed["levels"] += int(np.isfinite(out).sum())
        return out
    monkeypatch.setattr(fill_drain, "_window_levels", counted)
    got = [_readings(c) for c in cases]
    windows = {"levels": 0}

    def before(*args):
        out = _whole_window(*args)
        windows["levels"] += out.size
        return out
    with monkeypatch.context() as mp:
        mp.setattr(fill_drain, "_window_levels", before)
        want = [_readings(c) for c in cases]
    finite = 0
    for x, y in zip(got, want):
        for p, q in zip(x, y):
            assert np.array_equal(p, q, equal_nan=True)
            finite += int(np.isfinite(q).sum())
    assert finite > 1000 and listed["levels"] < 0.5 * windows["levels"]  # rows that fit; fewer levels

    def fault(*args):  # the planted fault: each row's least level left out
        return window_levels(*args)[:, 1:]
    with monkeypatch.context() as mp:
        mp.setattr(fill_drain, "_window_levels", fault)
        assert any(not np.array_equal(p, q, equal_nan=True) for c, y in zip(cases, want) for p, q in zip(_readings(c), y))


def test_the_listed_levels_are_the_windows_between_the_room_and_the_bar():
    # _window_levels against the window listed in full: every level of a present kind within
    # its cap and at or above the room whose bound does not pass the bar is listed, once, and
    # each listed level is one of the window's (the same float)
    rng = np.random.default_rng(7)
    for _ in range(40):
        N, K, W = int(rng.integers(1, 30)), int(rng.integers(1, 9)), int(rng.integers(1, 25))
        a = rng.choice([0.0, 0.0, 0.04, 0.4, -0.01], (N, K))
        t = rng.choice([0.013, 0.02, 0.05, 0.11, 0.3], (N, K))
        live = rng.random((N, K)) < 0.8
        start = rng.integers(1, 6, (N, K)).astype(float)
        cap = start + rng.integers(-1, 30, (N, K))
        room = (a + start * t).max(1) + rng.uniform(-0.2, 0.5, N)
        G_inf, m = rng.uniform(0, 3, N), rng.integers(1, 17, N).astype(float)
        bar = G_inf + (m - 1) * rng.uniform(0, 4, N)
        Z = fill_drain._window_levels(a, t, cap, live, start, W, room, G_inf, m, bar)
        assert (Z[:, 1:] >= Z[:, :-1]).all()  # least first
        r, c = np.nonzero(np.isfinite(Z))
        z = Z[r, c]
        low = (m.take(r) - 1) * z + G_inf.take(r)
        listed = Counter((int(p), float(q)) for p, q, lo in zip(r, z, low) if not lo > bar[p])
        want = Counter()  # (two kinds may share a level: each is listed)
        for p in range(N):
            for j in range(K):
                for k in start[p, j] + np.arange(W, dtype=float):
                    level = a[p, j] + k * t[p, j]
                    if live[p, j] and k <= cap[p, j] and level >= room[p] and not (m[p] - 1) * level + G_inf[p] > bar[p]:
                        want[p, float(level)] += 1
        assert listed == want
