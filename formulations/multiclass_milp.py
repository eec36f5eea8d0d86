"""MILP form of the heterogeneous inner problem (formulations/multiclass.py has the model and
the notation), solved by SCIP or HiGHS through OR-Tools' pywraplp.

The product (m_k - 1) T_sk is linearised exactly with a binary expansion of the micro-batch
count: m_k = pp_k + sum_j 2^j beta_kj (beta binary, j < J_k, m_k <= m_max_k), and for every
scenario and bit a variable y_skj >= 0 with

    y_skj >= T_sk - U_sk (1 - beta_kj)           (U_sk: an upper bound of T_sk)

so at an optimum y_skj = beta_kj T_sk and P_sk = (pp_k - 1) T_sk + sum_j 2^j y_skj + sum_s T.
With one class the count is fixed by sum_k x_k m_k = M and no expansion is needed.

Tolerance. A backend accepts beta within its integrality tolerance iota of 0/1, so y may sit
up to iota * U_sk below beta T, and every other row may be violated by its feasibility
tolerance phi. The returned solution is rounded and re-evaluated exactly (`evaluate`); the
reported bound subtracts

    eps = iota * ([K > 1] m_max U_max (2 + pp_max) + (m_max + pp_max) (t + u)_max + g_max)
          + phi * (m_max + 3)

per scenario (weighted by the scenario weights' sum, 1 for "max"), with m_max, U_max, pp_max
and the per-layer coefficients the largest over classes and scenarios: the bits' term where
there are bits, and an integer variable off by iota moving T_s by iota (t + u) and the sync by
iota g. "optimal" then means optimal within 2 eps.
"""

from __future__ import annotations

import math
import time

import numpy as np

from paraplan.formulations.multiclass import MultiClassProblem, MultiClassResult, _done, _upper_bounds
from paraplan.formulations.result import SolverError

INTEGRALITY_TOL = 1e-6
FEASIBILITY_TOL = 1e-6
MEM_UNIT_BYTES = 2**20
MEM_MARGIN_MIB = 2**-10
BACKENDS = ("scip", "highs")


def solve_multiclass_milp(p: MultiClassProblem, time_limit_s: float = 10.0,
                          backend: str = "scip") -> MultiClassResult:
    from ortools.linear_solver import pywraplp

    start = time.perf_counter()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    solver = pywraplp.Solver.CreateSolver(backend.upper())
    if solver is None:
        raise SolverError(f"backend {backend!r}: this OR-Tools build has no {backend.upper()} solver")
    solver.SuppressOutput()
    L, Kc = p.layers, p.classes
    R = L if p.allow_full_recompute else 0
    inf = solver.infinity()

    n, r, m_expr, bits = [], [], [], []
    for k in range(Kc):
        c, pp = p.coeffs[0][k], p.pp(k)
        n.append([solver.IntVar(1, L, f"n_k{k}_s{s}") for s in range(pp)])
        r.append([solver.IntVar(0, R, f"r_k{k}_s{s}") for s in range(pp)])
        solver.Add(sum(n[k]) == L)
        b = c.stage_mem_bytes / MEM_UNIT_BYTES
        w = (c.layer_state_bytes + c.layer_act_bytes) / MEM_UNIT_BYTES
        h = (c.layer_act_bytes - c.layer_ckpt_bytes) / MEM_UNIT_BYTES
        cap = c.capacity_bytes / MEM_UNIT_BYTES - MEM_MARGIN_MIB
        for s in range(pp):
            solver.Add(r[k][s] <= n[k][s])
            solver.Add(b[s] + w[s] * n[k][s] - h[s] * r[k][s] <= cap[s])
        span = p.max_micro_batches(k) - pp
        J = span.bit_length() if Kc > 1 else 0
        bits.append([solver.BoolVar(f"beta_k{k}_j{j}") for j in range(J)])
        m_expr.append(pp + sum(2**j * bits[k][j] for j in range(J)))
        if J:
            solver.Add(m_expr[k] <= p.max_micro_batches(k))
    if Kc > 1:
        solver.Add(sum(x * mk for x, mk in zip(p.replicas, m_expr)) == p.total_micro_batches)
    else:
        fixed = p.total_micro_batches // p.replicas[0]
        if fixed * p.replicas[0] != p.total_micro_batches or fixed < p.pp(0):
            return _done(p, "infeasible", backend, start, math.inf, 0.0)

    iters, U_max, g_max, tu_max = [], 0.0, 0.0, 0.0
    for si, cs in enumerate(p.coeffs):
        Z = solver.NumVar(-inf, inf, f"Z_sc{si}")
        D = solver.NumVar(-inf, inf, f"D_sc{si}")
        for k, c in enumerate(cs):
            a, t, u = c.stage_time_s, c.layer_time_s, c.recompute_time_s
            T = [a[s] + t[s] * n[k][s] + u[s] * r[k][s] for s in range(c.pp)]
            U = float((np.abs(a) + L * np.abs(t) + R * np.abs(u)).max())
            U_max, g_max = max(U_max, U), max(g_max, float(np.abs(c.layer_sync_time_s).max()))
            tu_max = max(tu_max, float((np.abs(t) + np.abs(u)).max()))
            T_max = solver.NumVar(-inf, inf, f"T_sc{si}_k{k}")
            for s in range(c.pp):
                solver.Add(T_max >= T[s])
                solver.Add(D >= c.stage_sync_time_s[s] + c.layer_sync_time_s[s] * n[k][s])
            if Kc == 1:
                solver.Add(Z >= (fixed - 1) * T_max + sum(T))
                continue
            ys = []
            for j, beta in enumerate(bits[k]):
                y = solver.NumVar(0, inf, f"y_sc{si}_k{k}_j{j}")
                solver.Add(y >= T_max - U * (1 - beta))
                ys.append(2**j * y)
            solver.Add(Z >= (c.pp - 1) * T_max + sum(ys) + sum(T))
        iters.append(Z + D)
    if p.objective == "max":
        W = solver.NumVar(-inf, inf, "worst")
        for it in iters:
            solver.Add(W >= it)
        solver.Minimize(W)
        w_sum = 1.0
    else:
        solver.Minimize(sum(w * it for w, it in zip(p.weights, iters)))
        w_sum = float(sum(p.weights))
    m_max = max(p.max_micro_batches(k) for k in range(Kc))
    pp_max = max(p.pp(k) for k in range(Kc))
    bits_term = m_max * U_max * (2 + pp_max) if Kc > 1 else 0.0
    eps = w_sum * (INTEGRALITY_TOL * (bits_term + (m_max + pp_max) * tu_max + g_max)
                   + FEASIBILITY_TOL * (m_max + 3))

    solver.SetTimeLimit(max(1, math.ceil(time_limit_s * 1000)))
    if backend == "scip":
        solver.SetSolverSpecificParametersAsString("limits/gap = 0\nlimits/absgap = 0")
    else:
        solver.SetSolverSpecificParametersAsString("mip_rel_gap=0\nmip_abs_gap=0\nthreads=1\noutput_flag=false")
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    code = solver.Solve(params)
    if code == pywraplp.Solver.INFEASIBLE:
        return _done(p, "infeasible", backend, start, math.inf, 2 * eps)
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        if solver.WallTime() >= 0.5 * time_limit_s * 1000:
            return _done(p, "timeout", backend, start, None, 2 * eps)
        raise SolverError(f"backend {backend!r} returned MPSolver status {code} for a heterogeneous split")
    status = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
    bound = solver.Objective().BestBound() if status == "optimal" else None
    if bound is not None and math.isfinite(bound):
        bound -= eps
    mv = [int(round(p.pp(k) + sum(2**j * b.solution_value() for j, b in enumerate(bits[k]))))
          if Kc > 1 else fixed for k in range(Kc)]
    nv = [[int(round(x.solution_value())) for x in row] for row in n]
    rv = [[int(round(x.solution_value())) for x in row] for row in r]
    return _done(p, status, backend, start, bound, 2 * eps, mv, nv, rv)
