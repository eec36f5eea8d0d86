"""option_recompute's A* of whole chunks with the rows that cannot hold the layers left out
(issue 33, cpg2c), and least_recomputed_rows' row sums in one reduction.

- slowest_in_chunks_s reads inf, without their times, for the rows _chunks_held finds cannot
  hold `layers` in whole chunks within their memory (a stage's least marked count past where
  every layer is recomputed, or the stages' largest marked counts within that summing below
  the layers). Checked three ways on drawn rows, rooms from hopeless to ample, relieved end
  stages among them: against the full reading of every row (_slowest_in_chunks_s, the
  reading before: the same floats; passes of fewer than ROWS_TO_FILTER rows are read in
  full); every row it leaves out has no split in whole chunks by brute force
  (test_option_keys._brute_in, each stage's least time), with one mask or one per row; and
  rows a time could be nan in (a stage with no recompute cost) are all read. Planted fault:
  the test with the filter read at 90% of each row's room (so it leaves out rows that can
  hold the layers) sees different floats.
- least_recomputed_rows sums each row's free layers by one reduction along the rows: against
  least_recomputed row by row, rows of 1 to 96 stages (pairwise sums past 8).
"""

from __future__ import annotations

import numpy as np
from test_opt3_one_mask import _rows
from test_option_keys import _brute_in

from paraplan.solver.bounds import option_recompute
from paraplan.solver.bounds.option_recompute import (chunk_counts, least_recomputed, least_recomputed_rows,
                                                     slowest_in_chunks_s)


def _drawn(rng):
    """(layers, stages, v, mask, room, held, slope, f, rho, head) of a drawn pass, its rooms
    scaled from hopeless to ample so that many rows hold no split."""
    stages, v = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    layers = int(rng.integers(stages * v, stages * v + 13))
    first, last = (frozenset(((0,), (1,), (0, 1))[i]) for i in rng.integers(0, 3, 2).tolist())
    mask = chunk_counts(layers, stages, v, first, last)
    room, held, slope, f, rho, head = _rows(rng, int(rng.integers(1, 64)), stages)
    room = room * rng.uniform(0.02, 1.5, (len(room), 1))
    if rng.random() < 0.5:  # relieved end stages: their state alone, no recompute
        slope[:, 0] = slope[:, -1] = np.inf
    return layers, stages, v, first, last, mask, room, held, slope, f, rho, head


def _mismatches(seed: int, passes: int) -> tuple[int, int, int]:
    """(rows whose filtered A* differs from the full reading, rows left out, finite rows)."""
    rng = np.random.default_rng(seed)
    wrong = left_out = finite = 0
    for _ in range(passes):
        layers, _, _, _, _, mask, room, held, slope, f, rho, head = _drawn(rng)
        got = slowest_in_chunks_s(room, held, slope, layers, f, rho, mask, head)
        full = option_recompute._slowest_in_chunks_s(room, held, slope, layers, f, rho, mask[None], head)
        wrong += int((~((got == full) | np.isnan(got) & np.isnan(full))).any(axis=-1).sum())
        held_rows = option_recompute._chunks_held(room, held, slope, layers, f, rho, mask[None], head)
        left_out += int((~held_rows).sum())
        finite += int(np.isfinite(got).sum())
    return wrong, left_out, finite


def test_rows_left_out_read_as_the_full_reading():
    wrong, left_out, finite = _mismatches(3320, 300)
    assert wrong == 0 and left_out > 500 and finite > 500, (wrong, left_out, finite)


def test_a_filter_reading_less_room_is_seen():
    real = option_recompute._chunks_held
    option_recompute._chunks_held = lambda room, *rest: real(room * 0.9, *rest)
    try:
        wrong, _, _ = _mismatches(3320, 300)
    finally:
        option_recompute._chunks_held = real
    assert wrong > 20


def test_rows_left_out_hold_no_split_by_brute_force():
    rng = np.random.default_rng(3321)
    left_out = 0
    for _ in range(150):
        layers, stages, v, first, last, mask, room, held, slope, f, rho, head = _drawn(rng)
        if layers > 16:
            continue
        out = ~option_recompute._chunks_held(room, held, slope, layers, f, rho, mask[None], head)
        per_row = np.broadcast_to(mask, (len(room), *mask.shape)).copy()  # a mask per row: alike
        assert np.array_equal(out, ~option_recompute._chunks_held(room, held, slope, layers, f, rho, per_row, head))

        def whole(split):  # each stage's layers and a slot it may count fill whole chunks of v
            offs = [first if s == 0 else last if s == stages - 1 else {0} for s in range(stages)]
            return all(any((n + o) % v == 0 for o in off) for n, off in zip(split, offs))
        for i in np.flatnonzero(out).tolist():
            freed = held[i] / slope[i]  # 0 at a relieved end
            rows = list(zip(room[i], held[i], freed, f[i, 0], rho[i, 0], head[i, 0]))
            assert _brute_in(layers, rows, whole) == np.inf, (i, layers, stages, v)
            left_out += 1
    assert left_out > 100


def test_rows_whose_times_could_be_nan_are_all_read():
    rng = np.random.default_rng(3322)
    layers, _, _, _, _, mask, room, held, slope, f, rho, head = _drawn(rng)
    rho = rho.copy()
    rho[0] = 0.0  # 0 times an infinite recompute: nan
    assert option_recompute._chunks_held(room, held, slope, layers, f, rho, mask[None], head).all()
    assert (~option_recompute._chunks_held(room * 0.01, held, slope, layers, f, rho + 1.0, mask[None], head)).any()


def test_row_sums_in_one_reduction_are_least_recomputed_row_by_row():
    rng = np.random.default_rng(3323)
    short = 0
    for stages in (1, 2, 5, 8, 9, 17, 40, 96):
        count = int(rng.integers(8, 30))
        held = rng.uniform(0.5, 3.0, (count, stages)) * 10.0 ** rng.uniform(0, 9, (count, 1))
        room = held * rng.uniform(-1.0, 4.0, (count, stages))
        slope = held / (held * rng.uniform(0.05, 0.9, (count, stages)))
        slope[:, -1] = np.inf
        layers = float(stages * int(rng.integers(1, 4)))
        got = least_recomputed_rows(room, held, slope, layers)
        want = np.array([least_recomputed(room[i], held[i], slope[i], layers) for i in range(count)])
        assert np.array_equal(got, want), stages
        short += int((got > 0).sum())
    assert short > 50
