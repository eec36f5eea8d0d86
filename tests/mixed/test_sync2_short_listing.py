"""one_class._listed_levels reads a large listing over each stage's first chunks first
(_short_chunks: SHORT_FACTOR x ceil((L // v) / pp) of them) and lists again in full only the rows
that reading does not settle (_settled: each stage's next value at least the kth read; issue 33,
the three-type, two-site row: 37% fewer values listed). Checked against the full listing
(SHORT_LISTING_VALUES past every listing), float for float: tight_class_terms_of_blocks on
random blocks of 1-16 stages whose memory caps bind, force recompute or leave no split that
fits, one block or several of other depths (padded), v of 1, 2 and 4; and _listed_levels on
random pieces drawn from few values (ties), with zero slopes, inf and nan entries, and some
stage times that fall past a knee (read in full: _short_chunks). Each listing that the first chunks would
shorten is read short (SHORT_LISTING_VALUES 0), and at the module's threshold. Both readings occur: rows settled by the first
chunks and rows listed again. Each check fails on a planted fault: every row taken as settled,
the next value read one chunk too far, a negative slope read short."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_row1k_class_terms_blocks import _block

from paraplan.solver.bounds import one_class


def _read(monkeypatch, values: float, fn, *args):
    """fn(*args) with listings short from `values` values on (inf: every listing in full)."""
    with monkeypatch.context() as m:
        m.setattr(one_class, "SHORT_LISTING_VALUES", values)
        return fn(*args)


def _counting(monkeypatch) -> dict:
    """Counts of the rows _settled settles and of those it leaves to the full listing."""
    seen = {"settled": 0, "again": 0}
    settled = one_class._settled

    def spy(*a):
        ok = settled(*a)
        seen["settled"] += int(ok.sum())
        seen["again"] += int((~ok).sum())
        return ok
    monkeypatch.setattr(one_class, "_settled", spy)
    return seen


def _class_cases(seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(30):
        layers, v = int(rng.integers(24, 120)), int(rng.choice([1, 1, 2, 4]))
        depths = [int(pp) for pp in rng.choice([1, 2, 3, 5, 8, 16], int(rng.integers(1, 4)), replace=False)
                  if pp * v <= layers] or [1]
        yield [_block(rng, int(rng.integers(10, 60)), pp, layers) for pp in depths], layers, v, bool(rng.random() < 0.8)


def _class_mismatches(monkeypatch, seeds, values: float = 0) -> int:
    bad = 0
    for seed in seeds:
        for blocks, layers, v, full in _class_cases(seed):
            got = _read(monkeypatch, values, one_class.tight_class_terms_of_blocks, blocks, layers, v, full)
            ref = _read(monkeypatch, math.inf, one_class.tight_class_terms_of_blocks, blocks, layers, v, full)
            bad += sum(not np.array_equal(x, y, equal_nan=True) for g, r in zip(got, ref) for x, y in zip(g, r))
    return bad


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("values", (0, one_class.SHORT_LISTING_VALUES), ids=("every listing", "large listings"))
def test_tight_class_terms_are_the_full_listings(monkeypatch, seed, values):
    seen = _counting(monkeypatch)
    assert _class_mismatches(monkeypatch, [seed], values) == 0
    assert seen["settled"] > (20 if values == 0 else 0) and (seen["again"] > 0 or values > 0)


def _pieces(rng: np.random.Generator, rows: int, pp: int, layers: int, negative: bool) -> tuple:
    """(safe, base, slope, knee, slope2) of _listed_levels, drawn from few values (ties), some
    zero slopes, inf and nan entries, caps from 0 to every layer; negative: stage times that
    rise to a knee and fall past it (slope2 < 0), which only a full listing reads right."""
    def pick(xs):
        return rng.choice(np.asarray(xs, float), (rows, pp))
    knee = pick([10.0, 30.0, 50.0]) if negative else pick([2.0, 7.0, np.inf, np.inf])
    slope2 = pick([-0.05, -0.05, 0.04]) if negative else pick([0.02, 0.04, 0.04, np.inf])
    if negative:  # (every stage holding every layer, at finite times: the fall is what decides)
        return (np.full((rows, pp), float(layers)), (pick([0.0, 0.1, 0.3]), pick([0.0, 0.2])),
                (pick([0.01, 0.02]), pick([0.003, 0.01])), knee, slope2)
    return (pick([0, 1, 3, 10, layers, layers, np.nan]),
            (pick([0.0, 0.1, 0.1, -0.02, np.inf, np.nan]), pick([0.0, 0.2, 0.2, np.inf])),
            (pick([0.0, 0.01, 0.02, 0.02, 0.05]), pick([0.0, 0.003, 0.003, 0.01, np.inf])), knee, slope2)


def _listing_mismatches(monkeypatch, seeds, negative: bool = False) -> int:
    bad = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for _ in range(40):
            layers, v = int(rng.integers(16, 100)), int(rng.choice([1, 2, 4]))
            rows, pp = int(rng.integers(8, 80)), int(rng.integers(1, 12))
            safe, base, slope, knee, slope2 = _pieces(rng, rows, pp, layers, negative)
            live = None if rng.random() < 0.5 else np.arange(pp)[None, :] < rng.integers(1, pp + 1, rows)[:, None]
            if live is not None:
                safe = np.where(live, safe, 0.0)
            chunks = one_class._listed_chunks(layers, v, safe)
            args = (layers, v, chunks, safe, base, slope, knee, slope2, live)
            got = _read(monkeypatch, 0, one_class._listed_levels, *args)
            ref = _read(monkeypatch, math.inf, one_class._listed_levels, *args)
            bad += sum(not np.array_equal(x, y, equal_nan=True) for x, y in zip(got, ref))
    return bad


@pytest.mark.parametrize("negative", (False, True), ids=("slopes >= 0", "some slopes < 0"))
def test_listed_levels_are_the_full_listings(monkeypatch, negative):
    seen = _counting(monkeypatch)
    assert _listing_mismatches(monkeypatch, range(3), negative) == 0
    if not negative:
        assert seen["settled"] > 100 and seen["again"] > 0


def test_each_check_fails_on_a_planted_fault(monkeypatch):
    settled = one_class._settled
    with monkeypatch.context() as m:  # every row taken as settled
        m.setattr(one_class, "_settled", lambda v, short, kth, *a: np.ones(len(a[0]), bool))
        assert _class_mismatches(monkeypatch, [0]) and _listing_mismatches(monkeypatch, [0])
    with monkeypatch.context() as m:  # the next value read one chunk too far
        m.setattr(one_class, "_settled", lambda v, short, *a: settled(v, short + 1, *a))
        assert _class_mismatches(monkeypatch, range(3))
    short = one_class._short_chunks
    with monkeypatch.context() as m:  # a negative slope read short
        m.setattr(one_class, "_short_chunks", lambda L, v, chunks, safe, slope, slope2, live: short(
            L, v, chunks, safe, tuple(np.abs(x) for x in slope), np.abs(slope2), live))
        assert _listing_mismatches(monkeypatch, range(3), negative=True)
