"""Exhaustive search evaluates in blocks and shares work between configurations (issue 32):
micro-batch vectors of a configuration of several classes a block at a time, and the time
terms of lone classes whose time coefficients are equal once per block of rows. Neither may
change an answer: with one vector per block, and with no two configurations sharing their time
terms, the same plans are counted and the same first optimum is found, to the bit. The memory
tiers of a quantile objective are brute-forced side by side on coefficients priced once: each
tier gets what it gets brute-forced alone."""

from __future__ import annotations

from dataclasses import replace

import pytest
from randinst import random_cluster_instance, random_instance

from paraplan.solver import exhaustive, memory_tiers
from paraplan.solver.bench.ladder import ladder_instance


def _same(a, b) -> None:
    assert a.complete and b.complete
    assert (a.candidates, a.feasible) == (b.candidates, b.feasible)
    assert a.plan == b.plan
    assert (a.objective_s, a.quantile_s) == (b.objective_s, b.quantile_s)  # bit for bit


@pytest.mark.parametrize("seed, objective", [(1, "nominal"), (6, "robust"), (10, "expected")])
def test_one_micro_batch_vector_a_block_gives_the_same_answer(monkeypatch, seed, objective):
    # random mixed clusters: their replica-family configurations hold two classes, each with
    # several micro-batch vectors (the block path and, with "expected", the weighted sum per
    # vector); each space has plans that fit (measured: 168, 78 and 829 of them)
    inst = random_cluster_instance(seed)
    whole = exhaustive.exhaustive(inst, objective)
    monkeypatch.setattr(exhaustive, "VECTOR_BLOCK_ELEMENTS", 1)
    _same(exhaustive.exhaustive(inst, objective), whole)
    assert whole.feasible > 0


def test_lone_classes_that_share_no_time_terms_give_the_same_answer(monkeypatch):
    # the 32-GPU, 16-layer rung of `paraplan bench`: 254 lone-class configurations of which
    # ZeRO variants share time terms (148 distinct, measured); every configuration alone
    # (a key of its own) must count and find the same
    inst = ladder_instance(32, 16)
    shared = exhaustive.exhaustive(inst, max_candidates=10**12)
    keys = iter(range(10**9))
    monkeypatch.setattr(exhaustive, "_time_key", lambda p, k: next(keys))
    _same(exhaustive.exhaustive(inst, max_candidates=10**12), shared)


@pytest.mark.parametrize("make, seed", [(random_cluster_instance, 2), (random_instance, 1)])
def test_memory_tiers_side_by_side_give_each_tier_its_own_answer(make, seed):
    # under p90 each instance has two memory tiers (cost/trust.memory_fill_caps): the brute
    # force prices each configuration once, with the last tier's instance, and builds both tiers'
    # problems from those coefficients; each tier brute-forced alone prices with its own
    # instance. The cap binds on both (measured: 120 of 680 and 56 of 504 plans fit within the
    # first tier's cap, 181 and 64 within HBM), so pricing that read the cap would differ here
    base = make(seed)
    inst = replace(base, search=replace(base.search, objective="p90"))
    ts = memory_tiers.tiers(inst)
    assert len(ts) == 2
    together = exhaustive._exhaustive_tiers(ts)
    for t, got in zip(ts, together):
        _same(got, exhaustive._exhaustive_tiers([t])[0])
    assert together[0].feasible < together[1].feasible
