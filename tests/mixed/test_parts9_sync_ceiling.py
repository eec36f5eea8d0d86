"""The layer plans' least sync read only as far as it decides (solver/bounds/plan_sync.py:
raised_partial_bounds under the search's bar, each configuration's classes read while they
can lower the least D, each outer's sync kept by what it reads of an outer, the quantile factor
kept by what it reads), on test_plan_sync's two-site instances with the layout options, ZeRO
0 and 1 and both sequence-parallel flags (170 to 174 partial layouts of other families than the
stage-wise one, outers of 1 to 4 classes, v up to 4).

Checked against the full reading, computed here from the module's definitions alone (each
outer's D from plan_sync.layer_sync_floors with a fresh memo per outer, every class read, every
configuration each block lists, its quantile factor from trust.objective_factor_of each time):
- without a bar each raised bound and each raised key is the full reading's, float for float,
  with one memo shared across every call (so outers of one key and floors read once are reused)
  and on a worst case and a weighted aggregate over scenarios;
- under a bar each raised bound is at most the full reading's (test_plan_sync checks that one
  against every layer-plan combination's priced bound), and the search keeps or drops the
  layout as on the full reading: past the bar exactly where the full reading is, at bars from
  1e-3 to 1e-5 on either side of each layout's full reading, between its bound and that, and
  below its bound;
- each check fails on a planted fault: an outer's sync kept without its ZeRO stage, the slack
  turned over (a layout kept past the bar), each outer's classes read only up to the first.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_partitions_lazy import OPTIONS
from test_plan_sync import CASES, two_sites

from paraplan.cost.class_coefficients import class_outers
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.bounds import plan_sync
from paraplan.solver.bounds.layouts import partial_bounds_s
from paraplan.solver.space import declared_outers, declared_partials

VARIANTS = dict(zero=[0, 1], sequence_parallel=[False, True], **OPTIONS)
# aggregates over scenarios: the worst case (the least D) and a weighted one; the instances have
# one network scenario, read twice for the weighted one (the weights enter as they would)
AGGREGATES = (([0], "max", ()), ([0, 0], "expected", (0.25, 0.75)))


def _instance(case):
    return two_sites(*case, **VARIANTS)


def full_d(inst, o, idx, agg, weights) -> float:
    """An outer's D aggregated over `idx` as plan_sync's module docstring defines it: per scenario
    the largest over classes (and 0) of max((sum_s d_s + L min_s g_s) / pp, max_s (d_s + g_s)),
    the floors (g, d) of each class's stages per group from layer_sync_floors, a fresh memo each;
    then the least over scenarios for a worst case, else their weighted sum."""
    net, ring, cos, L = NetEfficiency(), plan_sync.ring_shape(o), class_outers(inst.job, o), inst.model.layers
    per_scenario = []
    for i in idx:
        best = 0.0
        for k, c in enumerate(o.classes):
            floors = {g: plan_sync.layer_sync_floors(inst, o, cos[k], i, g, {}, net, ring) for g in set(c.stage_groups)}
            gs = np.array([floors[g][0] for g in c.stage_groups])
            ds = np.array([floors[g][1] for g in c.stage_groups])
            best = max(best, max((ds.sum() + L * gs.min()) / len(c.stage_groups), float((ds + gs).max())))
        per_scenario.append(best)
    d = np.array(per_scenario)
    return d.min() if agg == "max" else float(d @ np.asarray(weights, float))


def full_reading(inst, part, bound_s: float, idx, agg, weights) -> float:
    """raised_partial_bounds' bound of one layout read in full: every configuration its blocks
    list (OuterBlock.outers: every v of every mode), the least D and the least factor; unraised
    where some block runs an embedding / loss slot or some configuration is not read
    (plan_sync.applies)."""
    outers = [o for blk in part.blocks() for o in blk.outers()]
    if any(o.embedding_in_split or o.loss_in_split or not plan_sync.applies(inst, o) for o in outers):
        return bound_s
    least_d = min((full_d(inst, o, idx, agg, weights) for o in outers), default=math.inf)
    least_f = min((objective_factor_of(inst, o) for o in outers), default=math.inf)
    if 0 < least_d < math.inf:
        return (bound_s + least_f * least_d) * (1 - plan_sync.MARGIN)
    return bound_s


def _layouts(inst):
    partials = [p for p in declared_partials(inst) if p.dp is None]
    return partials, partial_bounds_s(inst, partials, [0], "max", ())


def full_mismatches(inst, idx, agg, weights) -> list:
    """The layouts whose raised bound without a bar differs from the full reading (one memo
    across the calls, a layout at a time and then all at once)."""
    partials, bounds = _layouts(inst)
    memo: dict = {}
    one = [float(plan_sync.raised_partial_bounds(inst, [p], [b], idx, agg, weights, memo)[0])
           for p, b in zip(partials, bounds.tolist())]
    every = plan_sync.raised_partial_bounds(inst, partials, bounds, idx, agg, weights, memo).tolist()
    ref = [full_reading(inst, p, b, idx, agg, weights) for p, b in zip(partials, bounds.tolist())]
    assert sum(r > b for r, b in zip(ref, bounds.tolist())) > len(ref) // 2  # the raise is read
    return [(n, x, y, r) for n, (x, y, r) in enumerate(zip(one, every, ref)) if not x == y == r]


def _bars(bound_s: float, full_s: float) -> list[float]:
    """Bars around a layout's full reading, between it and the layout's bound, and below that."""
    return [full_s * (1 + e) for e in (-1e-3, -1e-5, 1e-5, 1e-3)] + [(bound_s + full_s) / 2, bound_s * (1 - 1e-3)]


def barred_faults(inst) -> list:
    """Per layout and bar (_bars; the search passes its bar times 1 + REL_TOL), where the bound read
    under it passes the full reading or is kept or dropped otherwise than that (past the bar)."""
    partials, bounds = _layouts(inst)
    memo: dict = {}
    faults = []
    for part, b in zip(partials, bounds.tolist()):
        full_s = full_reading(inst, part, b, [0], "max", ())
        for bar in _bars(b, full_s):
            got = float(plan_sync.raised_partial_bounds(inst, [part], [b], [0], "max", (), memo, bar)[0])
            if got > full_s or (got > bar) != (full_s > bar):
                faults.append((b, full_s, bar, got))
    return faults


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{'wide' if c[5] else 'tiny'}")
@pytest.mark.parametrize("read", AGGREGATES, ids=("worst", "weighted"))
def test_raised_partial_bounds_without_a_bar_are_the_full_reading(case, read):
    assert full_mismatches(_instance(case), *read) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{'wide' if c[5] else 'tiny'}")
def test_raised_partial_bounds_under_a_bar_decide_as_the_full_reading(case):
    assert barred_faults(_instance(case)) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{'wide' if c[5] else 'tiny'}")
@pytest.mark.parametrize("read", AGGREGATES, ids=("worst", "weighted"))
def test_raised_keys_are_the_full_reading(case, read):
    inst = _instance(case)
    outers = [o for o in declared_outers(inst) if plan_sync.applies(inst, o)]
    assert len({o.zero for o in outers}) == 2
    if case is CASES[0]:  # v up to 4: outers that share a key (their v > 1 differ)
        assert len({plan_sync._sync_key(o, 0) for o in outers}) < len(outers)
    keys = np.linspace(1.0, 2.0, len(outers))
    got = plan_sync.raised_keys(inst, outers, keys, *read, {})
    ref = [(k + objective_factor_of(inst, o) * d) * (1 - plan_sync.MARGIN) if (d := full_d(inst, o, *read)) > 0 else k
           for o, k in zip(outers, keys.tolist())]
    assert got.tolist() == ref


def test_each_check_fails_on_a_planted_fault(monkeypatch):
    inst = _instance(CASES[0])
    with monkeypatch.context() as m:  # an outer's sync kept without its ZeRO stage
        m.setattr(plan_sync, "_sync_key", lambda o, i: ("outer sync", i, o.classes, o.tp, o.group_tp, o.cp,
                                                        o.micro_batch, o.sequence_parallel, o.recompute))
        assert full_mismatches(inst, *AGGREGATES[0])
    with monkeypatch.context() as m:  # the slack turned over: kept above the bar, dropped below it
        m.setattr(plan_sync, "CEILING_SLACK", -1e-3)
        assert barred_faults(inst)
    up_to = plan_sync._least_sync_up_to
    with monkeypatch.context() as m:  # each outer's classes read up to the first only
        m.setattr(plan_sync, "_least_sync_up_to", lambda *a: up_to(*a[:6], -math.inf))
        assert full_mismatches(inst, *AGGREGATES[0])
