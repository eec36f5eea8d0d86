"""The option families' bound with per-operator partitions (solver/option_families.py reading
solver/bounds/option_recompute.py and option_sync.py at every layer plan's terms,
solver/bounds/plan_range.py) against every layout's priced optimum over its layer-plan
combinations, on a small cluster where plans beyond Megatron's exist (tiny-2types at tp 4 on
both groups, the three layout options on: test_partitions_lazy.tiny2).

Every option family is expanded with no cutoff. Where a node's bound is at most the least bound
before pricing of its layout's configurations (unpriced.floor_bounds_s with layer_plans, which
test_partitions_lazy.py checks against exhaustive search) the comparison stops there; where the
memory and sync terms raise it above that, the reference is the layout's priced optimum itself,
over every configuration and each layer-plan combination that no other dominates (each
dominated plan is no faster than one kept, solver/partition_plans.py), all-Megatron's included,
each priced by cost/. A combination whose priced bound (class_partitions.OuterChoices.expand_all
against the node's bound: one_class.tight_class_terms on its own coefficients, nothing of the
option families' terms) is above the node's bound has an optimum above it; every other one's
split problem is solved by CP-SAT, and its optimum must not be below the node's bound (32,489
combinations on one configuration of 2 layers: solving each is too slow for the suite). The
test also asserts that the new terms are read: some node's bound exceeds its layout's least
bound before pricing."""

from __future__ import annotations

import math

import pytest
from option_layouts import layer_plan_problems, option_layout_bounds
from test_partitions_lazy import OPTIONS, tiny2

from paraplan.solver import search as search_mod


def layout_optimum_s(inst, outers, upper_s: float) -> float:
    """The least priced optimum over every configuration of `outers` and each of its layer-plan
    combinations whose priced bound is at most `upper_s` (module docstring; inf: none)."""
    best = math.inf
    for o in outers:
        for p in layer_plan_problems(inst, o, upper_s):
            r = search_mod._solve_inner(p, "cpsat", 30.0, None)
            if r.objective_s is not None:
                best = min(best, r.objective_s)
    return best


# tiny-2types at tp 4 with a Llama-3 70B-wide layer (16 layers, batch 16): memory binds and the
# 200 Gbit/s group link makes the sync count; of its 30 layouts, 27 are raised above their
# floors (measured)
WIDE = dict(hidden=8192, heads=64, ffn=32768, seq_len=4096)


@pytest.mark.slow
def test_the_option_bound_with_layer_plans_is_at_most_every_layouts_priced_optimum():
    inst = tiny2((8, 8), (4,), 16, 16, model=WIDE, **OPTIONS)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    checked = raised = 0
    for f, node, outers, least, top in option_layout_bounds(inst, lazy):
        if top <= least * (1 + 1e-9):
            continue
        raised += 1
        best = layout_optimum_s(inst, outers, top)
        assert top <= best * (1 + 1e-9), (node.fam, node.bound, lazy.family_bounds[f], best)
        checked += 1
    assert raised > 0 and checked > 0
