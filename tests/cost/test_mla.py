"""cost/: multi-head latent attention (ModelSpec.mla) as Megatron-core's MLASelfAttention runs it
(megatron/core/transformer/multi_latent_attention.py at d98e8a64): parameters, FLOPs, the
tensor-parallel split, activations and the loader. Every expected value is derived by hand in
the comment above it.

Two running examples:
- DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): hidden h = 7,168, 128 heads, q_lora_rank
  1,536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128.
- a tiny MLA layer small enough to list every tensor: h = 64, 4 heads, q_lora_rank 32,
  kv_lora_rank 16, nope 8, rope 4, v 8 (Q and K 4 x 12 = 48 wide, V and the output 4 x 8 = 32),
  SwiGLU ffn f = 128, one sequence of s = 16 tokens (t = 16), cp = 1, bf16 (2 bytes).
"""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from oracles.cost import qkv
from paraplan import instances
from paraplan.cost import memory
from paraplan.cost.coefficients import homogeneous_placement, megatron_layer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import InstanceError
from paraplan.cost.flops import (attention_in_weights, attention_projections, gemm_output_elements, layer_matmuls, layer_params,
                                 linear_weight_params, model_flops_per_token, moe_attention_view,
                                 replicated_layer_params)
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.specs import MlaSpec, Mlp, ModelSpec, Outer
from paraplan.cost.plan_specs import Plan

INSTANCES = Path(instances.__file__).parent
DEEPSEEK = INSTANCES / "deepseek-v3-shaped-2048xH800.yaml"
EXACT = dict(rel=1e-12)
V3_MLA = MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                 v_head_dim=128)


def v3_attention(**changes) -> ModelSpec:
    """DeepSeek-V3's attention with a dense MLP of DeepSeek-V3's dense width (no experts)."""
    base = ModelSpec(name="v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn=18432,
                     vocab=129280, seq_len=4096, mlp=Mlp.SWIGLU, mla=V3_MLA)
    return replace(base, **changes)


def tiny(**changes) -> ModelSpec:
    base = ModelSpec(name="tiny-mla", layers=4, hidden=64, heads=4, kv_heads=4, ffn=128, vocab=1000,
                     seq_len=16, mlp=Mlp.SWIGLU,
                     mla=MlaSpec(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
                                 qk_rope_head_dim=4, v_head_dim=8))
    return replace(base, **changes)


# --- parameters -------------------------------------------------------------------------------

def test_deepseek_v3_attention_parameters_per_layer():
    # q_a 7168 x 1536 = 11,010,048; q_b 1536 x (128 x 192) = 37,748,736; kv_a 7168 x (512 + 64)
    # = 4,128,768; kv_b 512 x (128 x (128 + 128)) = 16,777,216; o (128 x 128) x 7168
    # = 117,440,512: 187,105,280 weights. Norms: the q and kv latents' RMSNorms 1,536 + 512 and
    # the layer's two RMSNorms 2 x 7,168: 16,384. The MLP: 3 x 7168 x 18432 = 396,361,728.
    m = v3_attention()
    mlp = 3 * 7168 * 18432
    assert linear_weight_params(m) - mlp == 187_105_280
    assert layer_params(m) - mlp == 187_105_280 + 1_536 + 512 + 2 * 7_168
    # whole on every tp rank: the two down projections, 11,010,048 + 4,128,768
    assert replicated_layer_params(m) == 15_138_816
    # the bundled DeepSeek-V3 instance's MoE layers price the same attention (their view)
    inst = load_instance(DEEPSEEK)
    view = moe_attention_view(inst.model)
    assert layer_params(view) - 3 * 7168 * 2048 == 187_121_664


def test_deepseek_v3_flops_per_token_and_layer():
    # One token, tp = 1: each projection 2 x its weights, 2 x 187,105,280 = 374,210,560 FLOPs
    # (the attention's part of 2 x params). The core at s = 4,096, causal half: QK^T 2 x s x
    # (128 x 192) and PV 2 x s x (128 x 128), x 0.5: 4096 x (24,576 + 16,384) = 167,772,160.
    m = v3_attention()
    mms = layer_matmuls(m, 1, tp=1, cp=1)
    t = 4096
    assert qkv(mms) + mms.attn_out == pytest.approx(t * 374_210_560, **EXACT)
    assert len(mms.attn_in) == 4  # q down, q up, kv down, kv up, in call order
    assert mms.attn_in[0] == pytest.approx(t * 2 * 7168 * 1536, **EXACT)
    assert mms.attention_core == pytest.approx(t * 167_772_160, **EXACT)
    # Model FLOPs per token (MFU): 6 x the parameters a token uses (embedding lookup aside) +
    # attention 6 x layers x s x (QK width + PV width) without the causal mask. DeepSeek-V3
    # (tests/instances/test_hf_config.py counts the parameters): 61 x 187,121,664 + 3 x
    # 396,361,728 + 58 x (1,835,008 + 9 x 44,040,192 = 398,196,736) = 35,698,917,376 in the
    # layers, + the output layer 129,280 x 7,168 = 926,679,040; x 6 = 219,753,578,496.
    # Attention: 6 x 61 x 4,096 x (24,576 + 16,384) = 61,404,610,560. Sum 281,158,189,056.
    v3 = load_instance(DEEPSEEK).model
    assert model_flops_per_token(v3) == 281_158_189_056


@pytest.mark.parametrize("m", [v3_attention(), v3_attention(mla=replace(V3_MLA, q_lora_rank=None)),
                               v3_attention(mla=None, kv_heads=8, attention_head_dim=128)])
def test_weight_counts_are_the_projections_shapes(m):
    # flops.attention_in_weights and replicated_layer_params are written out for speed: they
    # must equal the projections' k_in x n_out (MLA with and without q_lora_rank, and GQA)
    proj = attention_projections(m, 1, 8, 1, True)
    assert attention_in_weights(m) == sum(p.k_in * p.n_out for p in proj)
    assert replicated_layer_params(m) == sum(p.k_in * p.n_out for p in proj if p.replicated)


def test_without_query_compression_q_is_projected_from_the_layer_input():
    # DeepSeek-V2-Lite's layout: q_lora_rank null, q: hidden -> 128 x 192 directly,
    # 7168 x 24,576 = 176,160,768 weights in place of q_a + q_b (48,758,784)
    m = v3_attention(mla=replace(V3_MLA, q_lora_rank=None))
    mlp = 3 * 7168 * 18432
    assert linear_weight_params(m) - mlp == 187_105_280 - 48_758_784 + 176_160_768
    assert replicated_layer_params(m) == 4_128_768  # kv down only
    assert len(layer_matmuls(m, 1, 1, 1).attn_in) == 3


# --- tensor parallelism -----------------------------------------------------------------------

@pytest.mark.parametrize("sp", [False, True])
def test_tensor_parallel_split(sp):
    # tp = 8 on one sequence (t = 4,096). The down projections are TELinear "duplicated": whole
    # weights, run on the rank's tokens, the sequence shard t/8 = 512 with sequence parallelism,
    # all 4,096 without. The up projections are column-parallel (16 of the 128 heads per rank),
    # the output projection row-parallel; the core splits by heads.
    m = v3_attention()
    one, eight = layer_matmuls(m, 1, tp=1, cp=1), layer_matmuls(m, 1, tp=8, cp=1, sp=sp)
    down_tokens = 512 if sp else 4096
    assert eight.attn_in[0] == pytest.approx(2 * down_tokens * 7168 * 1536, **EXACT)
    assert eight.attn_in[2] == pytest.approx(2 * down_tokens * 7168 * 576, **EXACT)
    for k in (1, 3):
        assert eight.attn_in[k] == pytest.approx(one.attn_in[k] / 8, **EXACT)
    assert eight.attn_out == pytest.approx(one.attn_out / 8, **EXACT)
    assert eight.attention_core == pytest.approx(one.attention_core / 8, **EXACT)
    assert eight.attn_in_replicated == (True, False, True, False)
    # GEMM output stores (flops.gemm_output_elements), forward: q down t_d x 1,536, q up
    # 4,096 x 24,576 / 8, kv down t_d x 576, kv up 4,096 x 32,768 / 8, o 4,096 x 7,168, MLP
    # 2 x 4,096 x 18,432 / 8 + 4,096 x 7,168
    t_d = down_tokens
    fwd = (t_d * 1536 + 4096 * 24576 / 8 + t_d * 576 + 4096 * 32768 / 8 + 4096 * 7168
           + 2 * 4096 * 18432 / 8 + 4096 * 7168)
    assert gemm_output_elements(m, 1, 8, 1, sp)[0] == pytest.approx(fwd, **EXACT)


def test_replicated_down_projections_cost_state_and_a_tp_gradient_all_reduce():
    # The bundled DeepSeek-V3 instance at tp = 8 with sequence parallelism: the down
    # projections (15,138,816 weights) are held whole, 7/8 of them beyond the 1/tp share, and
    # their gradients (each rank's from its own 512 tokens) are all-reduced over the tp group
    # once per iteration; without sequence parallelism every rank sees every token: no
    # all-reduce, the same weights held.
    inst = load_instance(DEEPSEEK)
    net = NetEfficiency()
    for sp in (True, False):
        o = Outer(tp=8, pp=16, dp=16, micro_batch=1, num_micro_batches=960, sequence_parallel=sp, zero=1, ep=8)
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        lt = megatron_layer(replace(inst, model=moe_attention_view(inst.model)), o, site, net)
        assert lt.replicated_params == pytest.approx(15_138_816 * 7 / 8, **EXACT)
        assert (lt.grad_sync_s > 0) == sp


# --- activations ------------------------------------------------------------------------------

def test_tiny_layer_activations_by_tensor():
    # Tiny layer, tp = 1, flash, bf16, no dropout (memory.layer_activation_bytes):
    # the two layer norms' inputs 2 x 2th = 4,096 and the down projections' and MLP's inputs
    # 2 x 2th = 4,096; the latents' norm inputs 2t(32 + 16) = 1,536 and the up projections'
    # inputs (the normed latents) 2t x 48 = 1,536; Q, K, V 2t(48 + 48 + 32) = 4,096; the core's
    # output 2t x 32 = 1,024; SwiGLU's input 2t x 2f = 8,192 and output 2tf = 4,096; flash's
    # log-sum-exp 4 x 4 heads x t = 256. Total 28,928.
    m = tiny()
    assert memory.layer_activation_bytes(m, 1, 1, 1, False, True) == 28_928
    # tp = 2 with sequence parallelism: everything above halves (norms, down projections and
    # latents on the sequence shard; Q, K, V, output, MLP and statistics by heads): 14,464.
    assert memory.layer_activation_bytes(m, 1, 2, 1, True, True) == 14_464
    # without sequence parallelism the norm, down-projection and latent tensors stay whole on
    # every rank: 4,096 + 4,096 + 1,536 + 1,536 = 11,264 whole, (4,096 + 1,024 + 8,192 + 4,096)
    # / 2 = 8,704, statistics 128: 20,096
    assert memory.layer_activation_bytes(m, 1, 2, 1, False, True) == 20_096
    # selective recomputation (the core replayed) drops the statistics: 28,928 - 256
    assert memory.selective_activation_bytes(m, 1, 1, 1, False) == 28_672


def test_an_mla_layer_is_priced_through_the_dense_code_path():
    # megatron_layer sums one matmul time per linear call: with MLA that is 4 input
    # projections, o and 3 MLP GEMMs, each at its own size on the efficiency curve
    inst = load_instance(DEEPSEEK)
    o = Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64)
    view = replace(inst, model=moe_attention_view(inst.model))
    mms = layer_matmuls(view.model, 1, 1, 1)
    assert len(mms.linear_calls) == 8
    lt = megatron_layer(view, o, homogeneous_placement(inst.cluster.one_group, o).sites[0], NetEfficiency())
    assert lt.replicated_params == 0 and lt.grad_sync_s == 0  # tp = 1: nothing replicated
    # the stash less what the bundled instance's DeepSeek-V3 memory options remove
    # (tests/cost/test_memory_options.py derives those by hand)
    assert lt.act_bytes == (memory.layer_activation_bytes(view.model, 1, 1, 1, False, True,
                                                          inst.job.framework, inst.job.precision)
                            - memory.job_activation_savings_bytes(view.model, 1, 1, 1, False, inst.job))


# --- loader -----------------------------------------------------------------------------------

def _write(tmp_path, edit) -> Path:
    raw = yaml.safe_load(DEEPSEEK.read_text())
    edit(raw)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_bundled_instance_round_trips_its_mla():
    inst = load_instance(DEEPSEEK)
    assert inst.model.mla == V3_MLA and inst.model.kv_heads == 128
    assert instance_from_mapping(instance_to_mapping(inst), "x").model == inst.model


@pytest.mark.parametrize("edit, field, words", [
    (lambda r: r["model"].update(kv_heads=8), "model.kv_heads", "remove kv_heads"),
    (lambda r: r["model"].update(head_dim=128), "model.head_dim", "remove head_dim"),
    (lambda r: r["model"]["mla"].pop("q_lora_rank"), "model.mla.q_lora_rank", "q_lora_rank: null"),
    (lambda r: r["model"]["mla"].update(kv_lora_rank=0), "model.mla.kv_lora_rank", ""),
    (lambda r: r["model"]["mla"].update(kv_rank=512), "model.mla.kv_rank", "kv_lora_rank"),
    # (without the bundled instance's Megatron-core-only memory options, refused on their own)
    (lambda r: r.update(job={"global_batch": 15360, "framework": "torchtitan"}), "job.framework",
     "framework: megatron"),
    (lambda r: r["search"].update(zero=[3]), "search.zero", "zero 0, 1 or 2"),
])
def test_loader_errors_name_the_field_and_the_fix(tmp_path, edit, field, words):
    with pytest.raises(InstanceError) as info:
        load_instance(_write(tmp_path, edit))
    err = info.value
    assert err.field == field and words in str(err)
    assert "\n" not in str(err)


def test_q_lora_rank_null_reads_as_no_query_compression(tmp_path):
    inst = load_instance(_write(tmp_path, lambda r: r["model"]["mla"].update(q_lora_rank=None)))
    assert inst.model.mla.q_lora_rank is None
    # q (column-parallel), kv down (whole on every rank), kv up
    assert [p.replicated for p in attention_projections(inst.model, 1, 8, 1, True)] == [False, True, False]


def test_megatron_export_writes_the_latent_attention_flags():
    # Megatron-LM (d98e8a64): --multi-latent-attention, the widths of _add_mla_args
    # (--qk-head-dim is the non-rotary part, --qk-pos-emb-head-dim the rotary one), and
    # --qk-layernorm for the latents' RMSNorms; no --kv-channels (MLA's heads have their own
    # widths) and no --group-query-attention (Megatron asserts it is exclusive with MLA)
    import shlex

    from paraplan.solver.export.megatron import to_megatron
    from tests.solver.export_facts import MEGATRON_MAIN_D98E8A6
    inst = load_instance(DEEPSEEK)
    plan = Plan.of(Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64),
                   [3] + [4] * 14 + [2], [0] * 16)
    text = to_megatron(inst, plan).text
    flags = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0].startswith("--"):
            flags[words[0]] = words[1:]
    expected = {"--multi-latent-attention": [], "--q-lora-rank": ["1536"], "--kv-lora-rank": ["512"],
                "--qk-head-dim": ["128"], "--qk-pos-emb-head-dim": ["64"], "--v-head-dim": ["128"],
                "--qk-layernorm": []}
    for flag, value in expected.items():
        assert flags[flag] == value
        assert flag in MEGATRON_MAIN_D98E8A6
    assert "--kv-channels" not in flags and "--group-query-attention" not in flags


@pytest.mark.parametrize("target", ["torchtitan", "deepspeed"])
def test_other_exports_refuse_latent_attention(target):
    # a dense model with MLA (no experts, so the MoE refusal does not answer first)
    from paraplan.solver.export import deepspeed, torchtitan
    from paraplan.solver.export.common import ExportRefused
    inst = load_instance(DEEPSEEK)
    dense = replace(inst, model=replace(inst.model, moe=None))
    plan = Plan.of(Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1),
                   [3] + [4] * 14 + [2], [0] * 16)
    module = {"torchtitan": torchtitan, "deepspeed": deepspeed}[target]
    with pytest.raises(ExportRefused, match="latent attention"):
        module.runnable(dense, plan)


def test_a_plan_file_with_zero3_is_refused_not_asserted():
    # ZeRO-3 of the replicated down projections is not priced: a plan asking for it is a
    # ConfigError naming the fix, never an assertion inside the pricing
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.simulate import simulate
    inst = load_instance(DEEPSEEK)
    plan = Plan.of(Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=3, ep=64),
                   [3] + [4] * 14 + [2], [0] * 16)
    with pytest.raises(ConfigError, match="zero 0, 1 or 2"):
        simulate(inst, plan)
