"""Readings of the option families' set-up that must not change a float (issue 33, opt6):

- option_recompute.stage_class_slowest_s reads a stage-wise class's stage terms, modes and
  floors once per depth (_class_reads), whatever its counts on each group: read after every
  other split of its depth (the memo warm), each split's A* equals its reading on a fresh
  RecomputeFloor (the memo cold). Planted fault: the reads of other ranks (another ZeRO
  sharding of the state) put in the memo in place of the class's are seen.
- OptionBounds._stage_class_plain reads every v on whole arrays (each v > 1 the class runs reads
  the same terms): against the loop per v it replaced (_loop_plain), on every subset, stage
  counts and tp of a two-group instance. Planted fault: the loop reading every v as one the
  class runs is seen.
"""

from __future__ import annotations

import itertools

import numpy as np
from test_opt4_class_modes import _floor, _inst
from test_partitions_lazy import OPTIONS, tiny2

from paraplan.solver import search as search_mod
from paraplan.solver.bounds import option_recompute
from paraplan.solver.bounds.option_recompute import interleavings, kept_share, runs_v, stage_class_slowest_s, \
    zero_bubble_runs
from paraplan.solver.option_families import OptionFamily


def test_stage_class_reads_once_a_depth_are_the_fresh_ones():
    inst = _inst((1, 2))
    zeros, cp, tp = (0, 1, 2), 1, 1
    most = sum(g.num_gpus for g in inst.cluster.groups) // tp
    warm, cases = _floor(inst), 0
    for pp in (2, 3, 4):
        vs = (1, *interleavings(warm, pp))
        splits = [dict(zip((0, 1), (c, pp - c))) for c in range(1, pp)]
        got = [stage_class_slowest_s(warm, cls, tp, cp, zeros, most, vs) for cls in splits]
        for cls, x in zip(splits, got):
            assert np.array_equal(x, stage_class_slowest_s(_floor(inst), cls, tp, cp, zeros, most, vs)), cls
            cases += 1
    assert cases == 6 and sum(k[0] == "class reads" for k in warm.memo) == 3
    # the planted fault: the reads at 2 ranks (the state sharded over fewer) under the class's key
    caught = 0
    for pp in (2, 3, 4):
        rc = _floor(inst)
        vs = (1, *interleavings(rc, pp))
        cls = dict(zip((0, 1), (1, pp - 1)))
        want = stage_class_slowest_s(rc, cls, tp, cp, zeros, most, vs)
        few = option_recompute._class_reads(rc, (0, 1), tp, cp, pp, zeros, 2)
        rc.memo["class reads", (0, 1), tp, cp, pp, zeros, most] = few
        caught += not np.array_equal(stage_class_slowest_s(rc, cls, tp, cp, zeros, most, vs), want)
    assert caught > 0


def _loop_plain(ob, fam, S: tuple, counts: tuple, every_v: bool = False):
    """_stage_class_plain's (rates, bubbles, read) as the loop per v read them (`every_v`: the
    planted fault, every v read as one the class runs)."""
    L = ob.L
    floors = [ob.fb.floor(g, fam.tp, fam.cp) for g in S]
    rate_lo = sum(c / f for c, f in zip(counts, floors))
    least = L * np.minimum.reduce(floors) + np.minimum.reduce([ob.recompute.head_s(g, fam.tp, fam.cp) for g in S])
    pp = sum(counts)
    kept = kept_share(ob.recompute, fam.tp, fam.cp)
    rates, bubbles, read = [], [], []
    for v in ob.vs:
        runs = v == 1 or every_v or runs_v(ob.recompute, pp, v)
        read.append(not runs or v > 1 and zero_bubble_runs(ob.inst))
        if not runs:
            rates.append(np.zeros(rate_lo.shape))
            bubbles.append(np.full(rate_lo.shape, np.inf))
            continue
        rate = np.minimum(rate_lo, L * pp / least) if v > 1 else rate_lo
        rates.append(rate)
        bubbles.append((kept if v > 1 else 1.0) * (least * rate / L - 1))
    return np.stack(rates), np.stack(bubbles), read


def test_stage_class_plain_is_the_loop_per_v():
    inst = tiny2((4, 4), (1, 2), 12, 32, zero=[0, 1], micro_batch=[1, 2], virtual_stages=[1, 2, 3, 4], **OPTIONS)
    parts = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    ob = parts.ob
    compared = caught = 0
    fams = [f for f in parts.families if isinstance(f, OptionFamily) and f.family == "mixed"]
    for fam in fams:
        for counts in itertools.product(range(1, 5), repeat=len(fam.used)):
            got = ob._stage_class_plain(fam, fam.used, counts)
            rates, bubbles, read = _loop_plain(ob, fam, fam.used, counts)
            assert np.array_equal(got["plain"][0], rates) and np.array_equal(got["plain"][1], bubbles)
            assert got["read"] == read and np.array_equal(got["whole"][0], rates)
            compared += 1
            # the planted fault: every v read as run (a class runs only some)
            caught += not np.array_equal(_loop_plain(ob, fam, fam.used, counts, every_v=True)[1], got["plain"][1])
    assert len(fams) > 0 and compared >= 16 and caught > 0
    assert len(ob.vs) > 2  # (v > 1 read: else the arrays hold v = 1 alone)


def test_mixed_roots_keyed_together_are_each_ones_own(monkeypatch):
    # _keyed_roots reads every mixed root's bound in one pass: each must be _relaxed of that
    # root alone (the reading one call a root made), bit for bit
    inst = tiny2((4, 4), (1, 2), 12, 32, zero=[0, 1], micro_batch=[1, 2], virtual_stages=[1, 2, 3, 4], **OPTIONS)
    parts = search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)
    ob = parts.ob
    roots = [n for f in parts.families if isinstance(f, OptionFamily) and f.family == "mixed"
             for n in ob._roots(f)]
    assert len(roots) > 20 and len({n.bound for n in roots}) > 5
    for n in roots:
        assert n.bound == ob._relaxed(n, n.state, 0), n.stage
    # the planted fault: keyed without the sync after the last backward
    with monkeypatch.context() as m:
        m.setattr(type(ob), "_sync", lambda self, fam, zeros, replicas, shallow: np.zeros((len(ob.fb.mbs),
                                                                                          len(ob.fb.idx))))
        ob._keyed_roots(roots)
    assert sum(n.bound != ob._relaxed(n, n.state, 0) for n in roots) > 0
