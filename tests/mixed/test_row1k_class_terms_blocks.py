"""one_class.tight_class_terms_of_blocks reads the tight class terms of blocks of several
pipeline depths at once (the bound before pricing that reads memory, unpriced_memory.
_block_terms; issue 33, 8 x 8 row: 3,162 calls of a median of 2 rows, now one per call site's
(v, layers)): each stage's cap and pieces in one pass over the stages padded to the deepest
block, the listed levels and the sums per block. Each block's (tau, sigma, delta, fits) must be
the floats tight_class_terms gives it alone, on random blocks of 1-12 stages whose memory caps
bind, force recompute, or leave no split that fits. A padded stage holding memory (a planted
fault: its cap then enters the fit) changes some block's numbers, so the comparison can fail."""

from __future__ import annotations

import numpy as np

from paraplan.solver.bounds import one_class
from paraplan.solver.bounds.one_class import TIGHT_ARRAYS, tight_class_terms, tight_class_terms_of_blocks


def _block(rng: np.random.Generator, rows: int, pp: int, layers: int) -> dict:
    """`rows` random classes of `pp` stages: times on the scale of priced stages (some stage
    terms negative, as a slot-relaxed end stage's), per-layer memory of 1-4 GB with an input
    checkpoint below the activations (full recompute frees memory), and a capacity that holds
    from a few layers a stage to all of them."""
    def u(lo, hi):
        return rng.uniform(lo, hi, (rows, pp))
    act = u(1e9, 3e9)
    state = u(0.2e9, 1e9)
    per = state + rng.choice([1.0, 0.3], (rows, pp)) * act
    capacity = rng.choice([80e9, 40e9], (rows, pp))
    stage_mem = capacity - per * rng.uniform(0.5, 2.5 * layers / pp, (rows, pp))
    return {"stage_time_s": u(-0.01, 0.05), "layer_time_s": u(0.01, 0.1), "recompute_time_s": u(0.0, 0.03),
            "stage_sync_time_s": u(0.0, 0.2), "layer_sync_time_s": u(0.0, 0.01) * (rng.random((rows, pp)) < 0.9),
            "layer_state_bytes": state, "layer_act_bytes": act, "layer_ckpt_bytes": act * u(0.05, 0.5),
            "stage_mem_bytes": stage_mem, "capacity_bytes": capacity}


def _cases(seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        layers, v = int(rng.integers(4, 90)), int(rng.choice([1, 1, 2]))
        depths = rng.choice([1, 2, 3, 4, 8, 12], int(rng.integers(1, 5)), replace=False)
        depths = [int(pp) for pp in depths if pp * v <= layers] or [1]
        yield [_block(rng, int(rng.integers(1, 7)), pp, layers) for pp in depths], layers, v, bool(rng.random() < 0.8)


def _same(got: list, blocks: list, layers: int, v: int, full: bool) -> bool:
    return all(np.array_equal(x, y, equal_nan=True)
               for g, c in zip(got, blocks) for x, y in zip(g, tight_class_terms(c, layers, v, full)))


def test_blocks_read_together_are_each_blocks_own_floats():
    fit, no_fit, forced = 0, 0, 0
    for blocks, layers, v, full in _cases(0):
        assert set(blocks[0]) == set(TIGHT_ARRAYS)
        got = tight_class_terms_of_blocks(blocks, layers, v, full)
        assert _same(got, blocks, layers, v, full)
        for tau, sigma, delta, fits in got:
            fit += int(fits.sum())
            no_fit += int((~fits).sum())
        forced += full
    assert fit > 100 and no_fit > 10 and forced  # rows that fit and rows that do not


def test_a_fit_that_reads_the_padded_stages_is_caught(monkeypatch):
    plain = one_class._own_pieces

    def padded_fit(c, L, v, full, live=None):  # the planted fault: the padded stages' caps fit layers
        return plain(c, L, v, full)

    monkeypatch.setattr(one_class, "_own_pieces", padded_fit)
    assert any(len(blocks) > 1 and not _same(tight_class_terms_of_blocks(blocks, layers, v, full), blocks, layers, v,
                                             full)
               for blocks, layers, v, full in _cases(1))
