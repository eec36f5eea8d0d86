"""solver/bounds/layouts.partial_bounds_s on an MoE model (its layouts bounded at set-up,
search._Partials.of): each stage-wise representative's bound (per_block), read with every
block of the space in one call (_moe_least's rows, _least_over_v's least over v and weighted sum
per pp), against the same block bounded alone (stage_bound_rows on that block: one row per v,
one pp), on small random MoE instances (two toy GPU types or one group, with and without idle
GPUs), aggregated as "max" (bit for bit) and as a weighted sum (up to ULPS: a dot product's
floats read its operand's shape, here one row against many); and nothing kept for a later call (an MoE
model's layouts read no syncs). The bounds are checked admissible against the full listing in
test_moelazy_partial_bound.py; a planted fault (each block's v values miscounted) is caught."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import numpy as np
import pytest
from test_moelazy_partial_bound import SEEDS, _instance

from paraplan.solver.bounds import layouts
from paraplan.solver.space import declared_partials

# a weighted sum over a few scenarios taken on one row or on many differs by a few units in the
# last place; the planted fault moves bounds by far more
ULPS = 1e-14


def _mismatches(seed: int, idle: bool, one_group: bool, planted=nullcontext) -> int:
    """Stage-wise representatives whose bound read with all the others (`planted`, a context,
    around that call alone) is not the one read alone (bit for bit under "max", up to ULPS
    relative under a weighted sum)."""
    inst = _instance(seed, idle, one_group)
    idx = list(range(len(inst.scenarios)))
    w = np.random.default_rng(seed).uniform(0.1, 1.0, len(idx))
    bad = 0
    for agg, weights in (("max", ()), ("weighted", tuple((w / w.sum()).tolist()))):
        partials = declared_partials(inst)
        memo: dict = {}
        per_block: dict = {}
        with planted():
            layouts.partial_bounds_s(inst, partials, idx, agg, weights, memo, per_block)
        assert ("stage rows",) not in memo  # no block's terms kept
        for i, part in enumerate(partials):
            for _, blks in part.reps if part.dp is not None else ():
                for blk in blks:
                    alone = layouts.stage_bound_rows(inst, [blk], idx, agg, weights, {})[0]
                    got = per_block.get(layouts.representative_key(i, blk), np.inf)
                    close = agg != "max" and np.isfinite(alone) and abs(got - alone) <= ULPS * abs(alone)
                    bad += int(not (got == alone or close))
    return bad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("idle,one_group", [(False, False), (True, False), (True, True)])
def test_same_floats_as_each_block_alone(seed, idle, one_group):
    assert _mismatches(seed, idle, one_group) == 0


@contextmanager
def _miscounted_v():
    """Planted: each block's least over v read over its first v alone."""
    real = layouts._least_over_v

    def planted(least, rows, by_pp, factor, agg, weights):
        counts = np.array([len(it[2]) for it in rows], np.int64)
        firsts = [(*it[:2], it[2][:1], *it[3:]) for it in rows]
        return real(least[np.cumsum(counts) - counts], firsts, by_pp, factor, agg, weights)

    layouts._least_over_v = planted
    try:
        yield
    finally:
        layouts._least_over_v = real


def test_a_miscounted_v_is_caught():
    assert sum(_mismatches(seed, idle, True, _miscounted_v) for seed in SEEDS for idle in (False, True)) > 0
