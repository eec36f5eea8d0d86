"""torch's zero-bubble schedules on several replica classes (formulations/multiclass.py C6z/C9z,
multiclass_milp.py, solver/exhaustive.py): each class's micro-batch count m_k is a decision, so
its pipeline term max_s [m_k T_s + (sum_s' B_s' - B_s) / v] holds the product m_k T_s on every
stage. Every backend and exhaustive search against a hand-derived optimum."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.cost.class_coefficients import iteration_time_s
from paraplan.cost.plan_specs import ClassShape
from paraplan.cost.specs import ZeroBubble
from paraplan.formulations.multiclass import MultiClassProblem, solve_multiclass_cpsat
from paraplan.formulations.multiclass_milp import solve_multiclass_milp
from paraplan.solver.exhaustive import _several_classes
from paraplan.solver.space import micro_batch_vectors
from test_split import coefficients
from test_zero_bubble_split import zero_bubble

# Two classes of one replica each, pp 2, v 2, 6 layers (chunks of 2: splits (2, 4) and (4, 2)),
# M = 10 micro-batches; with v > 1 and several classes m_k is a multiple of pp_k from 2 pp_k
# (multiclass.py lo_k, st_k), so (m_A, m_B) is (4, 6) or (6, 4). No sync, memory unbounded
# (recompute only adds time). Under InterleavedZeroBubble a class's pipeline term is
# max_s [m T_s + (sum B - B_s) / 2], B_s = T_s - kW_s.
#   Class A: t = 1 per layer, kW = 0.5 per layer, stage terms a = (2.1, 0):
#     (2, 4): T = (4.1, 4), B = (3.1, 2): stage 0's path 4.1 m + 1, stage 1's 4 m + 1.55
#             m = 4: 17.4 vs 17.55 -> 17.55 (paced by stage 1, the faster one)
#             m = 6: 25.6 vs 25.55 -> 25.6  (paced by stage 0: the pacing stage moves with m)
#     (4, 2): T = (6.1, 2), B = (4.1, 1): 6.1 m + 0.5 -> 24.9 at m = 4, 37.1 at m = 6
#   Class B: t = 0.715, kW = 0.3575 per layer, a = (0, 0.05):
#     (4, 2): T = (2.86, 1.48), B = (1.43, 0.765): stage 0's path 2.86 m + 0.3825
#             m = 6: 17.5425 (stage 1's 1.48 * 6 + 0.715 = 9.595);  m = 4: 11.8225
#     (2, 4): T = (1.43, 2.91), B = (0.715, 1.48): stage 1's 2.91 m + 0.3575 -> 17.8175 at m = 6
#   (m_A, m_B) = (4, 6): max(17.55, 17.5425) = 17.55;  (6, 4): max(25.6, 11.8225) = 25.6.
# The optimum is m = (4, 6), A (2, 4), B (4, 2), at 17.55, paced by class A's faster stage.
# Reading each class's pacing stage as its slowest would give max(17.4, 17.5425) = 17.5425,
# and Interleaved1F1B on the same terms 4 * 4.1 + 4 / 2 = 18.4 for class A alone.
OPTIMUM_S = 17.55


def problem() -> MultiClassProblem:
    a = zero_bubble(coefficients(pp=2, L=6, v=2, layer_time=1.0, stage_time=[2.1, 0.0]), 0.5)
    b = zero_bubble(coefficients(pp=2, L=6, v=2, layer_time=0.715, stage_time=[0.0, 0.05]), 0.3575)
    return MultiClassProblem(coeffs=((a, b),), replicas=(1, 1), total_micro_batches=10, virtual_stages=2)


def test_the_hand_derived_terms_are_the_simulators():
    p = problem()
    a, b = p.coeffs[0]
    assert iteration_time_s([a, b], [4, 6], [np.array([2, 4]), np.array([4, 2])], [np.zeros(2)] * 2,
                            2) == pytest.approx(OPTIMUM_S, rel=1e-12)
    assert iteration_time_s([a, b], [6, 4], [np.array([2, 4]), np.array([4, 2])], [np.zeros(2)] * 2,
                            2) == pytest.approx(25.6, rel=1e-12)


@pytest.mark.parametrize("backend", ("cpsat", "cbc", "scip", "highs"))
def test_several_classes_by_hand(backend):
    p = problem()
    res = (solve_multiclass_cpsat(p, time_limit_s=10) if backend == "cpsat"
           else solve_multiclass_milp(p, 10, backend))
    assert res.status == "optimal"
    assert res.micro_batches == (4, 6)
    assert res.layers_per_stage == ((2, 4), (4, 2))
    assert res.objective_s == pytest.approx(OPTIMUM_S, abs=res.tolerance_s)
    assert res.bound_s <= res.objective_s


def test_exhaustive_enumerates_the_counts_and_splits():
    p = problem()
    a = p.coeffs[0][0]
    mvecs = micro_batch_vectors([ClassShape(replicas=1, stage_groups=(k, k)) for k in (0, 1)], 10, v=2)
    assert sorted(map(tuple, mvecs.tolist())) == [(4, 6), (6, 4)]
    _, _, minima, whole = _several_classes(p, mvecs, 2, False, "max", (), None)
    assert whole
    best = min(minima, key=lambda x: x[0])
    assert best[0] == pytest.approx(OPTIMUM_S, rel=1e-12)
    assert [tuple(n) for n in best[1]] == [(2, 4), (4, 2)]
    assert a.outer.zero_bubble is ZeroBubble.INTERLEAVED
