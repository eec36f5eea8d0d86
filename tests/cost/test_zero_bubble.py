"""torch.distributed.pipelining's schedules as torchtitan runs them (cost/schedule.py,
cost/torch_schedules.py): each schedule's pipeline time against the bubble of Qi et al., "Zero
Bubble Pipeline Parallelism" (ICLR 2024), worked by hand on small cases."""

import json
from pathlib import Path

import numpy as np
import pytest

from paraplan.cost import schedule, zero_bubble
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.schedule import TorchSchedule as S
from paraplan.cost.simulate import simulate
from paraplan.cost.plan_specs import Plan
from export_support import llama405_v2, zbv_split
from paraplan.cost.torch_schedules import fastest_fitting, schedule_prices

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = json.loads((ROOT / "tests" / "goldens" / "bundled.json").read_text())


def golden(name: str) -> tuple:
    inst = load_instance(ROOT / name)
    plan = Plan.flat(**{k: tuple(v) if isinstance(v, list) else v
                   for k, v in GOLDENS[f"{name}:nominal"]["plan"].items()})
    return inst, plan


def schedule_pipeline_time_s(t, w, m: int, v: int, kind: S):
    """The planner's pipeline time (cost/schedule.pipeline_time_s) of stage times t whose
    weight-gradient part is w under `kind`: its drain saves W_PASSES_SAVED[mode] x w per pass, as
    cost/zero_bubble.shaped prices a plan (k w per layer)."""
    t, w = np.asarray(t, float), np.asarray(w, float)
    if kind.mode is None:
        return schedule.pipeline_time_s(t, m, v)
    return schedule.pipeline_time_s(t, m, v, zero_bubble.W_PASSES_SAVED[kind.mode] * w)


def uniform(p: int, f: float, b: float, w: float):
    """p uniform stages, per micro-batch forward f, input gradient b, weight gradient w."""
    return np.full(p, f + b + w), np.full(p, w)


# p = 4 stages, m = 8 micro-batches, F = B = W = 1 (T = 3 per stage and micro-batch):
#   1F1B           8 * 3 + (p - 1)(F + B + W)           = 24 + 9       = 33
#   Interleaved    v = 2: the same bubble over v chunks = 24 + 9 / 2   = 28.5
#   ZB1P           v = 2: ZB-H1's (p - 1)(F + B - W) = 3, over v: 24 + 1.5 = 25.5
#   ZBV            (p - 1)(F + B - 2W) on the chunks = 0            = 24
# (the paper's bubble rates (p-1)/m, (p-1)/(3m) and 0 at F = B = W, Sec. 2 and Sec. 6)
@pytest.mark.parametrize("kind, v, expected", [(S.ONE_F_ONE_B, 1, 33.0),
                                               (S.INTERLEAVED_1F1B, 2, 28.5),
                                               (S.INTERLEAVED_ZERO_BUBBLE, 2, 25.5),
                                               (S.ZBV_ZERO_BUBBLE, 2, 24.0)])
def test_equal_passes_give_the_papers_bubbles(kind, v, expected):
    t, w = uniform(4, 1.0, 1.0, 1.0)
    assert schedule_pipeline_time_s(t, w, 8, v, kind) == pytest.approx(expected)


def test_zero_bubble_with_a_lighter_weight_gradient():
    # F = B = 1, W = 0.5 (T = 2.5), p = 4, m = 8, one chunk for ZB-H1:
    #   ZB-H1: 8 * 2.5 + (p - 1)(F + B - W) = 20 + 3 * 1.5 = 24.5 (1F1B: 20 + 7.5 = 27.5)
    #   ZBV:   chunk times F/2, B/2, W/2 = 0.5, 0.5, 0.25: (p - 1)(0.5 + 0.5 - 0.5) = 1.5 -> 21.5
    t, w = uniform(4, 1.0, 1.0, 0.5)
    assert schedule_pipeline_time_s(t, w, 8, 1, S.INTERLEAVED_ZERO_BUBBLE) == pytest.approx(24.5)
    assert schedule_pipeline_time_s(t, w, 8, 1, S.ONE_F_ONE_B) == pytest.approx(27.5)
    assert schedule_pipeline_time_s(t, w, 8, 2, S.ZBV_ZERO_BUBBLE) == pytest.approx(21.5)


def test_zbv_bubble_is_never_negative():
    # F = B = 1, W = 2: F + B - 2W = -2 per chunk; the fill/drain cannot give time back: 8 * 4
    t, w = uniform(4, 1.0, 1.0, 2.0)
    assert schedule_pipeline_time_s(t, w, 8, 2, S.ZBV_ZERO_BUBBLE) == pytest.approx(32.0)


def test_uneven_stages_pass_every_other_stage_once():
    # T = [3, 4, 3, 3], W = 1 each, m = 8, v = 1: the slowest (4) paces 8 micro-batches; the
    # other three stages pass once at F + B - W = T - 2W = 1 each (ZB-H1) or T = 3 each (1F1B)
    t, w = np.array([3.0, 4.0, 3.0, 3.0]), np.ones(4)
    assert schedule_pipeline_time_s(t, w, 8, 1, S.INTERLEAVED_ZERO_BUBBLE) == pytest.approx(32 + 3)
    assert schedule_pipeline_time_s(t, w, 8, 1, S.ONE_F_ONE_B) == pytest.approx(32 + 9)
    # 1F1B is the planner's own formula (cost/schedule.pipeline_time_s)
    assert schedule_pipeline_time_s(t, w, 8, 1, S.ONE_F_ONE_B) == pytest.approx(
        schedule.pipeline_time_s(t, 8, 1))


def test_the_pacing_stage_is_the_one_whose_path_is_longest():
    # T = (4.1, 4), W = (0.5, 1), m = 2, v = 2, InterleavedZeroBubble (k = 2): passes
    # B = T - 2W = (3.1, 2). Stage 0's path m T_0 + B_1 / v = 8.2 + 1 = 9.2; stage 1's
    # m T_1 + B_0 / v = 8 + 1.55 = 9.55. The time is 9.55: stage 1 paces although stage 0 is
    # slower (taking the slowest stage's path alone would jump from 9.55 to 9.2 as T_0 crosses 4)
    t, w = np.array([4.1, 4.0]), np.array([0.5, 1.0])
    assert schedule_pipeline_time_s(t, w, 2, 2, S.INTERLEAVED_ZERO_BUBBLE) == pytest.approx(9.55)
    # and it is continuous there: at T_0 = 4 + 1e-9 and 4 - 1e-9 the same to 1e-8
    lo, hi = (schedule_pipeline_time_s(np.array([4.0 + d, 4.0]), w, 2, 2, S.INTERLEAVED_ZERO_BUBBLE)
              for d in (-1e-9, 1e-9))
    assert abs(hi - lo) < 1e-8


def test_interleaved_zero_bubble_is_never_slower_than_interleaved_1f1b():
    # the dominance solver/space.with_zero_bubble leaves Interleaved1F1B out by: stage s's path
    # m T_s + sum_{s' != s} (T_s' - 2 W_s') / v <= m T_s + sum_{s' != s} T_s' / v <= the
    # slowest stage's 1F1B path; checked on random stage times with 0 <= 3 W_s <= T_s
    rng = np.random.default_rng(0)
    for _ in range(200):
        pp, m, v = int(rng.integers(2, 9)), int(rng.integers(1, 17)), int(rng.integers(2, 5))
        t = rng.uniform(0.1, 2.0, pp)
        w = t * rng.uniform(0, 1 / 3, pp)
        zb = schedule_pipeline_time_s(t, w, m, v, S.INTERLEAVED_ZERO_BUBBLE)
        assert zb <= schedule_pipeline_time_s(t, w, m, v, S.INTERLEAVED_1F1B)
        assert zb >= m * t.max()  # the slowest stage still runs m micro-batches


def test_the_schedule_a_plan_runs():
    inst, plan = llama405_v2()
    assert S.of(plan) is S.INTERLEAVED_1F1B
    assert S.of(plan.replace_flat(zero_bubble=S.ZBV_ZERO_BUBBLE.mode)) is S.ZBV_ZERO_BUBBLE
    assert S.of(plan.replace_flat(virtual_stages=1, layers_per_stage=(4,) * 31 + (2,))) is S.ONE_F_ONE_B


def test_weight_gradient_share_of_llama3_8b_from_its_flops():
    # Llama-3 8B, per token: linear GEMMs G = 2*4096*(4096 + 2*1024) [q, k, v] + 2*4096*4096
    # [out] + 3 * 2*4096*14336 [SwiGLU] = 436,207,616; the causal attention core at half the
    # 8192 x 8192 scores A = (2*8192*4096 + 2*8192*4096) / 2 = 67,108,864. W = G, F = G + A,
    # B = G + 2A: W / (F + B + W) = G / (3 (G + A)) = (6.5/7.5) / 3 = 13/45
    inst = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")
    assert zero_bubble.weight_grad_share(inst.model, 1, 1, 1) == pytest.approx(13 / 45)


@pytest.mark.parametrize("kind, pp, v, m, ok", [
    (S.ONE_F_ONE_B, 4, 1, 8, True), (S.ONE_F_ONE_B, 4, 2, 8, False),
    (S.INTERLEAVED_1F1B, 4, 1, 8, False), (S.INTERLEAVED_1F1B, 4, 3, 8, True),
    # rounds = max(1, m // pp) must divide m: 10 // 4 = 2 divides 10; 9 // 4 = 2 does not
    (S.INTERLEAVED_1F1B, 4, 2, 10, True), (S.INTERLEAVED_ZERO_BUBBLE, 4, 2, 9, False),
    (S.INTERLEAVED_ZERO_BUBBLE, 4, 1, 8, False),  # torchtitan: two stages per rank at least
    (S.ZBV_ZERO_BUBBLE, 4, 2, 7, True), (S.ZBV_ZERO_BUBBLE, 4, 2, 6, False),  # 2 pp - 1 = 7
    (S.ZBV_ZERO_BUBBLE, 4, 3, 12, False), (S.ZBV_ZERO_BUBBLE, 1, 2, 8, False),
    (S.ZBV_ZERO_BUBBLE, 2, 2, 8, False)])  # pp 2: no middle stage to price the bare rank
def test_which_schedules_torch_runs(kind, pp, v, m, ok):
    assert (schedule.schedule_problem(kind, pp, v, m) is None) is ok


def test_zbv_holds_pp_micro_batches_on_every_stage():
    # 2 pp half-stage chunks on every rank (Sec. 6), at most m; 1F1B's stage s holds pp - s
    # (what coefficients.build holds per stage under each)
    from paraplan.cost.coefficients import in_flight_micro_batches
    assert list(zero_bubble.v_in_flight(4, 8)) == [4, 4, 4, 4]
    assert list(zero_bubble.v_in_flight(4, 3)) == [3, 3, 3, 3]
    assert list(in_flight_micro_batches(4, 8, 1)) == [4, 3, 2, 1]


def test_the_planned_schedule_prices_as_the_simulator_and_zero_bubble_is_faster():
    # Llama-3.1 405B / 16,384 H100: pp 32, v 2, 128 micro-batches (m >= 2 pp - 1 = 63)
    inst, plan = llama405_v2()
    reserve = inst.search.memory_reserve_bytes
    bd = simulate(inst, plan, reserve_bytes=reserve)
    prices = {p.kind: p for p in schedule_prices(inst, plan, reserve_bytes=reserve)}
    assert set(prices) == {S.INTERLEAVED_1F1B, S.INTERLEAVED_ZERO_BUBBLE, S.ZBV_ZERO_BUBBLE}
    planned = prices[S.INTERLEAVED_1F1B]
    assert planned.iter_time_s == pytest.approx(bd.iter_time_s, rel=1e-12)
    assert planned.peak_mem_bytes == pytest.approx(bd.peak_mem_bytes, rel=1e-12)
    assert prices[S.INTERLEAVED_ZERO_BUBBLE].peak_mem_bytes == pytest.approx(planned.peak_mem_bytes)
    assert prices[S.INTERLEAVED_ZERO_BUBBLE].iter_time_s < planned.iter_time_s
    # the split was balanced with the output layer on the last stage (4 layers on stages 0-30,
    # 2 on stage 31); ZBV puts it on rank 0 beside 4 layers, which then paces the pipeline
    assert prices[S.ZBV_ZERO_BUBBLE].iter_time_s > prices[S.INTERLEAVED_ZERO_BUBBLE].iter_time_s
    assert fastest_fitting(list(prices.values())).kind is S.INTERLEAVED_ZERO_BUBBLE
    # the split shaped for the V (2 layers on stage 0, 4 on the last) makes ZBV the fastest
    shaped = zbv_split(plan)
    again = {p.kind: p for p in schedule_prices(inst, shaped, reserve_bytes=reserve)}
    assert fastest_fitting(list(again.values())).kind is S.ZBV_ZERO_BUBBLE
    assert again[S.ZBV_ZERO_BUBBLE].iter_time_s < planned.iter_time_s



def test_zbv_moves_the_output_layer_to_rank_0():
    # The V puts the last chunk (norm, output, loss) on rank 0: stage 0's terms gain what the
    # last stage has beyond a middle one, and the last stage keeps a middle stage's terms
    from paraplan.cost.coefficients import build
    inst, plan = llama405_v2()
    c = build(inst, plan.flat_outer)
    c = schedule.with_in_flight(c, zero_bubble.v_in_flight(plan.pp, 128))
    v = zero_bubble.v_shaped(c)
    for name in ("stage_time_s", "stage_mem_bytes", "stage_sync_time_s"):
        before, after = getattr(c, name), getattr(v, name)
        assert after[0] == pytest.approx(before[0] + before[-1] - before[-2])
        assert after[-1] == pytest.approx(before[-2])
        assert list(after[1:-1]) == list(before[1:-1])
    # the output layer (128,256 x 16,384 over tp 8, its state and logits) is real memory
    assert c.stage_mem_bytes[-1] - c.stage_mem_bytes[-2] > 2**30
