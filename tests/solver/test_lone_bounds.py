"""The batched lone-class bounds (solver/bounds/one_class.tight_lower_bounds_s and
coupled_bounds_above, which solver/search._settle_alone reads for a whole priced chunk) give
every configuration the numbers one_class.tight_lower_bound_s and coupled_bound_above give it
alone, bit for bit: the search's pruning decisions, and with them its counts and its plan, are
those of one configuration at a time. Checked on random configurations of mixed shapes
(stacked into one call: several stage counts, chunk sizes, memory caps that bind or not, some
that fit no split, some with the embedding / loss slots) and on the priced configurations of
the two-GPU-type growth instance."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from paraplan.solver.bench.growth import growth_instance
from paraplan.solver.bounds import one_class
from paraplan.solver.search import problems_for
from paraplan.solver.space import declared_outers
from tests.solver.test_coupled_bound import random_config


def _check(cs, allow: bool, cutoffs: np.ndarray) -> None:
    batched = one_class.tight_lower_bounds_s(cs, allow)
    alone = np.array([one_class.tight_lower_bound_s(c, allow) for c in cs])
    assert np.array_equal(batched, alone)  # inf where no split fits, on both sides
    above = one_class.coupled_bounds_above(cs, allow, cutoffs)
    assert above.tolist() == [one_class.coupled_bound_above(c, allow, float(x)) for c, x in zip(cs, cutoffs)]


def test_batched_equals_one_at_a_time_on_random_configurations():
    for allow in (True, False):
        cs = [random_config(seed)[0] for seed in range(80)]
        # every fifth with a fifth of its memory: most of those fit no split
        cs = [replace(c, capacity_bytes=c.capacity_bytes * (0.2 if i % 5 == 0 else 1.0)) for i, c in enumerate(cs)]
        # every third counts the embedding and the loss as layer slots (the slot relaxation)
        cs = [replace(c, outer=replace(c.outer, embedding_in_split=True, loss_in_split=True),
                      in_flight=np.ones(c.pp)) if i % 3 == 0 else c for i, c in enumerate(cs)]
        tight = np.array([one_class.tight_lower_bound_s(c, allow) for c in cs])
        assert np.isinf(tight).any() and np.isfinite(tight).any()  # both kinds are stacked
        # cutoffs on either side of each bound, so that coupled_bounds_above answers both ways
        rng = np.random.default_rng(0)
        cuts = np.where(np.isfinite(tight), tight, 1.0) * rng.uniform(0.9, 1.6, len(cs))
        _check(cs, allow, cuts)
        assert len(set(one_class.coupled_bounds_above(cs, allow, cuts).tolist())) == 2


def test_batched_equals_one_at_a_time_on_priced_growth_configurations():
    inst = growth_instance(2)
    outers = declared_outers(inst)
    lone = [o for o in outers if len(o.classes) == 1][:300]
    cs = [p.coeffs[0][0] for p in problems_for(inst, lone, "nominal") if p is not None]
    assert len(cs) > 50
    tight = np.array([one_class.tight_lower_bound_s(c, inst.search.full_recompute) for c in cs])
    _check(cs, inst.search.full_recompute, np.where(np.isfinite(tight), tight, 1.0) * 1.02)
