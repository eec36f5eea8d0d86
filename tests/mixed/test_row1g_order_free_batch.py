"""The bound of every stage order (solver/bounds/order_free.py) read for many blocks in one call
(OrderFree.read, search._Search._read_order_free: a dived tp choice's blocks through 7 groups,
8 x 8 row 278 calls -> 9) against each configuration's B read alone: on small random clusters
with slow links (test_hand_off_floors.slow_links_instance), B of configurations drawn across
many order classes (their first and last groups, stage counts and modes differ) read in one
call equals B read one configuration at a time, to a few ulps (a row's stage kinds may be
padded with absent ones beside longer pipelines, fill_drain._as_kinds, whose zeros can move a
sum's rounding; ORDER_FREE_SAFETY, 1e-12, covers far more), and exactly on most."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_hand_off_floors import slow_links_instance

from paraplan.solver.bounds import order_free
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers

# configurations drawn per seed
DRAWN = 80


@pytest.mark.parametrize("seed", (0, 1, 2, 3))
def test_many_blocks_in_one_call_are_each_read_alone(seed):
    inst = slow_links_instance(seed)
    idx, agg, weights = scenario_weights(inst, "nominal")
    outers = [o for o in declared_outers(inst) if order_free.reads(inst, o)]
    outers = random.Random(seed).sample(outers, min(DRAWN, len(outers)))
    assert len({(o.classes[0].stage_groups, o.virtual_stages) for o in outers}) > 1  # mixed shapes
    together = order_free.order_free_bounds_s(inst, outers, idx, agg, weights, {}, {})
    alone = np.array([order_free.order_free_bounds_s(inst, [o], idx, agg, weights, {}, {})[0] for o in outers])
    assert (alone > 0).all()
    assert np.allclose(together, alone, rtol=1e-14, atol=0)
    assert (together == alone).mean() > 0.5
