"""cost/moe_anchors.time_split on the long-context Qwen3-235B anchors (Megatron-MoE-ModelZoo,
256 H100, 16k-128k tokens): what the predicted time waits on, each figure derived by hand.
docs/moe.md ("Long context") tabulates every row."""

from dataclasses import replace

import pytest

from paraplan.cost import scale
from paraplan.cost.coefficients import ATTENTION_HALF_KEYS, BACKWARD_FLASH_FACTOR
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.moe_anchors import TimeSplit, anchor_instance, priced_rows, time_split


def _row(name: str) -> dict:
    return next(r for r in priced_rows() if r["id"] == f"modelzoo-qwen3-235b-256xH100-{name}")


def test_attention_seconds_of_the_128k_row_by_hand():
    # 131,072 tokens, cp 8, tp 4, pp 8 x 4 chunks (the 94 layers, the embedding and the loss in 96
    # slots of 3: 12 layers on the slowest stage, 82 on the other seven), 256 micro-batches of one sequence (global batch 256, dp 1).
    # A rank's causal work (tests/cost/test_cp_attention_work.py, Transformer Engine's ring):
    # s^2 / (2 cp) = 1.0737e9 query-key pairs, 4 FLOPs per pair and head dimension (QK^T, PV),
    # 64 / 4 = 16 heads of 128 per GPU: 8.796e12 FLOPs forward, x (1 + 2.5) with backward.
    # Each step's kernel call sees s / cp = 16,384 keys; cuDNN's fused attention (Megatron-core,
    # Transformer Engine) on H100 at its benchmark: FlashAttention-2's 322 TFLOP/s at 8,192 keys
    # (Shah et al. 2024) x cuDNN's 1.6 x (16384 / 16684) / (8192 / 8492) = 524 TFLOP/s.
    row = _row("128k-forced")
    g = anchor_instance(row).cluster.gpu
    assert (g.fa2_benchmark_flops_per_s, g.cudnn_attention_speedup) == (322e12, 1.6)
    s, cp = 131_072, 8
    flops = s * s / (2 * cp) * 4 * 128 * 64 / 4 * (1 + BACKWARD_FLASH_FACTOR)
    keys = s / cp
    rate = 322e12 * 1.6 * keys / (keys + ATTENTION_HALF_KEYS) / (8192 / (8192 + ATTENTION_HALF_KEYS))
    assert rate == pytest.approx(524e12, rel=1e-3)
    per_layer_s = flops / rate  # 0.0587 s
    # on the critical path: the slowest stage's 256 x 12 layers, the bubble's other stages over
    # the 4 chunks (82 / 4 layers), all slowed by the 256-rank straggler allowance (cost/scale.py)
    slow = scale.slowest_rank_fraction(256, NetEfficiency().rank_jitter_rel)
    by_hand = per_layer_s * (256 * 12 + 82 / 4) * (1 + slow)  # 188 s
    assert time_split(row).attention_s == pytest.approx(by_hand, rel=2e-3)


def test_the_parts_add_up_and_context_parallel_hides_its_transfers():
    # every long-context row: each part of the split is positive, and a ring step's K, V hide
    # behind the step's attention: at 128k, cp 8, 16,384 tokens x (K + V) of one of the 4 kv
    # heads per tp rank x 128 x 2 bytes = 8.4 MB, 0.17 ms on the 50 GB/s NIC share (the ring
    # spans 4 nodes) against 8.8e12 / 8 FLOPs forward at about 524 TFLOP/s, 2.1 ms
    for row in priced_rows():
        if row["id"].startswith("modelzoo-qwen3-235b-256xH100-") and row["config"]["seq_len"] >= 16384:
            x = time_split(row)
            assert min(x.attention_s, x.gemm_s, x.a2a_s, x.other_s) > 0, x
            assert x.cp_comm_s == 0.0, x


def test_implied_attention_speedup_by_hand():
    # predicted 10 s at 200 model TFLOP/s, published 250: the run took 10 x 200 / 250 = 8 s; the
    # 5 s not attention priced right leaves the attention 3 s for the 5 priced: 5 / 3 faster.
    x = TimeSplit(id="x", seq_len=1, cp=1, iter_time_s=10.0, attention_s=5.0, gemm_s=2.0, a2a_s=1.0,
                  cp_comm_s=0.0, published_tflops_per_gpu=250.0, megatron_tflops_per_gpu=200.0)
    assert x.other_s == pytest.approx(2.0)
    assert x.implied_attention_speedup == pytest.approx(5 / 3)
    # published 500: the run took 4 s, less than the 5 s the rest is priced at
    assert replace(x, published_tflops_per_gpu=500.0).implied_attention_speedup == float("inf")
