"""solver/option_families.py's bound, with the gradient sync (solver/bounds/option_sync.py) and
the recompute memory forces (solver/bounds/option_recompute.py), against every layout's priced
optimum, by enumeration on small random clusters of three or four toy GPU types (0.7-3 GiB, so
memory binds; group links of 5-25 GB/s, so the sync is not nothing) with the three layout
options on: every option family is expanded with no cutoff, and each class layout it sets up is
priced whole (every outer configuration's split problem solved by CP-SAT, cost/ pricing the
coefficients): the bound of the node that set it up, and its family's, must not exceed that
optimum. The reference is the priced optimum itself, not another bound, so a term the floors
over-count (a sync hidden that the bound took as exposed, a stage's memory read too tight)
fails here on the layout where it happens. The test also asserts that the new terms are read:
on some layout the node's bound exceeds the floors' bound without them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from option_layouts import cpsat_optimum_s, option_family_layouts
from test_many_types_agreement import many_types_instance

from paraplan.solver import search as search_mod

# seeds whose spaces the test prices whole in under a minute each on a loaded core
CASES = ((1, {}), (2, {}), (13, {}),
         (2, {"zero": (0, 1, 2, 3), "full_recompute": True}),
         (13, {"zero": (0, 1), "full_recompute": True}),
         # interleaving with the embedding / loss as layer slots: the end stages' relief
         (1, {"virtual_stages": (1, 2), "zero": (0, 1), "full_recompute": True}),
         # and at v = 2, 3 and 4 (whole chunks at interleaving's in-flight counts; 4 and 6 layers,
         # v = 3 and 4 only with a slot mode of v)
         (2, {"virtual_stages": (1, 2, 3, 4), "zero": (0, 1), "full_recompute": True}),
         (13, {"virtual_stages": (1, 2, 3, 4), "full_recompute": True}))


def optimum_s(inst, part) -> float:
    """The layout's priced optimum: the least objective over its outer configurations."""
    outers = [o for blk in part.blocks() for o in blk.outers()]
    best = math.inf
    for p in search_mod.problems_for(inst, outers, "nominal", {}):
        if p is None:
            continue
        got = cpsat_optimum_s(p)  # once per problem per test process (option_layouts)
        if got is not None:
            best = min(best, got)
    return best


# each case expands every option family and prices every layout it sets up: 30-60 s of CPU
@pytest.mark.slow
@pytest.mark.parametrize("seed,space", CASES)
def test_the_option_bound_is_at_most_every_layouts_priced_optimum(seed, space):
    inst = many_types_instance(seed)
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, **space))
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    ob = lazy.ob
    checked = raised = 0
    for f, node, part in option_family_layouts(lazy):
        best = optimum_s(inst, part)
        if not math.isfinite(best):
            continue
        checked += 1
        # the search's keys are the bounds less FAMILY_MARGIN: compare the bound itself
        assert node.bound <= best * (1 + 1e-9), (lazy.families[f], node.bound, best)
        assert lazy.family_bounds[f] <= best * (1 + 1e-9), (lazy.families[f], best)
        # the same node's bound with neither new term (no sync, the plain floors)
        plain = ob._z(_plain_d(ob, node), node.state[1], node.state[2], node.state[4]) * node.factor
        raised += bool(node.bound > float(np.min(plain)) * (1 + 1e-9))
    assert checked > 0
    assert raised > 0  # the sync or recompute terms raise some layout's bound


def _plain_d(ob, node) -> np.ndarray:
    """D of a full node on the plain floors f_g: its base's plus sum over groups of slots / f_g
    (the module docstring's D before option_recompute raised the floors)."""
    base = next(r for r in ob._roots(node.fam) if r.stage == node.stage and r.ways is node.ways)
    out = base.state[0]
    for j, i in enumerate(node.picked):
        out = out + node.levels[j][i].slots / node.f[j]
    return out
