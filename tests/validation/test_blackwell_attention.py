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
cuDNN is catalogued at every length the files measure (cudnn_attention_tflops), 512 to 131,072
tokens: forward + backward ms in CUDNN_MS below (B200 and GB300 at NVIDIA/cudnn-frontend bb37575,
GB200 at d48a60e; the same backends as above).
"""

from __future__ import annotations

import pytest

from paraplan.cost.coefficients import attention_efficiency
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.releases import Framework
from paraplan.cost.specs import JobSpec

FWD_FLOP = 4 * 8192**2 * 128 * 128 / 2  # 2.199e12
ROWS_MS = {  # GPU: ((FlashAttention-2 forward, backward), (cuDNN forward, backward)), milliseconds
    "B200-SXM-180GB": ((5.499, 17.288), (1.877, 5.833)),
    "GB200-186GB": ((5.308, 16.249), (1.389, 4.542)),
    "GB300-288GB": ((4.999, 15.632), (1.470, 4.865)),
}


# cuDNN's forward + backward milliseconds per sequence length (the files' rows, each the sum of
# forward_time and backward_time)
CUDNN_MS = {
    "B200-SXM-180GB": {512: 0.262, 1024: 0.413, 2048: 1.212, 4096: 2.602, 8192: 7.710,
                       16384: 27.062, 32768: 104.133, 65536: 429.701, 131072: 1758.450},
    "GB200-186GB": {512: 0.086, 1024: 0.210, 2048: 0.654, 4096: 1.701, 8192: 5.931,
                    16384: 22.136, 32768: 86.214, 65536: 375.795, 131072: 1568.297},
    "GB300-288GB": {512: 0.381, 1024: 0.463, 2048: 0.937, 4096: 2.020, 8192: 6.335,
                    16384: 22.512, 32768: 86.271, 65536: 349.787, 131072: 1426.627},
}


@pytest.mark.parametrize("name", sorted(ROWS_MS))
def test_benchmark_and_cudnn_curve_are_the_cited_rows(name):
    (fa_f, fa_b), (cu_f, cu_b) = ROWS_MS[name]
    g = load_catalogue()[name]
    # B200: 3.5 x 2.199e12 / 22.787 ms = 337.8 TFLOP/s (stored 338)
    assert g.fa2_benchmark_flops_per_s == pytest.approx(3.5 * FWD_FLOP / ((fa_f + fa_b) * 1e-3), rel=2e-3)
    # cuDNN at n keys: 3.5 x 4 n^2 x 128 x 128 / 2 FLOP in the row's ms; B200 at 4k 3.5 x
    # 5.498e11 / 2.602 ms = 739.5 TFLOP/s (stored 739), at 8k the 998 above
    want = {n: 3.5 * 4 * n**2 * 128 * 128 / 2 / (ms * 1e-3) for n, ms in CUDNN_MS[name].items()}
    got = dict(g.cudnn_attention_flops_per_s_by_keys)
    assert sorted(got) == sorted(want)
    for n in want:
        assert got[n] == pytest.approx(want[n], rel=2e-3, abs=0.5e12), n
    assert want[8192] == pytest.approx(3.5 * FWD_FLOP / ((cu_f + cu_b) * 1e-3), rel=1e-3)


def test_cudnn_between_measured_lengths_is_interpolated_in_log_keys():
    # B200: at 4k keys 739 TFLOP/s, at 8k 998 (stored); at 4096 * sqrt(2) keys, halfway in
    # log2, (739 + 998) / 2 = 868.5; beyond 128k the 128k figure (1,120); at 256 keys, half of
    # 512's, the 512-key 115 TFLOP/s x (256/556) / (512/812) = 84.0 on the key-length curve
    g = load_catalogue()["B200-SXM-180GB"]
    job = JobSpec(framework=Framework.MEGATRON, global_batch=8)
    speed = lambda keys: attention_efficiency(job, g, keys) * g.peak_flops_per_s / 1e12  # noqa: E731
    assert speed(4096 * 2**0.5) == pytest.approx(868.5, rel=1e-9)
    assert speed(1 << 20) == pytest.approx(1120, rel=1e-9)
    assert speed(256) == pytest.approx(115 * (256 / 556) / (512 / 812), rel=1e-9)
    # the reason for the curve: one 8k speedup on FlashAttention-2's length curve priced 4k at
    # 338 x 2.96 x (4096/4396) / (8192/8492) = 966 TFLOP/s, 31% above the measured 739
    assert speed(4096) == pytest.approx(739, rel=1e-9)


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
    # B200 3.5 x 2.199e12 / 7.710 ms = 998 TFLOP/s of 2,250 (998 stored)
    g = load_catalogue()["B200-SXM-180GB"]
    job = JobSpec(framework=Framework.MEGATRON, global_batch=8)
    got = attention_efficiency(job, g, 8192) * g.peak_flops_per_s
    assert got == pytest.approx(3.5 * FWD_FLOP / (7.710e-3), rel=3e-3)
