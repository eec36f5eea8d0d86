"""Fit the simulator's few physical parameters to published runs (run once; results are
stored in cost/gpus.yaml and cost/comm.py, never applied per row).

Parameters: per GPU die (A100 40/80 GB share one) the achieved matmul, attention and memory
efficiencies; globally the matmul half-efficiency size and the NVLink / NIC efficiencies.
Objective: mean absolute log error of iteration time, which treats over- and under-prediction
alike. Method: cyclic coordinate search on a multiplicative grid; deterministic, numpy only.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cost.calibration import predict_rows
from cost.comm import NetEfficiency
from cost.specs import GpuSpec

GPU_PARAMS = ("matmul_eff_max", "attention_eff", "memory_eff")
BOUNDS = {"matmul_eff_max": (0.2, 1.0), "attention_eff": (0.05, 1.0), "memory_eff": (0.1, 1.0),
          "matmul_half_flops": (1e7, 1e11), "intra_node": (0.2, 1.0), "inter_node": (0.2, 1.0)}


def die(name: str) -> str:
    """GPUs that share a compute die share efficiency parameters (A100-SXM4-40GB/-80GB)."""
    return name.split("-")[0]


def apply_params(catalogue: dict[str, GpuSpec], p: dict) -> tuple[dict[str, GpuSpec], NetEfficiency]:
    cat = {}
    for name, g in catalogue.items():
        changes = {k: p[(die(name), k)] for k in GPU_PARAMS if (die(name), k) in p}
        changes["matmul_half_flops"] = p["matmul_half_flops"]
        cat[name] = replace(g, **changes)
    return cat, NetEfficiency(intra_node=p["intra_node"], inter_node=p["inter_node"])


def _loss(rows, catalogue, p) -> float:
    cat, net = apply_params(catalogue, p)
    res = [r for r in predict_rows(rows, cat, net) if r.predicted_iter_time_s]
    return sum(abs(math.log(r.predicted_iter_time_s / r.measured_iter_time_s)) for r in res) / len(res)


MIN_ROWS_PER_DIE = 5  # fewer rows than this leave a die at its catalogue values


def fit(rows: list[dict], catalogue: dict[str, GpuSpec], sweeps: int = 4, log=print) -> dict:
    counts: dict[str, int] = {}
    for r in rows:
        counts[die(r["cluster"]["gpu"])] = counts.get(die(r["cluster"]["gpu"]), 0) + 1
    dies = sorted(d for d, k in counts.items() if k >= MIN_ROWS_PER_DIE)
    g0 = next(iter(catalogue.values()))
    p: dict = {"matmul_half_flops": g0.matmul_half_flops, "intra_node": 0.8, "inter_node": 0.8}
    for d in dies:
        ref = next(g for n, g in catalogue.items() if die(n) == d)
        for k in GPU_PARAMS:
            p[(d, k)] = getattr(ref, k)
    best = _loss(rows, catalogue, p)
    for sweep in range(sweeps):
        step = 1.25 ** (0.5 ** sweep)
        for key in list(p):
            lo, hi = BOUNDS[key if isinstance(key, str) else key[1]]
            improved = True
            while improved:
                improved = False
                for f in (step, 1 / step):
                    trial = dict(p)
                    trial[key] = min(hi, max(lo, p[key] * f))
                    val = _loss(rows, catalogue, trial)
                    if val < best - 1e-6:
                        p, best, improved = trial, val, True
                        break
        log(f"sweep {sweep + 1}: mean |log error| = {best:.4f}")
    return p
