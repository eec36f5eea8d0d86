"""The bound of each recompute-pattern value's optimum (solver/bounds/pattern_values.py), read
before CP-SAT or the MILP solves that value: at most the value's optimum, found here by brute
force (every split of every class with the value's recompute counts, memory checked by the
problem's own fits, every micro-batch vector), on random mixed instances under Megatron-LM's
one --recompute-num-layers; and the search that skips the values above its cutoff returns the
exhaustive optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from agreement_support import random_cluster_optimum
from randinst import random_cluster_instance

from paraplan.formulations.recompute_choice import distinct_values
from paraplan.solver.bounds import pattern_values
from paraplan.solver.exhaustive import compositions
from paraplan.solver.search import problems_for, search
from paraplan.solver.space import declared_outers, micro_batch_vectors


def _value_optimum(o, p, i: int) -> float:
    """min over splits and micro-batch vectors of the objective with value i's counts."""
    mvecs = micro_batch_vectors(o.classes, p.total_micro_batches, False, o.virtual_stages, p.paired)
    tables = [p.recompute_counts(k, i) for k in range(p.classes)]
    splits = [compositions(p.layers, p.pp(k), p.virtual_stages) for k in range(p.classes)]
    best = np.inf
    for n in itertools.product(*splits):
        r = []
        for (counts, grid), nk in zip(tables, n):
            j = [int(np.flatnonzero(grid[s] == x)[0]) for s, x in enumerate(nk)]
            r.append(counts[np.arange(len(nk)), j].astype(float))
        n = [np.asarray(x, float) for x in n]
        if not p.fits(n, r):
            continue
        for m in mvecs:
            best = min(best, p.evaluate(tuple(int(x) for x in m), n, r)[0])
    return best


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_values_bound_is_at_most_its_optimum(seed):
    inst = random_cluster_instance(seed)
    outers = declared_outers(inst)
    checked = above_best = 0
    for o, p in zip(outers, problems_for(inst, outers, "nominal")):
        if p is None or not pattern_values.applies(p):
            continue
        values = distinct_values(p)
        bounds = pattern_values.value_bounds_s(p, values)
        optima = {i: _value_optimum(o, p, i) for i in values}
        for i in values:
            assert bounds[i] <= optima[i] * (1 + 1e-12), (seed, o, i, bounds[i], optima[i])
        checked += len(values)
        # what the search gains: values proved above the configuration's own optimum
        above_best += sum(bounds[i] > min(optima.values()) for i in values)
    assert checked and above_best, (checked, above_best)


@pytest.mark.parametrize("seed", [1, 3])
def test_the_search_skipping_values_finds_the_exhaustive_optimum(seed):
    inst = random_cluster_instance(seed)
    ex = random_cluster_optimum(seed)
    res = search(inst, backend="cpsat", time_limit_s=60)
    assert res.status == "optimal"
    assert res.objective_s == pytest.approx(ex.objective_s, rel=1e-6)
