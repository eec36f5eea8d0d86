"""The slowest stage of a class read over the combinations of its groups' layer plans
(solver/bounds/plan_bottleneck.py), which keys the combinations of buckets of layer plans
(solver/class_partitions.OuterChoices._linked, _linked_terms).

Checked against what is computed without it:
- on random stage levels, least_levels is the least bottleneck over every combination of one
  plan per group, each read as one_class._min_bottleneck reads one row (the larger of every
  stage's first chunk and the (L // v)-th smallest level: its docstring), listed by brute force;
- on random stage levels, least_sums (of group_sums) is the least sum of the levels of every
  split in whole chunks (each stage one chunk at least, within its cap) over every combination
  of one plan per group, found by a dynamic programme over the stages of each combination:
  equal where each stage's levels are convex in its chunks (as one_class's tau_s), at most it
  otherwise;
- on tiny-2types at tp 4 (every group offers plans beyond Megatron's), once with a model whose
  memory binds: for each node of buckets the root lists, its linked slowest stage per class is
  the least over every combination of its plans of tight_class_terms' slowest stage, and its
  linked sum the least over them of the dynamic programme's sum of their stage levels, each
  combination assembled from its plans' own builds (class_partitions' last level); the node's
  linked bound is at most the bound of every combination of its plans (the candidates' keys,
  each at most its optimum: test_mixed_partitions.test_vectorised_class_bound_is_below_the_optimum),
  and above the bound the root keyed it by on some node (the link is read).
The search's optimum with the linked keys is exhaustive search's: test_partitions_lazy.py,
test_plan_sync.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from test_partitions_lazy import _choices_of as _choices, _choices_of_one, tiny2

from oracles.bounds import least_levels, least_sums
from paraplan.solver.bounds.one_class import FLOAT_SAFETY, stage_levels
from paraplan.solver.bounds.plan_bottleneck import group_steps, group_sums


def _row_bottleneck(levels: np.ndarray, need: int) -> float:
    """One row's least level (one_class._min_bottleneck, unlowered): levels (stages, chunks)."""
    flat = np.sort(levels.ravel())
    if flat.size < need or not np.isfinite(flat[need - 1]):
        return math.inf
    return float(max(flat[need - 1], levels[:, 0].max()))


@pytest.mark.parametrize("seed", range(40))
def test_least_levels_is_the_least_bottleneck_of_every_combination(seed):
    plans, need = _random_levels(np.random.default_rng(seed), convex=False)
    brute = min(_row_bottleneck(np.concatenate([plans[g][c] for g, c in enumerate(combo)]), need)
                for combo in itertools.product(*(range(len(p)) for p in plans)))
    got = least_levels([[group_steps(p) for p in plans]], need)[0]
    assert got == brute


def _dp_least_sum(levels: np.ndarray, need: int) -> float:
    """The least sum over stages of levels[s, j_s - 1], j_s >= 1 chunks each, summing to `need`
    (inf where none): a dynamic programme over the stages, levels (stages, chunks)."""
    best = np.full(need + 1, np.inf)
    best[0] = 0.0
    for row in levels:
        nxt = np.full(need + 1, np.inf)
        for c in range(need + 1):
            for j in range(1, min(len(row), c) + 1):
                nxt[c] = min(nxt[c], best[c - j] + row[j - 1])
        best = nxt
    return float(best[need])


def _random_levels(rng, convex: bool):
    """(plans, need): per group, its plans' non-decreasing levels (plans, stages, chunks), each
    stage capped by memory (inf past its cap, none held at cap 0), ties across stages and plans
    on purpose (levels on a coarse grid); `need` chunks, sometimes more than any holds."""
    groups = int(rng.integers(1, 4))
    chunks = int(rng.integers(2, 7))
    stages = [int(rng.integers(1, 4)) for _ in range(groups)]
    need = int(rng.integers(sum(stages), sum(stages) * chunks + 2))  # sometimes more than any holds
    plans = []
    for s in stages:
        p = int(rng.integers(1, 5))
        steps = rng.integers(0, 4, size=(p, s, chunks - 1))
        if convex:  # increments non-decreasing in the chunks, as one_class's tau_s
            steps = np.sort(steps, axis=2)
        lv = np.concatenate([rng.integers(1, 4, (p, s, 1)), steps], axis=2).cumsum(axis=2).astype(float)
        cap = rng.integers(0, chunks + 1, size=(p, s))
        lv[np.arange(chunks)[None, None, :] >= cap[:, :, None]] = np.inf
        plans.append(lv)
    return plans, need


@pytest.mark.parametrize("seed", range(40))
def test_least_sums_is_the_least_sum_of_every_combination(seed):
    convex = seed % 2 == 0
    plans, need = _random_levels(np.random.default_rng(seed), convex)
    brute = min(_dp_least_sum(np.concatenate([plans[g][c] for g, c in enumerate(combo)]), need)
                for combo in itertools.product(*(range(len(p)) for p in plans)))
    got = least_sums([[group_sums(p, need) for p in plans]], need)[0]
    if convex:
        assert got == brute
    else:
        assert got <= brute


def _memory_tight():
    # test_partitions_lazy.test_optimistic_stops_exactly_where_a_class_fits_no_split's model: a
    # Llama-3 70B-wide layer at tp 4 without full recompute, where memory caps the stages
    return tiny2((8, 8), (4,), 48, 32, model=dict(hidden=8192, heads=64, ffn=32768, seq_len=4096),
                 micro_batch=[1], full_recompute=False)


CASES = {"tp4": lambda: tiny2((8, 8), (4,), 8, 32), "memory": _memory_tight}


def _combinations_terms(ch, k, node):
    """Per scenario, the least over every combination of the node's plans of class k's slowest
    stage term (tight_class_terms, through _class_terms), and of the least sum of its stage
    levels over the splits in whole chunks (_dp_least_sum), each plan priced alone."""
    members = [x for x in ch.keys if x[0] == k]
    sets = dict(zip(ch.keys, node.sets))
    kept, store = {}, {}
    for x in members:
        kept[x] = [0] + [(p,) for p in sets[x] if p]
        store.update({(x[0], x[1], (p,)): ch._coeffs(x, (p,)) for p in sets[x] if p})
    cols = [([0] if 0 in sets[x] else []) + list(range(1, len(kept[x]))) for x in members]
    picks = np.array(list(itertools.product(*cols)), int).reshape(-1, len(members))
    A, _, D, _ = ch._class_terms(k, members, kept, picks, store, ch.meg)
    L, v = ch.inst.model.layers, ch.o.virtual_stages
    sums = []
    for si in range(len(ch.scenarios)):
        levels = stage_levels(ch._class_arrays(k, members, kept, picks, store, ch.meg, si), L, v,
                              ch.inst.search.full_recompute)
        sums.append(min(_dp_least_sum(lv, L // v) for lv in levels))
    return A.min(0), np.array(sums), D.min(0)


@pytest.mark.parametrize("case", CASES)
def test_linked_bound_is_the_least_over_its_plans(case):
    inst = CASES[case]()
    checked = raised = 0
    for o, ch in _choices(inst)[::3]:  # one class or two, on one group or two
        if ch.optimistic(stop_unfit=True) is None:
            continue
        # each combination of a node is priced and bounded below: a few small nodes per outer
        nodes = [(b, n) for b, n in ch.expand(math.inf).nodes if n.weight <= 256]
        for bound, node in nodes[:: max(1, len(nodes) // 3)]:
            linked = float(ch._linked([node])[0])
            for k in range(len(o.classes)):
                members = [x for x in ch.keys if x[0] == k]
                kept = {x: [0, s] for x, s in zip(ch.keys, node.sets) if x[0] == k}
                store = ch._node_store(k, dict(zip(ch.keys, node.sets)))
                reads = [ch._linked_reads(k, members, kept, np.ones((1, len(members)), int), store, si)
                         for si in range(len(ch.scenarios))]
                tau, total, sync = (np.array([r[i][0] for r in reads]) for i in (0, 1, 2))
                least, least_total, least_sync = _combinations_terms(ch, k, node)
                # the sync term reads the bucket's sync coefficients (below each plan's) with each
                # plan's own chunks: at most every combination's delta*
                assert (sync <= least_sync * (1 + 1e-9)).all()
                # exact (the same levels; the sums added in another order, then lowered by
                # FLOAT_SAFETY): a few % raised fails; inf where no combination fits
                for got, want, rtol in ((tau, least, 1e-12), (total, least_total, 1e-9)):
                    assert (np.isinf(got) == np.isinf(want)).all()
                    assert np.allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=rtol, atol=0)
                    assert (got[np.isfinite(got)] <= want[np.isfinite(want)]).all()
            every = _every_candidate(ch, node)
            if every:
                assert linked <= min(every) * (1 + FLOAT_SAFETY)
            raised += linked > bound * (1 + 1e-9)
            checked += 1
    assert checked >= 6 and raised >= 1


@pytest.mark.parametrize("case", CASES)
def test_linked_keys_read_in_a_batch_are_those_read_one_at_a_time(case):
    # a node's linked key is read alone, or with its outer's others whose plans are priced
    # (_linked_now): the same numbers either way, in any order the nodes come up
    inst = CASES[case]()
    checked = batched = 0
    for o, ch in _choices(inst)[::3]:
        if ch.optimistic(stop_unfit=True) is None:
            continue
        nodes = [n for _, n in ch.expand(math.inf).nodes if n.level == 1 and not n.linked]
        if not nodes:
            continue
        alone = [float(ch._linked([n])[0]) for n in nodes]
        assert np.array_equal(ch._linked(nodes), alone)
        fresh = _choices_of_one(inst, o)
        fresh.optimistic(stop_unfit=True)
        again = {n.sets: n for _, n in fresh.expand(math.inf).nodes}
        for n, want in list(zip(nodes, alone))[::-1]:  # come up in another order than listed
            batched += n.sets in fresh.linked_keys
            assert fresh._linked_now(again[n.sets]) == want
        assert not fresh.unlinked and not fresh.linked_keys
        checked += 1
    assert checked >= 2 and batched >= 1


def _every_candidate(ch, node) -> list[float]:
    """The keys (priced bounds) of every combination of `node` that may fit memory: expanded
    with no incumbent to the last level, every node expanded."""
    out, todo = [], [node]
    while todo:
        got = ch.expand(math.inf, todo.pop())
        out += [lb for lb, *_ in got.candidates]
        todo += [sub for _, sub in got.nodes]
    return out
