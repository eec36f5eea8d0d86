"""solver/option_families.py against the full listing (space.declared_partials) on random
clusters of three or four toy GPU types with classes_per_group 2, idle_gpus and
mixed_families on (test_many_types_agreement.many_types_instance): expanded with no cutoff,
an option family sets up each class layout of the listing once, with its place in it (the
rank orders the layouts as the listing does), except layouts holding a replica class too
shallow for its group's memory, none of whose configurations fits (build's own memory). The
family's bound prices the gradient sync and forced recompute that solver/bounds/layouts.py's
does not, so it is checked against each layout's priced optimum instead
(test_option_bound_admissible.py)."""

from __future__ import annotations

import pytest
from test_many_types_agreement import many_types_instance

from paraplan.solver import search as search_mod
from paraplan.solver.option_families import OptionFamily
from paraplan.solver.space import declared_partials

SEEDS = (1, 2, 13)


def _key(p) -> tuple:
    return p.family, p.used, tuple(sorted(p.tpg.items())), p.cp, p.reps[0][1][0].classes if p.reps[0][1] else None


@pytest.mark.parametrize("seed", SEEDS)
def test_an_option_family_sets_up_the_listings_layouts_that_fit_once_each_in_order(seed):
    inst = many_types_instance(seed)
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    mine = [f for f, fam in enumerate(lazy.families) if isinstance(fam, OptionFamily)]
    assert mine
    got = []
    for f in mine:
        start = len(lazy.partials)
        nodes = lazy.open_family(f, lambda lb: True)
        while nodes:
            nodes = [n for n in lazy.set_up(nodes) if isinstance(n, search_mod._Choice)]
        got += lazy.partials[start:]
    full = [p for p in declared_partials(inst) if p.family != "stage"]
    keys = [_key(p) for p in got]
    assert len(keys) == len(set(keys))  # each layout once
    listed = {_key(p): p for p in full}
    assert set(keys) <= set(listed)
    # in the listing's order: the ranks of the layouts set up sort as their places in it
    place = {k: i for i, k in enumerate(_key(p) for p in full)}
    by_rank = sorted(got, key=lambda p: p.rank)
    assert [place[_key(p)] for p in by_rank] == sorted(place[_key(p)] for p in got)
    left = [p for k, p in listed.items() if k not in set(keys)]
    assert len(got) > 0
    for p in left:  # dropped by memory only: no configuration of theirs fits
        outers = [o for blk in p.blocks() for o in blk.outers()]
        assert all(q is None for q in search_mod.problems_for(inst, outers, "nominal", {})), _key(p)
