"""A lower bound of each recompute-pattern value's optimum, read before CP-SAT or the MILP solves
that value (formulations/recompute_choice.py solves the inner problem once per value of the
framework's pattern: Megatron-LM's one --recompute-num-layers N, 76 values on Llama-3 70B's
80 layers over three stages). The search solves a value only where this bound can beat its
cutoff (solver/search.py, _solve_inner); on the 32 A100 + 32 H100 instance every value but
N = 0 was above the optimum (13.38-17.28 s against 12.88 s) and each was solved in 0.05-0.5 s.

With value i fixed, stage s of class k holding the j-th layer count of its grid (j + 1 chunks of
v layers, MultiClassProblem.recompute_counts) recomputes the value's count r_i(s, j) of them, so
on each network its time and memory are known numbers:
    T[s, j] = a_s + n[s, j] t_s + r_i(s, j) u_s,    fits[s, j]: the stage's peak <= capacity
(cost/schedule.stage_mem_bytes' linear terms, compared with a relative margin so that a count
the problem's own fits admits is never dropped here). T grows with j (n grows, and r_i with it).
Let jmax_s be stage s's largest count that fits. A split of C chunks (C = L / v) in counts j_s
<= jmax_s has, at any level Z >= max_s T[s, j_s], all of T[s, 0 .. j_s] <= Z: at least C values
of {T[s, j] : j <= jmax_s} lie at or below Z, so
    A_k = max_s T_s >= max( max_s T[s, 0],  the C-th smallest of those values ),
and its sum is sum_s T[s, 0] plus C - pp increments T[s, j] - T[s, j - 1] (j <= jmax_s, each >= 0),
at least the C - pp smallest of them:
    S_k = sum_s T_s >= sum_s T[s, 0] + the C - pp smallest increments.
With the syncs' memory-free bound D (solver/bounds/batched.py) these enter the pipeline's
relaxation over micro-batch vectors (batched.relaxed_s), per network, aggregated as the
objective. A value that no split fits (some jmax_s < 0, or fewer than C values) is bounded by inf.
Not read (None) with the embedding / loss as layer slots or under a zero-bubble schedule
(their stage memory and times are not these linear terms) nor for a per-stage pattern.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.solver.bounds.batched import relaxed_s

MARGIN = 1e-9  # relative, on the memory comparison: admits what the problem's own fits admits
FLOAT_SAFETY = 1e-12  # relative: these sums are other float operations than the solvers' evaluation


def applies(p) -> bool:
    """Whether value_bounds_s reads problem `p` (a MultiClassProblem with a fixed pattern)."""
    o = p.coeffs[0][0].outer
    return (p.recompute_pattern is not RecomputePattern.PER_STAGE and p.allow_full_recompute
            and not (o.embedding_in_split or o.loss_in_split)
            and not any(c.layer_drain_saving_s.size for cs in p.coeffs for c in cs))


def value_bounds_s(p, values: list[int]) -> dict[int, float]:
    """The module's bound of p's optimum with the pattern at each of `values`."""
    v, K, L = p.virtual_stages, p.classes, p.layers
    chunks = L // v
    x = np.array(p.replicas, float)
    lo = np.array([p.min_micro_batches(k) for k in range(K)], float)
    D = np.array([max(_sync_floor(c, L) for c in cs) for cs in p.coeffs])[None, :, None]
    out = {}
    for i in values:
        A = np.empty((1, len(p.coeffs), K))
        S = np.empty_like(A)
        for k in range(K):
            counts, grid = p.recompute_counts(k, i)
            for sc, cs in enumerate(p.coeffs):
                A[0, sc, k], S[0, sc, k] = _class_terms(cs[k], counts, grid, chunks)
        if not np.isfinite(A).all():
            out[i] = float("inf")
            continue
        b = relaxed_s(A, S, D, x, lo, float(p.total_micro_batches), v, False)[0]
        agg = float(b.max()) if p.objective == "max" else float(b @ np.asarray(p.weights, float))
        out[i] = agg * (1 - FLOAT_SAFETY)
    return out


def _sync_floor(c, L: int) -> float:
    """batched._terms' memory-free bound of a class's slowest sync."""
    d, g = c.stage_sync_time_s, c.layer_sync_time_s
    return float(max((d.sum() + L * g.min()) / c.pp, (d + g).max()))


def _class_terms(c, counts: np.ndarray, grid: np.ndarray, chunks: int) -> tuple[float, float]:
    """(A_k, S_k) of the module docstring for one class on one network; inf where no split fits."""
    pp = grid.shape[0]
    T = c.stage_time_s[:, None] + grid * c.layer_time_s[:, None] + counts * c.recompute_time_s[:, None]
    mem = (c.stage_mem_bytes[:, None] + grid * (c.layer_state_bytes + c.layer_act_bytes)[:, None]
           - counts * (c.layer_act_bytes - c.layer_ckpt_bytes)[:, None])
    ok = mem * (1 - MARGIN) <= c.capacity_bytes[:, None]
    if not ok.any(axis=1).all():
        return float("inf"), float("inf")
    jmax = grid.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)  # per stage, the largest count that fits
    upto = np.arange(grid.shape[1])[None, :] <= jmax[:, None]
    vals = T[upto]
    if vals.size < chunks:
        return float("inf"), float("inf")
    A = max(float(T[:, 0].max()), float(np.partition(vals, chunks - 1)[chunks - 1]))
    inc = np.diff(T, axis=1)[upto[:, 1:]]
    extra = chunks - pp
    S = float(T[:, 0].sum()) + (float(np.partition(inc, extra - 1)[:extra].sum()) if extra > 0 else 0.0)
    return A, S
