"""Provably valid lower bounds, memory-infeasibility proofs and quick incumbents for one outer
configuration, all from its per-stage coefficients (cost/coefficients.py).

Lower bound. The objective is (m - 1/v) * max_s T_s + sum_s T_s / v + max_s D_s with
m >= 1, v >= 1, so each term can be bounded on its own. Recompute only adds time
(recompute_time_s >= 0: replaying a forward never shortens an iteration), so r = 0 bounds T_s
from below; every stage holds >= v layers and all stages together hold L:
    sum_s T_s >= sum_s a_s + L * min_s t_s
    max_s T_s >= max( sum_s T_s / pp,  max_s (a_s + v * t_s) )
    max_s D_s >= max( (sum_s d_s + L * min_s g_s) / pp,  max_s (d_s + v * g_s) )
Memory is ignored, which only lowers the bound.

Memory infeasibility. A stage's memory is smallest when all its layers are fully recomputed
(r_s = n_s), so stage s can hold at most nmax_s = floor((cap_s - c_s) / (state_s + ckpt_s))
layers (rounded down to a multiple of v). If some nmax_s < v or sum_s nmax_s < L, no split
fits: the configuration is infeasible, proved.

Incumbent. The even split with, per stage, the fewest fully recomputed layers that fit: the
objective is non-decreasing in r_s, so for a fixed split that r is optimal.
"""

from __future__ import annotations

import numpy as np

from cost import schedule
from cost.coefficients import StageCoefficients


def lower_bound_s(c: StageCoefficients) -> float:
    m, v, pp, L = c.outer.num_micro_batches, c.outer.virtual_stages, c.pp, c.layers
    a, t = c.stage_time_s, c.layer_time_s
    d, g = c.stage_sync_time_s, c.layer_sync_time_s
    sum_t = a.sum() + L * t.min()
    max_t = max(sum_t / pp, float((a + v * t).max()))
    max_d = max((d.sum() + L * g.min()) / pp, float((d + v * g).max()))
    return float((m - 1 / v) * max_t + sum_t / v + max_d)


def max_layers_per_stage(c: StageCoefficients) -> np.ndarray:
    v = c.outer.virtual_stages
    per_layer = c.layer_state_bytes + c.layer_ckpt_bytes
    room = c.capacity_bytes - c.stage_mem_bytes
    n = np.floor(np.maximum(room, 0) / per_layer)
    return (n // v) * v


def memory_infeasible(c: StageCoefficients) -> bool:
    nmax = max_layers_per_stage(c)
    return bool((nmax < c.outer.virtual_stages).any() or nmax.sum() < c.layers)


def min_recompute(c: StageCoefficients, n: np.ndarray) -> np.ndarray | None:
    """Fewest fully recomputed layers per stage that make split n fit, or None if none does."""
    over = schedule.stage_mem_bytes(c, n, np.zeros_like(n)) - c.capacity_bytes
    saving = c.layer_act_bytes - c.layer_ckpt_bytes
    r = np.zeros_like(n)
    need = over > 0
    if need.any():
        if (saving[need] <= 0).any():
            return None
        r[need] = np.ceil(over[need] / saving[need])
    if (r > n).any():
        return None
    # ceil on floats can land one short of fitting; step up where it does
    for _ in range(2):
        ok = schedule.stage_mem_bytes(c, n, r) <= c.capacity_bytes
        if ok.all():
            return r
        r = np.where(ok, r, r + 1)
        if (r > n).any():
            return None
    return r if schedule.fits(c, n, r) else None


def even_split(layers: int, pp: int, v: int) -> np.ndarray:
    from cost.loader import default_layer_split
    return np.array(default_layer_split(layers, pp, v), float)


def incumbent(c: StageCoefficients, allow_full_recompute: bool) -> tuple[float, np.ndarray, np.ndarray] | None:
    n = even_split(c.layers, c.pp, c.outer.virtual_stages)
    if allow_full_recompute:
        r = min_recompute(c, n)
    else:
        r = np.zeros_like(n) if schedule.fits(c, n, np.zeros_like(n)) else None
    if r is None:
        return None
    return float(schedule.iteration_time_s(c, n, r)), n, r


def min_peak_mem_bytes(c: StageCoefficients) -> float:
    """Peak stage memory of the even split with every layer recomputed (for messages)."""
    n = even_split(c.layers, c.pp, c.outer.virtual_stages)
    return float(schedule.stage_mem_bytes(c, n, n).max())
