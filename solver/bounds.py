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

Tight lower bound (`tight_lower_bound_s`, computed only for configurations the bound above
cannot prune). It keeps memory and the recompute it forces. With r_s real, stage s holding n
layers must recompute at least rho_s(n) = max(0, (c_s + n w_s - cap_s) / h_s) layers (h_s > 0,
w_s = state + act), so with u_s >= 0 its time is at least the convex, increasing
    tau_s(n) = a_s + n t_s + u_s rho_s(n),
and n is at most ncap_s (the largest multiple of v that fits with r_s = min(n, R)); with
u_s < 0 (never produced by cost/, kept for safety) r_s <= n gives tau_s(n) = a_s + n (t_s + u_s).
Each term of the objective is bounded on its own, over real splits with Σ n_s = L,
v <= n_s <= ncap_s, rounding what integrality allows:
    max_s T_s >= tau*   the smallest tau at which Σ_s v floor(n_s(tau) / v) >= L, with n_s(tau)
                        the largest n with tau_s(n) <= tau (bisection; each stage's layer
                        count is a multiple of v below n_s(tau) when its time is <= tau)
    sum_s T_s >= sigma* the continuous minimum of Σ tau_s(n_s): tau_s is convex piecewise
                        linear (slopes t_s, then t_s + u_s w_s / h_s), so filling the cheapest
                        slopes first from n_s = v is optimal
    max_s D_s >= delta* as tau*, with d_s + n g_s
and the bound is (m - 1/v) tau* + sigma* / v + delta*. The memory-free bound above is its
special case with no recompute forced, so the tight bound is taken as the larger of the two.

Memory infeasibility. A stage's memory is smallest when all its layers are fully recomputed
(r_s = n_s), so stage s can hold at most nmax_s = floor((cap_s - c_s) / (state_s + ckpt_s))
layers (rounded down to a multiple of v). If some nmax_s < v or sum_s nmax_s < L, no split
fits: the configuration is infeasible, proved.

Incumbent. The even split with, per stage, the fewest fully recomputed layers that fit: the
objective is non-decreasing in r_s, so for a fixed split that r is optimal.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.coefficients import StageCoefficients


def lower_bound_s(c: StageCoefficients) -> float:
    m, v, pp, L = c.outer.num_micro_batches, c.outer.virtual_stages, c.pp, c.layers
    a, t = c.stage_time_s, c.layer_time_s
    d, g = c.stage_sync_time_s, c.layer_sync_time_s
    sum_t = a.sum() + L * t.min()
    max_t = max(sum_t / pp, float((a + v * t).max()))
    max_d = max((d.sum() + L * g.min()) / pp, float((d + v * g).max()))
    return float((m - 1 / v) * max_t + sum_t / v + max_d)


FLOAT_SAFETY_REL = 1e-12  # the tight bound is lowered by this much: float sums may round up


def _cap_layers(c: StageCoefficients, allow_full_recompute: bool) -> np.ndarray:
    """Largest multiple of v layers that fits stage s with r_s = min(n, R) (R = 0 without full
    recompute), before the pace and sync limits; may be < v (nothing fits)."""
    v = c.outer.virtual_stages
    room = c.capacity_bytes - c.stage_mem_bytes
    per = c.layer_state_bytes + c.layer_act_bytes
    if allow_full_recompute:
        per = per - np.maximum(c.layer_act_bytes - c.layer_ckpt_bytes, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(per > 0, np.floor(np.maximum(room, 0) / np.where(per > 0, per, 1)),
                     np.where(room >= 0, c.layers, 0))
    return np.minimum((n // v) * v, c.layers)


def _piecewise(n: np.ndarray, base, slope1, knee, slope2) -> np.ndarray:
    """f_s(n) = base + slope1 min(n, knee) + slope2 max(n - knee, 0), broadcast over n."""
    return base + slope1 * np.minimum(n, knee) + slope2 * np.maximum(n - knee, 0)


def _min_bottleneck(L: int, v: int, ncap: np.ndarray, base, slope1, knee, slope2) -> float:
    """A lower bound on min over splits (n_s multiples of v, v <= n_s <= ncap_s, Σ n_s = L) of
    max_s f_s(n_s), f_s convex increasing piecewise linear (module docstring); exact for the
    integer problem up to the float evaluation of f_s.

    First a level below the continuous optimum: G(level) = Σ_s min(n_s(level), ncap_s) is
    piecewise linear between the breakpoints f_s(0), f_s(knee_s), f_s(ncap_s), so it is
    evaluated there and interpolated, and a level with G < L is kept (every split has max f
    above it). Then, in chunks of v layers, k_s = the chunks of stage s with f_s <= level
    (checked forwards, so never over-counted) and the answer must admit the deficit = N - Σ k_s
    cheapest further chunks: it is the deficit-th smallest f_s(v (k_s + j))."""
    N = L // v
    kcap = ncap // v
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at_knee = np.where(np.isfinite(knee), _piecewise(knee, base, slope1, knee, slope2), np.inf)
        inv1 = np.where(slope1 > 0, 1 / slope1, np.inf)
        inv2 = np.where(slope2 > 0, 1 / slope2, np.inf)

        def reach(level):  # largest real n_s with f_s(n_s) <= level (>= 0), per stage
            first = np.where(level >= base, (level - base) * inv1, -np.inf)
            second = np.where(level >= at_knee, knee + (level - at_knee) * inv2, -np.inf)
            n = np.where(level <= at_knee, np.minimum(first, knee), second)
            return np.clip(np.nan_to_num(n, nan=np.inf), 0, None)

        def held(level: np.ndarray) -> np.ndarray:  # G(level) for a column of levels
            return np.minimum(reach(level), ncap).sum(axis=-1)

        top = _piecewise(ncap.astype(float), base, slope1, knee, slope2)
        points = np.unique(np.concatenate([base, at_knee[np.isfinite(at_knee)], top]))
        g = held(points[:, None])
        i = int(np.argmax(g >= L)) if (g >= L).any() else len(points) - 1
        level = float(points[0]) - 1.0 if i == 0 else float(points[i - 1])
        if i > 0 and g[i] > g[i - 1]:  # interpolate, then step below by a relative 1e-9
            x = points[i - 1] + (L - g[i - 1]) * (points[i] - points[i - 1]) / (g[i] - g[i - 1])
            x = float(x) - 1e-9 * max(abs(float(x)), 1e-300)
            if x > level and held(np.array([[x]]))[0] < L:
                level = x
        level = max(level, float(_piecewise(float(v), base, slope1, knee, slope2).max()))
        k = np.minimum(kcap, np.floor(reach(level) / v + 1e-9))
        k = np.maximum(k - (_piecewise(v * k, base, slope1, knee, slope2) > level), 0)
    deficit = int(N - k.sum())
    if deficit <= 0:
        return level
    if deficit > 8 * len(k) + 64:  # only with degenerate slopes: keep the weaker valid level
        return level
    kk = k[:, None] + np.arange(1, deficit + 1)[None, :]
    vals = np.where(kk <= kcap[:, None],
                    _piecewise(v * kk, base[:, None], slope1[:, None], knee[:, None], slope2[:, None]),
                    np.inf).ravel()
    if np.isinf(vals).sum() > vals.size - deficit:
        return float("inf")  # the caps cannot hold L
    return max(level, float(np.partition(vals, deficit - 1)[deficit - 1]))


def tight_lower_bound_s(c: StageCoefficients, allow_full_recompute: bool = True) -> float:
    """Lower bound with memory and forced recompute (module docstring); >= lower_bound_s(c)."""
    m, v, pp, L = c.outer.num_micro_batches, c.outer.virtual_stages, c.pp, c.layers
    ncap = _cap_layers(c, allow_full_recompute)
    if (ncap < v).any() or ncap.sum() < L:
        return float("inf")  # no split fits: proved as in memory_infeasible
    a, t, u = c.stage_time_s, c.layer_time_s, c.recompute_time_s
    w = c.layer_state_bytes + c.layer_act_bytes
    h = c.layer_act_bytes - c.layer_ckpt_bytes
    room = c.capacity_bytes - c.stage_mem_bytes
    forced = allow_full_recompute & (u >= 0) & (h > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        knee = np.where(forced & (w > 0), np.maximum(room, 0) / np.where(w > 0, w, 1), np.inf)
        slope2 = np.where(forced, t + u * w / np.where(h > 0, h, 1), t)
    slope1 = np.where(u < 0, t + u, t)  # r_s <= n_s: a negative recompute time saves at most u n
    slope2 = np.where(u < 0, slope1, slope2)
    knee = np.where(u < 0, np.inf, knee)
    tau = _min_bottleneck(L, v, ncap, a, slope1, knee, slope2)
    delta = _min_bottleneck(L, v, ncap, c.stage_sync_time_s, c.layer_sync_time_s,
                            np.full(pp, np.inf), c.layer_sync_time_s)
    # sigma*: every stage starts at n_s = v, then the cheapest slopes fill the other L - pp v
    f_v = _piecewise(float(v), a, slope1, knee, slope2)
    seg1 = np.clip(np.minimum(knee, ncap) - v, 0, None)
    seg2 = np.clip(ncap - np.maximum(knee, v), 0, None)
    slopes = np.concatenate([slope1, slope2])
    lengths = np.concatenate([seg1, seg2])
    order = np.argsort(slopes, kind="stable")
    lengths, slopes = lengths[order], slopes[order]
    before = np.cumsum(lengths) - lengths
    take = np.clip(float(L - pp * v) - before, 0, lengths)
    sigma = float(f_v.sum() + (take * slopes).sum())
    bound = ((m - 1 / v) * tau + sigma / v + delta) * (1 - FLOAT_SAFETY_REL)
    return max(float(bound), lower_bound_s(c))


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
    from paraplan.cost.loader import default_layer_split
    return np.array(default_layer_split(layers, pp, v), float)


def incumbent(c: StageCoefficients, allow_full_recompute: bool) -> tuple[float, np.ndarray, np.ndarray] | None:
    n = even_split(c.layers, c.pp, c.outer.virtual_stages)
    if not schedule.holds_dense_prefix(c, n):  # an MoE dense prefix larger than stage 0's share
        return None
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
