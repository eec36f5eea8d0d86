"""MILP form of the inner problem of replica classes (formulations/multiclass.py has the model and
the notation), built on formulations/milp.py's modelling calls and solved by the same solvers:
CBC through PuLP (backend "cbc", the planners' `milp`, as for one outer configuration of a
homogeneous cluster), SCIP or HiGHS through OR-Tools' pywraplp.

The product m_k T_sk is linearised exactly with a binary expansion of the micro-batch
count: m_k = lo_k + st_k sum_j 2^j beta_kj (beta binary, j < J_k, m_k <= m_max_k), and for every
scenario and bit a variable y_skj >= 0 with

    y_skj >= T_sk - U_sk (1 - beta_kj)           (U_sk: an upper bound of T_sk)

so at an optimum y_skj = beta_kj T_sk and
P_sk = (lo_k - 1/v) T_sk + st_k sum_j 2^j y_skj + sum_s T / v. With v > 1 a stage's layers are
v times an integer chunk count.
With one class the count is fixed by sum_k x_k m_k = M and no expansion is needed. Under a
zero-bubble schedule each stage's row C6z holds (m_k - 1/v) T_sk,s (multiclass.py): of several
classes, the same expansion with one y_sksj >= T_sk,s - U_sk (1 - beta_kj) per stage and bit
(C9z), exact at an optimum as above.

Tolerance. A backend accepts beta within its integrality tolerance iota of 0/1, so y may sit
up to iota * U_sk below beta T, and every other row may be violated by its feasibility
tolerance phi. The returned solution is rounded and re-evaluated exactly (`evaluate`); the
reported bound subtracts

    eps = iota * ([K > 1] m_max U_max (2 + pp_max) + (m_max + pp_max) (t + u)_max + g_max)
          + phi * (m_max + 3)

per scenario (weighted by the scenario weights' sum, 1 for "max"), with m_max, U_max, pp_max
and the per-layer coefficients the largest over classes and scenarios: the bits' term where
there are bits, and an integer variable off by iota moving T_s by iota (t + u) and the sync by
iota g; with CBC also the error of the bound as its log prints it (formulations/milp.py).
"optimal" then means optimal within 2 eps (plus that print error).

Memory (formulations/quantize.py, Exact memory). The rows C3 carry capacity plus MEM_MARGIN_MIB,
a relaxation even under the backends' tolerances; a solution is re-checked with cost.schedule's
exact predicate, and each stage (n0, r0) that does not fit is excluded with what it implies
(C3x: n_s <= n0 - 1 or r_s >= r0 + 1, one binary) and the model solved again, until the solution
fits (formulations/milp.solve_with_cuts). The relaxation holds every split that fits, so the
first solution that fits is optimal when the last solve proved its optimum, and the bound of
any solve is valid.
"""

from __future__ import annotations

import math
import time

import numpy as np

from paraplan.cost.schedule import first_stage_min_layers, slot_relief_bytes, stage_mem_bytes
from paraplan.formulations.milp import (BACKENDS, FEASIBILITY_TOL_S, INTEGRALITY_TOL, MEM_MARGIN_MIB,
                                        MEM_UNIT_BYTES, int_value, new_model, solve_with_cuts)
from paraplan.formulations.multiclass import MultiClassProblem, MultiClassResult, _done
from paraplan.formulations.result import SolverError



def solve_multiclass_milp(p: MultiClassProblem, time_limit_s: float = 10.0,
                          backend: str = "cbc") -> MultiClassResult:
    start = time.perf_counter()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    Kc = p.classes
    if Kc == 1:  # one class: its count is fixed by the batch, or nothing is feasible
        fixed = p.total_micro_batches // p.replicas[0]
        if (fixed * p.replicas[0] != p.total_micro_batches or fixed < p.min_micro_batches(0)
                or fixed % p.micro_batch_step(0)):
            return _done(p, "infeasible", backend, start, math.inf, 0.0)
    what = "a multi-class split"

    def check(built):
        api, _, bits, n, r = built
        mv = [p.min_micro_batches(k) + p.micro_batch_step(k)
              * sum(2**j * int_value(api, b, backend, what) for j, b in enumerate(bits[k]))
              if Kc > 1 else fixed for k in range(Kc)]
        nv = [[int_value(api, x, backend, what) for x in row] for row in n]
        rv = [[int_value(api, x, backend, what) for x in row] for row in r]
        return (mv, nv, rv), _overfull(p, nv, rv)

    got = solve_with_cuts(lambda cuts: _formulate(p, backend, cuts), check, backend,
                          start + time_limit_s, what)
    return _done(p, got.status, backend, start, got.bound_s, got.tolerance_s, *got.values)


def _overfull(p: MultiClassProblem, n, r) -> list[tuple[int, int, int, int]]:
    """(class, stage, n, r) of every stage of a solution that does not fit by cost.schedule's
    exact predicate (quantize.py, Exact memory)."""
    out = []
    for k, c in enumerate(p.coeffs[0]):
        mem = stage_mem_bytes(c, np.asarray(n[k], float), np.asarray(r[k], float))
        out += [(k, s, n[k][s], r[k][s]) for s in np.flatnonzero(mem > c.capacity_bytes).tolist()]
    return out


def _formulate(p: MultiClassProblem, backend: str, cuts: list[tuple[int, int, int, int]] = ()):
    """The model of the module docstring on a new `backend` model: (model, eps, bits, n, r);
    `cuts` (class, stage, n0, r0): splits found not to fit, excluded with what they imply."""
    api = new_model(backend)
    Kc = p.classes
    n, r, m_expr, bits = [], [], [], []
    for k in range(Kc):
        nk, rk, mk, bk = _class_rows(api, p, k, [cut for cut in enumerate(cuts) if cut[1][0] == k])
        n.append(nk)
        r.append(rk)
        m_expr.append(mk)
        bits.append(bk)
    if Kc > 1:
        api.add(sum(x * mk for x, mk in zip(p.replicas, m_expr)) == p.total_micro_batches, "C5_batch")
    iters, big = [], [0.0, 0.0, 0.0]  # the largest U, g and t + u: the tolerance's terms
    for si, cs in enumerate(p.coeffs):
        iters.append(_scenario_rows(api, p, si, cs, n, r, bits, big))
    if p.objective == "max":
        W = api.real_var("worst")
        for si, it in enumerate(iters):
            api.add(W >= it, f"C10_worst_sc{si}")
        api.minimise(W)
        w_sum = 1.0
    else:
        api.minimise(sum(w * it for w, it in zip(p.weights, iters)))
        w_sum = float(sum(p.weights))
    U_max, g_max, tu_max = big
    m_max = max(p.max_micro_batches(k) for k in range(Kc))
    pp_max = max(p.pp(k) for k in range(Kc))
    bits_term = m_max * U_max * (2 + pp_max) if Kc > 1 else 0.0
    eps = w_sum * (INTEGRALITY_TOL * (bits_term + (m_max + pp_max) * tu_max + g_max)
                   + FEASIBILITY_TOL_S * (m_max + 3))
    return api, eps, bits, n, r


def _class_rows(api, p: MultiClassProblem, k: int, cuts):
    """Class k's variables n, r (per stage), its micro-batch count's expression and bits, with
    C1-C4 (layers, dense prefix, chunks, recompute, relaxed memory and its cuts, count);
    `cuts`: (index, (class, stage, n0, r0)) of this class."""
    c, pp, v, L = p.coeffs[0][k], p.pp(k), p.virtual_stages, p.layers
    R = L if p.allow_full_recompute else 0
    n = [api.int_var(1, L, f"n_k{k}_s{s}") for s in range(pp)]
    r = [api.int_var(0, R, f"r_k{k}_s{s}") for s in range(pp)]
    api.add(sum(n) == L, f"C1_layers_k{k}")
    if first_stage_min_layers(c) > v - p.slot_offsets(k)[0]:  # stage 0's first chunk holds the dense prefix
        api.add(n[0] >= first_stage_min_layers(c), f"C1_dense_prefix_k{k}")
    if v > 1:  # whole chunks of v slots per stage, the embedding / loss taking one each
        off = p.slot_offsets(k)
        for s in range(pp):
            chunks = api.int_var(1, p.slots // v, f"chunks_k{k}_s{s}")
            api.add(n[s] == v * chunks - off[s], f"C1_chunks_k{k}_s{s}")
    # relaxed (cuts decide): the short chunk's correction lowers stage 0's memory at most by
    # quantize.slot_relief_bytes
    b = ((c.stage_mem_bytes - slot_relief_bytes(c)) / MEM_UNIT_BYTES).tolist()
    w = ((c.layer_state_bytes + c.layer_act_bytes) / MEM_UNIT_BYTES).tolist()
    h = ((c.layer_act_bytes - c.layer_ckpt_bytes) / MEM_UNIT_BYTES).tolist()
    cap = (c.capacity_bytes / MEM_UNIT_BYTES + MEM_MARGIN_MIB).tolist()  # relaxed: cuts decide
    for s in range(pp):
        api.add(r[s] <= n[s], f"C2_recompute_k{k}_s{s}")
        api.add(b[s] + w[s] * n[s] - h[s] * r[s] <= cap[s], f"C3_mem_k{k}_s{s}")
    for i, (_, s, n0, r0) in cuts:
        _exclude(api, c, s, n[s], r[s], n0, r0, L, R, f"C3x_mem_k{k}_s{s}_{i}")
    if p.recompute_value is not None:  # r_ks = the pattern's count for n_ks, one binary per count
        counts, grid = p.recompute_counts(k, p.recompute_value)
        for s in range(pp):
            z = [api.int_var(0, 1, f"z_k{k}_s{s}_n{int(x)}") for x in grid[s]]
            api.add(sum(z) == 1, f"C2_pattern_one_k{k}_s{s}")
            api.add(n[s] == sum(int(x) * zj for x, zj in zip(grid[s], z)), f"C2_pattern_n_k{k}_s{s}")
            api.add(r[s] == sum(int(y) * zj for y, zj in zip(counts[s], z)),
                    f"C2_pattern_r_k{k}_s{s}")
    lo, st = p.min_micro_batches(k), p.micro_batch_step(k)
    span = (p.max_micro_batches(k) - lo) // st
    J = span.bit_length() if p.classes > 1 else 0
    bits = [api.int_var(0, 1, f"beta_k{k}_j{j}") for j in range(J)]
    m_expr = lo + st * sum(2**j * bits[j] for j in range(J))
    if J:
        api.add(m_expr <= p.max_micro_batches(k), f"C4_count_k{k}")
    return n, r, m_expr, bits


def _scenario_rows(api, p: MultiClassProblem, si: int, cs, n, r, bits, big: list[float]):
    """Scenario si's iteration time Z + D with C6-C9 (pace, sync, pipeline, the product of the
    count's bits and T_max); `big` [U, g, t + u] raised to this scenario's largest."""
    L, v = p.layers, p.virtual_stages
    R = L if p.allow_full_recompute else 0
    Z = api.real_var(f"Z_sc{si}")
    D = api.real_var(f"D_sc{si}")
    for k, c in enumerate(cs):
        a, t, u = c.stage_time_s.tolist(), c.layer_time_s.tolist(), c.recompute_time_s.tolist()
        e, g = c.stage_sync_time_s.tolist(), c.layer_sync_time_s.tolist()
        T = [a[s] + t[s] * n[k][s] + u[s] * r[k][s] for s in range(c.pp)]
        U = float((np.abs(c.stage_time_s) + L * np.abs(c.layer_time_s)
                   + R * np.abs(c.recompute_time_s)).max())
        big[0], big[1] = max(big[0], U), max(big[1], float(np.abs(c.layer_sync_time_s).max()))
        big[2] = max(big[2], float((np.abs(c.layer_time_s) + np.abs(c.recompute_time_s)).max()))
        T_max = api.real_var(f"T_sc{si}_k{k}")
        for s in range(c.pp):
            api.add(T_max >= T[s], f"C6_pace_sc{si}_k{k}_s{s}")
            api.add(D >= e[s] + g[s] * n[k][s], f"C7_sync_sc{si}_k{k}_s{s}")
        if c.layer_drain_saving_s.size:  # a zero-bubble schedule (C6z)
            w = [float(x) * n[k][s] for s, x in enumerate(c.layer_drain_saving_s.tolist())]
            big[2] = max(big[2], float((np.abs(c.layer_time_s) + np.abs(c.recompute_time_s)
                                        + 2 * c.layer_drain_saving_s).max()))
            pace = api.real_var(f"P_sc{si}_k{k}")
            for s in range(c.pp):
                api.add(pace >= _count_times(api, p, k, T[s], U, bits[k], f"sc{si}_k{k}_s{s}", "z")
                        + w[s] * (1 / v), f"C6z_pace_sc{si}_k{k}_s{s}")
            api.add(Z >= pace + (sum(T) - sum(w)) * (1 / v), f"C8_pipeline_sc{si}_k{k}")
            continue
        api.add(Z >= _count_times(api, p, k, T_max, U, bits[k], f"sc{si}_k{k}", "") + sum(T) * (1 / v),
                f"C8_pipeline_sc{si}_k{k}")
    return Z + D


def _count_times(api, p: MultiClassProblem, k: int, T, U: float, bits, where: str, z: str):
    """(m_k - 1/v) T of class k's rows C8 (T its T_max) and C6z (a stage's T_s, under a
    zero-bubble schedule): linear for a lone class (m fixed by the batch); of several,
    m_k = lo_k + st_k sum_j 2^j beta_kj and each bit's product with T a y_kj >= T - U (1 - beta_kj),
    y >= 0 (C9 for T_max; C9z, z = "z", for T_s; `where` names the scenario, class and stage): at
    an optimum y = beta T, and any larger y only lengthens the row."""
    v = p.virtual_stages
    if p.classes == 1:
        return (p.total_micro_batches // p.replicas[0] - 1 / v) * T
    ys = []
    for j, beta in enumerate(bits):
        y = api.real_var(f"y{z}_{where}_j{j}", lb=0.0)
        api.add(y >= T - U * (1 - beta), f"C9{z}_product_{where}_j{j}")
        ys.append(2**j * p.micro_batch_step(k) * y)
    return (p.min_micro_batches(k) - 1 / v) * T + sum(ys)


def _exclude(api, c, s: int, n_var, r_var, n0: int, r0: int, L: int, R: int, name: str) -> None:
    """Exclude stage s's split (n0, r0), which does not fit, and every split it implies does not:
    the peak grows with n (w >= 0) and falls with r where a recomputed layer frees memory
    (h >= 0; grows otherwise), so n_s <= n0 - 1 or r_s on the other side of r0 (one binary y)."""
    frees = c.layer_act_bytes[s] - c.layer_ckpt_bytes[s] >= 0
    if c.layer_state_bytes[s] + c.layer_act_bytes[s] < 0:
        raise SolverError(f"stage {s}: a layer's memory is negative; the MILP's memory cuts need it >= 0")
    y = api.int_var(0, 1, f"y_{name}")
    api.add(n_var <= n0 - 1 + L * y, f"{name}_n")
    if frees:
        api.add(r_var >= (r0 + 1) * y, f"{name}_r")
    else:
        api.add(r_var <= r0 - 1 + (R + 1) * (1 - y), f"{name}_r")
