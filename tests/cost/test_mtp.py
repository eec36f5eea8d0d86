"""Multi-token prediction (ModelSpec.mtp_layers; DeepSeek-V3, arXiv 2412.19437 Sec. 2.2): priced
on the last pipeline stage as Megatron-core runs it (--mtp-num-layers), read from DeepSeek-V3's
config, exported to Megatron-LM, dropped with a deviation elsewhere, and seen by every planner
backend as a last-stage extra."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from agreement_support import assert_backends_agree_with_exhaustive
from randinst import random_instance

from paraplan.cost import coefficients
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import expert_params, layer_params, model_params, output_params
from paraplan.cost.hf_config import model_from_hf_config
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.memory import mtp_stage_params
from paraplan.cost.memory_breakdown import stage_categories_bytes
from paraplan.cost.specs import Outer
from paraplan.cost.plan_specs import Plan
from paraplan.solver.solve import solve as plan
from paraplan.solver.export import FORMATS
from paraplan.solver.report.page import plan_coefficients

ROOT = Path(__file__).resolve().parents[2]


def with_mtp(inst, depth: int = 1):
    return replace(inst, model=replace(inst.model, mtp_layers=depth))


def test_deepseek_v3_mtp_module_is_the_published_14b():
    # Hugging Face model card of deepseek-ai/DeepSeek-V3: 685B = 671B of the main model + 14B of
    # the MTP module (both rounded to 1B). The module: one MoE layer with MLA (its 256 experts
    # of 3 x 7168 x 2048, a shared expert, the router, MLA, two norms), the projection
    # 2 x 7168^2 and its two norms, its own embedding table and output head (129,280 x 7168
    # each, the head with its norm): 13.46B, of which the projection and embedding are
    # mtp_stage_params on a pipelined, untied stage and the head is the main model's on it.
    m = model_from_hf_config(ROOT / "tests/data/hf/deepseek-v3/config.json")
    assert m.mtp_layers == 1 and model_params(m) == 671_026_404_352
    module = layer_params(m) + m.moe.experts * expert_params(m) + mtp_stage_params(m, 2) + output_params(m)
    assert module == pytest.approx(14e9, abs=0.6e9)
    # without a pipeline the stage holds the embedding already: only the projection and norms
    assert mtp_stage_params(m, 1) == 2 * 7168 * 7168 + 2 * 7168


def test_the_last_stage_runs_one_more_layer_and_head_per_depth():
    # tiny-gpt (8 layers of width 1024, ffn 4096) on 8 A100, pp 2: per micro-batch the MTP
    # extra is one more layer as the stage runs its own, the shared head and loss again, plus
    # the embedding of the shifted tokens and the 2h -> h projection with its two norms. The
    # projection's GEMMs are 2 x 2h x h of a layer's 24 h^2 FLOPs per token (1/6) and the rest
    # is memory-bound passes over h-wide activations: between 0 and half a layer's time.
    inst = load_instance(ROOT / "instances/tiny-gpt-8xA100.yaml")
    o = Outer(tp=1, pp=2, dp=4, micro_batch=1, num_micro_batches=8)
    no_wait = NetEfficiency(rank_jitter_rel=0.0)  # the stage parts alone (test_scale.py)
    base, mtp = coefficients.build(inst, o, no_wait), coefficients.build(with_mtp(inst, 2), o, no_wait)
    extra = mtp.stage_parts[1]["mtp"]
    per_depth = extra / 2
    layer, head = mtp.layer_time_s[1], base.stage_parts[1]["output_layer"]
    assert 0 < per_depth - layer - head < 0.5 * layer
    assert "mtp" not in mtp.stage_parts[0]
    assert mtp.stage_time_s[1] == pytest.approx(base.stage_time_s[1] + extra, rel=1e-12)
    assert mtp.stage_time_s[0] == pytest.approx(base.stage_time_s[0], rel=1e-12)
    # two layers' gradient sync and step more on the last stage
    assert mtp.stage_sync_time_s[1] > base.stage_sync_time_s[1] + 2 * mtp.layer_sync_time_s[1] * 0.999
    # memory: two more layers' state on the last stage at least, nothing on the first
    assert mtp.stage_mem_bytes[1] > base.stage_mem_bytes[1] + 2 * mtp.layer_state_bytes[1]
    assert mtp.stage_mem_bytes[0] == pytest.approx(base.stage_mem_bytes[0], rel=1e-12)


def test_memory_categories_sum_to_the_stage_total_with_mtp():
    # the breakdown asserts its categories sum to the stage memory (cost/memory_breakdown.py)
    inst = with_mtp(load_instance(ROOT / "instances/mixtral-8x7b-64xH100.yaml"))
    p = Plan.flat(tp=1, pp=4, dp=16, micro_batch=1, num_micro_batches=64, zero=1, ep=8,
             layers_per_stage=(8, 8, 8, 8), full_recompute_layers=(0, 0, 0, 0))
    cats = stage_categories_bytes(inst, p, plan_coefficients(inst, p))
    assert cats[3]["weights"] > cats[2]["weights"]  # the MTP layer and the embedding copy


def test_the_optimum_gives_the_last_stage_fewer_layers():
    # as DeepSeek-V3's [3, 4 x 14, 2] and Megatron's "...tmL" layouts do: Llama-3 8B's 32
    # layers on 64 H100 with pp 4 forced split (9, 8, 8, 7) without MTP (the head already
    # weighs on the last stage); each MTP depth costs about a layer and a head there, so the
    # last stage gives up more layers with each: 5 with one depth, 2 with two (measured)
    inst = load_instance(ROOT / "instances/llama3-8b-64xH100.yaml")
    inst = replace(inst, search=replace(inst.search, pp=(4,), virtual_stages=(1,)))
    last = [plan(with_mtp(inst, d)).plan.layers_per_stage[-1] for d in (0, 1, 2)]
    assert last[0] > last[1] > last[2]


@pytest.mark.parametrize("seed", [1, 3, 4, 9, 12, 16, 18, 33])
def test_all_methods_agree_with_an_mtp_module(seed):
    assert_backends_agree_with_exhaustive(with_mtp(random_instance(seed)))


def test_megatron_export_writes_the_depth_and_the_others_drop_it():
    inst = with_mtp(load_instance(ROOT / "instances/llama3-8b-64xH100.yaml"))
    p = plan(inst).plan
    megatron = FORMATS["megatron"][0](inst, p)
    assert "--mtp-num-layers 1" in megatron.text and not megatron.unsupported
    titan = FORMATS["torchtitan"][0](inst, p)
    assert any("model.mtp_layers 1" in line for line in titan.unsupported)


@pytest.mark.parametrize("seed", [1, 3, 4, 9])
def test_mixed_cluster_methods_agree_with_an_mtp_module(seed):
    # every class's last stage carries the module (cost/class_coefficients builds each class)
    from agreement_support import assert_mixed_backends_agree_with_exhaustive
    from randinst import random_cluster_instance
    assert_mixed_backends_agree_with_exhaustive(with_mtp(random_cluster_instance(seed)))
