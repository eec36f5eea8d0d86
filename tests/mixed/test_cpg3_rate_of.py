"""OptionBounds._rate_of (solver/option_families.py, issue 33): one profile's (D, B) read at a
layout's ZeRO ranks, its classes alone, is the same arrays as that profile's entry of _rates
read whole at those ranks (every profile of the group), in any order of the two readings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from randinst import random_instance
from test_many_types_agreement import many_types_instance

from paraplan.solver import search as search_mod
from paraplan.solver.option_families import OptionFamily


def _one_group(seed: int):
    inst = random_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True))


def _bounds(inst):
    return search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)


@pytest.mark.parametrize("make,seed", [(_one_group, 1), (_one_group, 4), (_one_group, 7), (many_types_instance, 1)])
def test_one_profile_at_ranks_is_its_entry_of_the_whole_reading(make, seed):
    inst = make(seed)
    whole, alone = _bounds(inst), _bounds(inst)
    compared = 0
    for fam in (f for f in whole.families if isinstance(f, OptionFamily)):
        for root_w, root_a in zip(whole.ob._roots(fam), alone.ob._roots(fam)):
            if root_w.raised:
                continue
            for j, g in enumerate(root_w.order):
                ways_w, ways_a = root_w.ways[j], root_a.ways[j]
                for ranks in (2, 4, 8):
                    want = whole.ob._rates(fam, g, ways_w, root_w.levels[j], root_w.zeros, ranks=ranks)
                    for i in reversed(range(len(root_a.levels[j]))):
                        got = alone.ob._rate_of(fam, g, ways_a, root_a.levels[j], root_a.zeros, ranks, i)
                        for a, b in zip(got, want[i]):
                            assert np.array_equal(a, b)
                        compared += 1
                    # and once the whole reading is in hand, from it
                    again = whole.ob._rate_of(fam, g, ways_w, root_w.levels[j], root_w.zeros, ranks, 0)
                    assert again is want[0]
    assert compared > 0
