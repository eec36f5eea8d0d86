"""Fidelity where the optimum lands: the published head-to-heads, the source families and the
physics behind them, on the bundled copy of the published rows (cost/published/).

Each number asserted is measured by the publication, never by us: a head-to-head pair is two
published runs of one workload (same model, GPUs, global batch, precision) whose measured times
differ by more than 5%; the model must order them as measured. The goals of the fidelity issue
that the model does not meet yet are written as strict xfails, so they fail loudly the day they
start passing (then the xfail goes) and never pass silently while the gap is open.
"""

from __future__ import annotations

import pytest

from paraplan.cost.calibration import BUNDLED_FILES, load_rows, predict_rows, row_to_instance_plan, source_family
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.simulate import simulate
from paraplan.cost.trust import ranking_pairs


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [r for f in BUNDLED_FILES for r in load_rows(str(f))]


@pytest.fixture(scope="module")
def results(rows):
    return predict_rows(rows)


def _by_family(rows, results) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for row, res in zip(rows, results):
        if res.error is not None:
            out.setdefault(source_family(row).name, []).append(res.error)
    return out


def test_zero3_loses_to_3d_parallelism_at_scale(rows, results):
    # Narayanan et al. SC'21 Table 2: PTD-P (tp 8, pp 12) against ZeRO-3 on the same 175B
    # workload (batch 1,536): 768 GPUs 39.4 s vs 66.7 s, 1,536 GPUs 20.8 s vs 66.7 s; 530B at
    # 1,120 GPUs 105.6 s vs 179.9 s and 2,240 GPUs 55.4 s vs 183.7 s. ZeRO-3 measured slower
    # every time; the model must say so on each pair where the measured gap exceeds 30%.
    pred = {r.id: r.predicted_iter_time_s for r in results}
    pairs = [("174.6B-768gpu", "174.6B-768gpu"), ("174.6B-1536gpu", "174.6B-1536gpu"),
             ("529.6B-1120gpu", "529.6B-1120gpu"), ("529.6B-2240gpu", "529.6B-2240gpu")]
    for ptdp, zero3 in pairs:
        assert pred[f"narayanan21-t2-ptdp-{ptdp}"] < pred[f"narayanan21-t2-zero3-{zero3}"], ptdp


def test_every_published_head_to_head_is_ranked_right(rows, results):
    # 14 published pairs; before the NCCL/framework model 7 were ranked right, then 12, then
    # 13 (Megatron's pipeline scatter/gather, DeepSpeed's re-gather after recompute); the last
    # one, ZeRO-3 vs PTD-P at 384 GPUs (measured 6% apart), once the 2021-22 Megatron and
    # DeepSpeed rows are priced with the attention kernel they ran (scores stored, no flash).
    pairs = ranking_pairs(rows, results)
    assert len(pairs) == 14
    assert all(p.right for p in pairs), [p for p in pairs if not p.right]


def test_nemo_fp8_family_within_10_percent(rows, results):
    # The 12 NeMo 24.07 H100 rows (FP8 linears, launcher defaults: no recomputation) were
    # predicted +119% before FP8 GEMMs and the launcher's recompute default were modelled.
    errs = _by_family(rows, results)["nemo"]
    assert len(errs) == 12
    assert abs(sum(errs) / len(errs)) <= 0.10


def test_every_family_within_10_percent(rows, results):
    # every family of 3 or more rows. The DeepSpeed ZeRO-3 rows were the last one off: -16.0%
    # until a backward gather that is not prefetched (DeepSpeed's 5e7-parameter prefetch bucket
    # against 4.5e8-6e8-parameter GPT-3 weights) was priced as queuing behind the previous
    # layer's reduce-scatter on the same communicator; -9.1% after.
    fam = _by_family(rows, results)
    checked = [name for name, errs in fam.items() if len(errs) >= 3]
    assert "narayanan21-zero3" in checked and "mosaicml" in checked
    for name in checked:
        errs = fam[name]
        assert abs(sum(errs) / len(errs)) <= 0.10, name


def test_overlap_is_not_free():
    # The same ZeRO-3 plan (MosaicML 13B on 32 H100, FSDP, no recompute, one stage) with and
    # without the measured slowdown of overlapped compute (Lee et al. 2025: 18.9% on average):
    # every second of hidden gather/scatter traffic costs overlap_slowdown seconds of compute,
    # so the iteration gets slower by exactly overlap_slowdown * overlapped seconds (the hidden
    # share is fixed by the windows, not by the slowdown; nothing else is overlapped here).
    cat = load_catalogue()
    rows_ = load_rows(str(BUNDLED_FILES[0]))
    row = next(r for r in rows_ if r["id"] == "mpt-h100bf16-13b-s2048-g32")
    inst, plan = row_to_instance_plan(row, cat)
    # without the wait for the slowest rank (cost/scale.py), which scales the stage's time
    # and with it the slowdown's share; this test prices the overlap alone
    free = simulate(inst, plan, NetEfficiency(overlap_slowdown=0.0, rank_jitter_rel=0.0))
    paid = simulate(inst, plan, NetEfficiency(overlap_slowdown=0.19, rank_jitter_rel=0.0))
    hidden = free.overlapped_s["zero3_comm"]
    assert hidden > 0
    assert paid.iter_time_s - free.iter_time_s == pytest.approx(0.19 * hidden, rel=1e-6)
