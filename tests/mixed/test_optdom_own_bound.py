"""Two readings of solver/option_families.py's bound of one layout (issue 33), against every
layout's priced optimum (each outer configuration's split problem solved by CP-SAT), on small
random one-group instances with classes_per_group 2 (and idle GPUs on some), every option family
expanded with no cutoff:

- OptionBounds._own_bound: each way of a leaf's profile at its own classes' terms, not the
  profile's most D and least B (the profile (1, 2) + (3, 2) beside (1, 3) + (5, 1) on 8 stage
  slots: both 8 slots, a bubble of 4, two classes, the shallowest one stage);
- OptionBounds._alike: a layout of one-stage classes on the one group read at X ceil(M / X)
  micro-batches, M the batch's and X its replicas (each batch drawn so that X need not divide M).

Each must be at most the optimum of every layout it bounds, and each must bite somewhere (raise
the leaf's bound, or the bound at M): the planted faults below (one more micro-batch a replica
for the alike layouts; each way's rate halved) must break the first check, so the check can fail.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest
from option_layouts import cpsat_optimum_s
from randinst import random_instance

from paraplan.solver import option_families as of
from paraplan.solver import search as search_mod
from paraplan.solver.option_families import OptionFamily
from paraplan.solver.space import Partial, partial_rank

# The planted-fault tests below check the same layouts against the same CP-SAT optima as the
# first test (option_layouts.cpsat_optimum_s: once per problem per test process), about 1 s of
# CPU each beside it and the first test's whole cost (61 s of CPU at load 10, 238 problems on
# seed 0 alone, issue 32) each on a worker of its own. One xdist group: the three on one
# worker, collected first (tests/conftest.py), so a steal cannot part them and the run's longest
# test starts at the front, not in the middle of the order where it could end the run.
pytestmark = pytest.mark.xdist_group("optdom-own-bound-optima")


def _instance(seed: int):
    """A random one-group instance of 8 GPUs of 1.25 GiB or more with classes_per_group 2,
    pipelines of up to 8 stages, full recompute allowed, and a batch of 9 to 31 sequences."""
    rng = random.Random(7000 + seed)
    k = 37 * seed
    while True:
        k += 1
        inst = random_instance(k)
        if inst.cluster.num_gpus == 8 and inst.model.layers >= 5 and inst.cluster.groups[0].gpu.hbm_bytes > 2**30:
            break
    space = dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=rng.random() < 0.4,
                                full_recompute=True, virtual_stages=(1,), cp=(1,), micro_batch=(1, 2),
                                zero=(0, 1))
    job = dataclasses.replace(inst.job, global_batch=rng.choice([9, 10, 12, 13, 20, 22, 31]))
    return dataclasses.replace(inst, search=space, job=job)


def _optimum_s(inst, part) -> float:
    best = math.inf
    for p in search_mod.problems_for(inst, [o for blk in part.blocks() for o in blk.outers()], "nominal", {}):
        if p is not None:
            got = cpsat_optimum_s(p)
            if got is not None:
                best = min(best, got)
    return best


def _layouts(inst):
    """(leaf node, own bound, the bound at M, layout) of every way combination of every leaf
    of every option family, each family opened and every node expanded with no cutoff."""
    lazy = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    ob, lst = lazy.ob, lazy.lst
    for f, fam in enumerate(lazy.families):
        if not isinstance(fam, OptionFamily):
            continue
        todo = [x for x, _ in ob.open(fam, lambda lb: True)]
        while todo:
            x = todo.pop()
            node = ob.nodes[x]
            if node.depth < len(node.levels):
                kids, _ = ob.expand(lst, x, lambda lb: True)
                todo += [y for y, _ in kids]
                continue
            tpg = dict.fromkeys(fam.used, fam.tp)
            picked = [node.levels[j][i] for j, i in enumerate(node.picked)]
            for picks in itertools.product(*(p.members for p in picked)):
                own = ob._own_bound(node, picks) if node.read else node.bound
                at_m = _bound_at_m(ob, node, picks) if node.read else -math.inf
                for fields, shapes in ob._layouts_of(node, picks):
                    part = Partial(lst, fam.family, fam.used, tpg, fam.cp, None,
                                   [(1, lst.shape_blocks(fam.family, tpg, fam.cp, shapes))],
                                   partial_rank(*fam.at, *fields))
                    yield node, own, at_m, part


def _bound_at_m(ob, node, picks) -> float:
    """_own_bound with the layout's M read as M (no _alike)."""
    was = ob._alike
    try:
        ob._alike = lambda *a: 0
        ranks, live, _, sync, _ = node.read
        state = node.state
        here = ob._bound(node, state[0], state[7], state[1], state[2], state[4], sync, per_v=True)
        node2 = dataclasses.replace(node, read=(ranks, live, here, sync, 0))
        return ob._own_bound(node2, picks)
    finally:
        ob._alike = was


def _check(seeds) -> tuple[int, int, int, int]:
    """(layouts checked, own bounds above their leaf's, alike bounds above the bound at M,
    bounds above the layout's optimum)."""
    checked = own_up = alike_up = over = 0
    for seed in seeds:
        inst = _instance(seed)
        for node, own, at_m, part in _layouts(inst):
            best = _optimum_s(inst, part)
            if not math.isfinite(best):
                continue
            checked += 1
            own_up += own > node.bound * (1 + 1e-9)
            alike_up += own > at_m * (1 + 1e-9)
            over += max(own, node.bound) > best * (1 + 1e-9)
    return checked, own_up, alike_up, over


SEEDS = range(6)


@pytest.mark.slow
def test_own_and_alike_bounds_are_at_most_each_layouts_optimum():
    checked, own_up, alike_up, over = _check(SEEDS)
    assert checked > 0
    assert over == 0
    assert own_up > 0  # a way's own terms raise some leaf's bound
    assert alike_up > 0  # X ceil(M / X) raises some one-stage layout's


@pytest.mark.slow
def test_a_micro_batch_more_is_caught(monkeypatch):
    # planted fault: the alike layouts read at one micro-batch more a replica (X more in B at
    # v = 1, where one-stage classes run): past some layout's optimum
    z = of.OptionBounds._z

    def one_more(self, d, b, slots, deep, sync=0.0, per_v=False, alike=0):
        return z(self, d, b + np.asarray(alike, float)[..., None, None, None], slots, deep, sync, per_v, alike)

    monkeypatch.setattr(of.OptionBounds, "_z", one_more)
    assert _check(SEEDS)[3] > 0


@pytest.mark.slow
def test_an_own_bound_a_fifth_higher_is_caught(monkeypatch):
    # planted fault: each own bound 20% higher passes some layout's optimum (the own bounds lie
    # that near the optima, so the first test's check can fail)
    own = of.OptionBounds._own_bound
    monkeypatch.setattr(of.OptionBounds, "_own_bound", lambda self, node, picks: 1.2 * own(self, node, picks))
    assert _check(SEEDS)[3] > 0
