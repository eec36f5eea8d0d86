"""cost/fit.py's parameter table: which efficiencies one fitted value sets together.

Expected values by hand from the published benchmarks the module cites: FlashAttention-2 at
175 of 312 TFLOP/s on A100 (Dao 2023, Fig. 4 (a); cost/fit.py says why not (d)'s 182) and 322
of 989 on H100 (Shah et al. 2024, Figs. 5-6: forward 333, backward 318 TFLOP/s at 8k tokens;
the backward has 2.5x the forward's FLOPs, so 3.5 / (1/333 + 2.5/318) = 322.1).
"""

import pytest

from paraplan.cost.comm import NetEfficiency
from paraplan.cost.fit import FA2_PEAK_FRACTION, MIN_ROWS_PER_DIE, parameter_table
from paraplan.cost.readers.gpus import load_catalogue

ROWS = ["A100-SXM4-80GB"] * MIN_ROWS_PER_DIE + ["H100-SXM5-80GB"] * MIN_ROWS_PER_DIE


def _param(name, gpus=ROWS):
    (p,) = [p for p in parameter_table(gpus) if p.name == name]
    return p


def test_the_h100_benchmark_fraction_is_its_forward_and_backward_throughput():
    assert 3.5 / (1 / 333 + 2.5 / 318) == pytest.approx(322.1, abs=0.1)
    # Blackwell's from NVIDIA's SDPA training benchmark (cost/gpus.yaml): 338 / 2,250, 357 / 2,500,
    # 373 / 2,500
    assert FA2_PEAK_FRACTION == {"A100": pytest.approx(0.5609, abs=1e-4), "H100": pytest.approx(0.3256, abs=1e-4),
                                 "H200": pytest.approx(0.3256, abs=1e-4),  # H200: the GH100 die's
                                 "B200": pytest.approx(0.1502, abs=1e-4), "GB200": pytest.approx(0.1428, abs=1e-4),
                                 "GB300": pytest.approx(0.1492, abs=1e-4)}


def test_one_attention_value_sets_every_benchmarked_die():
    names = [p.name for p in parameter_table(ROWS)]
    assert "attention_of_fa2_benchmark" in names
    assert not any(n.endswith(".attention_eff") for n in names)
    cat, _ = _param("attention_of_fa2_benchmark").set(load_catalogue(), NetEfficiency(), 0.6)
    # 0.6 x 175 / 312 = 0.33654; 0.6 x 322 / 989 = 0.19535
    assert cat["A100-SXM4-40GB"].attention_eff == pytest.approx(0.33654, abs=1e-5)
    assert cat["A100-SXM4-80GB"].attention_eff == pytest.approx(0.33654, abs=1e-5)
    assert cat["H100-SXM5-80GB"].attention_eff == pytest.approx(0.19535, abs=1e-5)
    # B200 has a benchmark but no rows among ROWS: the fraction fitted on the others leaves it be
    assert cat["B200-SXM-180GB"].attention_eff == load_catalogue()["B200-SXM-180GB"].attention_eff


def test_a_die_without_a_benchmark_keeps_its_own_attention_value():
    names = [p.name for p in parameter_table(["MI300X"] * MIN_ROWS_PER_DIE)]
    assert "MI300X.attention_eff" in names and "attention_of_fa2_benchmark" not in names


def test_one_gemm_efficiency_for_bf16_and_fp8():
    assert not any("fp8" in p.name for p in parameter_table(ROWS))
    cat, _ = _param("H100.matmul_eff_max").set(load_catalogue(), NetEfficiency(), 0.7)
    h100 = cat["H100-SXM5-80GB"]
    assert h100.matmul_eff_max == h100.fp8_matmul_eff_max == 0.7
    assert cat["A100-SXM4-80GB"].matmul_eff_max == load_catalogue()["A100-SXM4-80GB"].matmul_eff_max


def test_the_published_values_are_one_benchmark_fraction():
    # cost/gpus.yaml: A100's and H100's attention_eff are the same fraction of their benchmarks
    cat = load_catalogue()
    a100 = cat["A100-SXM4-80GB"].attention_eff / FA2_PEAK_FRACTION["A100"]
    h100 = cat["H100-SXM5-80GB"].attention_eff / FA2_PEAK_FRACTION["H100"]
    assert a100 == pytest.approx(h100, rel=1e-3)
    assert cat["H100-SXM5-80GB"].matmul_eff_max == cat["H100-SXM5-80GB"].fp8_matmul_eff_max
