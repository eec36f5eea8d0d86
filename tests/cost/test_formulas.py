"""cost/: hand-derived formulas, each checked against its published source.

Every expected value below is derived by hand in the comment above it, from the paper the
simulator's docstrings cite, and never computed by calling the function under test twice.
Sources:
  [N21]  Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
         Using Megatron-LM", SC'21 (arXiv 2104.04473).
  [K22]  Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
         2022 (arXiv 2205.05198), Sec. 4 and Table 2.
  [T05]  Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations
         in MPICH", IJHPCA 2005 (ring all-reduce / all-gather).
  [R20]  Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
         Models", SC'20, Sec. 3.1 and 5.
  [L24]  Meta, "The Llama 3 Herd of Models" (2024), Table 3, and the Meta-Llama-3-70B config.
"""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from oracles.cost import qkv
from paraplan import instances
from paraplan.cost import comm, memory, schedule
from paraplan.cost.coefficients import in_flight_micro_batches
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import (CAUSAL_ATTENTION_FRACTION, layer_matmuls, layer_params, logits_flops,
                        model_params)
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Cluster, NodeGroup, Link, Mlp, ModelSpec
from paraplan.cost.plan_specs import Plan

INSTANCES = Path(instances.__file__).parent
EXACT = dict(rel=1e-12)  # the formulas are exact; only float rounding separates the two sides


def gpt(*, layers=2, hidden=1024, heads=16, kv_heads=None, ffn=None, vocab=32000, seq_len=2048,
        mlp=Mlp.GELU, tied=False, dropout=0.0) -> ModelSpec:
    """A GPT-style shape; defaults: MHA, ffn = 4h (the shape of [N21] and [K22])."""
    return ModelSpec(name="t", layers=layers, hidden=hidden, heads=heads,
                     kv_heads=kv_heads or heads, ffn=ffn or 4 * hidden, vocab=vocab,
                     seq_len=seq_len, mlp=mlp, tied_embeddings=tied, dropout=dropout)


# --- FLOPs (cost/flops.py) -----------------------------------------------------------------

def test_gpt_layer_linear_flops_are_24bsh2():
    # [N21] Sec. 5.1: a GPT layer's forward matmuls are QKV 6bsh^2, attention output 2bsh^2,
    # MLP 2 x 8bsh^2 (ffn = 4h): 24bsh^2 in all. b=2, s=2048, h=1024.
    b, s, h = 2, 2048, 1024
    mms = layer_matmuls(gpt(hidden=h, seq_len=s), b, tp=1, cp=1)
    assert qkv(mms) == pytest.approx(6 * b * s * h**2, **EXACT)
    assert mms.attn_out == pytest.approx(2 * b * s * h**2, **EXACT)
    assert mms.mlp == pytest.approx((8 * b * s * h**2,) * 2, **EXACT)
    assert sum(mms.linear_calls) == pytest.approx(24 * b * s * h**2, **EXACT)


def test_gqa_shrinks_only_the_qkv_matmul():
    # GQA: Q keeps h columns, K and V get kv_heads*head_dim each: 2bsh(h + 2*kv_heads*head_dim).
    # h=4096, 32 heads (head_dim 128), 8 kv heads: QKV = 2bsh(4096 + 2048) = 2bsh * 6144.
    b, s, h = 1, 4096, 4096
    m = gpt(hidden=h, heads=32, kv_heads=8, seq_len=s)
    mms = layer_matmuls(m, b, tp=1, cp=1)
    assert qkv(mms) == pytest.approx(2 * b * s * h * (h + 2 * 8 * 128), **EXACT)
    assert qkv(mms) == pytest.approx(2 * b * s * h * 6144, **EXACT)
    assert mms.attn_out == pytest.approx(2 * b * s * h * h, **EXACT)


def test_swiglu_has_three_mlp_matmuls():
    # Shazeer 2020 (GLU variants): gate and up are h x f, down is f x h: 3 matmuls of 2bshf.
    b, s, h, f = 1, 2048, 2048, 5632
    mms = layer_matmuls(gpt(hidden=h, ffn=f, seq_len=s, mlp=Mlp.SWIGLU), b, tp=1, cp=1)
    assert mms.mlp == pytest.approx((2 * b * s * h * f,) * 3, **EXACT)


def test_tensor_parallel_divides_every_matmul():
    # Megatron tensor parallelism splits every weight matrix and the attention heads t ways
    # ([N21] Sec. 2.3), so every per-GPU FLOP count is the tp=1 count / t.
    m = gpt(hidden=2048, heads=16, kv_heads=4, mlp=Mlp.SWIGLU, ffn=5504)
    one, four = layer_matmuls(m, 2, tp=1, cp=1), layer_matmuls(m, 2, tp=4, cp=1)
    for a, b in zip((*one.linear_calls, one.attention_core), (*four.linear_calls, four.attention_core)):
        assert b == pytest.approx(a / 4, **EXACT)


def test_attention_core_is_4bs2h_times_causal_fraction():
    # [N21] Sec. 5.1: QK^T and (softmax)V are 2bs^2h each, 4bs^2h forward; cost/flops.py counts
    # only the unmasked half of a causal mask (CAUSAL_ATTENTION_FRACTION = 0.5, FlashAttention-2
    # Sec. 3.1). b=2, s=2048, h=1024, tp=2: 4*2*2048^2*1024*0.5/2.
    b, s, h = 2, 2048, 1024
    assert CAUSAL_ATTENTION_FRACTION == 0.5
    mms = layer_matmuls(gpt(hidden=h, seq_len=s), b, tp=2, cp=1)
    assert mms.attention_core == pytest.approx(4 * b * s**2 * h * 0.5 / 2, **EXACT)


def test_narayanan_flops_per_iteration_formula():
    # [N21] Sec. 5.1, eq. for F with activation recomputation: 4 passes over the layers
    # (forward, recompute, 2x backward) and 3 over the logits layer:
    #   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    # = 4 l (24Bsh^2 + 4Bs^2h) + 3 * 2BshV, with the full (non-causal) attention count.
    # GPT-3 175B shape, B = 1 sequence.
    l, h, s, V, B = 96, 12288, 2048, 51200, 1
    m = gpt(layers=l, hidden=h, heads=96, vocab=V, seq_len=s)
    mms = layer_matmuls(m, B, tp=1, cp=1)
    per_layer = sum(mms.linear_calls) + mms.attention_core / CAUSAL_ATTENTION_FRACTION
    total = 4 * l * per_layer + 3 * logits_flops(m, B, tp=1, cp=1)
    assert total == pytest.approx(96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)), **EXACT)


def test_gpt3_175b_parameter_count():
    # [N21] Table 1 lists 174.6 B parameters for 96 layers, h 12288, vocab 51200; its count
    # (Sec. 5.1) is P = 12lh^2(1 + 13/(12h) + (V+s)/(12lh)) with tied embeddings and biases.
    # cost/flops.py: l(12h^2 + 2h) + Vh + h (tied: one V x h matrix, biases not counted)
    # = 96 * 1,811,963,904 + 629,145,600 + 12,288 = 174,577,692,672.
    m = gpt(layers=96, hidden=12288, heads=96, ffn=49152, vocab=51200, tied=True)
    assert model_params(m) == 174_577_692_672
    assert model_params(m) == pytest.approx(174.6e9, rel=0.005)
    # untied (a separate output matrix) adds V*h = 0.63 B and still sits within 0.5%
    assert model_params(replace(m, tied_embeddings=False)) == pytest.approx(174.6e9, rel=0.005)


def test_llama3_70b_parameter_count():
    # [L24]: 80 layers, h 8192, 64 heads (head_dim 128), 8 kv heads, ffn 28672, SwiGLU,
    # vocab 128256, untied. Per layer: attention 8192*(8192 + 2*1024) + 8192^2 = 150,994,944;
    # MLP 3*8192*28672 = 704,643,072; two norms 16,384; sum 855,654,400.
    # 80 layers 68,452,352,000 + embedding 1,050,673,152 + output 1,050,673,152 + final norm
    # 8,192 = 70,553,706,496: the 70.6 B the model card reports (safetensors total).
    m = gpt(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
            mlp=Mlp.SWIGLU, tied=False)
    assert layer_params(m) == 855_654_400
    assert model_params(m) == 70_553_706_496
    assert model_params(m) == pytest.approx(70.6e9, rel=0.01)


# --- collectives (cost/comm.py) ------------------------------------------------------------

LINK = Link(bw_bytes_per_s=100e9, latency_s=5e-6)


IDEAL = NetEfficiency(intra_node=1.0, inter_node=1.0, overlap_slowdown=0.0, call_latency_s=0.0)


def test_ring_all_reduce_time():
    # [T05] ring all-reduce: 2(n-1)/n * B / bw + 2(n-1) * alpha.
    # n=8, B=1 GB, bw=100 GB/s, alpha=5 us: 2*7/8*1e9/1e11 + 14*5e-6 = 0.0175 + 7e-5 = 0.01757 s.
    t = comm.all_reduce_time_s(1e9, 8, LINK, False, IDEAL)
    assert t == pytest.approx(0.01757, **EXACT)
    # the measured defaults: NVLink at 80% of wire speed and NCCL's 8.4 us per call:
    # 0.0175/0.8 + 7e-5 + 8.4e-6 = 0.021875 + 7.84e-5 = 0.0219534 s
    t = comm.all_reduce_time_s(1e9, 8, LINK, False, NetEfficiency())
    assert t == pytest.approx(0.0219534, **EXACT)


def test_ring_all_gather_time():
    # [T05] ring all-gather (and reduce-scatter) of a full tensor of B bytes:
    # (n-1)/n * B / bw + (n-1) * alpha = 7/8 * 0.01 + 7*5e-6 = 0.00875 + 3.5e-5 = 0.008785 s.
    t = comm.all_gather_time_s(1e9, 8, LINK, False, IDEAL)
    assert t == pytest.approx(0.008785, **EXACT)
    # issued as 10 calls (a framework's buckets): 10 * (8.4 us + 7 * 5 us) + 0.00875 / 0.8
    # = 4.34e-4 + 0.0109375 = 0.0113715 s
    t = comm.all_gather_time_s(1e9, 8, LINK, False, NetEfficiency(), calls=10)
    assert t == pytest.approx(0.0113715, **EXACT)


def test_collectives_trivial_groups_and_efficiency():
    # one rank moves nothing; an inter-node efficiency e divides the bandwidth term only:
    # n=4, B=4e8, bw=100e9*0.5: 2*3/4*4e8/5e10 + 6*5e-6 = 0.012 + 3e-5 = 0.01203 s.
    assert comm.all_reduce_time_s(1e9, 1, LINK, False, NetEfficiency()) == 0.0
    assert comm.all_gather_time_s(1e9, 1, LINK, True, NetEfficiency()) == 0.0
    half = NetEfficiency(intra_node=1.0, inter_node=0.5, call_latency_s=0.0)
    assert comm.all_reduce_time_s(4e8, 4, LINK, True, half) == pytest.approx(0.01203, **EXACT)
    assert comm.all_reduce_time_s(4e8, 4, LINK, False, half) == pytest.approx(0.00603, **EXACT)


def test_tree_all_reduce_wins_on_many_nodes_with_small_payloads():
    # 64 nodes x 8 GPUs, a 1 MB all-reduce over all 512 ranks at 400 GB/s per rank (8 NICs):
    # ring: 2*511 hops * 10 us = 10.22 ms of latency; NCCL's tree: a chain of 7 NVLink hops
    # (5 us) + log2(64) = 6 network hops (10 us) per pass, 2 passes: 2 * (35 + 60) us = 0.19 ms,
    # plus 2 * 1e6 / 4e11 = 5 us of bandwidth: 0.195 ms (ideal network, no call latency)
    from paraplan.cost.specs import GpuSpec
    gpu = GpuSpec(name="g", peak_flops_per_s=1e15, hbm_bytes=8e10, hbm_bw_bytes_per_s=3e12)
    cl = NodeGroup(gpu=gpu, nodes=64, gpus_per_node=8,
                   intra_node=Link(bw_bytes_per_s=450e9, latency_s=5e-6),
                   inter_node=Link(bw_bytes_per_s=50e9, latency_s=10e-6))
    link, inter = comm.group_link(cl, 512, 1)
    assert inter and link.bw_bytes_per_s == 400e9
    assert comm.all_reduce_time_s(1e6, 512, link, inter, IDEAL) == pytest.approx(1.95e-4, **EXACT)
    ring = comm.all_reduce_time_s(1e6, 512, link, inter, IDEAL, tree=False)
    assert ring == pytest.approx(2 * 511 * 10e-6 + 2 * 511 / 512 * 1e6 / 400e9, **EXACT)


NVLINK = Link(bw_bytes_per_s=300e9, latency_s=5e-6)  # DGX A100: 600 GB/s both directions / 2
NIC = Link(bw_bytes_per_s=25e9, latency_s=10e-6)  # one 200 Gbit/s HDR adapter per GPU


def four_dgx_nodes() -> NodeGroup:
    return NodeGroup(gpu=load_catalogue()["A100-SXM4-80GB"], nodes=4, gpus_per_node=8,
                     intra_node=NVLINK, inter_node=NIC)


def test_group_link_tp8_stays_in_node():
    # ranks 0..7 of one 8-GPU node: NVLink
    link, inter = comm.group_link(four_dgx_nodes(), size=8, stride=1)
    assert (link, inter) == (NVLINK, False)


def test_group_link_strided_dp_uses_one_nic():
    # dp=4 with stride 8 (tp=8): one member per node, so each ring runs through one NIC.
    link, inter = comm.group_link(four_dgx_nodes(), size=4, stride=8)
    assert inter
    assert link.bw_bytes_per_s == 25e9
    assert link.latency_s == 10e-6


def test_group_link_whole_nodes_aggregate_nics():
    # dp=32 stride 1: 8 members per node run 8 rings side by side (cost/comm.py docstring),
    # min(NVLink 300e9, 8 * 25e9 = 200e9) = 200e9 bytes/s.
    link, inter = comm.group_link(four_dgx_nodes(), size=32, stride=1)
    assert inter
    assert link.bw_bytes_per_s == min(300e9, 8 * 25e9) == 200e9


# --- pipeline schedule (cost/schedule.py, cost/coefficients.py) -----------------------------

def test_1f1b_pipeline_time_and_bubble():
    # [N21] Sec. 2.2.1: uniform stage time T, m micro-batches, p stages: (m + p - 1) * T, so the
    # bubble is (p - 1) * T, a fraction (p - 1)/m of the ideal m*T. p=4, m=8, T=0.1 s: 1.1 s, 3/8.
    p, m, T = 4, 8, 0.1
    t = schedule.pipeline_time_s(np.full(p, T), m, 1)
    assert t == pytest.approx((m + p - 1) * T, **EXACT)
    assert (t - m * T) / (m * T) == pytest.approx((p - 1) / m, **EXACT)


def test_interleaved_pipeline_time():
    # [N21] Sec. 2.2.2: v model chunks per stage shrink the bubble to (p-1)*T/v.
    # p=4, m=8, T=0.1, v=2: 0.8 + 3*0.1/2 = 0.95 s.
    p, m, T, v = 4, 8, 0.1, 2
    t = schedule.pipeline_time_s(np.full(p, T), m, v)
    assert t == pytest.approx(m * T + (p - 1) * T / v, **EXACT)
    assert t == pytest.approx(0.95, **EXACT)


def test_pipeline_time_is_vectorised_over_splits():
    # two splits at once, shape (2, p): each row on its own formula
    t = np.array([[0.1, 0.1, 0.1, 0.1], [0.1, 0.2, 0.1, 0.1]])
    got = schedule.pipeline_time_s(t, 8, 1)
    assert got == pytest.approx([11 * 0.1, 8 * 0.2 + 0.3], **EXACT)


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 2), (1, 5), (8, 8)])
def test_1f1b_in_flight_micro_batches(pp, m):
    # [N21] Sec. 2.2.1 / Megatron-LM's 1F1B: stage s runs pp - s - 1 warm-up forwards and
    # one more before its first backward, so it holds min(pp - s, m) micro-batches.
    expected = [min(pp - s, m) for s in range(pp)]
    assert in_flight_micro_batches(pp, m, 1).tolist() == expected


def test_interleaved_in_flight_micro_batches():
    # Megatron-LM's interleaved schedule warms up 2(pp-s-1) + (v-1)pp chunks and holds one
    # more, capped at m*v chunks; a chunk is 1/v of the stage (cost/coefficients.py docstring).
    # pp=4, v=2, m=8: stage 0: (6+4+1)/2 = 5.5, 1: (4+4+1)/2 = 4.5, 2: 3.5, 3: (0+4+1)/2 = 2.5.
    assert in_flight_micro_batches(4, 8, 2).tolist() == [5.5, 4.5, 3.5, 2.5]
    # m=2: every stage is capped at m*v = 4 chunks = 2 stage-equivalents
    assert in_flight_micro_batches(4, 2, 2).tolist() == [2.0, 2.0, 2.0, 2.0]


# --- memory (cost/memory.py) ---------------------------------------------------------------

B, S, H, A = 2, 2048, 1024, 16  # micro-batch, sequence, hidden, heads of the [K22] checks


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_korthikanti_tensor_parallel_activations(t):
    # [K22] Table 2, tensor parallel, no sequence parallel: sbh(10 + 24/t + 5as/(ht)); the
    # paper's GPT-3 models train with dropout 0.1, whose masks are part of these counts.
    m = gpt(hidden=H, heads=A, seq_len=S, dropout=0.1)
    got = memory.layer_activation_bytes(m, B, t, 1, sp=False, flash=False)
    assert got == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)), **EXACT)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_sequence_parallel_activations(t):
    # [K22] Table 2, tensor + sequence parallel: sbh/t (34 + 5as/h), with dropout 0.1.
    m = gpt(hidden=H, heads=A, seq_len=S, dropout=0.1)
    got = memory.layer_activation_bytes(m, B, t, 1, sp=True, flash=False)
    assert got == pytest.approx(S * B * H / t * (34 + 5 * A * S / H), **EXACT)


@pytest.mark.parametrize("sp", [False, True])
def test_flash_and_selective_drop_the_score_term(sp):
    # [K22] Table 2 selective recomputation (and FlashAttention, which never stores the s x s
    # scores): the 5as/h term vanishes. t=4: sbh(10 + 24/4) without sp, sbh/4*34 with sp
    # (dropout 0.1 as in [K22]). FlashAttention also keeps its fp32 log-sum-exp, 4*a*s*b/t
    # bytes (Dao et al. 2022, Alg. 2), which selective recomputation of the core drops.
    t = 4
    m = gpt(hidden=H, heads=A, seq_len=S, dropout=0.1)
    expected = S * B * H * 34 / t if sp else S * B * H * (10 + 24 / t)
    lse = 4 * A * S * B / t
    assert memory.layer_activation_bytes(m, B, t, 1, sp, flash=True) == pytest.approx(expected + lse, **EXACT)
    assert memory.selective_activation_bytes(m, B, t, 1, sp) == pytest.approx(expected, **EXACT)


@pytest.mark.parametrize("sp", [False, True])
def test_full_recompute_keeps_the_layer_input(sp):
    # [K22] Sec. 4.3 / Table 2: full recomputation stores only the bf16 layer input, 2sbh,
    # split t ways when sequence parallelism shards it.
    t = 4
    m = gpt(hidden=H, heads=A, seq_len=S)
    expected = 2 * S * B * H / (t if sp else 1)
    assert memory.checkpoint_activation_bytes(m, B, t, 1, sp) == pytest.approx(expected, **EXACT)


@pytest.mark.parametrize("zero,expected", [
    (0, 18.0),               # 2 bf16 weight + 4 fp32 grad + 12 Adam (master, m, v)
    (1, 2 + 4 + 12 / 8),     # ZeRO-1 shards the optimizer state
    (2, 2 + (4 + 12) / 8),   # ZeRO-2 also the gradients
    (3, 18 / 8),             # ZeRO-3 also the weights
])
def test_zero_state_bytes_per_param(zero, expected):
    # [R20] Sec. 3.1 (K = 12 for mixed-precision Adam) and Sec. 5.1 (P_os, P_os+g, P_os+g+p),
    # with Megatron-LM's fp32 gradient buffer (4 bytes, not 2), as cost/memory.py documents.
    # N = 8 data-parallel ranks.
    assert memory.state_bytes_per_param(zero, 8) == pytest.approx(expected, **EXACT)


def test_layer_state_bytes_combines_params_tp_and_zero():
    # one GPT layer has 12h^2 + 2h parameters; tp=2 halves them; ZeRO-1 over 4 ranks: 2+4+3 bytes
    m = gpt(hidden=H, heads=A)
    assert memory.layer_state_bytes(m, 2, 1, 4) == pytest.approx((12 * H**2 + 2 * H) / 2 * 9, **EXACT)


# --- the simulator as a whole (cost/simulate.py) -------------------------------------------

SMALL = INSTANCES / "small-gpt-16xA100.yaml"  # 2 nodes x 8 A100, 12 layers, batch 64

PLANS = [
    dict(tp=8, pp=1, dp=2, micro_batch=1),
    dict(tp=2, pp=2, dp=4, micro_batch=2, sequence_parallel=True, recompute="selective"),
    dict(tp=1, pp=4, dp=4, micro_batch=1, zero=1, virtual_stages=3),
    dict(tp=4, pp=1, dp=4, micro_batch=4, zero=2),
    dict(tp=1, pp=1, dp=16, micro_batch=2, zero=3, recompute="full"),
    dict(tp=2, pp=1, dp=4, cp=2, micro_batch=1, sequence_parallel=True),
    dict(tp=4, pp=4, dp=1, micro_batch=1, recompute="full"),
]


def with_batch(inst, global_batch):
    return replace(inst, job=replace(inst.job, global_batch=global_batch))


def with_nic_scaled(inst, factor):
    cl = inst.cluster.one_group
    nic = replace(cl.inter_node, bw_bytes_per_s=cl.inter_node.bw_bytes_per_s * factor)
    return replace(inst, cluster=Cluster.of(replace(cl, inter_node=nic)))


@pytest.mark.parametrize("mapping", PLANS)
def test_exposed_parts_sum_to_iteration_time(mapping):
    inst = load_instance(SMALL)
    bd = simulate(inst, plan_from_mapping(mapping, inst))
    assert bd.iter_time_s > 0
    assert all(v >= 0 for v in bd.exposed_s.values())
    assert sum(bd.exposed_s.values()) == pytest.approx(bd.iter_time_s, rel=1e-9)


@pytest.mark.parametrize("mapping", [dict(tp=2, pp=4, dp=2), dict(tp=1, pp=2, dp=8, virtual_stages=2),
                                     dict(tp=8, pp=2, dp=1, sequence_parallel=True)])
def test_more_micro_batches_in_flight_never_reduce_memory(mapping):
    # Same micro-batch size, growing m: each stage holds min(pp - s, m) (or the interleaved
    # count), which never falls, so no stage's memory may fall either.
    inst = load_instance(SMALL)
    dp = mapping["dp"]
    prev = None
    for m in range(1, 10):
        inst_m = with_batch(inst, dp * m)
        bd = simulate(inst_m, plan_from_mapping(dict(mapping, micro_batch=1), inst_m))
        mem = np.array([s.mem_bytes for s in bd.stages])
        if prev is not None:
            assert (mem >= prev).all(), f"m={m}: {mem} < {prev}"
            if m <= mapping["pp"]:
                assert mem[0] > prev[0]  # stage 0 is still filling its pipeline
        prev = mem


@pytest.mark.parametrize("mapping", [dict(tp=2, pp=2, dp=4, micro_batch=2),
                                     dict(tp=4, pp=2, dp=2, micro_batch=1, recompute="selective",
                                          sequence_parallel=True),
                                     dict(tp=1, pp=1, dp=16, micro_batch=4, zero=3)])
def test_full_recompute_trades_memory_for_time(mapping):
    inst = load_instance(SMALL)
    base = simulate(inst, plan_from_mapping(mapping, inst))
    plan = plan_from_mapping(mapping, inst)
    full = simulate(inst, Plan.of(plan.flat_outer, plan.layers_per_stage, plan.layers_per_stage))
    assert full.iter_time_s > base.iter_time_s
    for b, f in zip(base.stages, full.stages):
        assert f.mem_bytes < b.mem_bytes


@pytest.mark.parametrize("mapping", PLANS)
def test_doubling_nic_bandwidth_never_increases_time(mapping):
    inst = load_instance(SMALL)
    plan = plan_from_mapping(mapping, inst)
    assert simulate(with_nic_scaled(inst, 2), plan).iter_time_s <= simulate(inst, plan).iter_time_s


def test_faster_nic_helps_a_plan_that_syncs_across_nodes():
    # tp=8 fills a node, so the dp=2 gradient all-reduce crosses the NIC: strictly faster.
    inst = load_instance(SMALL)
    plan = plan_from_mapping(dict(tp=8, pp=1, dp=2, micro_batch=1), inst)
    assert simulate(with_nic_scaled(inst, 2), plan).iter_time_s < simulate(inst, plan).iter_time_s


def test_pipeline_crossing_the_node_boundary_pays_the_nic():
    # 16 GPUs on 2 nodes, tp=2, dp=2, pp=4: stage s holds ranks 4s..4s+3 (cost/comm.py rank
    # order), so the stage 1 -> 2 activations cross nodes and a 10x slower NIC must show up.
    inst = load_instance(SMALL)
    plan = plan_from_mapping(dict(tp=2, pp=4, dp=2, micro_batch=1), inst)
    assert simulate(with_nic_scaled(inst, 0.1), plan).iter_time_s > simulate(inst, plan).iter_time_s
