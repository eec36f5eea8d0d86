"""cost/: what head_dim, biases, norms, parallel blocks, learned positions and sliding windows
change, each expected value derived by hand in the comment above it.

The running example is a tiny layer, small enough to list every tensor: hidden h = 64, 4 heads
of head_dim 32 (so Q is q = 128 wide, twice hidden), 2 kv heads (k = 64), SwiGLU ffn f = 256,
one sequence of s = 16 tokens (t = 16), tp = cp = 1, bf16 (2 bytes).
"""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from oracles.cost import qkv
from paraplan import instances
from paraplan.cost import memory
from paraplan.cost.coefficients import build
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import InstanceError
from paraplan.cost.flops import (attended_keys, causal_score_fraction, layer_matmuls, layer_params,
                        model_flops_per_token, model_params)
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.model_notes import model_warnings
from paraplan.cost.specs import Mlp, ModelSpec, Outer
from paraplan.cost.plan_specs import Plan

INSTANCES = Path(instances.__file__).parent
EXACT = dict(rel=1e-12)


def tiny(**changes) -> ModelSpec:
    base = ModelSpec(name="tiny", layers=4, hidden=64, heads=4, kv_heads=2, ffn=256, vocab=1000,
                     seq_len=16, mlp=Mlp.SWIGLU, attention_head_dim=32)
    return replace(base, **changes)


# --- sliding windows ----------------------------------------------------------------------

@pytest.mark.parametrize("s, w", [(16, 1), (16, 4), (100, 37), (257, 256), (64, 64)])
def test_band_fraction_counts_the_scores(s, w):
    # Exhaustive count: query i attends to min(i + 1, w) keys. Summed: w(w+1)/2 for the first
    # w queries plus w(s - w) for the rest = s*w - w^2/2 + w/2; the formula drops the w/2.
    scores = sum(min(i + 1, w) for i in range(s))
    assert causal_score_fraction(s, w) * s * s == pytest.approx(scores - w / 2, **EXACT)


def test_window_at_least_the_sequence_is_plain_causal():
    assert causal_score_fraction(16, 16) == 0.5
    assert causal_score_fraction(16, 4096) == 0.5
    assert causal_score_fraction(16, None) == 0.5


def test_layer_flops_with_head_dim_and_window():
    # QKV: 2*t*h*(q + 2k) = 2*16*64*256 = 524,288; attention output 2*t*q*h = 262,144;
    # gate and up 2*t*h*f = 524,288 each, down 524,288. Core: QK^T and PV are 2*t*s*q each,
    # full causal keeps half: 2 * 2*16*16*128 * 0.5 = 65,536.
    mms = layer_matmuls(tiny(), 1, tp=1, cp=1)
    assert (qkv(mms), mms.attn_out, mms.mlp) == (524_288, 262_144, (524_288,) * 3)
    assert mms.attention_core == 65_536
    # a 4-token window in every layer: fraction 4/16 - (4/16)^2/2 = 0.21875 of s^2,
    # 4*16*16*128 * 0.21875 = 28,672
    assert layer_matmuls(tiny(sliding_window_tokens=4), 1, 1, 1).attention_core == 28_672
    # in 1 of the 4 layers: the mean fraction (0.21875 + 3*0.5)/4 = 0.4296875 -> 56,320
    mixed = tiny(sliding_window_tokens=4, sliding_window_layers=1)
    assert layer_matmuls(mixed, 1, 1, 1).attention_core == 56_320


def test_bias_flops_add_one_per_output():
    # QKV bias adds t*(q + 2k) = 16*256 = 4,096; output bias t*h = 1,024; MLP biases t*f on gate
    # and up (4,096 each) and t*h on down (1,024)
    plain = layer_matmuls(tiny(), 1, 1, 1)
    biased = layer_matmuls(tiny(qkv_bias=True, attn_out_bias=True, mlp_bias=True), 1, 1, 1)
    assert qkv(biased) - qkv(plain) == 4_096
    assert biased.attn_out - plain.attn_out == 1_024
    assert [b - p for b, p in zip(biased.mlp, plain.mlp)] == [4_096, 4_096, 1_024]


def test_mfu_flops_per_token_count_the_attended_keys():
    # dense: 6*(L*layer_params + V*h); attention (PaLM, non-causal): 12*L*s*q, a windowed layer
    # counting its w keys. Layer params: h(q+2k) + qh + 3hf + 2h = 16,384 + 8,192 + 49,152 + 128
    # = 73,856. Full: 6*(4*73,856 + 64,000) + 12*4*16*128 = 2,156,544 + 98,304 = 2,254,848.
    assert layer_params(tiny()) == 73_856
    assert model_flops_per_token(tiny()) == 2_254_848
    # window 4 in 2 of 4 layers: mean keys (2*4 + 2*16)/4 = 10; 12*4*10*128 = 61,440
    half = tiny(sliding_window_tokens=4, sliding_window_layers=2)
    assert attended_keys(half) == 10
    assert model_flops_per_token(half) == 2_156_544 + 61_440


# --- parameters ---------------------------------------------------------------------------

def test_parameters_of_every_variation():
    # biases: q + 2k = 256 (QKV), h = 64 (output), 2f + h = 576 (SwiGLU MLP); LayerNorm doubles
    # the two norms' 128 parameters
    m = tiny(qkv_bias=True, attn_out_bias=True, mlp_bias=True, norm_bias=True)
    assert layer_params(m) == 73_856 + 256 + 64 + 576 + 128
    # four norms (Gemma-2) add 2h = 128; one (Falcon-7B) removes 64
    assert layer_params(tiny(norms_per_layer=4)) == 73_856 + 128
    assert layer_params(tiny(norms_per_layer=1)) == 73_856 - 64
    # model: 4 layers + untied V*h twice + final norm h; learned positions add 16*64 = 1,024,
    # an embedding norm 64
    assert model_params(tiny()) == 4 * 73_856 + 2 * 64_000 + 64
    assert model_params(tiny(position_embeddings=16, embedding_norm=True)) == model_params(tiny()) + 1_024 + 64


def test_stage_state_holds_positions_on_the_first_stage_only():
    m = tiny(position_embeddings=16, tied_embeddings=True)
    # first stage: token table 64,000 + positions 1,024; last (pp > 1, tied): its copy of the
    # token table and the final norm, 64,064 (no positions)
    assert memory.embedding_stage_params(m, True, False) == 65_024
    assert memory.embedding_stage_params(m, False, True) == 64_064


# --- activations --------------------------------------------------------------------------

def test_activations_with_head_dim():
    # t = 16, h = 64, q = 128, k = 64, f = 256, flash, no dropout, bf16:
    # norm inputs 2 x 2th = 4,096; linear inputs (QKV, MLP) 2 x 2th = 4,096; Q, K, V
    # 2t(q + 2k) = 8,192; attention output 2tq = 4,096; SwiGLU input 2t*2f = 16,384 and output
    # 2tf = 8,192; log-sum-exp 4 bytes x 4 heads x t = 256. Sum 45,312.
    assert memory.layer_activation_bytes(tiny(), 1, 1, 1, False, True) == 45_312


def test_activations_of_block_layouts():
    # one shared norm in a parallel block (Falcon-7B): the layer input and the one norm output
    # are stored once each: 2th + 2th = 4,096 instead of 8,192
    falcon_like = tiny(parallel_blocks=True, norms_per_layer=1)
    assert memory.layer_activation_bytes(falcon_like, 1, 1, 1, False, True) == 45_312 - 4_096
    # two norms in a parallel block (GPT-NeoX): both read the layer input (stored once), two
    # distinct norm outputs: 2th + 2 x 2th = 6,144
    neox_like = tiny(parallel_blocks=True, norms_per_layer=2)
    assert memory.layer_activation_bytes(neox_like, 1, 1, 1, False, True) == 45_312 - 2_048
    # Gemma-2's four sequential norms: four norm inputs, 4 x 2th = 8,192
    assert memory.layer_activation_bytes(tiny(norms_per_layer=4), 1, 1, 1, False, True) == 45_312 + 4_096


def test_backward_workspace_uses_the_qkv_width():
    # widest: max(2f, q + 2k) = max(512, 256); with head_dim 64 instead (q = 256, k = 128):
    # q + 2k = 512 ties, with ffn 128 (2f = 256) it wins: 2 x 2 bytes x t x 512 = 32,768
    assert memory.backward_workspace_bytes(tiny(attention_head_dim=64, ffn=128), 1, 1, 1) == 32_768


# --- the whole layer, priced -------------------------------------------------------------

def _mistral_on_tiny_cluster(window: int | None):
    inst = load_instance(INSTANCES / "tiny-gpt-8xA100.yaml")
    model = ModelSpec(name="m", layers=8, hidden=1024, heads=16, kv_heads=4, ffn=3584,
                      vocab=32000, seq_len=8192, mlp=Mlp.SWIGLU, sliding_window_tokens=window)
    return replace(inst, model=model)


def test_window_shrinks_only_the_attention_core():
    # FlashAttention's forward core costs F / rate and its backward 2.5x that; Megatron on A100
    # runs Transformer Engine's FlashAttention-2 at its benchmark, 175 TFLOP/s at 8,192 keys
    # per call (Dao 2023, Fig. 4; cost/coefficients.attention_efficiency; the window narrows
    # each query's band, not the call), so a 1,024-token window on s = 8,192 saves, per layer
    # and micro-batch, 3.5 x (F_full - F_window) / rate
    # with F = 4*t*s*q*fraction: fraction 0.5 vs 1/8 - 1/128 = 0.1171875.
    full, windowed = _mistral_on_tiny_cluster(None), _mistral_on_tiny_cluster(1024)
    o = Outer(tp=2, pp=1, dp=4, micro_batch=1, num_micro_batches=8)
    gpu = full.cluster.gpu
    t = s = 8192
    assert gpu.fa2_benchmark_flops_per_s == 175e12 and full.job.framework.value == "megatron"
    saved = 3.5 * 4 * t * s * 1024 / 2 * (0.5 - 0.1171875) / 175e12
    # (without the wait for the slowest rank, which scales the whole layer: test_scale.py)
    no_wait = NetEfficiency(rank_jitter_rel=0.0)
    a, b = build(full, o, no_wait), build(windowed, o, no_wait)
    assert a.layer_time_s[0] - b.layer_time_s[0] == pytest.approx(saved, rel=1e-9)
    assert a.layer_act_bytes[0] == b.layer_act_bytes[0]  # flash stores no score matrix


# --- YAML model keys ----------------------------------------------------------------------

def _instance_with_model(tmp_path, **keys):
    raw = yaml.safe_load((INSTANCES / "tiny-gpt-8xA100.yaml").read_text())
    raw["model"].update(keys)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_yaml_model_takes_the_layout_keys(tmp_path):
    path = _instance_with_model(tmp_path, hidden=1000, head_dim=64, qkv_bias=True,
                                norms_per_layer=1, parallel_blocks=True, position_embeddings=2048,
                                sliding_window_tokens=256, sliding_window_layers=4)
    m = load_instance(path).model
    assert (m.q_hidden, m.kv_hidden, m.windowed_layers, m.position_embeddings) == (1024, 1024, 4, 2048)
    assert m.qkv_bias and m.parallel_blocks and m.norms_per_layer == 1


@pytest.mark.parametrize("keys, field", [
    (dict(hidden=1000), "model.heads"),  # 1000 / 16 heads is no head width, and no head_dim
    (dict(sliding_window_layers=2), "model.sliding_window_layers"),
    (dict(sliding_window_tokens=256, sliding_window_layers=9), "model.sliding_window_layers"),
    (dict(position_embeddings=512), "model.position_embeddings"),  # fewer than seq_len 1024
    (dict(head_dim=0), "model.head_dim"),
    (dict(unmodelled="not a list"), "model.unmodelled"),
])
def test_yaml_model_layout_errors(tmp_path, keys, field):
    with pytest.raises(InstanceError) as info:
        load_instance(_instance_with_model(tmp_path, **keys))
    assert info.value.field == field and "\n" not in str(info.value)


# --- the lines shown with a plan ---------------------------------------------------------

def test_model_warnings_name_what_is_priced_approximately():
    inst = load_instance(INSTANCES / "tiny-gpt-8xA100.yaml")
    assert model_warnings(inst) == []
    m = replace(inst.model, sliding_window_tokens=256, sliding_window_layers=4,
                parallel_blocks=True, unmodelled=("a config line",))
    inst = replace(inst, model=m)
    one_stage = Plan.flat(tp=1, pp=1, dp=8, micro_batch=1, num_micro_batches=4,
                     layers_per_stage=(8,), full_recompute_layers=(0,))
    lines = model_warnings(inst, one_stage)
    # one stage holds every layer, so the mean layer is exact; tp = 1 has no all-reduces
    assert lines == ["a config line"]
    two = Plan.flat(tp=2, pp=2, dp=2, micro_batch=1, num_micro_batches=16,
               layers_per_stage=(4, 4), full_recompute_layers=(0, 0))
    lines = model_warnings(inst, two)
    assert len(lines) == 3 and "4 of 8 layers attend to a 256-token window" in lines[1]
    # 256 of 1,024 tokens: fraction 1/4 - 1/32 = 0.21875 of s^2, 44% of causal's 0.5
    assert "(44% of full causal attention's scores)" in lines[1]
    assert "two per direction" in lines[2]
    with_cp = Plan.flat(tp=1, pp=1, dp=4, cp=2, micro_batch=1, num_micro_batches=8,
                   layers_per_stage=(8,), full_recompute_layers=(0,))
    assert [line.split(":")[0] for line in model_warnings(inst, with_cp)[1:]] == [
        "context parallel cp=2 with a sliding window"]


def test_standard_attention_keeps_the_whole_score_matrix():
    # the unfused kernel materialises the masked s x s scores whatever the window: 2 bytes x
    # heads x s x t = 2 x 4 x 16 x 16 = 2,048 (no dropout), with or without a window
    t_bytes = memory.layer_activation_bytes(tiny(sliding_window_tokens=4), 1, 1, 1, False, False)
    assert t_bytes == 45_312 - 256 + 2_048


def test_tensor_parallel_splits_heads_not_hidden(tmp_path):
    # hidden 1,000 with 16 heads of 64: tp splits the 16 heads (Q 1,024 wide), so every power
    # of two up to the node's 8 GPUs divides the attention; hidden itself need not divide
    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver.class_layouts import tp_values
    inst = load_instance(_instance_with_model(tmp_path, hidden=1000, head_dim=64))  # as one group
    assert tp_values(inst, (0,)) == [1, 2, 4, 8]
