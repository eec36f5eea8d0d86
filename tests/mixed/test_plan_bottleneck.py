"""The slowest stage of a class read over the combinations of its groups' layer plans
(solver/bounds/plan_bottleneck.py), which keys the combinations of buckets of layer plans
(solver/class_partitions.OuterChoices._linked, _linked_terms).

Checked against what is computed without it:
- on random stage levels, least_levels is the least bottleneck over every combination of one
  plan per group, each read as one_class._min_bottleneck reads one row (the larger of every
  stage's first chunk and the (L // v)-th smallest level: its docstring), listed by brute force;
- on tiny-2types at tp 4 (every group offers plans beyond Megatron's), once with a model whose
  memory binds: for each node of buckets the root lists, its linked slowest stage per class is
  the least over every combination of its plans of tight_class_terms' slowest stage, each
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
from test_partitions_lazy import _choices_of as _choices, tiny2

from paraplan.solver.bounds.one_class import FLOAT_SAFETY
from paraplan.solver.bounds.plan_bottleneck import group_steps, least_levels


def _row_bottleneck(levels: np.ndarray, need: int) -> float:
    """One row's least level (one_class._min_bottleneck, unlowered): levels (stages, chunks)."""
    flat = np.sort(levels.ravel())
    if flat.size < need or not np.isfinite(flat[need - 1]):
        return math.inf
    return float(max(flat[need - 1], levels[:, 0].max()))


@pytest.mark.parametrize("seed", range(40))
def test_least_levels_is_the_least_bottleneck_of_every_combination(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(1, 4))
    chunks = int(rng.integers(2, 7))
    stages = [int(rng.integers(1, 4)) for _ in range(groups)]
    need = int(rng.integers(sum(stages), sum(stages) * chunks + 2))  # sometimes more than any holds
    plans = []
    for s in stages:
        p = int(rng.integers(1, 5))
        # non-decreasing levels per stage, each stage capped by memory (inf past its cap, none held
        # at cap 0); ties across stages and plans on purpose (levels on a coarse grid)
        lv = np.cumsum(rng.integers(0, 4, size=(p, s, chunks)), axis=2).astype(float) + rng.integers(1, 4, (p, s, 1))
        cap = rng.integers(0, chunks + 1, size=(p, s))
        lv[np.arange(chunks)[None, None, :] >= cap[:, :, None]] = np.inf
        plans.append(lv)
    brute = min(_row_bottleneck(np.concatenate([plans[g][c] for g, c in enumerate(combo)]), need)
                for combo in itertools.product(*(range(len(p)) for p in plans)))
    got = least_levels([[group_steps(p) for p in plans]], need)[0]
    assert got == brute


def _memory_tight():
    # test_partitions_lazy.test_optimistic_stops_exactly_where_a_class_fits_no_split's model: a
    # Llama-3 70B-wide layer at tp 4 without full recompute, where memory caps the stages
    return tiny2((8, 8), (4,), 48, 32, model=dict(hidden=8192, heads=64, ffn=32768, seq_len=4096),
                 micro_batch=[1], full_recompute=False)


CASES = {"tp4": lambda: tiny2((8, 8), (4,), 8, 32), "memory": _memory_tight}


def _combinations_tau(ch, k, node):
    """Per scenario, the least over every combination of the node's plans of class k's slowest
    stage term (tight_class_terms, through _class_terms), each plan priced alone."""
    members = [x for x in ch.keys if x[0] == k]
    sets = dict(zip(ch.keys, node.sets))
    kept, store = {}, {}
    for x in members:
        kept[x] = [0] + [(p,) for p in sets[x] if p]
        store.update({(x[0], x[1], (p,)): ch._coeffs(x, (p,)) for p in sets[x] if p})
    cols = [([0] if 0 in sets[x] else []) + list(range(1, len(kept[x]))) for x in members]
    picks = np.array(list(itertools.product(*cols)), int).reshape(-1, len(members))
    A = ch._class_terms(k, members, kept, picks, store, ch.meg)[0]
    return A.min(0)


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
            linked = ch._linked(node)
            for k in range(len(o.classes)):
                members = [x for x in ch.keys if x[0] == k]
                kept = {x: [0, s] for x, s in zip(ch.keys, node.sets) if x[0] == k}
                tau = np.array([ch._linked_tau(k, members, kept, np.ones((1, len(members)), int), si)[0]
                                for si in range(len(ch.scenarios))])
                least = _combinations_tau(ch, k, node)
                # exact (the same levels): a few % raised fails; inf where no combination fits
                assert (np.isinf(tau) == np.isinf(least)).all()
                assert np.allclose(tau[np.isfinite(tau)], least[np.isfinite(least)], rtol=1e-12, atol=0)
            every = _every_candidate(ch, node)
            if every:
                assert linked <= min(every) * (1 + FLOAT_SAFETY)
            raised += linked > bound * (1 + 1e-9)
            checked += 1
    assert checked >= 6 and raised >= 1


def _every_candidate(ch, node) -> list[float]:
    """The keys (priced bounds) of every combination of `node` that may fit memory: expanded
    with no incumbent to the last level, every node expanded."""
    out, todo = [], [node]
    while todo:
        got = ch.expand(math.inf, todo.pop())
        out += [lb for lb, *_ in got.candidates]
        todo += [sub for _, sub in got.nodes]
    return out
