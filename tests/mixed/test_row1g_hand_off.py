"""The pipeline hand-off of one pair of groups (cost/coefficients.hand_off_s, read by
solver/bounds/order_free._edge_s) against build's own: on small random clusters with slow links
between groups (test_hand_off_floors.slow_links_instance: tp 1 or 2 per group, v 1 or 2), each
stage's hand-offs in build's stage extras (coefficients.placed_extras on the configuration's
own placement, every stage order the space lists) equal the sum of the pair hand-offs of the
edges that stage touches: the next and previous stage's and, interleaved, the wrap-around
between the last stage and the first."""

from __future__ import annotations

import random

import pytest
from test_hand_off_floors import slow_links_instance

from paraplan.cost.class_coefficients import class_outers, class_placement
from paraplan.cost.coefficients import placed_extras
from paraplan.solver.bounds import order_free
from paraplan.solver.space import declared_outers

# configurations checked per seed at most (a seeded draw)
PER_SEED = 150


def _pipelines(inst) -> list:
    """A seeded draw of the space's one-class pipelines through two groups or more."""
    got = [o for o in declared_outers(inst)
           if len(o.classes) == 1 and o.zero_bubble is None and len(set(o.classes[0].stage_groups)) >= 2]
    return random.Random(len(got)).sample(got, min(PER_SEED, len(got)))


@pytest.mark.parametrize("seed", (0, 1, 2, 3))
def test_pair_hand_offs_sum_to_builds_per_stage(seed):
    inst = slow_links_instance(seed)
    outers = _pipelines(inst)
    assert outers
    interleaved = 0
    for o in outers:
        groups = o.classes[0].stage_groups
        pp = len(groups)
        edges = [(s, s + 1) for s in range(pp - 1)] + ([(pp - 1, 0)] if o.virtual_stages > 1 else [])
        interleaved += o.virtual_stages > 1
        memo: dict = {}
        expected = [0.0] * pp
        for a, z in edges:
            e, _ = order_free._edge_s(inst, 0, o, groups[a], groups[z], memo)
            expected[a] += e
            expected[z] += e
        built = placed_extras(inst, class_outers(inst.job, o)[0], class_placement(inst.scenarios[0].cluster, o, 0))
        assert built.p2p_s == pytest.approx(expected, rel=1e-12, abs=0), (o, built.p2p_s, expected)
        assert any(x > 0 for x in expected)
    assert interleaved  # v = 2's scaling is checked, not only v = 1's
