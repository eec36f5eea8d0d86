"""The bound of a lone pipeline that reads its slowest stage and its stages' sum together
(solver/bounds/fill_drain.py; issue 33's 8-type row), checked against what it bounds:
- fill_drain_s equals the least of (m - 1) max_s T_s + sum_s T_s over every integer split,
  enumerated (caps and kinds of identical stages included);
- fill_drain_relaxed_s lies between the two terms' separate bound (the bound before pricing's,
  (m - 1) max(L / sum_s 1 / t_s, t_max) + sum_s t_s + (L - pp) t_min, at v = 1) and J;
- on random clusters of three and four GPU types (tests/mixed generators), each stage-wise
  partial layout's bound (layouts.partial_bounds_s, which now reads J) and each tp choice's
  bound of an opened stage family (stage_families.FamilyBounds.choices) is at most the least
  optimum of the configurations it holds, each priced and solved exactly by the split DP.
The search keyed by them returns exhaustive search's optimum on those clusters:
test_partial_layouts.py (seeds 1, 2, 10, 11, 13, partial layouts) and test_stage_families.py
(every family deferred, its tp choices keyed by this bound)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from test_many_types_agreement import many_types_instance
from test_stage_families import _every_family_opened, _least_optimum, repeated_types_instance

from paraplan.solver import search as search_mod
from paraplan.solver.bounds import fill_drain
from paraplan.solver.bounds.fill_drain import fill_drain_relaxed_s, fill_drain_s
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.bounds.stage_families import StageFamily
from paraplan.solver.bounds.unpriced import floor_bounds_s
from paraplan.solver.space import declared_partials


def _enumerated(a, t, count, layers, m, cap) -> float:
    """min over every split n (n_s >= 1, n_s <= cap_s, sum n = layers) of the pipeline at
    v = 1, (m - 1) max_s T_s + sum_s T_s with T_s = a_s + n_s t_s: cost/schedule.
    pipeline_time_s at v = 1, written out. The kinds are expanded into their stages."""
    a, t, cap = (np.repeat(x, count) for x in (a, t, cap))
    best = np.inf
    for n in itertools.product(range(1, layers + 1), repeat=len(t)):
        if sum(n) != layers or any(x > c for x, c in zip(n, cap)):
            continue
        T = a + np.array(n) * t
        best = min(best, (m - 1) * T.max() + T.sum())
    return best


def test_fill_drain_is_the_least_pipeline_over_every_split():
    rng = random.Random(0)
    exercised = 0
    for _ in range(300):
        K = rng.randint(1, 3)
        count = np.array([rng.randint(0 if K > 1 else 1, 2) for _ in range(K)])
        if not count.sum():
            count[0] = 1
        layers = rng.randint(int(count.sum()), 8)
        t = np.array([rng.choice([0.5, 0.7, 1.0, 1.5, 3.0]) for _ in range(K)])
        a = np.array([rng.choice([0.0, 0.0, 0.4, 1.2]) for _ in range(K)])
        m = float(rng.randint(1, 9))
        cap = np.array([rng.randint(1, layers) for _ in range(K)]) if rng.random() < 0.3 else np.full(K, layers)
        got = fill_drain_s(a[None], t[None], count[None], layers, np.array([m]), cap[None])[0]
        want = _enumerated(a, t, count, layers, m, cap)
        assert got == pytest.approx(want, rel=1e-12) if np.isfinite(want) else got == np.inf
        # the case the bound is for: the separate terms' bound lies below the joint least
        if np.isfinite(want) and a.sum() == 0 and (cap >= layers).all():
            sep = ((m - 1) * max(layers / (count / t).sum(), t[count > 0].max())
                   + (count * t).sum() + (layers - count.sum()) * t[count > 0].min())
            exercised += want > sep * (1 + 1e-9)
    assert exercised  # some split problems where reading the terms together binds


def test_a_narrow_window_of_levels_still_bounds_every_split(monkeypatch):
    # past its window of levels per kind, fill_drain_s bounds the rest by (m - 1) Z_top + G(inf):
    # with one or two levels it is below the least over every split, never above it
    rng = random.Random(3)
    below = 0
    for window in (1, 2):
        monkeypatch.setattr(fill_drain, "WINDOW_LEVELS", window)
        for _ in range(150):
            K = rng.randint(1, 3)
            count = np.array([rng.randint(1, 2) for _ in range(K)])
            layers = rng.randint(int(count.sum()), 8)
            t = np.array([rng.choice([0.5, 0.7, 1.0, 1.5, 3.0]) for _ in range(K)])
            a, m = np.zeros(K), float(rng.randint(1, 9))
            got = fill_drain.fill_drain_s(a[None], t[None], count[None], layers, np.array([m]))[0]
            want = _enumerated(a, t, count, layers, m, np.full(K, layers))
            assert got <= want * (1 + 1e-12)
            below += got < want * (1 - 1e-9)
    assert below  # the tail bound is what some rows read


def test_the_relaxed_bound_lies_between_the_separate_terms_and_the_exact_one():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        K = int(rng.integers(1, 6))
        count = rng.integers(0, 5, K)
        if not count.sum():
            count[0] = 1
        layers = int(rng.integers(count.sum(), 40))
        t, m = rng.uniform(0.1, 2.0, K), float(rng.integers(1, 12))
        exact = fill_drain_s(np.zeros((1, K)), t[None], count[None], layers, np.array([m]))[0]
        relaxed = fill_drain_relaxed_s(t[None], count[None], layers, np.array([m]))[0]
        live = count > 0
        sep = ((m - 1) * max(layers / (count / t).sum(), t[live].max())
               + (count * t).sum() + (layers - count.sum()) * t[live].min())
        assert sep * (1 - 1e-12) <= relaxed <= exact * (1 + 1e-12)


def test_a_kind_read_at_any_of_its_choices_bounds_each_choice():
    # FamilyBounds.fill_drain_family: each group at any of its tp values, read as its least
    # floor, least stage count and largest count / floor (fill_drain_relaxed_s with `rate`), is
    # at most the relaxed bound of every combination of the groups' values, and equals it where
    # each group has one value
    rng = np.random.default_rng(2)
    for _ in range(300):
        G = int(rng.integers(1, 4))
        opts = [[(float(rng.uniform(0.1, 2.0)), int(rng.integers(1, 5))) for _ in range(int(rng.integers(1, 4)))]
                for _ in range(G)]
        layers, m = int(rng.integers(G, 30)), float(rng.integers(1, 12))
        lo = np.array([[min(f for f, _ in o) for o in opts]])
        least = np.array([[min(c for _, c in o) for o in opts]], float)
        most = np.array([[max(c / f for f, c in o) for o in opts]])
        family = fill_drain_relaxed_s(lo, least, layers, np.array([m]), most)[0]
        each = [fill_drain_relaxed_s(np.array([[f for f, _ in pick]]), np.array([[c for _, c in pick]], float),
                                     layers, np.array([m]))[0] for pick in itertools.product(*opts)]
        assert family <= min(each) * (1 + 1e-12)
        if all(len(o) == 1 for o in opts):
            assert family == pytest.approx(each[0], rel=1e-12) or family == each[0] == np.inf


def _enumerated_with_sync(a, t, count, layers, m, cap, d, g, v) -> float:
    """min over every split n (1 <= n_s <= cap_s, sum n = layers) of the pipeline and its
    slowest gradient sync, ((m - 1) max_s T_s + sum_s T_s) / v + max_s (d_s + n_s g_s) with
    T_s = a_s + n_s t_s: cost/schedule.iteration_time_s's v = 1 form (m read as v m
    otherwise, as priced_bounds_s reads it), written out. Kinds expanded into their stages."""
    a, t, cap, d, g = (np.repeat(x, count) for x in (a, t, cap, d, g))
    best = np.inf
    for n in itertools.product(range(1, layers + 1), repeat=len(t)):
        if sum(n) != layers or any(x > c for x, c in zip(n, cap)):
            continue
        n = np.array(n)
        T = a + n * t
        best = min(best, ((m - 1) * T.max() + T.sum()) / v + (d + n * g).max())
    return best


def _sync_case(rng, layers_most: int = 8):
    """One random pipeline of 1-3 kinds with stage terms, caps and syncs (g = 0 among them)."""
    K = rng.randint(1, 3)
    count = np.array([rng.randint(0 if K > 1 else 1, 2) for _ in range(K)])
    if not count.sum():
        count[0] = 1
    layers = rng.randint(int(count.sum()), layers_most)
    t = np.array([rng.choice([0.5, 0.7, 1.0, 1.5, 3.0]) for _ in range(K)])
    a = np.array([rng.choice([0.0, 0.0, 0.4, 1.2]) for _ in range(K)])
    d = np.array([rng.choice([0.0, 0.3, 1.0]) for _ in range(K)])
    g = np.array([rng.choice([0.0, 0.2, 0.5, 1.1]) for _ in range(K)])
    m, v = float(rng.randint(1, 9)), float(rng.choice([1, 1, 2]))
    cap = np.array([rng.randint(1, layers) for _ in range(K)]) if rng.random() < 0.3 else np.full(K, layers)
    return a, t, count, layers, m, cap, d, g, v


def _with_sync(a, t, count, layers, m, cap, d, g, v) -> float:
    return fill_drain.fill_drain_sync_s(a[None], t[None], count[None], layers, np.array([m]), cap[None],
                                        d[None], g[None], np.array([v]))[0]


def test_the_pipeline_and_its_slowest_sync_read_together_are_the_least_over_every_split():
    rng = random.Random(5)
    lifted = 0
    for _ in range(300):
        case = _sync_case(rng)
        got, want = _with_sync(*case), _enumerated_with_sync(*case)
        assert got == pytest.approx(want, rel=1e-12) if np.isfinite(want) else got == np.inf
        a, t, count, layers, m, cap, d, g, v = case
        if np.isfinite(want):  # priced_bounds_s before: the two least values apart
            apart = (fill_drain_s(a[None], t[None], count[None], layers, np.array([m]), cap[None])[0] / v
                     + max((d + g)[count > 0].max(), ((count * d).sum() + layers * g[count > 0].min()) / count.sum()))
            assert apart <= want * (1 + 1e-12)
            lifted += want > apart * (1 + 1e-9)
    assert lifted  # some splits where the two terms read together bind


def test_a_narrow_window_of_sync_levels_still_bounds_every_split(monkeypatch):
    # past its window of sync levels per kind, fill_drain_sync_s bounds the rest by
    # W_top + J(caps) / v: with one or two levels it is below the least over every split
    rng = random.Random(6)
    below = 0
    for window in (1, 2):
        monkeypatch.setattr(fill_drain, "SYNC_WINDOW_LEVELS", window)
        monkeypatch.setattr(fill_drain, "SYNC_LEVELS_AT_ONCE", 1)
        for _ in range(150):
            case = _sync_case(rng)
            got, want = _with_sync(*case), _enumerated_with_sync(*case)
            assert got <= want * (1 + 1e-12) if np.isfinite(want) else got == np.inf
            below += np.isfinite(want) and got < want * (1 - 1e-9)
    assert below  # the tail bound is what some rows read


# many_types_instance seeds (three or four toy GPU types) whose stage-wise partial layouts the
# new bound lifts above their configurations' bound before pricing (checked below: not vacuous)
SEEDS = (1, 2, 11)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_stage_layouts_bound_is_at_most_its_least_optimum(seed):
    inst = many_types_instance(seed)
    partials = declared_partials(inst)
    bounds = partial_bounds_s(inst, partials, [0], "max", ())
    lifted = 0
    for part, lb in zip(partials, bounds.tolist()):
        outers = [o for blk in part.blocks() for o in blk.outers()]
        if part.dp is None or not outers:
            continue
        if lb > floor_bounds_s(inst, outers, [0], "max", ()).min() * (1 + 1e-12):
            lifted += 1
            assert lb <= _least_optimum(inst, part, lb / (1 + 1e-12)) * (1 + 1e-12), (part.used, part.tpg, part.dp)
    assert lifted


@pytest.mark.parametrize("seed", (0, 1, 2, 3))
def test_a_tp_choices_bound_is_at_most_its_least_optimum(seed, monkeypatch):
    monkeypatch.setattr(search_mod, "DEFER_TP_CHOICES", 0)
    inst = repeated_types_instance(seed)
    lazy, _, spans = _every_family_opened(inst)
    for f, a, b in spans:
        fam = lazy.families[f]
        if not isinstance(fam, StageFamily):
            continue
        choices = dict(lazy.fb.choices(fam, lambda lb: True))
        for part in lazy.partials[a:b]:
            x = (part.rank >> 128) & ((1 << 64) - 1)
            if np.isfinite(choices[x]):
                assert choices[x] <= _least_optimum(inst, part, choices[x] / (1 + 1e-12)) * (1 + 1e-12), (fam, x)
