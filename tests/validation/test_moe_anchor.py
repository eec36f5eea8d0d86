"""The DeepSeek-V3 anchor (cost/published/moe.yaml): paraplan's prediction of the published
layout next to the published throughput. Reported, never fitted, so the bound here is loose:
it catches a pricing change that moves the anchor far, in either direction.

Published: 180K H800 GPU hours per trillion tokens (DeepSeek-V3 report, arXiv 2412.19437,
Sec. 1 / 4): 1e12 / (180,000 x 3,600) = 1,543 tokens/s per GPU, the row's `derived` value. The
layout (Sec. 3.1-3.3): tp 1, pp 16, ep 64, dp 128, ZeRO-1, FP8, 4,096-token sequences, a batch
of 15,360 (120 micro-batches of one sequence per pipeline), layers [3, 4 x 14, 2] (the three
dense layers on the first stage), no recomputation, with the row's `paraplan_options`
(DeepEP dispatch, node-limited routing to 4 nodes, DualPipe).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost.calibration import PUBLISHED_DIR
from paraplan.cost.loader import load_instance, read_yaml
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import MoeDispatcher, PipelineSchedule, Plan

ROOT = Path(__file__).resolve().parents[2]
PLAN = Plan(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64,
            layers_per_stage=(3,) + (4,) * 14 + (2,), full_recompute_layers=(0,) * 16)


def _row():
    rows = read_yaml(PUBLISHED_DIR / "moe.yaml")["rows"]
    return next(r for r in rows if r["id"] == "deepseek-v3-2048xH800")


def _tokens_per_s_per_gpu(inst) -> float:
    bd = simulate(inst, PLAN)
    return 15360 * 4096 / bd.iter_time_s / 2048


def test_anchor_with_the_published_options_within_25_percent():
    row = _row()
    published = row["derived"]["tokens_per_s_per_gpu"]
    assert published == pytest.approx(1e12 / (180_000 * 3600), abs=1)
    inst = load_instance(ROOT / row["paraplan_instance"].split()[0])
    assert inst.model.moe.max_nodes_per_token == row["paraplan_options"]["model"]["moe"]["max_nodes_per_token"]
    assert inst.job.moe_dispatcher is MoeDispatcher.DEEPEP
    dual = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE))
    got = _tokens_per_s_per_gpu(dual)
    # 1,788 tokens/s per GPU when written (+15.9%; README "Mixture of experts")
    assert abs(got / published - 1) <= 0.25, got


def test_each_published_option_speeds_the_anchor_up():
    # Without DeepSeek's options the same layout is far slower than published (841 tokens/s,
    # -45%: its all-to-alls are exposed); DeepEP, node-limited routing and DualPipe each help.
    inst = load_instance(ROOT / _row()["paraplan_instance"].split()[0])
    plain = replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, max_nodes_per_token=None)),
                    job=replace(inst.job, moe_dispatcher=MoeDispatcher.ALLTOALL))
    deepep = replace(plain, job=replace(plain.job, moe_dispatcher=MoeDispatcher.DEEPEP))
    dual = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE))
    steps = [_tokens_per_s_per_gpu(i) for i in (plain, deepep, inst, dual)]
    assert steps == sorted(steps) and steps[0] < 0.7 * _row()["derived"]["tokens_per_s_per_gpu"], steps
