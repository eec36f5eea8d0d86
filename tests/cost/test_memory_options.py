"""cost/: DeepSeek-V3's memory savings as job options (bf16 Adam moments, Megatron-core's
recompute modules, the fp8 activation input, the E5M6 attention output), the experts' stash as
Megatron-core keeps it, and DualPipe's in-flight micro-batches; each expected value derived by
hand in the comment above it.

The running dense example: hidden h = 64, 4 heads of 32 (q = 128), 2 kv heads (k = v = 64),
SwiGLU ffn f = 256, one sequence of s = t = 16 tokens, tp = cp = 1 (as tests/cost/test_model_layout.py).
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from paraplan.cost import coefficients, dualpipe, memory
from paraplan.cost.errors import ConfigError, InstanceError
from tests.job_files import tiny_with_job
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import (Framework, JobSpec, Mlp, ModelSpec, Optimizer, Outer, Precision,
                                 RecomputeModule)

ROOT = Path(__file__).resolve().parents[2]
EXACT = dict(rel=1e-12)
T, H = 16, 64


def tiny(**changes) -> ModelSpec:
    base = ModelSpec(name="tiny", layers=4, hidden=64, heads=4, kv_heads=2, ffn=256, vocab=1000,
                     seq_len=16, mlp=Mlp.SWIGLU, attention_head_dim=32)
    return replace(base, **changes)


def job(**changes) -> JobSpec:
    return replace(JobSpec(global_batch=8), **changes)


# --- bf16 Adam moments ----------------------------------------------------------------------

def test_bf16_moments_bytes_per_parameter():
    # Megatron with fp32 moments: 2 (bf16 weight) + 4 (fp32 main grad) + 12 (master, m, v) = 18.
    # With bf16 moments (DeepSeek-V3 Sec. 3.3.3): 2 + 4 + (4 + 2 + 2) = 14; ZeRO-1 over 128
    # ranks shards only the optimizer's 8: 2 + 4 + 8/128 = 6.0625
    adam = memory.state_layout(job(optimizer=Optimizer.ADAM))
    bf16_moments = memory.state_layout(job(optimizer=Optimizer.ADAM_BF16_MOMENTS))
    assert memory.state_bytes_per_param(0, 1, adam) == 18
    assert memory.state_bytes_per_param(0, 1, bf16_moments) == 14
    assert memory.state_bytes_per_param(1, 128, bf16_moments) == 6.0625


def test_bf16_moments_need_megatron_and_the_distributed_optimizer():
    with pytest.raises(ConfigError, match="precision-aware optimizer"):
        job(optimizer=Optimizer.ADAM_BF16_MOMENTS, framework=Framework.TORCHTITAN)
    from paraplan.cost.framework_rules import rules_for
    assert rules_for(Framework.MEGATRON, Optimizer.ADAM_BF16_MOMENTS).zero_stages == (1,)


# --- recompute modules and activation storage: bytes ----------------------------------------

def test_recomputing_the_norms_of_one_layer_saves_their_outputs():
    # The two norms' outputs are the QKV and MLP-in linears' inputs: 2 x t x h elements, bf16
    # (2 bytes) in a bf16 job = 2 x 16 x 64 x 2 = 4,096 bytes; Transformer Engine FP8 stashes
    # them as fp8 (1 byte): 2,048. The norms' inputs stay (the recompute reads them).
    m = tiny()
    on = (RecomputeModule.LAYERNORM,)
    assert memory.job_activation_savings_bytes(m, 1, 1, 1, False, job(recompute_modules=on)) == 4_096
    fp8 = job(recompute_modules=on, precision=Precision.FP8)
    assert memory.job_activation_savings_bytes(m, 1, 1, 1, False, fp8) == 2_048
    # with sequence parallelism over tp = 2 each rank held half of them: 1,024
    assert memory.job_activation_savings_bytes(m, 1, 2, 1, True, fp8) == 1_024


def test_fp8_activation_input_halves_the_swiglu_input():
    # SwiGLU's input is 2 x f wide per token: 2 x 16 x 256 elements, 2 bytes -> 1: 8,192 saved
    saved = memory.job_activation_savings_bytes(tiny(), 1, 1, 1, False, job(activation_fp8_input_store=True))
    assert saved == 8_192


def test_e5m6_attention_output():
    # TE FP8 stashes the attention output (t x q = 16 x 128, bf16: 4,096 B) and the output
    # projection's fp8 copy (2,048 B); E5M6 keeps one 12-bit copy with an fp32 scale per 128
    # elements: 2,048 x (1.5 + 4/128) = 3,136 B, so 6,144 - 3,136 = 3,008 saved
    fp8 = job(precision=Precision.FP8, attention_output_e5m6=True)
    assert memory.job_activation_savings_bytes(tiny(), 1, 1, 1, False, fp8) == pytest.approx(3_008, **EXACT)
    with pytest.raises(ConfigError, match="precision: fp8"):
        job(attention_output_e5m6=True)


def test_mla_up_projection_recompute_on_deepseek_v3_shapes():
    # DeepSeek-V3's MLA, one sequence of t = 4,096, tp = 1, bf16: Q and K are 128 x (128 + 64)
    # = 24,576 wide, V 128 x 128 = 16,384: 2 x 4,096 x 65,536 = 536,870,912 B; the up
    # projections' normed-latent inputs 4,096 x (1,536 + 512) x 2 = 16,777,216 B; the rotary
    # key before rotation stays stashed (the checkpoint reads it): - 4,096 x 64 x 2 = 524,288.
    # Saved: 536,870,912 + 16,777,216 - 524,288 = 553,123,840
    m = load_instance(ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml").model
    on = job(recompute_modules=(RecomputeModule.MLA_UP_PROJ,))
    assert memory.job_activation_savings_bytes(m, 1, 1, 1, False, on) == 553_123_840


# --- recompute modules: time ----------------------------------------------------------------

def _inst(**job_changes):
    inst = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")
    return replace(inst, job=replace(inst.job, **job_changes))


def test_norm_recompute_time_is_one_pass_over_each_norm():
    # Llama 3 8B, micro-batch 1, s = 8,192, tp = 1: each of the 2 norms reads its bf16 input and
    # writes its output again, 2 x (2 + 2) x 8,192 x 4,096 = 268,435,456 bytes, at the H100's
    # HBM bandwidth x memory efficiency; backward grows by that and nothing else does
    o = Outer(tp=1, pp=4, dp=16, micro_batch=1, num_micro_batches=32)
    site = coefficients.homogeneous_placement(_inst().cluster.one_group, o).sites[0]
    base = coefficients.megatron_layer(_inst(), o, site, coefficients.NetEfficiency())
    on = coefficients.megatron_layer(_inst(recompute_modules=(RecomputeModule.LAYERNORM,)), o, site,
                                     coefficients.NetEfficiency())
    gpu = site.gpu
    by_hand = 268_435_456 / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)
    assert on.bwd_s - base.bwd_s == pytest.approx(by_hand, **EXACT)
    assert on.fwd_s == base.fwd_s
    # its stash loses the two linear inputs: 2 x 8,192 x 4,096 x 2 bytes
    assert base.act_bytes - on.act_bytes == 2 * 8192 * 4096 * 2


# --- loader ----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, field, words", [
    ({"recompute_modules": ["layernorm", "qkv"]}, "job.recompute_modules[1]", "unknown value 'qkv'"),
    ({"recompute_modules": ["moe_act"]}, "job.recompute_modules", "no routed experts"),
    ({"recompute_modules": ["mla_up_proj"]}, "job.recompute_modules", "no latent attention"),
    ({"recompute_modules": ["layernorm"]}, "job.recompute_modules", "full_recompute: false"),
    ({"recompute_modules": ["layernorm", "layernorm"]}, "job.recompute_modules", "twice"),
    ({"activation_fp8_input_store": True}, "job.activation_fp8_input_store", "only for SwiGLU"),
    ({"optimizer": "adam_bf16", }, "job.optimizer", "unknown value"),
])
def test_bad_options_name_file_field_and_fix(tmp_path, extra, field, words):
    path = tiny_with_job(tmp_path, **extra)
    with pytest.raises(InstanceError) as e:
        load_instance(path)
    text = str(e.value)
    assert str(path) in text and field in text and words in text, text


def test_options_load_and_round_trip(tmp_path):
    from paraplan.cost.readers.instance import instance_from_mapping
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    data = yaml.safe_load((ROOT / "instances" / "tiny-gpt-8xA100.yaml").read_text())
    data["model"]["mlp"] = "swiglu"
    data["job"].update(recompute_modules=["layernorm"], activation_fp8_input_store=True,
                       optimizer="adam_bf16_moments")
    data["search"] = {"full_recompute": False}
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    inst = load_instance(path)
    assert inst.job.recompute_modules == (RecomputeModule.LAYERNORM,)
    assert inst.job.activation_fp8_input_store and inst.job.optimizer is Optimizer.ADAM_BF16_MOMENTS
    assert instance_from_mapping(instance_to_mapping(inst), "<memory>").job == inst.job


# --- the experts' stash ----------------------------------------------------------------------

def test_expert_stash_in_fp8_is_one_byte_per_gemm_input():
    # DeepSeek-V3 anchor layer, ep 64, one micro-batch, FP8, no savings: a rank stashes the
    # mean rank's routed copies whatever the imbalance (cost/moe.STASH_IMBALANCE 1.0; the stated
    # 1.1 is the busiest rank's per collective, a time), 8 x 4,096 = 32,768. MLP-in's input fp8
    # 32,768 x 7,168 = 234,881,024; SwiGLU input bf16 2 x 32,768 x 2,048 x 2 = 268,435,456;
    # MLP-out's input fp8 32,768 x 2,048 = 67,108,864; permuted probabilities 32,768 x 4 =
    # 131,072; router probabilities 4,096 x 256 x 4 = 4,194,304. Sum 574,750,720 (the combine
    # stashes nothing)
    from paraplan.cost import moe
    inst = load_instance(ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml")
    inst = replace(inst, job=replace(inst.job, recompute_modules=(), activation_fp8_input_store=False),
                   model=replace(inst.model, moe=replace(inst.model.moe, imbalance=1.1)))  # stated: 1.1
    o = Outer(tp=1, pp=16, dp=128, micro_batch=1, num_micro_batches=120, zero=1, ep=64)
    assert moe.expert_act_bytes(inst, o) == pytest.approx(574_750_720, **EXACT)


# --- DualPipe's in-flight micro-batches -------------------------------------------------------

def _replay_dualpipe_step(pp: int, m: int, d: int, a0: float, a1: float) -> float:
    """Peak activation bytes of device d, replaying deepseek-ai/DualPipe dualpipe.py
    DualPipe.step's eight steps (3da1bbe) as counts of forward (+1) and backward (-1) chunks
    of phase 0 (the shallower stage, a0 bytes each) and phase 1 (a1), a paired chunk's
    forward allocating before its backward frees."""
    half_rank, h = min(d, pp - 1 - d), pp // 2
    n, peak = [0, 0], 0.0

    def f(p):
        nonlocal peak
        n[p] += 1
        peak = max(peak, n[0] * a0 + n[1] * a1)

    def b(p):
        n[p] -= 1
    for _ in range((h - half_rank - 1) * 2):
        f(0)
    for _ in range(half_rank + 1):
        f(0), f(1)
    for _ in range(h - half_rank - 1):
        b(1), f(1)
    for _ in range(m // 2 - pp + half_rank + 1):
        f(0), b(1), f(1), b(0)
    for _ in range(h - half_rank - 1):
        b(1), f(1), b(0)
    for _ in range(half_rank + 1):
        b(1), b(0)
    for _ in range(h - half_rank - 1):
        b(0)
    assert n == [0, 0]
    return peak


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (8, 20), (16, 120)])
def test_dualpipe_in_flight_pairs_match_a_replay_of_its_steps(pp, m):
    own, other = dualpipe.in_flight_pairs(pp)
    assert (own + other == pp + 1).all()  # the repository's table: PP + 1 chunks
    rng = np.random.default_rng(pp)
    sizes = rng.uniform(1, 10, pp)  # unequal stages
    for d in range(pp):
        shallow = min(d, pp - 1 - d)
        a0, a1 = sizes[shallow], sizes[pp - 1 - shallow]
        got = own[d] * sizes[d] + other[d] * sizes[pp - 1 - d]
        assert got == pytest.approx(_replay_dualpipe_step(pp, m, d, a0, a1), **EXACT)


# --- memory by category: the dense prefix, DualPipe devices ----------------------------------

ANCHOR_PLAN = {"tp": 1, "pp": 16, "dp": 128, "micro_batch": 1, "num_micro_batches": 120, "zero": 1,
               "ep": 64, "layers_per_stage": [3] + [4] * 14 + [2], "full_recompute_layers": [0] * 16}


def test_dense_prefix_categories_keep_the_workspace_its_own():
    # The first stage holds DeepSeek-V3's 3 dense layers: its workspace is one layer's backward
    # buffers, as on stage 1 (both widest at MLA's Q + K + V = 65,536 > 2 x 18,432), not the
    # dense layers' state and activations leaking into it (it read -50.7 GiB before)
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.cost.memory_breakdown import stage_categories_bytes
    inst = load_instance(ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml")
    plan = plan_from_mapping(ANCHOR_PLAN, inst)
    cats = stage_categories_bytes(inst, plan, coefficients.build(inst, plan.flat_outer))
    assert cats[0]["workspace"] == pytest.approx(cats[1]["workspace"], rel=1e-12) and cats[0]["workspace"] > 0


def test_memory_command_shows_dualpipe_devices(tmp_path, capsys):
    # `paraplan memory` of a DualPipe job's plan file: one column per device, the categories
    # summing to cost/dualpipe.iteration's memory (77.5 GiB on device 1 when written; 75.0 GiB
    # since a rank's expert stash is the mean rank's, cost/moe.STASH_IMBALANCE, with the fitted
    # imbalance 1.2, which priced as a stash factor made it 79.9 of the 78.0 GiB usable)
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.solver.commands.cli import main
    raw = yaml.safe_load((ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml").read_text())
    raw["job"]["pipeline_schedule"] = "dualpipe"
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(raw))
    pf = tmp_path / "p.yaml"
    pf.write_text(yaml.safe_dump({"plan": ANCHOR_PLAN}))
    assert main(["memory", str(path), "--plan", str(pf)]) == 0
    out = capsys.readouterr().out
    assert "device 15" in out and "stage 1 " not in out
    inst = load_instance(path)
    plan = plan_from_mapping(ANCHOR_PLAN, inst)
    cats = dualpipe.device_categories_bytes(inst, plan)
    it = dualpipe.iteration(inst, plan)
    assert [sum(c.values()) for c in cats] == pytest.approx(list(it.mem_bytes), rel=1e-12)


def test_options_refused_beside_per_operator_partitions(tmp_path):
    # cost/partition.py prices each linear's stash itself: the options would be ignored there
    data = yaml.safe_load((ROOT / "instances" / "tiny-gpt-8xA100.yaml").read_text())
    data["model"]["mlp"] = "swiglu"
    data["job"]["activation_fp8_input_store"] = True
    data["search"] = {"tensor_partitions": ["megatron", "spatial_temporal"]}
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InstanceError, match="tensor_partitions: \\[megatron\\]"):
        load_instance(path)


def test_experts_cached_fp8_weights():
    # DeepSeek-V3, ep 64: 256 / 64 = 4 local experts of 3 x 7,168 x 2,048 = 44,040,192 weights
    # each, 176,160,768 per GPU and MoE layer; Transformer Engine keeps an fp8 copy and its
    # transpose: 2 x 176,160,768 = 352,321,536 bytes (none in a bf16 job)
    ex = 4 * 3 * 7168 * 2048
    assert memory.fp8_expert_weight_bytes(ex, Precision.FP8, Framework.MEGATRON) == 352_321_536
    assert memory.fp8_expert_weight_bytes(ex, Precision.BF16, Framework.MEGATRON) == 0
