"""Heterogeneous planner pieces checked against numbers derived by hand or by the homogeneous
planner, plus the switching cost, re-planning and the multi-period timeline choice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from randinst import random_instance

from paraplan.cost.specs import Instance
from paraplan.cost.coefficients import build
from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.readers.scenarios import load_event
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.plan_specs import ClassShape, ClassOuter
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.switching import switch_time_s
from paraplan.cost.specs import Outer, SearchSpace
from paraplan.formulations.timeline import choose_plans, timeline_iterations
from paraplan.solver.dynamic import replan
from paraplan.solver.bounds.batched import balanced_split
from paraplan.solver.search import search
from paraplan.solver.space import count_micro_batch_splits, has_micro_batch_split, micro_batch_vectors
from paraplan.solver.exhaustive import exhaustive

ROOT = Path(__file__).resolve().parents[2]
TINY2 = ROOT / "instances/mixed/tiny-2types.yaml"
DYNAMIC = ROOT / "instances/mixed/llama3-8b-dynamic.yaml"
EVENT = ROOT / "instances/mixed/events/inter-site-degraded.yaml"


def test_micro_batch_vectors_by_hand():
    # x = (2, 1) replicas, pp = (1, 2), total 8: 2 m1 + m2 = 8, m1 >= 1, m2 >= 2
    # -> m1 = 1, 2, 3 with m2 = 6, 4, 2
    shapes = (ClassShape(replicas=2, stage_groups=(0,)), ClassShape(replicas=1, stage_groups=(1, 1)))
    assert micro_batch_vectors(shapes, 8).tolist() == [[1, 6], [2, 4], [3, 2]]
    # uniform: the same count on all 3 replicas needs 3 | total and >= the largest pp (2)
    assert micro_batch_vectors(shapes, 9, uniform=True).tolist() == [[3, 3]]
    assert micro_batch_vectors(shapes, 8, uniform=True).size == 0


def test_balanced_split_is_the_min_max_split():
    # a = (0, 1), t = (1, 3), 8 layers: enumerate n0 = 1..7 by hand, max(n0, 1 + 3 (8 - n0)):
    # n0 = 6 -> max(6, 7) = 7; n0 = 7 -> max(7, 4) = 7; n0 = 5 -> max(5, 10). Best value 7.
    a, t = np.array([0.0, 1.0]), np.array([1.0, 3.0])
    n = balanced_split(a, t, 8)
    assert n.sum() == 8 and (a + n * t).max() == 7


def test_cross_group_hand_off_uses_the_group_link():
    inst = load_instance(TINY2)
    o = ClassOuter(tp=1, micro_batch=1, classes=(ClassShape(replicas=8, stage_groups=(0, 1)),))
    c = class_coefficients(inst, inst.cluster, o)[0]
    # tiny-gpt: seq 1024 x hidden 1024 x 2 bytes = 2,097,152 bytes per micro-batch, tp = 1;
    # one GPU of group 0 to one of group 1 on one site: the slower NIC, 200 Gbit/s = 25e9 B/s,
    # latency the larger inter-node one, 10 us, at the measured 95% of wire speed (cost/comm.py):
    # 2,097,152 / (25e9 * 0.95) + 1e-5 = 98.301 us
    link = inst.cluster.between[0][1]
    assert link.bw_bytes_per_s == pytest.approx(25e9) and link.latency_s == pytest.approx(1e-5)
    assert c.stage_parts[0]["pp_p2p"] == pytest.approx(2_097_152 / (25e9 * 0.95) + 1e-5)
    assert c.stage_parts[1]["pp_p2p"] == pytest.approx(2_097_152 / (25e9 * 0.95) + 1e-5)
    # stage 1 runs on the H100 group: its capacity is the H100's 80 GiB, stage 0's the A100's
    assert c.capacity_bytes.tolist() == [g.gpu.hbm_bytes for g in inst.cluster.groups]


def test_one_group_class_prices_like_the_homogeneous_model():
    inst = load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml")
    het = load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml")  # the same file as one group
    for tp, pp, dp in [(2, 2, 2), (1, 4, 2), (4, 1, 2), (8, 1, 1)]:
        m = inst.job.global_batch // dp
        o = Outer(tp=tp, pp=pp, dp=dp, micro_batch=1, num_micro_batches=m, zero=1 if dp > 1 else 0)
        ho = ClassOuter(tp=tp, micro_batch=1, zero=o.zero,
                         classes=(ClassShape(replicas=dp, stage_groups=(0,) * pp),))
        a, b = build(inst, o), class_coefficients(het, het.cluster, ho)[0]
        for name in ("layer_time_s", "stage_time_s", "layer_sync_time_s", "stage_sync_time_s",
                     "layer_state_bytes", "layer_act_bytes", "stage_mem_bytes", "capacity_bytes"):
            assert np.allclose(getattr(a, name), getattr(b, name), rtol=1e-12), (tp, pp, dp, name)


@pytest.mark.parametrize("seed", range(12))
def test_one_group_optimum_matches_exhaustive_search(seed):
    """cp 1-2, interleaving 1-2, ZeRO 0-3 on one group: exhaustive search's optimum is the
    reference (it was the homogeneous planner's, equal to it, before that planner was deleted).
    A lone class may run fewer micro-batches than stages, as on one group (issue 12)."""
    inst = random_instance(seed)
    inst = dataclasses.replace(inst, search=SearchSpace(micro_batch=(1, 2), cp=(1, 2), virtual_stages=(1, 2),
                                                        zero=(0, 1, 2, 3)))
    ex = exhaustive(inst)
    het = search(inst)
    if ex.plan is None:
        assert het.plan is None
        return
    assert het.objective_s == pytest.approx(ex.iter_time_s, rel=1e-9, abs=het.tolerance_s)


def test_switch_time_by_hand():
    inst = load_instance(DYNAMIC)
    # Llama 3 8B: 8,030,261,248 parameters (the released model's count); checkpoint 14 bytes
    # each, written and read once at 20 GB/s, plus the 180 s restart of the instance file
    expected = 180 + 2 * 8_030_261_248 * 14 / 20e9
    assert switch_time_s(inst.model, inst.switching) == pytest.approx(expected)


def test_replan_warm_start_gives_the_cold_optimum():
    inst = load_instance(DYNAMIC)
    current = search(inst).plan
    event, remaining_s, _ = load_event(EVENT, inst)
    r = replan(inst, current, event, remaining_s, None)
    cold = search(inst.with_cluster(event.cluster))
    assert r.new.status == "optimal"
    assert r.new.objective_s == pytest.approx(cold.objective_s, rel=1e-9)
    assert r.current_time_s >= r.new.objective_s * (1 - 1e-9)  # the running plan is in the space
    assert r.remaining_iterations == pytest.approx(remaining_s / r.current_time_s)
    assert r.pays_off == (r.switch_s + r.remaining_iterations * r.new.objective_s < remaining_s)


def test_timeline_choice_by_hand():
    # candidate 0 takes 1 s in scenario 0 and 4 s in scenario 1; candidate 1 takes 2 s in both.
    # Two periods of 100 s, scenario 0 then 1. Iterations of each choice with S = 10 s:
    #   (0,0) 100 + 25 = 125   (1,1) 50 + 50 = 100   (0,1) 100 + 90/2 = 145   (1,0) 50 + 90 = 140
    times = [[1.0, 4.0], [2.0, 2.0]]
    periods = [(0, 100.0), (1, 100.0)]
    ch = choose_plans(times, periods, 10.0)
    assert ch.plan_per_period == (0, 1) and ch.switches == (1,)
    assert ch.iterations == pytest.approx(145)
    # S = 60 s: (0,1) gives 100 + 40/2 = 120 < 125, so keeping candidate 0 wins
    ch = choose_plans(times, periods, 60.0)
    assert ch.plan_per_period == (0, 0) and ch.iterations == pytest.approx(125)
    # (1,0): 100/2 in period 1, then candidate 0 at 4 s for the 40 s left after the change
    assert timeline_iterations(times, periods, 60.0, (1, 0)) == pytest.approx(50 + 40 / 4)


@pytest.mark.parametrize("x", [(1,), (2,), (3, 5), (4, 6), (2, 3, 7), (6, 10, 15)])
@pytest.mark.parametrize("pp", [1, 2])
def test_split_existence_matches_the_listing(x, pp):
    shapes = tuple(ClassShape(replicas=xk, stage_groups=(0,) * pp) for xk in x)
    for total in range(0, 60):
        for uniform in (False, True):
            listed = micro_batch_vectors(shapes, total, uniform)
            assert has_micro_batch_split(shapes, total, uniform) == bool(listed.size), (total, uniform)
            assert count_micro_batch_splits(shapes, total, uniform) == len(listed)
            # several classes: every replica runs >= its stage count; a lone class's count is
            # fixed by the batch and may be below it, as on one group (solver/space.py)
            least = pp if len(x) > 1 else 1
            assert all(sum(a * b for a, b in zip(x, row)) == total and min(row) >= least for row in listed)


def test_a_plans_class_coefficients_carry_its_micro_batch_counts():
    """simulate's class coefficients are built with the plan's own micro-batch counts, so the
    homogeneous schedule.iteration_time_s on them is the class's time: 1F1B over its stages,
    m * max_s t_s + sum_s t_s - max_s t_s (Narayanan et al. SC'21), plus its slowest sync."""
    from paraplan.cost import schedule

    inst = load_instance(ROOT / "instances/mixed/llama3-70b-32xA100-32xH100.yaml")
    p = search(inst).plan
    counts = tuple(k.num_micro_batches for k in p.classes)
    assert any(m > len(k.stage_groups) for m, k in zip(counts, p.classes))  # not the stage count
    coeffs = class_coefficients(inst, inst.cluster, p.outer, num_micro_batches=counts)
    for c, k in zip(coeffs, p.classes):
        n, r = np.array(k.layers_per_stage, float), np.array(k.full_recompute_layers, float)
        t = schedule.stage_times_s(c, n, r)
        by_hand = k.num_micro_batches * t.max() + t.sum() - t.max() + schedule.sync_times_s(c, n).max()
        assert float(schedule.iteration_time_s(c, n, r)) == pytest.approx(by_hand, rel=1e-12)
    # several classes need >= pp micro-batches per replica (memory would otherwise depend on
    # the split); this optimum is one stage-wise class, so take the first replica-wise outer
    from paraplan.solver.space import declared_outers
    two = next(o for o in declared_outers(inst, families=("replica",)) if max(c.pp for c in o.classes) > 1)
    with pytest.raises(ValueError, match="1F1B needs"):
        class_coefficients(inst, inst.cluster, two, num_micro_batches=(1,) * len(two.classes))


@pytest.mark.parametrize("space, words", [
    # tiny-2types: 16 heads, 8 GPUs per node in both groups
    ({"tp": (16,)}, "no value of search.tp [16] divides the 16 heads and the GPUs per node"),
    # 8 A100 + 8 H100, tp 4 or 8: a group holds 8 / (dp x tp) in {1, 2} stages of a class, so
    # a pipeline has 1, 2 or 4 stages (one group or both), never 7
    ({"pp": (7,)}, "no pipeline shape fits"),
])
def test_an_empty_mixed_cluster_space_says_why(space, words):
    """The API path (no loader refusal): the planner's reason names the rule that empties it."""
    inst = load_instance(TINY2)
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, **space))
    res = search(inst)
    assert res.status == "infeasible" and res.outer_configs == 0
    assert res.reason.startswith("the declared space is empty: ") and words in res.reason, res.reason


def test_interleaving_micro_batch_vectors_and_an_empty_space_say_why():
    """With v > 1 a class's count is a multiple of its stage count and, with several classes,
    at least twice it. By hand for two classes of (replicas, stages) = (2, 2) and (1, 4) and 24
    micro-batches: m_1 in {4, 6, ...}, m_2 in {8, 12, ...} with 2 m_1 + m_2 = 24 gives
    (8, 8) and (4, 16), and (6, 12) -- three vectors; at v = 1 (m_1 >= 2, m_2 >= 4) there are
    m_1 = 2..10, nine. A v no shape can take empties the space, and the reason names the key."""
    shapes = (ClassShape(replicas=2, stage_groups=(0, 0)), ClassShape(replicas=1, stage_groups=(1,) * 4))
    got = sorted(map(tuple, micro_batch_vectors(shapes, 24, v=2).tolist()))
    assert got == [(4, 16), (6, 12), (8, 8)]
    assert count_micro_batch_splits(shapes, 24, v=2) == 3 and has_micro_batch_split(shapes, 24, v=2)
    assert count_micro_batch_splits(shapes, 24) == 9
    from paraplan.solver.space import empty_space_reason, declared_outers
    inst = load_instance(TINY2)
    narrow = dataclasses.replace(inst, search=dataclasses.replace(inst.search, virtual_stages=(64,)))
    assert declared_outers(narrow) == []
    assert "search.virtual_stages [64]" in empty_space_reason(narrow)
