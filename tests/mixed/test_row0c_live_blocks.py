"""A stage-wise block reads fill_drain (at set-up) and its syncs (when popped) only while its
bound without them can still reach the search's bar (solver/bounds/layouts._live, the ceiling_s
of partial_bounds_s; issue 33: on the 4 types x 16 nodes row 8,819 of the 20,376 blocks set up
could, and 1,412 of the 1,938 popped).

What the search reads of a block is its bound against its bar: a bound at most the bar must be
the one read in full (the search lists that block's configurations and keys them by it), one past
the bar need only stay past it (the block is never listed: the bar only falls) and at most the
full bound (it still bounds the block's configurations). Checked here on the bundled two-type toy,
at a bar on either side of each block's bound: the full bounds are those read with no bar
(ceiling_s = inf, as before), and the bounds that read neither fill_drain nor syncs (fill_drain
switched off) give the bars between the two readings, where the block must be read in full
although its cheap bound passes no bar. That the full bounds are at most the configurations'
optima is tests/mixed/test_layout_syncs.py's and test_partial_layouts.py's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bounds import layouts
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.space import declared_partials


def _stage_wise():
    inst = load_instance("instances/mixed/tiny-2types.yaml")
    return inst, [p for p in declared_partials(inst) if p.dp is not None and len(p.used) > 1]


def _read(inst, parts, ceiling_s: float = math.inf, memo: dict | None = None) -> tuple[np.ndarray, dict]:
    """The partial layouts' bounds and each representative's (per_block) at set-up, then read
    with the syncs (per (ZeRO stage, v)), both under the bar `ceiling_s`, sharing `memo`."""
    memo = {} if memo is None else memo
    per_block: dict = {}
    keys = partial_bounds_s(inst, parts, [0], "max", (), memo, per_block, ceiling_s=ceiling_s)
    synced: dict = {}
    partial_bounds_s(inst, parts, [0], "max", (), memo, synced, {}, ceiling_s)
    per_block.update((k, lb) for k, lb in synced.items() if len(k) > 4)
    return keys, per_block


def test_blocks_past_the_bar_read_less_and_stay_past_it(monkeypatch):
    inst, parts = _stage_wise()
    full_keys, full = _read(inst, parts)
    with monkeypatch.context() as m:  # no fill_drain: each block's bound without it
        m.setattr(layouts, "_fill_drain_rows", lambda batches, L: [np.zeros(b[:2]) for b in batches])
        _, cheap = _read(inst, parts)
    blocks = [k for k in full if len(k) == 4]
    # the bars: each block's bound read in full and without fill_drain, and between the two
    bars = sorted({full[k] for k in blocks} | {cheap[k] for k in blocks}
                  | {(full[k] + cheap[k]) / 2 for k in blocks if full[k] > cheap[k]})
    between = [k for k in blocks if full[k] > cheap[k]]
    assert between  # fill_drain raises some blocks: some bars lie between the two readings
    cut_some = False
    for bar in bars:
        keys, got = _read(inst, parts, bar)
        for k in blocks:
            if full[k] <= bar:
                assert got[k] == full[k]  # read in full, the same floats
            else:
                assert bar < got[k] <= full[k]
                cut_some |= got[k] < full[k]
        for k, lb in full.items():  # per (ZeRO stage, v): read where the block can win
            if len(k) == 4:
                continue
            if full[k[:4]] > bar:
                assert k not in got  # its syncs not read
            elif lb <= bar:
                # (the joint reading, fill_drain.fill_drain_sync_s, rounds a row by the rows
                # read with it, as the layouts popped together in a search: a few ulps)
                assert got[k] == pytest.approx(lb, rel=1e-12, abs=0.0)
            else:  # (a pair past the bar is not raised by the joint reading: _pair_bounds)
                assert bar < got[k] <= lb * (1 + 1e-12)
        for key, lb in zip(keys.tolist(), full_keys.tolist()):
            assert key == lb if lb <= bar else bar < key <= lb
    assert cut_some  # some block past a bar skipped fill_drain


def test_terms_kept_past_a_bar_are_read_again_under_a_higher_one():
    # a memo that kept a block's terms without fill_drain under a low bar gives the full bounds
    # under no bar (layouts._kept_terms): the search's bar only falls, but a memo is no bar's
    inst, parts = _stage_wise()
    full_keys, full = _read(inst, parts)
    memo: dict = {}
    low = min(lb for k, lb in full.items() if len(k) == 4)
    _read(inst, parts, low, memo)
    keys, got = _read(inst, parts, math.inf, memo)
    assert np.array_equal(keys, full_keys) and got == full
