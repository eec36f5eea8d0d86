"""The bound before pricing that reads memory (unpriced_memory.memory_floor_bounds_s) keeps
each class row's tight terms (tau*, sigma*, delta*, fits; one_class.tight_class_terms) across
its calls, by the identity of the row's arrays (unpriced_memory._row_terms), and
one_class.tight_class_terms_of_blocks lists the levels of blocks of several depths in one
padded listing (one_class._padded_levels). Both rely on each row's terms being its own floats
whatever rows it is read with:

- random blocks of 1-12 stages (the caps binding, recompute forced, or no split fitting): each
  row's terms read in its blocks together equal the row read alone, float for float; a padded
  listing whose padded stages keep a cap (a planted fault: they list levels of their own)
  changes some row;
- on random mixed clusters, the configurations' bounds read in chunks with the memos shared (as
  the search reads them), then read again, equal each configuration's bound read alone with
  fresh memos; the second pass reads no terms (every row kept: not vacuous); a store that serves
  a row the terms of another row of its block (a planted fault: a key without the row) changes
  some bound."""

from __future__ import annotations

import random

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance
from test_row1k_class_terms_blocks import _cases as _block_cases

from paraplan.solver.bounds import one_class, unpriced_memory
from paraplan.solver.bounds.one_class import tight_class_terms_of_blocks
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers


def _rows_differ(seed: int) -> int:
    """How many rows of seed's random blocks read together differ from the row read alone."""
    differ = 0
    for blocks, layers, v, full in _block_cases(seed):
        for block, got in zip(blocks, tight_class_terms_of_blocks(blocks, layers, v, full)):
            for r in range(len(block["stage_time_s"])):
                alone = tight_class_terms_of_blocks([{f: x[r:r + 1] for f, x in block.items()}], layers, v, full)[0]
                differ += not all(np.array_equal(x[r:r + 1], y, equal_nan=True) for x, y in zip(got, alone))
    return differ


def test_each_rows_terms_are_its_own_floats():
    assert all(_rows_differ(seed) == 0 for seed in range(6))


def test_a_padded_listing_that_lists_the_padded_stages_is_caught(monkeypatch):
    def listed_padding(L, v, live, safe, base, slope, knee, slope2):  # the fault: padded stages keep a cap
        return one_class._levels(L, v, np.where(live, safe, L), base, slope, knee, slope2, live)

    monkeypatch.setattr(one_class, "_padded_levels", listed_padding)
    assert sum(_rows_differ(seed) for seed in range(3)) > 0


def _instances():
    for seed in (1, 2, 3):  # (seed 0 fits no configuration)
        yield f"random {seed}", random_cluster_instance(seed)
    yield "group tp 19", group_tp_instance(19)


def _read_in_chunks(inst, outers, idx, agg, weights) -> tuple[np.ndarray, np.ndarray, int]:
    """(the bounds read in chunks of 16, memos shared; the same read again; the class rows the
    second pass read with tight_class_terms_of_blocks)."""
    memo, layer_memo = {}, {}

    def chunked():
        return np.concatenate([unpriced_memory.memory_floor_bounds_s(inst, outers[j:j + 16], idx, agg, weights, memo,
                                                                     layer_memo) for j in range(0, len(outers), 16)])
    first = chunked()
    read = [0]
    plain = unpriced_memory.tight_class_terms_of_blocks

    def counted(blocks, *args):
        read[0] += sum(len(c["stage_time_s"]) for c in blocks)
        return plain(blocks, *args)
    unpriced_memory.tight_class_terms_of_blocks = counted
    try:
        second = chunked()
    finally:
        unpriced_memory.tight_class_terms_of_blocks = plain
    return first, second, read[0]


def _alone(inst, outers, idx, agg, weights) -> np.ndarray:
    return np.array([unpriced_memory.memory_floor_bounds_s(inst, [o], idx, agg, weights, {}, {})[0] for o in outers])


@pytest.mark.parametrize("name,inst", list(_instances()), ids=lambda x: x if isinstance(x, str) else "")
def test_kept_class_terms_give_the_bounds_read_alone(name, inst):
    outers = [o for o in declared_outers(inst) if unpriced_memory.applies(inst, o)]
    random.Random(5).shuffle(outers)
    idx, agg, weights = scenario_weights(inst, "robust")
    first, second, read_again = _read_in_chunks(inst, outers, idx, agg, weights)
    alone = _alone(inst, outers, idx, agg, weights)
    assert np.array_equal(first, alone) and np.array_equal(second, alone)
    assert read_again == 0  # every row's terms kept from the first pass
    assert (np.isfinite(alone) & (alone > 0)).any()


def test_a_store_without_the_row_in_its_key_is_caught(monkeypatch):
    def by_block(store, arrays, key):  # the fault: a row served the terms first kept for its block
        return next((row for k, (_, row) in store.items() if k[1:] == key), None)

    inst = random_cluster_instance(1)
    outers = [o for o in declared_outers(inst) if unpriced_memory.applies(inst, o)]
    random.Random(5).shuffle(outers)
    idx, agg, weights = scenario_weights(inst, "robust")
    alone = _alone(inst, outers, idx, agg, weights)
    monkeypatch.setattr(unpriced_memory, "_kept_row", by_block)
    first, second, _ = _read_in_chunks(inst, outers, idx, agg, weights)
    assert not np.array_equal(second, alone)
