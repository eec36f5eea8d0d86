"""The node expansion of the layer-plan search read with less work (solver/class_partitions.
OuterChoices._step, _linked, _price_buckets; solver/bounds/plan_bottleneck's *_picked; issue 33).

Each is checked against the number it replaces, computed independently:
- least_levels_picked and least_sums_picked, on random stage levels (test_plan_bottleneck's
  generator) and random picks of one entry per group, equal least_levels and least_sums read
  row by row (themselves checked by brute force in test_plan_bottleneck), float for float;
- a first-level node's class terms kept from its parent's step (kid_terms) give the linked key
  read without them (_class_terms of the node's own coefficients), exactly, on tiny-2types at
  tp 4 and with a model whose memory binds; a planted fault (the kept slowest stage raised)
  moves the key, so the kept terms are what is read;
- a choice's plans and buckets priced in one pass (_price_buckets) equal those priced one at a
  time: a plan's own build (cost/coefficients.build), a bucket's elementwise minimum of its two
  optimistic builds (_below), field by field.
Planted faults show each comparison can fail.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import _choices_of, _choices_of_one  # noqa: E402
from test_plan_bottleneck import CASES, _random_levels  # noqa: E402

from oracles.bounds import least_levels, least_sums  # noqa: E402
from paraplan.cost import partition as P  # noqa: E402
from paraplan.cost.class_coefficients import on_group  # noqa: E402
from paraplan.solver.bounds.plan_bottleneck import (group_steps, group_sums, least_levels_picked,  # noqa: E402
                                                    least_sums_picked)
from paraplan.solver.class_partitions import _const  # noqa: E402
from paraplan.solver.partition_plans import optimistic_terms, stage_arrays  # noqa: E402


def _random_entries(seed: int):
    """(entries, picks, need): per group of test_plan_bottleneck's random levels, its plans cut
    into one to three entries (buckets, each (plans, stages, chunks)); 1-40 rows of picks of
    one entry per group."""
    rng = np.random.default_rng(seed)
    plans, need = _random_levels(rng, convex=seed % 2 == 0)
    entries = []
    for lv in plans:
        cuts = sorted(set(rng.integers(1, lv.shape[0] + 1, 2).tolist()) | {lv.shape[0]})
        entries.append([lv[a:b] for a, b in zip([0] + cuts[:-1], cuts) if b > a])
    rows = int(rng.integers(1, 41))
    picks = np.stack([rng.integers(0, len(e), rows) for e in entries], 1)
    return entries, picks, need


@pytest.mark.parametrize("seed", range(60))
def test_picked_reads_equal_the_row_by_row_reads(seed):
    per, picks, need = _random_entries(seed)
    steps = [[group_steps(lv) for lv in e] for e in per]
    sums = [[group_sums(lv, need) for lv in e] for e in per]
    rows = picks.tolist()
    want_levels = least_levels([[steps[g][j] for g, j in enumerate(r)] for r in rows], need)
    want_sums = least_sums([[sums[g][j] for g, j in enumerate(r)] for r in rows], need)
    assert np.array_equal(least_levels_picked(steps, picks, need), want_levels)
    assert np.array_equal(least_sums_picked(sums, picks, need), want_sums)


def test_picked_reads_cover_finite_and_unfit_rows_and_catch_a_planted_fault():
    # across the seeds both finite and inf answers occur, and a raised entry moves some answer
    finite = unfit = moved = moved_sums = 0
    for seed in range(60):
        per, picks, need = _random_entries(seed)
        steps = [[group_steps(lv) for lv in e] for e in per]
        got = least_levels_picked(steps, picks, need)
        finite += np.isfinite(got).sum()
        unfit += np.isinf(got).sum()
        # planted fault: every level of group 0's entries raised by one: a row that fits moves
        bad = [[(z + 1.0, c) for z, c in steps[0]]] + steps[1:]
        moved += not np.array_equal(least_levels_picked(bad, picks, need), got)
        sums = [[group_sums(lv, need) for lv in e] for e in per]
        total = least_sums_picked(sums, picks, need)
        raised = least_sums_picked([[s + 1.0 for s in sums[0]]] + sums[1:], picks, need)
        moved_sums += not np.array_equal(raised, total)
    # measured when written: 291 rows finite, 864 inf; 16 and 19 of 60 seeds moved
    assert finite > 50 and unfit > 10 and moved > 8 and moved_sums > 8


@pytest.mark.parametrize("case", CASES)
def test_kept_class_terms_give_the_key_read_without_them(case):
    inst = CASES[case]()
    checked = planted = 0
    for o, ch in _choices_of(inst)[::3]:
        if ch.optimistic(stop_unfit=True) is None:
            continue
        nodes = [n for _, n in ch.expand(math.inf).nodes if n.level == 1 and not n.linked]
        kept = [n for n in nodes if n.sets in ch.kid_terms]
        assert len(kept) == len(nodes)  # the root's step keeps every child's terms
        for n in kept[:: max(1, len(kept) // 4)]:
            memo = float(ch._linked([n])[0])
            fresh = _choices_of_one(inst, o)  # no terms kept: read from the node's coefficients
            fresh.optimistic(stop_unfit=True)
            fresh.expand(math.inf)
            fresh.kid_terms.clear()
            assert float(fresh._linked([n])[0]) == memo
            # planted fault: the kept slowest stage of class 0 doubled raises a finite key
            A, S, D, fits = ch.kid_terms[n.sets][0]
            saved = ch.kid_terms[n.sets]
            ch.kid_terms[n.sets] = [(A * 2, S, D, fits)] + saved[1:]
            if math.isfinite(memo) and np.isfinite(A).all():
                planted += float(ch._linked([n])[0]) != memo
            ch.kid_terms[n.sets] = saved
            checked += 1
    assert checked >= 4 and planted >= 1


def _fields_equal(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in stage_arrays(a))


@pytest.mark.parametrize("case", CASES)
def test_plans_priced_in_one_pass_equal_those_priced_alone(case):
    inst = CASES[case]()
    checked = 0
    for o, ch in _choices_of(inst)[::5]:
        if ch.optimistic(stop_unfit=True) is None:
            continue
        ch.expand(math.inf)  # the root: plans recorded, nothing priced yet
        for x in ch.open:
            k, g = x
            plans = list(range(1, len(ch.plans[x])))[:6]
            bucket = tuple(plans[:3])
            ch._price_buckets(x, [(p,) for p in plans] + [bucket])
            for p in plans:
                fn = P.partition_layer_fn(dict(ch.plans[x][p]))
                for si, i in enumerate(ch.scenarios):
                    alone = ch._build(inst, ch.co[k], ch.net, inst.search.memory_reserve_bytes,
                                      placement=ch.placed(i, k),
                                      layer_fn=ch._layer_fn(i, k, {g: on_group(fn, ch.ginst[i, g])}))
                    assert _fields_equal(ch.priced[k, g, (p,)][si], alone)
                    checked += 1
            if len(bucket) > 1:
                for si, (i, (ginst, site, _)) in enumerate(zip(ch.scenarios, ch._where(k, g))):
                    lo, hi = optimistic_terms(P.table_for(ginst, ch.cg[x], site, ch.net),
                                              ch.rows[x][si][np.array(bucket) - 1])
                    below = ch._below(i, k, {g: _const(lo)}, {g: _const(hi)})
                    assert _fields_equal(ch.priced[k, g, bucket][si], below)
                    # planted fault: another plan's build differs somewhere
                    assert not _fields_equal(ch.priced[k, g, (plans[0],)][si], below) or len(plans) == 1
    assert checked >= 10
