"""Bound calls batched across their callers' groups, and a family's least bound read best first,
give the floats of the calls they replace (issue 33: the 4 x 16 row bounds about 15 stage-wise
blocks per call, so fixed per-call costs dominated):
- solver/bounds/layouts._fill_drain_rows prices the fill-and-drain rows of several (pp, v)
  batches in one fill_drain_s call; each row's bound is the float of a call per batch (the
  reference: fill_drain_s on the batch alone, as each was priced before);
- solver/bounds/stage_families.FamilyBounds.bound reads its tp choices' slowest stage with
  forced recompute best first; its bound is the float of the least over every choice's bound
  (combos), on the stage families of the 4 x 16 row."""

from __future__ import annotations

import numpy as np

from oracles.bounds import combos
from paraplan.solver.bench.growth import ISSUE_ROWS
from paraplan.solver.bounds import layouts, stage_families
from paraplan.solver.bounds.fill_drain import TIE_MARGIN, fill_drain_s
from paraplan.solver.bounds.stage_families import FamilyBounds, StageFamily
from paraplan.solver.search import FAMILIES, scenario_weights
from paraplan.solver.space import partials_and_families


def _batch(rng, rows: int, n: int, pp: int, v: int, values: int) -> tuple:
    """A (pp, v) batch of _fill_drain_rows: floors drawn from `values` distinct numbers, so
    stages repeat and the kinds number up to values + 1 (the last stage its own)."""
    t = rng.choice(rng.uniform(0.5e-3, 3e-3, values), (rows, n, pp))
    h = rng.uniform(0.0, 5e-3, (rows, n))
    ak, tk, count = layouts._stage_kinds(t, h)
    m = np.repeat(rng.integers(1, 40, rows).astype(float) * v, n)
    return rows, n, pp, v, list(range(rows)), (ak, tk, count, m)


def test_fill_drain_rows_priced_together_keep_each_batchs_floats(monkeypatch):
    rng = np.random.default_rng(0)
    layers, n = 80, 2
    # kinds of 3 to 10 (past MERGED_KINDS a batch keeps its own call), and a depth whose
    # window of levels (layers - pp + 1 = 11) is below fill_drain.WINDOW_LEVELS
    shapes = [(4, 1, 2), (6, 2, 4), (9, 1, 6), (16, 4, 3), (12, 1, 9), (3, 5, 1), (70, 1, 2), (8, 2, 8)]
    batches = [_batch(rng, int(rng.integers(1, 12)), n, pp, v, k) for pp, v, k in shapes]
    want = [fill_drain_s(ak, tk, count, layers, m).reshape(rows, n) / v * (1 - TIE_MARGIN)
            for rows, n, pp, v, _, (ak, tk, count, m) in batches]
    calls = []
    monkeypatch.setattr(layouts, "fill_drain_s", lambda *a, **k: calls.append(1) or fill_drain_s(*a, **k))
    got = layouts._fill_drain_rows(batches, layers)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)  # the same floats, bit for bit
    kinds = [b[5][0].shape[1] for b in batches]
    assert max(kinds) > layouts.MERGED_KINDS  # some batch priced alone
    assert len(calls) < len(batches)  # and some priced together


def test_a_familys_least_bound_read_best_first_is_the_least_of_its_choices_bounds(monkeypatch):
    inst = ISSUE_ROWS[0][1]()  # 4 types x 16 nodes, full space
    idx, agg, weights = scenario_weights(inst, "nominal")
    assert agg == "max"  # the best-first reading's case
    _, lst, deferred = partials_and_families(inst, FAMILIES, defer_stage=True)
    fams = [f for f in stage_families.stage_families(inst, deferred) if isinstance(f, StageFamily)]
    read = []
    fb = FamilyBounds(inst, idx, agg, weights, {}, lst.modes)
    slowest = fb.stage_recompute.slowest_s
    monkeypatch.setattr(fb.stage_recompute, "slowest_s", lambda *a: read.append(len(a[1])) or slowest(*a))
    sample = [f for f in fams[::7] if len(list(np.ndindex(*[len(o) for o in f.tps])))
              <= stage_families.RECOMPUTE_CHOICES][:24]
    assert sample
    got = [fb.bound(fam) for fam in sample]
    best_first = sum(read)  # the choices whose slowest stage bound() read
    read.clear()
    for fam, lb in zip(sample, got):
        _, every = combos(fb, fam)  # every choice's bound, its slowest stage read
        assert lb == (float(every.min()) if every.size else float("inf"))  # the same float
    assert best_first < sum(read)  # some choices were never read
