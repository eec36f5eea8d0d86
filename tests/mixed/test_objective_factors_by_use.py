"""cost/trust.objective_factors keeps each configuration's quantile factor by what
objective_factor_of reads of it (the groups its stages use, whether its deepest class is
pipelined, its ZeRO stage, min(cp, 2)) for the last instance read. The reference is
objective_factor_of read on every configuration alone: the two must be the same floats.

So that the check can fail, the space must hold configurations that share their groups and
differ in what else the key holds and in their factor: a key that dropped ZeRO or the depth
would then hand one of them the other's factor (asserted below, on growth_instance(3), a
three-GPU-type Llama-3 70B cluster whose 12,788 configurations use 1 to 3 of the types)."""

from __future__ import annotations

from collections import defaultdict

from paraplan.cost.trust import objective_factor_of, objective_factors
from paraplan.solver.bench.growth import growth_instance
from paraplan.solver.space import declared_outers


def test_factors_by_use_equal_each_read_alone():
    inst = growth_instance(3)
    outers = declared_outers(inst)
    got = objective_factors(inst, outers)
    want = [objective_factor_of(inst, o) for o in outers]
    assert list(got) == want
    # the same again on a second call (the kept factors of the last instance)
    assert list(objective_factors(inst, outers[::-1])) == want[::-1]
    by_groups = defaultdict(set)
    for o, f in zip(outers, want):
        by_groups[frozenset(g for c in o.classes for g in c.stage_groups)].add(f)
    assert any(len(fs) > 1 for fs in by_groups.values()), "no configurations sharing groups differ in factor"
