"""solver/bounds/layouts.moe_partial_bounds_s (an MoE model's partial layouts bounded at
set-up, search._Partials.of) against partial_bounds_s, bit for bit: each partial layout's bound
and each stage-wise representative's (per_block), on small random MoE instances (two toy GPU
types or one group, with and without idle GPUs), aggregated as "max" and as a weighted sum
(the weighted sums are taken per pp on the same rows, so the same floats). partial_bounds_s'
bounds are checked admissible against the full listing in test_moelazy_partial_bound.py; a
planted fault (each block's v values miscounted) is caught."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from test_moelazy_partial_bound import SEEDS, _instance

from paraplan.solver.bounds import layouts
from paraplan.solver.space import declared_partials


def _mismatches(seed: int, idle: bool, one_group: bool, planted=None) -> int:
    """Bounds (and per_block entries) that differ, `planted` (a context) around
    moe_partial_bounds_s' call alone."""
    inst = _instance(seed, idle, one_group)
    idx = list(range(len(inst.scenarios)))
    w = np.random.default_rng(seed).uniform(0.1, 1.0, len(idx))
    bad = 0
    for agg, weights in (("max", ()), ("weighted", tuple((w / w.sum()).tolist()))):
        partials = declared_partials(inst)
        want_blocks: dict = {}
        want = layouts.partial_bounds_s(inst, partials, idx, agg, weights, {}, want_blocks)
        partials = declared_partials(inst)  # blocks of their own: no kept terms shared
        got_blocks: dict = {}
        with planted() if planted else _nothing():
            got = layouts.moe_partial_bounds_s(inst, partials, idx, agg, weights, {}, got_blocks)
        bad += int((got.view(np.int64) != want.view(np.int64)).sum())
        bad += sum(1 for k in want_blocks.keys() | got_blocks.keys()
                   if np.float64(want_blocks.get(k, np.nan)).view(np.int64)
                   != np.float64(got_blocks.get(k, np.nan)).view(np.int64))
    return bad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("idle,one_group", [(False, False), (True, False), (True, True)])
def test_same_floats_as_partial_bounds(seed, idle, one_group):
    assert _mismatches(seed, idle, one_group) == 0


@contextmanager
def _nothing():
    yield


@contextmanager
def _miscounted_v():
    """Planted: each block's least over v read over its first v alone."""
    real = layouts._moe_least

    def planted(*args):
        least, owners = real(*args)
        return least, [(b, vs[:1]) for b, vs in owners]

    layouts._moe_least = planted
    try:
        yield
    finally:
        layouts._moe_least = real


def test_a_miscounted_v_is_caught():
    assert sum(_mismatches(seed, idle, True, _miscounted_v) for seed in SEEDS for idle in (False, True)) > 0
