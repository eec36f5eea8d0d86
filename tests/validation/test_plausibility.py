"""Plausibility where the optimum lands: re-plan every published workload on 256 or more GPUs
(same model, GPUs, network, global batch, precision and framework; only the parallel
configuration free, over the default declared space) and check that no optimum predicts a
model FLOPs utilisation more than 5 points above the best MFU ever published for that GPU die
at 256 or more GPUs in the same precision (an FP8 run is compared with FP8 runs: its MFU is
still counted against the bf16 peak, as the published FP8 numbers are).

The reference is measured, not modelled: each published row's MFU is its measured tokens per
second times the model FLOPs per token (cost/flops.model_flops_per_token, the definition every
plan's MFU uses) over the GPUs' bf16 peak. A planner that exploits an optimistic error of the
cost model lands above that line first.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from paraplan.cost.calibration import load_published, row_to_instance_plan
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.fit import die
from paraplan.cost.trust import (MFU_RECORD_MIN_GPUS, fastest_published_runs, memory_headroom_warning,
                                 mfu_records, plan_memory_fill, workload_key)
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import OPTIMAL

MIN_GPUS = MFU_RECORD_MIN_GPUS  # 256
MARGIN = 0.05  # 5 MFU points
# No workload is open on the optimum alone any more. Four were: MosaicML's 13B on 512 H100
# (now 47.9% against the 49.1% bar) and 30B on 256 H100 (47.4%) and Narayanan's 530B ZeRO-3
# workload on 640 A100 (60.7% against 61.3%) until full recomputation was priced as Composer
# and torchtitan stop it (cost/framework.recompute_stops_early) and the efficiencies were
# refitted; the NeMo launcher's GPT-3 5B on 256 A100 (63.4%) until its rows were priced as
# their 2022 configs ran (no layer recomputed, Megatron's unfused attention, Apex's
# distributed Adam: cost/calibration.py), after which it re-plans at 50.0%.
OPEN: set[str] = set()
# NeMo's GPT-3 175B FP8 on 512 H100 was open until attention on Hopper was priced by kernel
# (Transformer Engine's cuDNN fused attention, cost/framework.Behaviour.te_fused_attention) and
# refitted: its published configuration was predicted 5.5% fast (9.905 s against 10.476 s) and
# the optimum, 0.6% faster, at the bar by half a point; it is now predicted 1.4% fast.


def _workloads():
    firsts: dict[tuple, tuple] = {}
    cat = load_catalogue()
    for row in load_published():
        if row["cluster"]["num_gpus"] >= MIN_GPUS:
            inst, _ = row_to_instance_plan(row, cat)
            cls = die(row["cluster"]["gpu"]), row.get("precision", "bf16")
            firsts.setdefault(workload_key(row), (row["id"], inst, cls))
    # the best measured MFU per (GPU die, precision) at 256+ GPUs: the records `paraplan plan`
    # warns above (cost/trust.mfu_records, measured_mfu)
    return {k: mfu for k, (mfu, _) in mfu_records().items()}, list(firsts.values())


BEST, WORKLOADS = _workloads()
# the promise test below reads the optima the plausibility cases proved (_planned): an
# xdist_group puts the module's tests side by side at the front of the run (tests/conftest.py),
# where a worker starts on them and no steal splits them (about 100 s on two cores: long tests
# first)
pytestmark = pytest.mark.xdist_group("test_plausibility")


def test_reference_mfu_is_the_published_record():
    # A100: Narayanan et al. SC'21 Table 1 reports 163 TFLOP/s per GPU (52% of 312) for the
    # 1T model on 3,072 A100s, counting the recomputed forward; in model FLOPs that run is the
    # best A100 row at 256+ GPUs, about 56%. H100 bf16: MosaicML's 256-512 GPU runs, 30-45%.
    assert 0.40 < BEST["A100", "bf16"] < 0.60
    assert 0.25 < BEST["H100", "bf16"] < 0.60


def _param(wl):
    marks = [pytest.mark.xfail(strict=True, reason="open: optimum without the published recompute")] \
        if wl[0] in OPEN else []
    return pytest.param(wl, id=wl[0], marks=marks)


@functools.lru_cache(maxsize=None)
def _planned(inst):
    """The instance's optimum, once per test process: 17 of the 24 workloads' first rows give
    the same instance as their fastest rows, so the promise test below reads the optima the
    plausibility cases on its worker already proved (issue 32)."""
    return plan(inst, time_limit_s=600)


# about 100 s for all 24 workloads on 2 cores (the exact DP and the tight bound)
@pytest.mark.slow
@pytest.mark.parametrize("wl", [_param(w) for w in WORKLOADS])
def test_replanned_optimum_is_plausible(wl):
    row_id, inst, cls = wl
    res = _planned(inst)
    assert res.status == OPTIMAL, (row_id, res.status)
    assert res.breakdown.mfu <= BEST[cls] + MARGIN, (row_id, res.plan, res.breakdown.mfu, BEST[cls])


# --- the optimum's promise over the published run (issue 31) ----------------------------------
# Per workload of 256+ GPUs: the fastest published run's measured time over the re-planned
# optimum's time at the default objective (p90: the time the plan says it stays under in 9 of
# 10 out-of-sample runs), re-planned within what the run's framework release ran
# (cost/framework_rules.release_space). The bar: at most 1.4x on every workload, median
# at most 1.15x. Measured (the 24 re-planned): median 0.976x, 90th percentile 1.247x, max
# 1.358x, none above the bar (docs/accuracy.md, "Where the optimum lands"); with the band's
# scale axis (cost/trust.scale_slow_log_quantile) every optimum here at distance level 2 or
# nearer is valued at p90 factor 1.0976 rather than 1.0644 (median 1.006x, 90th percentile
# 1.286x, max 1.4004x and the 18.4B run above the bar before it). Narayanan et al.'s
# runs (April 2021) predate Megatron-LM's partial recomputation (v2.5, 2021-08:
# framework_rules.MEGATRON_FEATURE_MONTHS), so their re-plans recompute every layer or none:
# the 530B ZeRO-3 baseline on 640 A100 went from 1.461x (12 of 105 layers recomputed) to
# 1.234x (tp 8 x pp 20 ZeRO-1, none recomputed, 97% of HBM), and with the memory-aware p90
# (the fill counted past the fullest run of its scale) to 1.228x (tp 4 x pp 10 ZeRO-1, every
# layer recomputed, 88% of HBM); 1.230x, the same plan, since the refit below; 1.193x at the
# scale axis's p90 factor.
# - 18.4B on 256 A100, 1.4004x (39.1B: 1.382x): the published run recomputed every layer at tp 8
#   with torch DDP (examples/sc21/run_table_1.sh); the optimum (tp 2, pp 4 x 5 chunks,
#   micro-batch 1) recomputes none and fills 95.8% of HBM with the unfused attention's scores
#   priced (5 a s^2 b / t bytes a layer). Its memory is not validated at that scale (the
#   fullest run at 256-1023 GPUs fills 91.5%; its trust warns: cost/trust.
#   memory_headroom_warning), but what the release held beyond the priced peak nets out in the
#   optimum's favour: each in-flight chunk's pipeline output kept until its backward
#   (deallocate_output_tensor came in 2022-01), +0.54 GiB on its first stage, against fp16
#   gradients in param.grad (the runs passed --fp16), 16 bytes a parameter at the backward's
#   peak rather than the 18 priced, -4.5 GiB. Its time now prices the release's gradient
#   reduction: pipelined, the release ran local DDP, which all-reduces after the backward
#   (--overlap-grad-reduce came in 2023-08; cost/framework.grad_reduce_overlaps), so none of
#   it hides (the model hid 0.108 s of the optimum's 6.25 s before): 1.413x -> 1.397x with the
#   term alone; the refit it brought (H100 matmul_eff_max 0.6300, memory_eff 0.7299: A100
#   rows faster) gives 0.3% back, 6.306 s predicted, 6.712 s at p90, 1.4004x: above the bar
#   until the scale axis put its p90 at 6.306 x 1.0976 = 6.921 s, 1.358x.
PROMISE_MAX = 1.4
PROMISE_MEDIAN_MAX = 1.15
OPEN_PROMISE: set[str] = set()


FASTEST = fastest_published_runs(MIN_GPUS)


# about 100 s on 2 cores: the 24 workloads re-planned
@pytest.mark.slow
def test_the_optimum_promises_at_most_1_4x_over_the_published_run_median_1_15x():
    promises = {}
    for row in FASTEST:
        inst, _ = row_to_instance_plan(row, load_catalogue())
        res = _planned(inst)
        assert res.status == OPTIMAL and inst.search.objective == "p90", row["id"]
        promises[row["id"]] = float(row["measured"]["iter_time_s"]) / res.quantile_s
        if row["id"] in OPEN_PROMISE:  # each fills HBM past every run at its scale: its trust says so
            assert memory_headroom_warning(inst, plan_memory_fill(inst, res.plan)), row["id"]
    assert len(promises) == 24
    assert float(np.median(list(promises.values()))) <= PROMISE_MEDIAN_MAX, promises
    over = {k for k, v in promises.items() if v > PROMISE_MAX}
    assert over == OPEN_PROMISE, promises  # the open ones stay listed only while they are open
