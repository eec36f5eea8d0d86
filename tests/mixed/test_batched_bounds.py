"""The class planner's batched lower bound (solver/bounds/batched.py): the balanced split against
brute force, each batched bound against the same problem bounded alone, and every bound
against its configuration's optimum over all splits and micro-batch vectors, found by
enumeration with memory and recompute left out (the bound ignores both, so it must lie below
even that relaxed optimum)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from randinst import random_cluster_instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bounds import batched
from paraplan.solver.bounds.batched import balanced_split, balanced_splits, lower_bounds_s
from paraplan.solver.search import problems_for
from paraplan.solver.space import declared_outers, micro_batch_vectors

ROOT = Path(__file__).resolve().parents[2]


def _splits(layers: int, pp: int, v: int, slots: tuple[bool, bool] = (False, False)):
    """Every split of `layers` into pp stages of >= v layers each, multiples of v; with the
    embedding / loss counted as a layer slot (cost/pipeline_split.py), of layers + slots, the
    first / last stage holding one layer fewer."""
    off = (int(slots[0]),) + (0,) * (pp - 2) + (int(slots[1]),) if pp > 1 else (sum(slots),)
    chunks = (layers + sum(slots)) // v
    for cut in itertools.combinations(range(1, chunks), pp - 1):
        edges = (0,) + cut + (chunks,)
        yield np.array([v * (b - a) - o for a, b, o in zip(edges, edges[1:], off)], float)


@pytest.mark.parametrize("way", ["partition", "bisection"])
def test_balanced_split_is_the_min_max_split_by_brute_force(way, monkeypatch):
    # ties included (equal stage times, zero layer times): the min-max value is what counts;
    # both ways of finding the threshold (batched.PARTITION_VALUES decides which runs)
    monkeypatch.setattr(batched, "PARTITION_VALUES", 10**9 if way == "partition" else 0)
    rng = np.random.default_rng(7)
    for _ in range(300):
        pp, v = int(rng.integers(1, 5)), int(rng.choice([1, 2]))
        layers = v * int(rng.integers(pp, pp + 7))
        if rng.random() < 0.3:
            a, t = rng.choice([0.0, 1.0], pp), rng.choice([0.0, 0.5, 1.0], pp)
        else:
            a, t = rng.random(pp), rng.random(pp) + 1e-3
        n = balanced_split(a, t, layers, v)
        assert n.sum() == layers and (n >= v).all() and (n % v == 0).all()
        best = min((a + s * t).max() for s in _splits(layers, pp, v))
        assert (a + n * t).max() == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_balanced_splits_rows_are_independent():
    """A block of rows gives each row the split it gets alone (the planner stacks configurations)."""
    rng = np.random.default_rng(3)
    a, t = rng.random((50, 6)), rng.random((50, 6))
    block = balanced_splits(a, t, 40, 2)
    assert all((block[i] == balanced_split(a[i], t[i], 40, 2)).all() for i in range(50))


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
def test_bisection_gives_the_partitions_split(monkeypatch):
    """Bit for bit, ties by stage order included, on rows too wide to brute-force."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        pp, v = int(rng.integers(1, 12)), int(rng.choice([1, 2, 3]))
        layers = v * int(rng.integers(pp, 6 * pp + 20))
        if rng.random() < 0.4:
            a, t = rng.choice([0.0, 0.5, 1.0], (4, pp)), rng.choice([0.0, 0.25, 0.5], (4, pp))
        else:
            a, t = rng.random((4, pp)) * 10 ** rng.uniform(-4, 1), rng.random((4, pp)) * 10 ** rng.uniform(-6, 0)
        monkeypatch.setattr(batched, "PARTITION_VALUES", 10**9)
        by_partition = balanced_splits(a, t, layers, v)
        monkeypatch.setattr(batched, "PARTITION_VALUES", 0)
        assert (balanced_splits(a, t, layers, v) == by_partition).all()


def _problems(inst, objective: str, uniform: bool = False):
    outers = declared_outers(inst, uniform=uniform)
    return [(o, p) for o, p in zip(outers, problems_for(inst, outers, objective)) if p is not None]


def _instances():
    yield "tiny-gpt as one group", load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml"), ("nominal",)
    yield "tiny-2types", load_instance(ROOT / "instances/mixed/tiny-2types.yaml"), ("nominal",)
    for seed in (0, 1, 2):
        yield f"random {seed}", random_cluster_instance(seed), ("nominal", "robust", "expected")


@pytest.mark.parametrize("uniform", [False, True])
def test_batched_bounds_equal_each_problem_bounded_alone(uniform):
    """Bitwise: the search order and its tie rule read these keys."""
    seen_multi = seen_lone = 0
    for name, inst, objectives in _instances():
        for objective in objectives:
            probs = _problems(inst, objective, uniform)
            mv = [micro_batch_vectors(o.classes, p.total_micro_batches, uniform, o.virtual_stages)
                  for o, p in probs]
            batched = lower_bounds_s([p for _, p in probs], lambda i: mv[i], uniform)
            for i, (o, p) in enumerate(probs):
                alone = lower_bounds_s([p], lambda _: mv[i], uniform)[0]
                assert batched[i] == alone, (name, objective, o)
                seen_multi += p.classes > 1
                seen_lone += p.classes == 1
    assert seen_multi and seen_lone  # both paths of lower_bounds_s were compared


def _relaxed_optimum(o, p) -> float:
    """min over micro-batch vectors and splits (r = 0, memory ignored) of the exact objective."""
    mvecs = micro_batch_vectors(o.classes, p.total_micro_batches, False, o.virtual_stages)
    splits = [list(_splits(p.layers, p.pp(k), p.virtual_stages, (o.embedding_in_split, o.loss_in_split)))
              for k in range(p.classes)]
    best = np.inf
    for m in mvecs:
        for n in itertools.product(*splits):
            best = min(best, p.evaluate(m, n, [np.zeros_like(x) for x in n])[0])
    return best


def test_every_bound_is_below_its_configurations_relaxed_optimum():
    tight = 0
    for seed in range(6):
        inst = random_cluster_instance(seed)
        for objective in ("nominal", "robust", "expected"):
            probs = _problems(inst, objective)
            mv = [micro_batch_vectors(o.classes, p.total_micro_batches, False, o.virtual_stages)
                  for o, p in probs]
            bounds = lower_bounds_s([p for _, p in probs], lambda i: mv[i])
            for (o, p), lb in zip(probs, bounds):
                opt = _relaxed_optimum(o, p)
                assert lb <= opt * (1 + 1e-12), (seed, objective, o, lb, opt)
                tight += lb >= opt * (1 - 1e-12)
    assert tight  # not vacuous: some bounds reach their configuration's relaxed optimum
