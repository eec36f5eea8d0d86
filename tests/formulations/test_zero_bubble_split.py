"""The layer split under torch's zero-bubble schedules (cost/zero_bubble.py; the pipeline term of
cost/schedule.pipeline_time_s): every backend against hand-derived optima and brute force.

Under a zero-bubble schedule each stage's pass through the fill and drain costs
B_s = T_s - k W_s, and the pipeline is paced by the stage whose path is longest:
    pipeline = max_s [ m T_s + (sum_s' B_s' - B_s) / v ].
The coefficients carry k W per layer as layer_drain_saving_s (k w t_s)."""

from __future__ import annotations

import dataclasses
from itertools import islice

import numpy as np
import pytest

from paraplan.cost.schedule import iteration_time_s
from paraplan.cost.specs import ZeroBubble
from test_split import BACKENDS, brute_force, check_consistent, coefficients, random_coefficients, solve


def zero_bubble(c, saving_per_layer: float, kind: ZeroBubble = ZeroBubble.INTERLEAVED):
    """`c` run under `kind`, each layer taking `saving_per_layer` (k w t) off its stage's pass."""
    return dataclasses.replace(c, outer=dataclasses.replace(c.outer, zero_bubble=kind),
                               layer_drain_saving_s=np.full(c.pp, float(saving_per_layer)))


# pp 2, v 2, m 2, 6 layers (chunks of 2: splits (2, 4) and (4, 2)); a layer takes t = 1 per
# micro-batch, of which k W = 0.5 leaves the fill/drain (InterleavedZeroBubble, k = 2, w = 1/4);
# stage 0 carries 2.1 more (its embedding), no sync, memory unbounded (recompute only adds time).
#   (2, 4): T = (4.1, 4), kW = (1, 2), B = (3.1, 2), sum B = 5.1
#           stage 0's path 2 * 4.1 + 2 / 2 = 9.2;  stage 1's 2 * 4 + 3.1 / 2 = 9.55  -> 9.55
#   (4, 2): T = (6.1, 2), kW = (2, 1), B = (4.1, 1)
#           stage 0's path 2 * 6.1 + 1 / 2 = 12.7; stage 1's 4 + 4.1 / 2 = 6.05    -> 12.7
# The optimum is (2, 4) at 9.55, paced by stage 1 although stage 0 is the slower: reading the
# pacing stage as the slowest would give 9.2, and Interleaved1F1B gives 2 * 4.1 + 4 / 2 = 10.2.
NEAR_TIE = dict(pp=2, L=6, m=2, v=2, layer_time=1.0, recompute_time=0.5, stage_time=[2.1, 0.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_interleaved_zero_bubble_paced_by_the_longest_path(backend):
    c = zero_bubble(coefficients(**NEAR_TIE), 0.5)
    res = solve(backend, c)
    assert res.status == "optimal"
    assert res.layers_per_stage == (2, 4)
    assert res.objective_s == pytest.approx(9.55, abs=res.tolerance_s)
    assert float(iteration_time_s(c, np.array([2, 4]), np.zeros(2))) == pytest.approx(9.55, rel=1e-12)
    plain = solve(backend, coefficients(**NEAR_TIE))  # Interleaved1F1B on the same terms
    assert plain.objective_s == pytest.approx(10.2, abs=plain.tolerance_s)


# ZBVZeroBubble (k = 3) on pp 3, v 2, m 6 (>= 2 pp - 1, and a multiple of pp as the space's
# interleaved counts are), 8 layers (chunks of 2 over three stages: (2, 2, 4), (2, 4, 2),
# (4, 2, 2)); t = 1, k W = 0.75 per layer (w = 1/4); stage terms a = (0.5, 0, 0.2):
#   (2, 2, 4): T = (2.5, 2, 4.2), B = (1, 0.5, 1.2), sum 2.7; stage 2's path 6 * 4.2 + 1.5 / 2 = 25.95
#   (2, 4, 2): T = (2.5, 4, 2.2), B = (1, 1, 0.7),   sum 2.7; stage 1's path 6 * 4 + 1.7 / 2 = 24.85
#              (stage 0's 15 + 0.85, stage 2's 13.2 + 1)
#   (4, 2, 2): T = (4.5, 2, 2.2), B = (1.5, 0.5, 0.7), sum 2.7; stage 0's 27 + 1.2 / 2 = 27.6
# -> (2, 4, 2) at 24.85; Interleaved1F1B there: 6 * 4 + (2.5 + 2.2) / 2 = 26.35.
ZBV = dict(pp=3, L=8, m=6, v=2, layer_time=1.0, recompute_time=0.5, stage_time=[0.5, 0.0, 0.2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_zbv_split_by_hand(backend):
    c = zero_bubble(coefficients(**ZBV), 0.75, ZeroBubble.V)
    res = solve(backend, c)
    assert res.status == "optimal"
    assert res.layers_per_stage == (2, 4, 2)
    assert res.objective_s == pytest.approx(24.85, abs=res.tolerance_s)
    assert solve(backend, coefficients(**ZBV)).objective_s == pytest.approx(26.35, abs=1e-6)


def interleaved_seeds(count: int) -> list[int]:
    """The first `count` seeds of random_coefficients with v = 2 (zero-bubble schedules
    interleave)."""
    # islice: the search stops at the count-th (seed 17 of 12), not at 200 (issue 32)
    return list(islice((s for s in range(200) if random_coefficients(s)[0].outer.virtual_stages == 2), count))


@pytest.mark.parametrize("seed", interleaved_seeds(12))
def test_every_backend_finds_the_brute_force_optimum(seed):
    # random memory-bound coefficients (tests/formulations/test_split.py) under a zero-bubble
    # schedule: brute force evaluates cost/schedule.iteration_time_s on every (n, r)
    base, allow = random_coefficients(seed)
    share = (seed % 3 + 1) / 4  # k w in 1/4 .. 3/4
    c = dataclasses.replace(base, outer=dataclasses.replace(base.outer, zero_bubble=ZeroBubble.INTERLEAVED),
                            layer_drain_saving_s=share * base.layer_time_s)
    best = brute_force(c, allow)
    for backend in ("dp", "cpsat", "cbc"):
        res = solve(backend, c, allow)
        check_consistent(res, c, allow)
        if best is None:
            assert res.status == "infeasible", backend
            continue
        assert res.status == "optimal", backend
        assert res.objective_s == pytest.approx(best, abs=res.tolerance_s + 1e-12), backend


@pytest.mark.parametrize("seed", interleaved_seeds(12))
def test_bounds_before_solving_stay_below_the_optimum(seed):
    # every bound solver/bounds/ reads from coefficients (one_class's, the coupled test at the
    # optimum, batched.lower_bounds_s) against the brute-force optimum under the schedule: each
    # subtracts what the drain saving can take off 1F1B's form (one_class.drain_credit_s)
    from paraplan.solver.bounds import one_class
    from paraplan.solver.bounds.batched import lower_bounds_s
    from test_split import lone_class
    base, allow = random_coefficients(seed)
    c = zero_bubble(base, 0.0)
    c = dataclasses.replace(c, layer_drain_saving_s=(seed % 3 + 1) / 4 * base.layer_time_s)
    best = brute_force(c, allow)
    if best is None:
        return
    assert one_class.lower_bound_s(c) <= best
    assert one_class.tight_lower_bound_s(c, allow) <= best
    assert one_class.tight_lower_bounds_s([c], allow)[0] <= best
    assert not one_class.coupled_bound_above(c, allow, best * (1 + 1e-12))
    assert not one_class.coupled_bounds_above([c], allow, [best * (1 + 1e-12)])[0]
    p = lone_class(c, allow)
    assert lower_bounds_s([p], lambda i: None)[0] <= best
    # and the credit is not vacuous: without it the 1F1B bound of the same terms is higher
    plain = dataclasses.replace(c, layer_drain_saving_s=np.zeros(0))
    assert one_class.lower_bound_s(plain) > one_class.lower_bound_s(c)
