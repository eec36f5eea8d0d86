"""Lower bounds of solver/bounds/one_class.py are valid: on every configuration of seeded random small
instances, neither bound exceeds the configuration's optimum found by brute force over every
split and recompute count (solver/exhaustive.py's enumeration), and the tight bound is never
below the memory-free one. Infinite tight bounds only where no split fits."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from oracles.space import one_group_plans_total
from paraplan.cost.coefficients import build
from agreement_support import brute_optimum
from randinst import random_instance
from paraplan.solver.bounds import one_class
from paraplan.solver.space import one_group_outers as outer_configs


N_SEEDS = 40


@pytest.fixture(scope="module")
def seeds() -> list[int]:
    """The first N_SEEDS seeds from 2000 whose space holds at most 20,000 plans, the search
    stopped at the last (2039; the 360 seeds after it cost ~0.5 s of CPU), searched once per
    test process that runs a test reading them, not at every worker's collection (issue 32)."""
    out = list(islice((s for s in range(2000, 2400)
                       if one_group_plans_total(random_instance(s, variant=True)) <= 20_000), N_SEEDS))
    assert len(out) == N_SEEDS, out
    return out


@pytest.mark.parametrize("case", range(N_SEEDS))
def test_bounds_never_exceed_the_brute_force_optimum(seeds, case):
    inst = random_instance(seeds[case], variant=True)
    allow = inst.search.full_recompute
    for o in outer_configs(inst):
        c = build(inst, o, reserve_bytes=inst.search.memory_reserve_bytes)
        opt = brute_optimum(c, allow)
        tight = one_class.tight_lower_bound_s(c, allow)
        assert tight >= one_class.lower_bound_s(c)
        if opt is None:
            continue
        assert one_class.lower_bound_s(c) <= opt * (1 + 1e-12)
        assert tight <= opt * (1 + 1e-12), (o, tight, opt)


def test_tight_bound_is_tighter_where_memory_binds(seeds):
    """Over the instances above, the tight bound closes most of the memory-free bound's gap
    where recompute is forced (measured: it is the optimum itself on most configurations)."""
    gaps_old, gaps_new = [], []
    for seed in seeds[:20]:
        inst = random_instance(seed, variant=True)
        allow = inst.search.full_recompute
        for o in outer_configs(inst):
            c = build(inst, o, reserve_bytes=inst.search.memory_reserve_bytes)
            opt = brute_optimum(c, allow)
            if opt:
                gaps_old.append(1 - one_class.lower_bound_s(c) / opt)
                gaps_new.append(1 - one_class.tight_lower_bound_s(c, allow) / opt)
    assert len(gaps_new) >= 50
    assert np.mean(gaps_new) < 0.5 * np.mean(gaps_old)
