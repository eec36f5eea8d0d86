"""CP-SAT formulation of the layer split of one outer configuration.

Sets
    S = {0, ..., pp-1}   pipeline stages

Parameters (`cost.coefficients.StageCoefficients`; arrays of shape (pp,), indexed by s)
    L        layers                         transformer layers to place (c.layers)
    m        micro-batches per iteration    (c.outer.num_micro_batches)
    v        model chunks per stage         interleaved 1F1B (c.outer.virtual_stages); v = 1 is 1F1B
    a_s  [s]      stage_time_s          fixed time of stage s per micro-batch
    t_s  [s]      layer_time_s          one layer, one micro-batch, forward + backward
    u_s  [s]      recompute_time_s      extra time of one fully recomputed layer
    e_s  [s]      stage_sync_time_s     fixed time after the last backward (sync, optimizer)
    g_s  [s]      layer_sync_time_s     the same, per layer
    b_s  [bytes]  stage_mem_bytes       fixed memory of stage s
    w_s  [bytes]  layer_state_bytes + layer_act_bytes   one stored layer, all micro-batches in flight
    h_s  [bytes]  layer_act_bytes - layer_ckpt_bytes    saved by fully recomputing one layer
    K_s  [bytes]  capacity_bytes
    R        L when full recompute is allowed, else 0

Quantisation (`quantize`; the integer model sees only the rounded parameters, marked ^)
    q   [s]      time quantum, TIME_QUANTUM_S * 2^j with the smallest j >= 0 that keeps an upper
                 bound of the scaled objective below OBJECTIVE_LIMIT_QUANTA (2^40)
    mu  [bytes]  memory quantum, MEM_QUANTUM_BYTES (1 KiB)
    â_s = round(a_s/q), and likewise t̂, û, ê, ĝ                    (error <= q/2 each)
    b̂_s = ceil(b_s/mu), ŵ_s = ceil(w_s/mu), ĥ_s = floor(h_s/mu),  K̂_s = floor(K_s/mu)
    Memory use is rounded up and capacity down, so every split the integer model accepts fits
    in real memory (`cost.schedule.fits`); a split within mu*(1 + n_s + r_s) bytes of a
    capacity may be rejected.

Variables
    k_s ∈ {1, ..., max(1, ⌊L/v⌋)}   layers per model chunk on stage s; n_s = v k_s layers;
                                    k_0 >= d0 (c.first_chunk_min_layers: an MoE model's dense
                                    prefix, priced on stage 0; 1 otherwise)
    r_s ∈ {0, ..., R}               fully recomputed layers on stage s
    T_max  [quanta]                 slowest stage time per micro-batch
    D_max  [quanta]                 slowest post-backward time

Objective: v times the iteration time, in quanta, so that every coefficient is an integer
    minimise  (v m - 1) T_max + Σ_s (â_s + v k_s t̂_s + r_s û_s) + v D_max

Constraints
    C1_layers          Σ_s v k_s = L
    C2_recompute_s{s}  r_s <= v k_s
    C3_mem_s{s}        b̂_s + v k_s ŵ_s - r_s ĥ_s <= K̂_s
    C4_pace_s{s}       T_max >= â_s + v k_s t̂_s + r_s û_s
    C5_sync_s{s}       D_max >= ê_s + v k_s ĝ_s

Tolerance. Charging each rounded time coefficient a full quantum q (q/2 from rounding, the rest
absorbs floating-point error), the scaled objective q Ẑ(x)/v differs from the true iteration
time Z(x) of the same split x by at most

    E = (q / v) * [ (v m - 1)(1 + L + R) + (pp + L + R) + v (1 + L) ]

(`QuantizedCoefficients.objective_error_s`). Hence bound_s = q * (CP-SAT bound) / v - E is a
valid lower bound on min Z, and an "optimal" split is within 2E of the true optimum
(objective_s - bound_s <= 2E), over the splits that fit with the memory rounding above.

Determinism (threads == 1, the default). `random_seed` and `num_workers` are fixed and the stop
is `max_deterministic_time` (CP-SAT's work units, about one second each), so the same input
gives the same answer. A wall-clock backstop (WALL_BACKSTOP_FACTOR * time_limit_s +
WALL_BACKSTOP_S), lowered to the caller's `max_wall_s` when one is given (the planner's
overall deadline), guards against a work-unit estimate far off the clock; a run stopped by it
is the only kind that can differ between repeats.

Search. One worker runs with `use_objective_lb_search`. With CP-SAT's default single-worker
search, the objective's lower bound can climb one quantum per conflict (10^9 steps at 1 ns): a
pp = 4, L = 12 model stalled without a solution, and the walk barely advances deterministic
time, so only the backstop ended it. With the objective lower-bound search, 2,600 small random
models and 320 pp = 16, L = 128 models with tight memory were all proved optimal or infeasible,
the slowest in about 1 s.

threads > 1 runs CP-SAT's parallel portfolio, which is not reproducible: a proved optimum's
objective repeats (within 2E) but the split among equally fast ones, and any time-limited
answer, may not. OR-Tools' deterministic parallel mode (`interleave_search`) was measured worse
than one worker on these models (2 threads, pp = 16: 22 of 32 unproved after 10 work units;
with other subsolver sets, stalls on 1% of small models), so it is not used; parallelise across
outer configurations instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.schedule import fits, iteration_time_s
from paraplan.formulations.quantize import (MEM_QUANTUM_BYTES, OBJECTIVE_LIMIT_QUANTA,  # noqa: F401
                                   TIME_QUANTUM_S, QuantizedCoefficients, quantize)
from paraplan.formulations.result import SolverError, SplitResult

WALL_BACKSTOP_FACTOR = 4.0
WALL_BACKSTOP_S = 5.0

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.UNKNOWN: "timeout",
}


def solve_split_cpsat(c: StageCoefficients, allow_full_recompute: bool = True,
                      time_limit_s: float = 10.0, threads: int = 1, seed: int = 0,
                      hint: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
                      max_wall_s: float | None = None) -> SplitResult:
    """Best layer split (n_s, r_s) of `c` by CP-SAT; see the module docstring for the model.

    time_limit_s is CP-SAT deterministic time (about seconds); hint = (n, r) is a warm start;
    max_wall_s, when given, caps the wall-clock backstop (a caller's overall deadline).
    threads == 1 is reproducible; threads > 1 is CP-SAT's (non-reproducible) parallel portfolio.
    """
    start = time.perf_counter()
    pp, L, m, v = c.pp, c.layers, c.outer.num_micro_batches, c.outer.virtual_stages
    if threads < 1 or time_limit_s <= 0:
        raise ValueError(f"threads must be >= 1 and time_limit_s > 0, got {threads}, {time_limit_s}")
    Q = quantize(c, allow_full_recompute)
    R = Q.max_recompute
    a, t, u = (Q.stage_time_q.tolist(), Q.layer_time_q.tolist(), Q.recompute_time_q.tolist())
    e, g = Q.stage_sync_q.tolist(), Q.layer_sync_q.tolist()
    b, w, h, K = (Q.stage_mem_q.tolist(), Q.layer_mem_q.tolist(), Q.recompute_saving_q.tolist(),
                  Q.capacity_q.tolist())
    S = range(pp)

    model = cp_model.CpModel()
    k = [model.new_int_var(c.first_chunk_min_layers if s == 0 else 1, max(1, L // v), f"k_s{s}")
         for s in S]
    r = [model.new_int_var(0, R, f"r_s{s}") for s in S]
    n = [v * k[s] for s in S]
    T = [a[s] + t[s] * n[s] + u[s] * r[s] for s in S]
    D = [e[s] + g[s] * n[s] for s in S]
    t_ub = max(abs(a[s]) + L * abs(t[s]) + R * abs(u[s]) for s in S)
    d_ub = max(abs(e[s]) + L * abs(g[s]) for s in S)
    T_max = model.new_int_var(-t_ub, t_ub, "T_max")
    D_max = model.new_int_var(-d_ub, d_ub, "D_max")

    model.add(sum(n) == L).with_name("C1_layers")
    for s in S:
        model.add(r[s] <= n[s]).with_name(f"C2_recompute_s{s}")
        model.add(b[s] + w[s] * n[s] - h[s] * r[s] <= K[s]).with_name(f"C3_mem_s{s}")
        model.add(T_max >= T[s]).with_name(f"C4_pace_s{s}")
        model.add(D_max >= D[s]).with_name(f"C5_sync_s{s}")
    model.minimize((v * m - 1) * T_max + sum(T) + v * D_max)

    if hint is not None:
        hn, hr = hint
        if len(hn) != pp or len(hr) != pp or any(x % v for x in hn):
            raise ValueError(f"hint must be (n, r) with {pp} entries each and n_s a multiple of v={v}, "
                             f"got {hint}")
        for s in S:
            model.add_hint(k[s], hn[s] // v)
            model.add_hint(r[s], hr[s])
        model.add_hint(T_max, max(a[s] + t[s] * hn[s] + u[s] * hr[s] for s in S))
        model.add_hint(D_max, max(e[s] + g[s] * hn[s] for s in S))

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.random_seed = seed
    p.num_workers = threads
    p.max_deterministic_time = time_limit_s
    p.max_time_in_seconds = WALL_BACKSTOP_FACTOR * time_limit_s + WALL_BACKSTOP_S
    if max_wall_s is not None:
        p.max_time_in_seconds = max(1e-3, min(p.max_time_in_seconds, max_wall_s))
    p.use_objective_lb_search = threads == 1  # the parallel portfolio has its own lb-search worker
    code = solver.solve(model)
    if code not in _STATUS:
        raise SolverError(f"CP-SAT returned {solver.status_name(code)} for the layer split "
                          f"(pp={pp}, L={L}, v={v}): {model.validate() or 'no validation message'}")
    status = _STATUS[code]

    def bound() -> float | None:
        raw = solver.best_objective_bound
        return raw * Q.time_quantum_s / v - Q.objective_error_s if math.isfinite(raw) else None

    if status == "infeasible":
        return SplitResult(status=status, layers_per_stage=None, full_recompute_layers=None,
                           objective_s=None, bound_s=math.inf, wall_time_s=time.perf_counter() - start,
                           backend="cpsat", quantum_s=Q.time_quantum_s)
    if status == "timeout":
        return SplitResult(status=status, layers_per_stage=None, full_recompute_layers=None,
                           objective_s=None, bound_s=bound(), wall_time_s=time.perf_counter() - start,
                           backend="cpsat", quantum_s=Q.time_quantum_s)

    n_val = tuple(v * solver.value(k[s]) for s in S)
    r_val = tuple(solver.value(r[s]) for s in S)
    if not fits(c, np.array(n_val), np.array(r_val)):
        raise SolverError(f"CP-SAT split n={n_val}, r={r_val} does not fit after re-checking with "
                          f"cost.schedule.fits: the conservative memory rounding is broken")
    return SplitResult(
        status=status, layers_per_stage=n_val, full_recompute_layers=r_val,
        objective_s=float(iteration_time_s(c, np.array(n_val), np.array(r_val))),
        bound_s=bound(), wall_time_s=time.perf_counter() - start, backend="cpsat",
        quantum_s=Q.time_quantum_s,
    )
