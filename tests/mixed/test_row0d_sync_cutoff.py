"""fill_drain_sync_s reads a sync level's pipeline term only as far as it can lower the least
F so far (fill_drain_s' cutoff; issue 33: the joint reading of the 4 x 16 row's popped layouts,
0.5 ms a row). The least over the levels is unchanged: a level whose J reaches its cutoff,
(best (1 + SYNC_CUT_REL) - W) v, has F = W + J / v above the least so far, whether J is read
exactly or stops at a value at least the cutoff, and a J below the cutoff is exact.

Checked on random pipelines (kinds, stage terms, caps, syncs, interleaving): fill_drain_s with
a cutoff is exact below it and at least it above (against its reading without one, itself
checked against every split in test_fill_drain.py); fill_drain_sync_s gives the same floats as
with the cutoff dropped, and the least over every split, enumerated, on small ones; and the
cutoff bites (fewer levels read)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_fill_drain import _enumerated_with_sync, _sync_case

from paraplan.solver.bounds import fill_drain


def _batch(rng, rows: int, layers: int, kinds: int) -> tuple:
    """`rows` random pipelines of `kinds` kinds (1-4 stages each) over `layers` layers."""
    count = np.array([[rng.randint(1, 4) for _ in range(kinds)] for _ in range(rows)], float)
    pick = lambda xs: np.array([[rng.choice(xs) for _ in range(kinds)] for _ in range(rows)])  # noqa: E731
    t, a = pick([0.5, 0.7, 1.0, 1.5, 3.0]), pick([0.0, 0.0, 0.4, 1.2])
    d, g = pick([0.0, 0.3, 1.0, 4.0]), pick([0.0, 0.05, 0.2, 0.5, 1.1])
    m = np.array([float(rng.randint(1, 17)) for _ in range(rows)])
    v = np.array([float(rng.choice([1, 1, 2, 4])) for _ in range(rows)])
    caps = np.full((rows, kinds), float(layers))
    return a, t, count, layers, m, caps, d, g, v


def test_fill_drain_with_a_cutoff_is_exact_below_it_and_at_least_it_above():
    rng = random.Random(11)
    a, t, count, layers, m, caps, _, _, _ = _batch(rng, 400, 40, 3)
    exact = fill_drain.fill_drain_s(a, t, count, layers, m, caps)
    cut = exact * np.array([rng.choice([0.5, 0.9, 0.999, 1.0, 1.001, 1.2]) for _ in range(len(a))])
    got = fill_drain.fill_drain_s(a, t, count, layers, m, caps, cut)
    below = exact < cut * (1 - fill_drain.LEVEL_SKIP_REL)
    assert below.any() and (~below).any()
    assert np.array_equal(got[below], exact[below])
    # above it, the least of fewer levels (the same floats each): at least J, and J or past the cutoff
    assert (got >= exact).all() and ((got == exact) | (got >= cut * (1 - 1e-12))).all()
    assert (got[~below] > exact[~below]).any()  # some rows stop short of J


def test_the_joint_reading_is_the_same_with_the_cutoff_and_reads_fewer_levels(monkeypatch):
    rng = random.Random(12)
    plain = fill_drain.fill_drain_s
    read = {"levels": 0}
    least_sum = fill_drain._least_sum

    def counted(kinds, r, held):  # held: (rows, levels, kinds), one J per row and level
        read["levels"] += held.shape[0] * held.shape[1]
        return least_sum(kinds, r, held)

    monkeypatch.setattr(fill_drain, "_least_sum", counted)
    for layers, kinds in ((40, 3), (80, 5), (24, 2)):
        case = _batch(rng, 300, layers, kinds)
        read["levels"] = 0
        got = fill_drain.fill_drain_sync_s(*case)
        with_cut = read["levels"]
        with monkeypatch.context() as mp:  # the cutoff dropped: every level's J read exactly
            mp.setattr(fill_drain, "fill_drain_s", lambda a, t, c, L, m, caps=None, cutoff=None: plain(a, t, c, L, m, caps))
            read["levels"] = 0
            want = fill_drain.fill_drain_sync_s(*case)
        assert np.array_equal(got, want)
        assert with_cut < read["levels"]  # the cutoff bites


def test_the_joint_reading_is_the_least_over_every_split():
    rng = random.Random(13)
    for _ in range(200):
        a, t, count, layers, m, cap, d, g, v = _sync_case(rng)
        got = fill_drain.fill_drain_sync_s(a[None], t[None], count[None], layers, np.array([m]), cap[None],
                                           d[None], g[None], np.array([v]))[0]
        want = _enumerated_with_sync(a, t, count, layers, m, cap, d, g, v)
        assert got == pytest.approx(want, rel=1e-12) if np.isfinite(want) else got == np.inf
