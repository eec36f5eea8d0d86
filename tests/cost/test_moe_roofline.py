"""An expert GEMM streams its weight from HBM at least once (cost/moe.expert_terms): with few
tokens per expert it is bound by that read, not by its FLOPs. Numbers by hand for Qwen3-235B-A22B
(hidden 4096, 128 experts of ffn 1536, top-8, SwiGLU, 4096-token sequences) on H100 (989 TFLOP/s
bf16 peak at the fitted matmul efficiency 0.6300, half-efficiency size 6.05 GFLOP (measured); 3.35
TB/s HBM at the fitted memory efficiency 0.7299), routing balanced (imbalance 1.0), without the
host loop over local experts (priced beside the GEMMs: tests/cost/test_moe_fine_grained.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost import coefficients, moe, moe_params
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Outer

QWEN3 = Path(__file__).resolve().parents[2] / "instances" / "qwen3-235b-a22b-256xH100.yaml"
W = 4096 * 1536  # elements of one expert weight (MLP-in gate, MLP-in up, MLP-out alike)
HALF = 6.05e9  # FLOPs at half the large-GEMM efficiency (cost/gpus.yaml matmul_half_gflops, measured)
COMPUTE = 989e12 * 0.6300  # achieved FLOP/s of a large bf16 GEMM (cost/gpus.yaml, fitted)
HBM = 3.35e12 * 0.7299  # achieved bytes/s of a memory-bound pass (cost/gpus.yaml, fitted)


def qwen3():
    inst = load_instance(QWEN3)
    return replace(inst, model=replace(inst.model, moe=replace(inst.model.moe, imbalance=1.0)))


def wgrad_s(o: Outer) -> float:
    inst = qwen3()
    site = coefficients.homogeneous_placement(inst.cluster.one_group, o).sites[0]
    with moe_params.using(replace(moe_params.FITTED, expert_gemm_issue_s=0.0)):
        return moe.expert_terms(inst, o, site.gpu, site.etp_link or site.tp_link, site.ep_links, NetEfficiency(),
                                coefficients.matmul_time_s, coefficients.memory_time_s).wgrad_s


def test_few_tokens_per_expert_are_bound_by_the_weight_read():
    # ep 1, cp 2, micro-batch 1: 2048 tokens x 8 copies over 128 local experts = 128 tokens
    # each. A weight-gradient GEMM: 2 x 128 x W = 1.61 GFLOP, (1.61 + 6.05) GFLOP / COMPUTE =
    # 12.29 us; it accumulates into Megatron's fp32 main gradient, read + write 8 bytes a weight:
    # 50.3 MB / HBM = 20.58 us, the longer. 128 experts x 3 GEMMs x 20.58 us = 7.90 ms, plus
    # the router's weight gradient (2 x 2048 x 4096 x 128 FLOPs: 13.16 us)
    o = Outer(tp=1, pp=16, dp=8, cp=2, micro_batch=1, num_micro_batches=64, ep=1)
    router = (2 * 2048 * 4096 * 128 + HALF) / COMPUTE
    assert wgrad_s(o) == pytest.approx(128 * 3 * W * 8 / HBM + router, rel=1e-9)


def test_many_tokens_per_expert_are_bound_by_their_flops():
    # ep 8, two sequences per micro-batch: each rank's 16 experts take the copies of 8 ranks,
    # 8 x 4096 x 8 / 128 = 2048 tokens each: 25.8 GFLOP, (25.77 + 6.05) GFLOP / COMPUTE =
    # 51.07 us, above the 20.58 us read
    o = Outer(tp=1, pp=16, dp=8, cp=2, micro_batch=2, num_micro_batches=32, ep=8)
    router = (2 * 4096 * 4096 * 128 + HALF) / COMPUTE
    assert wgrad_s(o) == pytest.approx(16 * 3 * (2 * 2048 * W + HALF) / COMPUTE + router, rel=1e-9)


def test_the_bundled_qwen3_optimum_at_one_sequence_per_micro_batch_shards_its_experts():
    # Every published Qwen3-235B configuration runs ep 8 to 32 (cost/published/moe.yaml). With
    # the weight read priced, ep 1 at micro-batch 1 (every rank all 128 experts, 128 tokens
    # each) is no longer the optimum it was (7.437 s, tp 2, pp 32, cp 2, ep 1): README
    # "Mixture of experts". At micro-batch 1, the published runs' (but the FSDP one's), the
    # optimum shards its experts; over every micro-batch, since the fixed time per MoE layer
    # and micro-batch is fitted (cost/moe_params.py), it is ZeRO-3 over 256 ranks at ep 1 and
    # micro-batch 4, 1,024 tokens per expert (docs/moe.md)
    from dataclasses import replace

    from paraplan.solver.solve import solve as plan
    inst = load_instance(QWEN3)
    res = plan(replace(inst, search=replace(inst.search, micro_batch=(1,))))
    assert res.status == "optimal" and res.plan.ep >= 8
