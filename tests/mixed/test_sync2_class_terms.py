"""The layer plans' least sync with each class's term and each ring's shape kept by what they read
(solver/bounds/plan_sync.py: _class_term_of, keyed by the class and _outer_fields; ring_shape
with a memo), on test_plan_sync's two-site instances with the layout options, ZeRO 0 and 1 and
both sequence-parallel flags (422 and 503 outers that the module reads, of 1 to 4 classes).

Checked against the full reading (test_parts9_sync_ceiling.full_d: each outer's D from
plan_sync.layer_sync_floors with a fresh memo per outer, every class read, no key of this
module's): the outers in a random order, read a few at a time with random keys and one memo
shared across the calls (so a class's term, a ring's shape and a floor read for one outer are
reused for the next), each raised key is the full reading's, float for float, on a worst case and
a weighted aggregate. Each check fails on a planted fault: a class's term kept without its
outer's ZeRO stage, without its ring's shape, or without its outer's replicas; a ring's shape
kept by its first class alone.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_parts9_sync_ceiling import AGGREGATES, _instance, full_d
from test_plan_sync import CASES

from paraplan.cost.trust import objective_factor_of
from paraplan.solver.bounds import plan_sync
from paraplan.solver.space import declared_outers

AT_ONCE = 7  # outers per raised_keys call


def mismatches(inst, idx, agg, weights, seed: int) -> list:
    """The outers (in a random order, AT_ONCE a call, one memo) whose raised key differs from
    the full reading's."""
    outers = [o for o in declared_outers(inst) if plan_sync.applies(inst, o)]
    rng = random.Random(seed)
    rng.shuffle(outers)
    memo: dict = {}
    bad = []
    for s in range(0, len(outers), AT_ONCE):
        chunk = outers[s:s + AT_ONCE]
        keys = [rng.uniform(1.0, 2.0) for _ in chunk]
        got = plan_sync.raised_keys(inst, chunk, keys, idx, agg, weights, memo).tolist()
        for o, k, x in zip(chunk, keys, got):
            d = full_d(inst, o, idx, agg, weights)
            ref = (k + objective_factor_of(inst, o) * d) * (1 - plan_sync.MARGIN) if d > 0 else k
            if x != ref:
                bad.append((o, x, ref))
    return bad


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{'wide' if c[5] else 'tiny'}")
@pytest.mark.parametrize("read", AGGREGATES, ids=("worst", "weighted"))
def test_kept_class_terms_give_the_full_reading(case, read):
    inst = _instance(case)
    outers = [o for o in declared_outers(inst) if plan_sync.applies(inst, o)]
    assert max(len(o.classes) for o in outers) > 1  # rings read
    assert mismatches(inst, *read, seed=len(outers)) == []


def _without(fields, drop: int):
    return lambda o, ring: (x := fields(o, ring))[:drop] + x[drop + 1:]


@pytest.mark.parametrize("fault", ("zero", "ring", "replicas", "ring's classes"))
def test_each_check_fails_on_a_planted_fault(monkeypatch, fault):
    inst = _instance(CASES[0])
    fields = plan_sync._outer_fields
    if fault == "ring's classes":
        ring_shape = plan_sync.ring_shape
        monkeypatch.setattr(plan_sync, "ring_shape", lambda o, memo=None: _ring_of_the_first_class(o, memo, ring_shape))
    else:
        at = {"zero": 6, "replicas": 8, "ring": 9}[fault]
        assert fields(declared_outers(inst)[0], "ring")[9] == "ring"
        monkeypatch.setattr(plan_sync, "_outer_fields", _without(fields, at))
    assert mismatches(inst, *AGGREGATES[0], seed=0)


def _ring_of_the_first_class(o, memo, ring_shape):
    """ring_shape kept by the first class alone (a planted fault)."""
    if len(o.classes) == 1 or memo is None:  # (the full reading's, fresh)
        return ring_shape(o) if memo is None else None
    key = ("planted ring", o.classes[0], o.tp, o.group_tp, o.cp)
    if key not in memo:
        memo[key] = plan_sync._ring_shape(o)
    return memo[key]
