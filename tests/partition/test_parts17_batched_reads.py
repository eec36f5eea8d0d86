"""The layer-plan node's expansion read in fewer calls (solver/class_partitions.OuterChoices.
_bucketed, _linked_reads; issue 33, row 4).

Each is checked against the reading it replaces, computed here as the code before read it:
- _bucketed bounds every class's buckets in one _bounded_many read; the code before bounded
  each choice's alone (_bounded: its buckets' rows, every other stage at the optimistic
  build). On the first 12 layer-plan outers of tiny-2types at tp 4, of the two-site
  instance with a Llama-3 70B-wide layer and of the two-site instance with several classes
  per group, for the root's buckets and the first children's (each level's size, and single
  plans), at no cut and at cuts around the optimistic bound: the same surviving
  buckets in the same order and the very coefficient objects kept. The cuts after the first
  read the buckets' bounds kept by the first (OuterChoices.bucket_bounds), the children's
  levels some of the root's: kept bounds answer as fresh reads. A planted fault (each
  choice's buckets read on another group's stages) changes some answer.
- _least_levels_both reads the slowest stage's and the slowest sync's least levels in one
  least_levels_picked call; on random stage levels and picks (test_node6_expansion's
  generator) it equals the two calls float for float, and a planted fault (the second's rows
  picking the first's entries) changes some answer.
- _combination_bounds reads a lone class's arrays without stacking them and the stand-ins of
  unfit rows only where some term is not finite; on random terms (some inf) of the outers of
  the two-site instance with several classes per group (one and several classes, uniform and
  not) it equals the stacked reading float for float, and a planted fault (the first class's
  sync read, not the largest) changes some answer.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_node6_expansion import _random_entries  # noqa: E402
from test_partitions_lazy import OPTIONS, _choices_of, tiny2  # noqa: E402
from test_plan_sync import WIDE, two_sites  # noqa: E402

from paraplan.solver.bounds.batched import relaxed_s  # noqa: E402
from paraplan.solver.bounds.one_class import FLOAT_SAFETY  # noqa: E402
from paraplan.solver.bounds.plan_bottleneck import group_steps, least_levels_picked  # noqa: E402
from paraplan.solver.class_partitions import LEVELS, Listing, _least_levels_both  # noqa: E402


def _bucketed_alone(ch, node, cut, size, rotate=False):
    """_bucketed as the code before read it: each choice's buckets bounded alone (_bounded).
    `rotate`: the planted fault, each choice's buckets bounded on the next choice's group."""
    tokens, store, mega = {}, {}, {}
    groups = [x[1] for x in ch.keys]
    for i, (x, plans) in enumerate(zip(ch.keys, node.sets)):
        mega[x] = plans[0] == 0
        mine = plans[1:] if mega[x] else plans
        buckets = [tuple(mine[b:b + size]) for b in range(0, len(mine), size)]
        ch._price_buckets(x, buckets)
        coeffs = [ch._coeffs(x, bk) for bk in buckets]
        g = groups[(i + 1) % len(groups)] if rotate else x[1]
        ok = ch._bounded(x[0], g, coeffs, cut) if coeffs else []
        tokens[x] = [bk for bk, y in zip(buckets, ok) if y]
        store.update({(x[0], x[1], bk): c for bk, c, y in zip(buckets, coeffs, ok) if y})
    return tokens, store, mega


def _same(got, want) -> bool:
    (t1, s1, m1), (t2, s2, m2) = got, want
    return t1 == t2 and m1 == m2 and list(s1) == list(s2) and all(s1[k] is s2[k] for k in s1)


def _nodes(ch):
    """(node, size) pairs to bucket: the root at the first level's size, and the root's first
    children at the next level's and as single plans."""
    root = ch._root(Listing())
    out = [(root, LEVELS[0])]
    kids = ch.expand(math.inf, None).nodes[:3]
    for _, kid in kids:
        out += [(kid, LEVELS[1]), (kid, 1)]
    return out


def test_bucketed_bounds_each_class_in_one_read_as_each_choice_alone():
    checked = faults = dropped = multi = kept_reads = 0
    for inst in (tiny2((8, 8), (4,), 8, 32), two_sites((8, 8), (4,), 8, 32, 100, WIDE),
                 two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS)):
        for o, ch in _choices_of(inst)[:12]:
            if ch.optimistic(stop_unfit=True) is None:
                continue
            root = ch.optimistic_bound()
            multi += len(ch.keys) > 1
            for node, size in _nodes(ch):
                for cut in (math.inf, root, root * 1.01, root * 1.05):
                    before = len(ch.bucket_bounds)
                    got = ch._bucketed(node, cut, size, None)
                    kept_reads += len(ch.bucket_bounds) == before
                    want = _bucketed_alone(ch, node, cut, size)
                    assert _same(got, want)
                    kept = sum(len(t) for t in got[0].values())
                    listed = sum(len(s) - (s[0] == 0) for s in node.sets)
                    dropped += kept < math.ceil(listed / size)
                    if len(ch.keys) > 1:
                        faults += not _same(got, _bucketed_alone(ch, node, cut, size, rotate=True))
                    checked += 1
    assert checked >= 40 and multi > 0 and dropped > 0 and faults > 0 and kept_reads > 0


def test_least_levels_both_equal_two_calls_float_for_float():
    faults = finite = 0
    for seed in range(60):
        per, picks, need = _random_entries(seed)
        first = [[group_steps(lv) for lv in e] for e in per]
        # a second set of entries of the same columns: the levels shifted and reordered
        second = [[(z * 1.5 + 0.25, c) for z, c in reversed(col)] for col in first]
        tau, delta = _least_levels_both(first, second, picks, need)
        want_tau = least_levels_picked(first, picks, need)
        want_delta = least_levels_picked(second, picks, need)
        assert tau.tobytes() == want_tau.tobytes() and delta.tobytes() == want_delta.tobytes()
        finite += np.isfinite(tau).sum() + np.isfinite(delta).sum()
        # planted fault: the second's rows pick the first's entries (no offset)
        both = least_levels_picked([a + b for a, b in zip(first, second)], np.vstack([picks, picks]), need)
        faults += both[len(picks):].tobytes() != want_delta.tobytes()
    assert finite > 0 and faults > 0


def _bounds_before(ch, per_class, fault: bool = False) -> np.ndarray:
    """_combination_bounds as the code before read it (every class stacked, the stand-ins
    always); `fault`: the sync of the first class read, not the largest."""
    p = ch.problem
    x = np.array(p.replicas, float)
    lo = np.array([p.min_micro_batches(k) for k in range(p.classes)], float)
    A = np.stack([c[0] for c in per_class], -1)
    Sm = np.stack([c[1] for c in per_class], -1)
    D = (per_class[0][2] if fault else np.max(np.stack([c[2] for c in per_class], -1), -1))[..., None]
    hopeless = ~np.isfinite(A).all(-1) | ~np.isfinite(Sm).all(-1) | ~np.isfinite(D[..., 0])
    A, Sm, D = (np.where(np.isfinite(y), y, 1.0) for y in (A, Sm, D))
    per = relaxed_s(A, Sm, D, x, lo, p.total_micro_batches, p.virtual_stages, ch.uniform)
    per = np.where(hopeless, np.inf, per)
    return per.max(-1) * (1 - FLOAT_SAFETY) if p.objective == "max" else per @ np.asarray(p.weights) * (1 - FLOAT_SAFETY)


def test_combination_bounds_equal_the_stacked_reading_on_random_terms():
    rng = np.random.default_rng(5)
    roots = [ch for _, ch in _choices_of(two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS))
             if ch.optimistic(stop_unfit=True) is not None]
    classes = {len(ch.o.classes) for ch in roots}
    checked = faults = unfit = 0
    for trial in range(200):
        ch = roots[trial % len(roots)]
        ch.uniform = bool(trial % 3 == 0)
        rows = int(rng.integers(1, 40))
        per = []
        for _ in ch.o.classes:  # (A, S, D) per class, some terms inf (no split fits)
            terms = [rng.uniform(0.01, 2.0, (rows, 1)) for _ in range(3)]
            terms[int(rng.integers(0, 3))][rng.random((rows, 1)) < 0.1] = np.inf
            per.append(tuple(terms))
        got = ch._combination_bounds(per)
        assert got.tobytes() == _bounds_before(ch, per).tobytes()
        unfit += np.isinf(got).any() and np.isfinite(got).any()
        faults += got.tobytes() != _bounds_before(ch, per, fault=True).tobytes()
        checked += 1
    assert classes >= {1, 2} and unfit > 0 and faults > 0
