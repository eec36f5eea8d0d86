"""The pipeline hand-offs in the option families' bound (issue 33): option_recompute.
RecomputeFloor.hand_off_s (cost/class_coefficients.least_hand_off_s) charges every stage of a
replica class of two stages or more the least hand-off it can pay, and hand_offs_s their sum,
in the class's A_lo and S_lo (option_families._plain_terms, RecomputeFloor.class_terms).

Derivation checked here: build prices each stage's hand-offs (coefficients._pipeline_p2p_s on
class_coefficients.class_placement) as the sum over the edges it touches of v (p2p + the tp
all-gather); every stage touches one edge at least, a class has pp - 1 edges (pp at v > 1) and
each counts on both its stages. So least_hand_off_s must be at most each stage's priced hand-off
and twice the edges times it at most their sum, on every class build prices; and the roots'
bounds, which read them, at most the priced optimum of every layout the root holds.

Each check is run with a planted fault too (the hand-off of the NIC alone, where a stage's
hand-off may stay on NVLink; the charge scaled up), which it must catch."""

from __future__ import annotations

import dataclasses
import math

import pytest
from option_layouts import option_family_layouts
from randinst import random_instance
from test_many_types_agreement import many_types_instance
from test_option_bound_admissible import optimum_s

from paraplan.cost import comm
from paraplan.cost.class_coefficients import class_outers, class_placement, least_hand_off_s
from paraplan.cost.coefficients import placed_extras
from paraplan.solver import search as search_mod
from paraplan.solver.bounds import option_recompute
from paraplan.solver.option_families import OptionFamily


def _one_group(seed: int):
    inst = random_instance(seed)
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2, idle_gpus=True))


def _lazy(inst):
    return search_mod._Partials.of(inst, "nominal", search_mod.FAMILIES, None)


def _nic_only_s(m, group, tp, cp, micro_batch, sp, v) -> float:
    """The planted fault: least_hand_off_s with the NIC as every edge's link."""
    emb_io = micro_batch * m.seq_len / cp * m.hidden * 2
    regather = 0.0 if tp == 1 or sp else comm.all_gather_time_s(emb_io, tp, *comm.group_link(group, tp, 1),
                                                                 comm.NetEfficiency())
    return v * (comm.p2p_time_s(emb_io / tp, group.inter_node, True, comm.NetEfficiency()) + regather)


def _stage_hand_offs(inst, limit: int = 400):
    """(group, class outer, priced hand-off per stage) of the classes of two stages or more on
    one group in the configurations the option families set up (at most `limit`)."""
    seen = 0
    for _, _, part in option_family_layouts(_lazy(inst)):
        for o in (o for blk in part.blocks() for o in blk.outers()):
            for k, (c, co) in enumerate(zip(o.classes, class_outers(inst.job, o))):
                if c.pp < 2 or len(set(c.stage_groups)) > 1:
                    continue
                x = placed_extras(inst, co, class_placement(inst.cluster, o, k))
                yield inst.cluster.groups[c.stage_groups[0]], o, c, x.p2p_s
                seen += 1
                if seen >= limit:
                    return


# seeds whose option families set up classes of two stages or more (1, 3, 5 and 7 none)
@pytest.mark.parametrize("make,seed", [(_one_group, 2), (_one_group, 4), (_one_group, 6), (many_types_instance, 2)])
def test_least_hand_off_is_at_most_every_priced_stage(make, seed):
    inst = make(seed)
    checked = tight = caught = 0
    for group, o, c, p2p in _stage_hand_offs(inst):
        tp = o.tp_of(c.stage_groups[0])
        args = (inst.model, group, tp, o.cp, o.micro_batch, o.sequence_parallel, o.virtual_stages)
        e = least_hand_off_s(*args)
        edges = c.pp - 1 + (o.virtual_stages > 1)
        assert min(p2p) >= e * (1 - 1e-12), (o, p2p, e)
        assert sum(p2p) >= 2 * edges * e * (1 - 1e-12), (o, p2p, e)
        checked += 1
        tight += math.isclose(min(p2p), e, rel_tol=1e-12)
        caught += min(p2p) < _nic_only_s(*args) * (1 - 1e-9)
    assert checked > 0
    assert tight > 0  # the least is some stage's own hand-off
    assert caught > 0  # a hand-off on NVLink that the NIC's would over-charge


def _bounds_against_optima(inst, scale: float = 1.0):
    """Per root of every option family, then per node that set up layouts: (its bound, the least
    priced optimum of its layouts, the same node's bound with no hand-off), the hand-offs scaled
    by `scale` (1: as the planner reads them). Every family is opened and expanded whole."""
    real = option_recompute.RecomputeFloor.hand_off_s

    def bounds(factor: float, price: bool) -> dict:
        def charged(self, *a, **k):
            return factor * real(self, *a, **k)
        out: dict[tuple, list] = {}
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(option_recompute.RecomputeFloor, "hand_off_s", charged)
            lazy = _lazy(inst)
            for _, node, part in option_family_layouts(lazy):
                opt = optimum_s(inst, part) if price else math.nan
                root = next(r for r in lazy.ob.root_memo[node.fam, False]
                            if r.ways is node.ways and r.stage == node.stage and r.pipelined == node.pipelined)
                for key, bound in (((node.fam, node.stage, node.pipelined), root.bound),
                                   ((node.fam, node.stage, node.pipelined, node.picked), node.bound)):
                    got = out.setdefault(key, [bound, math.inf])
                    got[1] = min(got[1], opt) if price else math.nan
        return out

    got, bare = bounds(scale, True), bounds(0.0, False)
    rows = {key: (b, opt, bare[key][0]) for key, (b, opt) in got.items() if math.isfinite(opt)}
    return [r for k, r in rows.items() if len(k) == 3], [r for k, r in rows.items() if len(k) == 4]


# each case prices every layout the option families set up (twice the search: 5-11 s on a loaded core)
@pytest.mark.slow
@pytest.mark.parametrize("make,seed", [(_one_group, 4), (_one_group, 6), (many_types_instance, 2)])
def test_root_bound_is_at_most_its_layouts_priced_optimum(make, seed):
    roots, nodes = _bounds_against_optima(make(seed))
    assert roots and nodes
    for bound, opt, _ in roots + nodes:
        assert bound <= opt * (1 + 1e-9), (bound, opt)
    # the hand-offs are read: some node's bound is above its reading without them
    assert any(bound > bare * (1 + 1e-9) for bound, _, bare in roots + nodes)


@pytest.mark.slow
def test_an_over_charged_hand_off_is_caught():
    """The planted fault: hand-offs charged 10 times over put some bound above a layout it
    holds, which the check above reports."""
    roots, nodes = _bounds_against_optima(_one_group(4), scale=10.0)
    assert any(bound > opt * (1 + 1e-9) for bound, opt, _ in roots + nodes)
