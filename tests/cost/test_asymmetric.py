"""cost/asymmetric.py: a data-parallel degree per pipeline stage (issue 33), priced by the same
per-layer model as every other plan."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from randinst import mixed_family_instance

from oracles.cost import asymmetric_fits
from paraplan.cost import asymmetric, schedule
from paraplan.cost.asymmetric import pipeline, stage_class_outer
from paraplan.cost.class_coefficients import class_coefficients, iteration_time_s
from paraplan.cost.simulate import simulate
from paraplan.cost.errors import ConfigError
from paraplan.cost.specs import MoeSpec
from paraplan.solver.asymmetric_space import _layouts, asymmetric_outers


def test_two_stage_pipeline_time_by_hand():
    # stage 0: 4 ranks, T_0 = 2 s; stage 1: 2 ranks, T_1 = 3 s; M = 16 micro-batches, so each
    # rank of stage 0 runs m_0 = 4 and of stage 1 m_1 = 8. Paths: through stage 0,
    # 4 * 2 + 3 = 11 s; through stage 1, 8 * 3 + 2 = 26 s: stage 1 paces, 26 s. Its ranks are
    # busy 24 s, plus one micro-batch's pass through stage 0 (the fill and drain), 2 s.
    t = np.array([2.0, 3.0])
    assert asymmetric.pipeline_time_s(t, np.array([4.0, 8.0])) == 26.0
    # with 8 ranks on stage 1 instead (m_1 = 2): 4 * 2 + 3 = 11 against 2 * 3 + 2 = 8
    assert asymmetric.pipeline_time_s(t, np.array([4.0, 2.0])) == 11.0


@pytest.mark.parametrize("m", [1, 3, 8])
def test_equal_degrees_give_the_symmetric_1f1b_time(m):
    # every d equal (m_s = m): cost/schedule.py's m max T + sum T - max T at v = 1
    t = np.array([[1.0, 4.0, 2.5], [3.0, 0.5, 0.5]])
    got = asymmetric.pipeline_time_s(t, np.full(3, float(m)))
    np.testing.assert_allclose(got, schedule.pipeline_time_s(t, m, 1), rtol=1e-15)


def test_in_flight_counts():
    # equal degrees: 1F1B's pp - s (Narayanan et al. SC'21 Sec 2.2)
    assert asymmetric.in_flight((2, 2, 2), (8, 8, 8)).tolist() == [3, 2, 1]
    # 4 ranks then 2: the 6 micro-batches that keep every rank busy, over stage 0's 4 ranks
    # (ceil 1.5 = 2), and stage 1's own 2 over its 2 ranks (1)
    assert asymmetric.in_flight((4, 2), (4, 8)).tolist() == [2, 1]
    # 1 rank then 2: stage 0 holds its own and one for each of stage 1's ranks: 3
    assert asymmetric.in_flight((1, 2), (8, 4)).tolist() == [3, 1]
    # never more than the micro-batches a rank runs
    assert asymmetric.in_flight((1, 4), (2, 1)).tolist() == [2, 1]


def _inst(seed: int):
    return mixed_family_instance(seed)


def test_equal_degrees_price_as_the_symmetric_pipeline():
    # the one-model rule: a pipeline whose stages all have degree d is the symmetric class of d
    # replicas, priced by class_coefficients: same time and memory on every split checked
    checked = 0
    for seed in range(12):
        inst = _inst(seed)
        for ao in asymmetric_outers(inst):
            if len(set(ao.classes[0].stage_dp)) != 1:
                continue
            ac = asymmetric.coefficients(inst, ao)
            m = inst.job.global_batch // ao.micro_batch // ao.classes[0].stage_dp[0]
            c = class_coefficients(inst, inst.cluster, stage_class_outer(ao, 0), num_micro_batches=(m,))[0]
            L, pp = inst.model.layers, ao.classes[0].pp
            for first in range(1, L - pp + 2):
                n = np.ones(pp)
                n[0] = first
                n[-1] += L - n.sum()
                r = np.minimum(n, 1.0)
                got = float(asymmetric.iteration_time_s(ac, n, r))
                assert got == pytest.approx(iteration_time_s([c], [m], [n], [r]), rel=1e-12)
                assert bool(asymmetric_fits(ac, n, r)) == bool(schedule.fits(c, n, r))
                checked += 1
    assert checked > 20


def test_each_stage_is_its_symmetric_pipelines_stage():
    # stage s of an asymmetric pipeline is stage s of the symmetric pipeline of d_s replicas
    # (its group's layer time, its own ring over d_s ranks, its ZeRO shard), at its own m_s and
    # with h_s micro-batches in flight; seed 6 has a 4-stage win with degrees (1, 1, 2, 2)
    inst = _inst(6)
    ao = next(a for a in asymmetric_outers(inst) if len(set(a.classes[0].stage_dp)) > 1)
    dps = ao.classes[0].stage_dp
    ac = asymmetric.coefficients(inst, ao)
    M = inst.job.global_batch // ao.micro_batch
    assert (ac.micro_batches * np.array(dps) == M).all()  # every stage: the whole batch
    held = asymmetric.in_flight(dps, tuple(int(x) for x in ac.micro_batches))
    for s, d in enumerate(dps):
        c = class_coefficients(inst, inst.cluster, stage_class_outer(ao, s),
                               num_micro_batches=(M // d,))[0]
        for f in ("layer_time_s", "stage_time_s", "layer_sync_time_s", "stage_sync_time_s",
                  "layer_state_bytes", "capacity_bytes"):
            assert getattr(ac.rows, f)[s] == getattr(c, f)[s], f
        # activations scale with the micro-batches held
        assert ac.rows.layer_act_bytes[s] == pytest.approx(c.layer_act_bytes[s] * held[s] / c.in_flight[s])


def test_simulate_matches_the_formula_on_a_two_stage_pipeline():
    # by hand from the coefficient rows: T_s = a_s + n_s t_s + r_s u_s, D_s = e_s + n_s g_s,
    # time = max(m_0 T_0 + T_1, m_1 T_1 + T_0) + max(D_0, D_1)
    inst = _inst(3)
    ao = next(a for a in asymmetric_outers(inst) if len(set(a.classes[0].stage_dp)) == 2)
    L = inst.model.layers
    bd = simulate(inst, asymmetric.plan_of(inst, ao, (1, L - 1), (0, 0)))
    c = asymmetric.coefficients(inst, ao, reserve_bytes=inst.search.memory_reserve_bytes).rows
    m0, m1 = (inst.job.global_batch // ao.micro_batch // d for d in ao.classes[0].stage_dp)
    T0 = c.stage_time_s[0] + 1 * c.layer_time_s[0]
    T1 = c.stage_time_s[1] + (L - 1) * c.layer_time_s[1]
    D = max(c.stage_sync_time_s[0] + c.layer_sync_time_s[0], c.stage_sync_time_s[1] + (L - 1) * c.layer_sync_time_s[1])
    assert bd.iter_time_s == pytest.approx(max(m0 * T0 + T1, m1 * T1 + T0) + D, rel=1e-12)


def test_lower_bound_is_below_every_split():
    inst = _inst(6)
    L = inst.model.layers
    for ao in asymmetric_outers(inst)[:40]:
        ac = asymmetric.coefficients(inst, ao)
        lb = asymmetric.lower_bound_s(ac, L)
        pp = ao.classes[0].pp
        for first in range(1, L - pp + 2):
            n = np.ones(pp)
            n[0] = first
            n[-1] += L - n.sum()
            assert lb <= float(asymmetric.iteration_time_s(ac, n, np.zeros(pp))) * (1 + 1e-12)


def test_layouts_count_by_hand():
    # groups of 4 and 2 GPUs at tp 1, up to 6 stages (the layers): stage counts k_0 in 1..4 and
    # k_1 in 1..2, C(3, k_0 - 1) C(1, k_1 - 1) ordered degree splits each, both group orders:
    # (1 + 3 + 3 + 1) * (1 + 1) * 2 = 32
    inst = _inst(0)  # 4 + 2 GPUs, 6 layers
    assert [g.num_gpus for g in inst.cluster.groups] == [4, 2] and inst.model.layers == 6
    assert len(list(_layouts(inst, (0, 1), {0: 1, 1: 1}))) == 32


def test_refusals_name_the_reason():
    inst = _inst(3)
    ao = pipeline(stage_groups=(1, 0), stage_dp=(1, 2), tp=1, micro_batch=1)
    assert asymmetric.refusal(inst, ao) is None
    odd = dataclasses.replace(inst, job=dataclasses.replace(inst.job, global_batch=9))
    assert "do not divide" in asymmetric.refusal(odd, ao)
    tied = dataclasses.replace(inst, model=dataclasses.replace(inst.model, tied_embeddings=True))
    assert "tied embeddings" in asymmetric.refusal(tied, ao)
    assert asymmetric.refusal(tied, pipeline(stage_groups=(1, 0), stage_dp=(2, 2), tp=1, micro_batch=1)) is None
    moe = dataclasses.replace(inst, model=dataclasses.replace(
        inst.model, moe=MoeSpec(experts=4, top_k=2, expert_ffn=256)))
    assert "dense models only" in asymmetric.refusal(moe, ao)
    with pytest.raises(ConfigError):
        pipeline(stage_groups=(0,), stage_dp=(1,), tp=1, micro_batch=1)
