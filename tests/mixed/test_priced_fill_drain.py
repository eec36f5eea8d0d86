"""Two uses of the bound that reads a lone pipeline's slowest stage and its stages' sum together
(solver/bounds/fill_drain.py; issue 33's 4 types x 16 nodes and 8 types x 8 nodes rows):
- after pricing, fill_drain.priced_bounds_s of a lone class's coefficients is at most the
  optimum the exact split DP finds for that configuration (its every split, recompute and
  memory read: formulations/split_dp.py), and above the tight bound (one_class, which reads the
  two terms apart) on some of them, so it prunes what the tight bound leaves to the DP;
- before pricing, each stage-wise representative's own bound (layouts.partial_bounds_s's
  per_block, which search._list_layouts raises the listed configurations' keys to) is at most
  the least optimum of every block it stands for (representative_key: the other orders of its
  stages before the last), each configuration priced and solved by the split DP.
On random clusters of three and four toy GPU types (tests/mixed generators), where memory binds.
The search keyed and pruned by both returns exhaustive search's optimum on those clusters:
test_many_types_agreement.py, test_partial_layouts.py, test_stage_families.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_many_types_agreement import many_types_instance

from paraplan.solver import search as search_mod
from paraplan.solver.bounds import one_class
from paraplan.solver.bounds.fill_drain import priced_bounds_s
from paraplan.solver.bounds.layouts import partial_bounds_s, representative_key
from paraplan.solver.space import declared_partials

# many_types_instance seeds whose stage-wise layouts the priced bound lifts above the tight
# bound somewhere (checked below: not vacuous)
SEEDS = (3, 11)


def _lone_problems(inst, outers):
    """(outer, priced problem) of every configuration of one class that fits memory."""
    return [(o, p) for o, p in zip(outers, search_mod.problems_for(inst, outers, "nominal"))
            if p is not None and p.classes == 1]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_priced_bound_is_at_most_each_lone_configurations_optimum(seed):
    inst = many_types_instance(seed)
    lifted = checked = 0
    for part in declared_partials(inst):
        if part.dp is None:
            continue
        outers = [o for blk in part.blocks() for o in blk.outers()]
        for o, p in _lone_problems(inst, outers):
            c = p.coeffs[0][0]
            lb = float(priced_bounds_s([c], p.allow_full_recompute)[0])
            sr = search_mod._solve_lone_dp(p, 60.0, None, None)
            if sr.objective_s is None:  # no split fits: the bound may say so (inf) or not
                continue
            checked += 1
            assert lb <= sr.objective_s * (1 + 1e-12), (o, lb, sr.objective_s)
            lifted += lb > one_class.tight_lower_bound_s(c, p.allow_full_recompute) * (1 + 1e-9)
    assert checked and lifted


@pytest.mark.parametrize("seed", SEEDS)
def test_a_representatives_bound_is_at_most_each_block_it_stands_for(seed):
    inst = many_types_instance(seed)
    partials = declared_partials(inst)
    per_block: dict = {}
    partial_bounds_s(inst, partials, [0], "max", (), per_block=per_block)
    checked = 0
    for i, part in enumerate(partials):
        if part.dp is None:
            continue
        for blk in part.blocks():
            lb = per_block[representative_key(i, blk)]  # every block has its representative
            optima = [search_mod._solve_lone_dp(p, 60.0, None, None).objective_s
                      for _, p in _lone_problems(inst, blk.outers())]
            optima = [x for x in optima if x is not None]
            if optima:
                checked += 1
                assert lb <= min(optima) * (1 + 1e-12), (part.used, part.tpg, blk.classes)
    assert checked
