"""The bounds before pricing keep what they computed by what it reads (issue 33), and a kept
value must be the one a fresh computation gives, float for float:

- a stage-wise block's sync-free terms, kept by layouts.stage_bound_rows when the partial layouts
  are set up, and read again with their syncs when the search pops them (_Partials.read_syncs):
  every bound and every per-(ZeRO stage, v) bound equals that of a call on an empty memo;
- unpriced_memory's floor coefficients and stage memory, kept per class by what they read (not
  the embedding / loss slots, which the configurations of a block vary): every configuration's
  bound, read in chunks that share the memo, equals its bound read alone on empty memos.

The fresh computations are the independent derivation here: a key that leaves out something a
term reads hands one configuration another's numbers, and the two disagree.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_many_types_agreement import many_types_instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.bounds.unpriced_memory import memory_floor_bounds_s
from paraplan.solver.search import scenario_weights
from paraplan.solver.space import declared_outers, declared_partials

# many_types_instance seeds as tests/mixed/test_layout_syncs.py's (several ZeRO stages, pipelines
# through three groups or more) and the bundled two-type toy file; for the memory bound, a file
# of three scenarios too
SEEDS = (1, 2, 11)


def _instances():
    return [many_types_instance(s) for s in SEEDS] + [load_instance("instances/mixed/tiny-2types.yaml")]


@pytest.mark.parametrize("inst", _instances(), ids=lambda i: i.name)
def test_stage_rows_kept_from_set_up_give_the_fresh_bounds(inst):
    partials = declared_partials(inst)
    memo: dict = {}
    set_up, synced = {}, {}
    first = partial_bounds_s(inst, partials, [0], "max", (), memo, set_up)
    again = partial_bounds_s(inst, partials, [0], "max", (), memo, synced, {})  # the set-up's terms kept
    fresh_set_up, fresh_synced = {}, {}
    assert np.array_equal(first, partial_bounds_s(inst, partials, [0], "max", (), {}, fresh_set_up))
    assert np.array_equal(again, partial_bounds_s(inst, partials, [0], "max", (), {}, fresh_synced, {}))
    assert set_up == fresh_set_up and synced == fresh_synced
    assert any(len(k) > 4 for k in synced)  # some syncs read (per ZeRO stage and v)


@pytest.mark.parametrize("inst", _instances() + [load_instance("instances/mixed/llama3-8b-dynamic.yaml")],
                         ids=lambda i: i.name)
def test_memory_bound_kept_per_class_gives_each_configurations_own(inst):
    # (the bundled two-type toy file counts the embedding / loss as layer slots in some
    # configurations: there the slot variants share one class's kept coefficients)
    outers = list(declared_outers(inst))[:400]
    objective = "expected" if len(inst.scenarios) > 1 else "nominal"
    idx, agg, weights = scenario_weights(inst, objective)
    memo, layer_memo = {}, {}
    shared = np.concatenate([memory_floor_bounds_s(inst, outers[a:a + 64], idx, agg, weights, memo, layer_memo)
                             for a in range(0, len(outers), 64)])
    alone = np.array([memory_floor_bounds_s(inst, [o], idx, agg, weights, {}, {})[0] for o in outers])
    # equal but for float rounding: the lone classes' joint reading (fill_drain.pipeline_sync_bounds_s)
    # pads each row's stage kinds to the longest row of its batch, and numpy's pairwise sums
    # associate the padded zeros differently (1 ulp on one configuration of the dynamic file,
    # 19.47537945033272 in a batch against ...724 alone); a kept entry of another
    # configuration would differ by far more than 1e-12
    assert np.array_equal(np.isinf(shared), np.isinf(alone))
    assert np.allclose(shared, alone, rtol=1e-12, atol=0.0)
    assert np.isfinite(alone).any() and (alone > 0).any()  # bounds read, not all refused
    if inst.name == "tiny-2types":
        assert any(o.embedding_in_split or o.loss_in_split for o in outers)
