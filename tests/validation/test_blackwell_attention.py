"""Blackwell's attention figures in cost/gpus.yaml, re-derived by hand from the rows they cite:
NVIDIA's SDPA training benchmark (NVIDIA/cudnn-frontend,
benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_<GPU>.csv), bf16,
causal, head dim 128, 128 query heads, batch 1, read at 8,192 tokens as H100's FlashAttention-2
figure is (Shah et al. 2024: forward + backward, causal, head dim 128, 8k).

Forward FLOPs at 8k, causal: 4 x s^2 x head_dim x heads / 2 = 4 x 8192^2 x 128 x 128 / 2
= 2.199e12; backward 2.5 times that; forward + backward throughput = 3.5 x 2.199e12 / (t_fwd +
t_bwd). The rows (forward ms, backward ms):
  B200  Dao's FlashAttention-2 5.499, 17.288; cuDNN through PyTorch's SDPA 1.877, 5.833
  GB200 PyTorch's FlashAttention-2 5.308, 16.249; cuDNN's frontend 1.389, 4.542
  GB300 Dao's FlashAttention-2 4.999, 15.632; cuDNN through PyTorch's SDPA 1.470, 4.865
"""

from __future__ import annotations

import pytest

from paraplan.cost.coefficients import attention_efficiency
from paraplan.cost.loader import load_catalogue
from paraplan.cost.releases import Framework
from paraplan.cost.specs import JobSpec

FWD_FLOP = 4 * 8192**2 * 128 * 128 / 2  # 2.199e12
ROWS_MS = {  # GPU: ((FlashAttention-2 forward, backward), (cuDNN forward, backward)), milliseconds
    "B200-SXM-180GB": ((5.499, 17.288), (1.877, 5.833)),
    "GB200-186GB": ((5.308, 16.249), (1.389, 4.542)),
    "GB300-288GB": ((4.999, 15.632), (1.470, 4.865)),
}


@pytest.mark.parametrize("name", sorted(ROWS_MS))
def test_benchmark_and_speedup_are_the_cited_rows(name):
    (fa_f, fa_b), (cu_f, cu_b) = ROWS_MS[name]
    g = load_catalogue()[name]
    # B200: 3.5 x 2.199e12 / 22.787 ms = 337.8 TFLOP/s, 22.787 / 7.710 = 2.955 (stored 338, 2.96)
    assert g.fa2_benchmark_flops_per_s == pytest.approx(3.5 * FWD_FLOP / ((fa_f + fa_b) * 1e-3), rel=2e-3)
    assert g.cudnn_attention_speedup == pytest.approx((fa_f + fa_b) / (cu_f + cu_b), abs=0.006)


@pytest.mark.parametrize("name", sorted(ROWS_MS))
def test_other_frameworks_reach_h100s_fraction_of_the_benchmark(name):
    # attention_eff is one fitted fraction of FlashAttention-2's benchmark on every die
    # (cost/fit.py): H100's 0.1897 of peak over its 322 / 989
    cat = load_catalogue()
    h100 = cat["H100-SXM5-80GB"]
    fraction = h100.attention_eff / (h100.fa2_benchmark_flops_per_s / h100.peak_flops_per_s)
    g = cat[name]
    assert g.attention_eff == pytest.approx(fraction * g.fa2_benchmark_flops_per_s / g.peak_flops_per_s, rel=2e-3)


def test_transformer_engine_runs_cudnn_at_its_measured_8k_throughput():
    # at the benchmark's 8k keys Megatron's attention core runs at cuDNN's measured figure:
    # B200 3.5 x 2.199e12 / 7.710 ms = 998 TFLOP/s of 2,250 (338 x 2.96 = 1,000.5 stored)
    g = load_catalogue()["B200-SXM-180GB"]
    job = JobSpec(framework=Framework.MEGATRON, global_batch=8)
    got = attention_efficiency(job, g, 8192) * g.peak_flops_per_s
    assert got == pytest.approx(3.5 * FWD_FLOP / (7.710e-3), rel=3e-3)
