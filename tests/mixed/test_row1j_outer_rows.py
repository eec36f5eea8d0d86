"""unpriced.floor_bounds_s keeps each outer's distinct rows by what they read (its fields, its
classes tuple, v, the slots, the zero-bubble mode), so that an outer met again takes them in one
step (issue 33, row 1). The reading it replaces looks every (scenario, class) up on its own; it
is what the function does where no two outers share a classes tuple, so each outer here is also
bounded with a copy of its classes (a new tuple of the same classes: equal, never the same
object). The two must be the same floats, outer by outer, on random instances whose outers share
classes tuples across placements, v, slots and modes (checked: a key that drops v, a slot
flag, the fields, tp, group_tp or the zero-bubble mode fails this test).

It also keeps each distinct row's split terms (A, S) in the caller's memo across calls: the
outers bounded in random chunks with one memo must be the same floats as each chunk bounded
with none (checked: a kept pair keyed without the row's v fails)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from randinst import group_tp_instance, slot_instance
from test_hand_off_floors import slow_links_instance
from test_zero_bubble_classes import zero_bubble_classes_instance

from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers

CASES = [(slow_links_instance, s) for s in (0, 1, 2)] + [(group_tp_instance, s) for s in (0, 1)] + \
        [(slot_instance, s) for s in (0, 1, 2)] + [(zero_bubble_classes_instance, s) for s in (2, 4, 7, 8)]


def _apart(outers: list) -> list:
    """Each outer with a classes tuple of its own (equal classes, a new object)."""
    return [dataclasses.replace(o, classes=tuple(list(o.classes))) for o in outers]


@pytest.mark.parametrize("make, seed", CASES)
def test_shared_outer_rows_are_the_rows_looked_up_one_by_one(make, seed):
    inst = make(seed)
    # and each outer with a tp per group also with one tp, each with tp 2 also with tp 1 (its
    # classes the same object): no declared outers share classes across tp, yet the key must
    # hold it
    outers = declared_outers(inst)
    outers += [dataclasses.replace(o, group_tp=()) for o in outers if o.group_tp]
    outers += [dataclasses.replace(o, tp=1, group_tp=(), sequence_parallel=False) for o in outers if o.tp == 2]
    ids = {id(o.classes) for o in outers}
    assert len(ids) < len(outers)  # outers share classes tuples: the shared reading is used
    idx, agg, weights = scenario_weights(inst, "nominal")
    shared = floor_bounds_s(inst, outers, idx, agg, weights)
    apart = floor_bounds_s(inst, _apart(outers), idx, agg, weights)
    assert np.isfinite(shared).any()
    np.testing.assert_array_equal(shared, apart)


@pytest.mark.parametrize("make, seed", CASES)
def test_split_terms_kept_across_calls_are_the_terms_computed_afresh(make, seed):
    inst = make(seed)
    outers = declared_outers(inst)
    idx, agg, weights = scenario_weights(inst, "nominal")
    rng = random.Random(seed)
    memo: dict = {}
    for _ in range(6):
        chunk = rng.sample(outers, rng.randint(1, len(outers)))
        kept = floor_bounds_s(inst, chunk, idx, agg, weights, memo=memo)
        np.testing.assert_array_equal(kept, floor_bounds_s(inst, chunk, idx, agg, weights))
    assert memo[("split terms",)]
