"""A stage family's tp choices' pipelines and syncs read together (solver/bounds/
stage_families.FamilyBounds.joint_keys) with the rows of the family's next opened choices read
ahead in the same fill_drain_sync_s call (_joint_rows, kept in joint_memo) are, popped choice by
popped choice, the floats of a fresh FamilyBounds that reads each popped choice alone (issue 33:
8 types x 8 nodes read 1,518 rows in 1,461 calls of about 4 ms each, nearly all of it numpy's
per-call work). What makes that so: fill_drain_sync_s reads row by row, so a row's float is the
same whatever rows share its call; checked here on random rows too. And the stage sites the
bound that reads memory keeps (unpriced_memory._ring_site) are each configuration's own."""

from __future__ import annotations

import numpy as np
import pytest
from randinst import group_tp_instance, random_cluster_instance
from test_choice_sync_admissible import slow_sync_instance

from paraplan.cost.class_coefficients import group_site
from paraplan.solver import search as search_mod
from paraplan.solver.bounds import stage_families, unpriced_memory
from paraplan.solver.bounds.fill_drain import fill_drain_sync_s
from paraplan.solver.bounds.stage_families import StageFamily
from paraplan.solver.space import declared_outers


def test_a_rows_sync_reading_is_the_same_alone_or_with_others():
    rng = np.random.default_rng(0)
    N, K, L = 64, 5, 40
    t = rng.uniform(0.01, 0.2, (N, K))
    count = rng.integers(0, 4, (N, K)).astype(float)
    count[:, 0] = np.maximum(count[:, 0], 1)
    d, g = rng.uniform(0.0, 0.3, (N, K)), rng.uniform(0.0, 0.02, (N, K))
    g[::7, 1] = 0.0  # a kind without a per-layer sync
    m = rng.integers(1, 32, N).astype(float)
    together = fill_drain_sync_s(np.zeros((N, K)), t, count, L, m, None, d, g, np.ones(N))
    for r in range(N):
        alone = fill_drain_sync_s(np.zeros((1, K)), t[r:r + 1], count[r:r + 1], L, m[r:r + 1], None, d[r:r + 1],
                                  g[r:r + 1], np.ones(1))
        assert alone[0] == together[r] or (np.isnan(alone[0]) and np.isnan(together[r])), r


def _families(monkeypatch, seed: int):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)  # every stage family deferred
    inst = slow_sync_instance(seed)
    return (search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None),
            search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None))


def test_joint_keys_read_ahead_are_each_popped_choices_own(monkeypatch):
    calls, read = [], []  # (rows of each call, whether the search's own object made it)
    real = stage_families.fill_drain_sync_s
    monkeypatch.setattr(stage_families, "fill_drain_sync_s", lambda *a: calls.append((len(a[1]), read[-1])) or real(*a))
    popped = raised = alone_calls = 0
    for seed in range(3):
        ahead, alone = _families(monkeypatch, seed)
        for fam in ahead.families:
            if not isinstance(fam, StageFamily) or not ahead.fb.reads_syncs(fam):
                continue
            every = ahead.fb.choices(fam, lambda lb: True)  # (`alone` opens none: it reads none ahead)
            if len(every) < 2:
                continue
            # a bar above the choices' bounds, so that every one can win apart and its rows are read
            bar = float(np.quantile([lb for _, lb in every if np.isfinite(lb)], 1.0)) * 1.01
            can_win = lambda lb: lb < bar  # noqa: E731
            opened = sorted(ahead.fb.choices(fam, can_win), key=lambda x: x[1])
            for index, lb in opened:  # popped least bound first, as the search pops them
                read.append(True)
                got = ahead.fb.joint_keys(fam, [index], can_win)
                read.append(False)
                want = alone.fb.joint_keys(fam, [index], can_win)
                assert np.array_equal(got, want), (fam, index)
                popped += 1
                raised += bool(got[0] > lb)
    ahead_calls = [n for n, mine in calls if mine]
    alone_calls = [n for n, mine in calls if not mine]
    assert popped > 20 and raised, (popped, raised)
    # read ahead: fewer calls than the popped choices' own, as many rows at least
    assert len(ahead_calls) < len(alone_calls) / 2 and sum(ahead_calls) >= sum(alone_calls), calls


@pytest.mark.parametrize("seed", range(4))
def test_a_kept_ring_site_is_the_configurations_own(seed):
    """unpriced_memory._ring_site keeps a stage's site by what group_site reads of the outer
    (not its layer fields, ZeRO or pipeline): over every declared configuration of small random
    clusters, several classes and a tp per group included, read through one memo, each kept
    site is the one group_site builds for that configuration."""
    for inst in (random_cluster_instance(seed), group_tp_instance(seed)):
        memo: dict = {}
        read = 0
        for o in declared_outers(inst):
            for i in range(len(inst.scenarios)):
                for g in sorted({g for c in o.classes for g in c.stage_groups}):
                    assert unpriced_memory._ring_site(inst, o, i, g, memo) == group_site(
                        inst.scenarios[i].cluster, o, g), (o, i, g)
                    read += 1
        assert read > len(memo) > 0, (read, len(memo))  # kept sites were read again
