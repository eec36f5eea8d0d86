"""slowest_in_chunks_s read with one mask of chunks for every row (issue 33, opt3).

RecomputeFloor._slowest_rows passes each (pp, v)'s rows apart with the one mask
chunk_counts gives them, and slowest_in_chunks_s reads the mask's terms (the counts kept,
each count's layers more, each stage's least count) once, not once per row. Each row's A*
is the same float as with the mask repeated for every row (the reading before) and as the
row read alone: every time is computed elementwise from the row's own terms, and the cut of
the counts read (_chunk_cols) only leaves out counts above every row's A*. The brute-force
check of A* itself is tests/mixed/test_option_keys.py's; here the planted fault (another v's
mask) shows the comparison sees a wrong mask.
"""

from __future__ import annotations

import numpy as np
from test_option_keys import _random_stages, _stage_wise
from test_partitions_lazy import OPTIONS, tiny2
from test_plan_bound_admissible import WIDE

from paraplan.solver.bounds import option_recompute
from paraplan.solver.bounds.option_recompute import RecomputeFloor, chunk_counts, slowest_in_chunks_s


def _rows(rng, count: int, stages: int):
    """(room, held, slope, f, rho, head) of `count` drawn rows of `stages` stages, rooms far
    apart so that the rows' cuts of the counts differ."""
    drawn = [_random_stages(rng, stages, 4.0, 80.0) for _ in range(count)]
    f, rho, held, freed, room, head = (np.stack([d[i] for d in drawn]) for i in range(6))
    return room, held, held / freed, f[:, None], rho[:, None], head[:, None]


def test_one_mask_reads_each_row_as_repeated_masks_and_alone():
    rng = np.random.default_rng(3303)
    wrong = cases = 0
    for _ in range(120):
        stages, v = int(rng.integers(2, 6)), int(rng.integers(2, 5))
        layers = int(rng.integers(stages * v, stages * v + 13))
        first, last = (frozenset(((0,), (1,), (0, 1))[i]) for i in rng.integers(0, 3, 2).tolist())
        mask = chunk_counts(layers, stages, v, first, last)
        room, held, slope, f, rho, head = _rows(rng, int(rng.integers(1, 40)), stages)
        one = slowest_in_chunks_s(room, held, slope, layers, f, rho, mask, head)
        repeated = slowest_in_chunks_s(room, held, slope, layers, f, rho,
                                       np.broadcast_to(mask, (len(room), *mask.shape)).copy(), head)
        alone = np.concatenate([slowest_in_chunks_s(room[i:i + 1], held[i:i + 1], slope[i:i + 1], layers,
                                                    f[i:i + 1], rho[i:i + 1], mask, head[i:i + 1])
                                for i in range(len(room))])
        assert np.array_equal(one, repeated) and np.array_equal(one, alone), (stages, v, layers)
        cases += int(np.isfinite(one).sum())
        # the planted fault: another v's mask is read as a different A* on some rows
        other = chunk_counts(layers, stages, v + 1, first, last)
        planted = slowest_in_chunks_s(room, held, slope, layers, f, rho, other, head)
        wrong += not np.array_equal(np.nan_to_num(planted, posinf=-1.0), np.nan_to_num(one, posinf=-1.0))
    assert cases > 500 and wrong > 60


def _class_terms_at_v(inst, read_mask) -> list:
    """Every (pp, v > 1) class's terms on `inst`'s groups at tp 1, with slowest_in_chunks_s's
    mask passed through read_mask (the identity: the reading as committed)."""
    real = option_recompute.slowest_in_chunks_s

    def wrapped(room, held, slope, layers, f, rho, allowed, head=None):
        return real(room, held, slope, layers, f, rho, read_mask(allowed, len(room)), head)

    option_recompute.slowest_in_chunks_s = wrapped
    try:
        lazy, fb, _, zeros, _, tp, cp, most, _ = _stage_wise(inst)
        rc = RecomputeFloor(fb)
        return [rc.class_terms(g, tp, cp, pp, zeros, most, v)
                for g in range(len(inst.cluster.groups)) for pp in (1, 2, 3, 4) for v in (2, 3, 4)]
    finally:
        option_recompute.slowest_in_chunks_s = real


def test_class_terms_at_v_as_with_the_mask_repeated_per_row():
    # tiny-2types with a Llama-3 70B-wide layer (memory binds at a few layers a stage), 12
    # layers, interleaving at v = 2, 3, 4 with the embedding and loss slots
    keys = dict(OPTIONS, virtual_stages=[1, 2, 3, 4])
    inst = tiny2((4, 4), (1,), 12, 32, model=dict(WIDE, vocab=128256), **keys)
    one = _class_terms_at_v(inst, lambda allowed, rows: allowed)
    repeated = _class_terms_at_v(inst, lambda allowed, rows: np.broadcast_to(
        allowed, (rows, *allowed.shape[-2:])).copy())
    read = 0
    for x, y in zip(one, repeated):
        assert all(np.array_equal(a, b) for a, b in zip(x, y))
        read += bool(np.isfinite(x[1]).any())
    assert read > 0
    # the planted fault: every stage may hold any count (the mask of v = 1)
    planted = _class_terms_at_v(inst, lambda allowed, rows: np.ones_like(allowed))
    assert any(not np.array_equal(x[0], y[0]) for x, y in zip(one, planted))
