"""The best K plans with distinct outer configurations (`paraplan plan --top K [--within PCT]`).

Each listed plan is the optimum of its own outer configuration (degrees, micro-batching,
modes), so a user can trade a little time for a simpler configuration. How they are obtained,
exactly, by the planner's own branch and bound generalised from 1 to K winners:

1. Every outer configuration c of the declared space has a valid lower bound L(c) on its best
   time and, when its even split fits, an incumbent U(c) >= its best time (solver/bounds.py).
2. tau = the K-th smallest value among {U(c)} and the optima solved so far is an upper bound on
   the K-th best optimum: K distinct configurations are known to reach it. With --within PCT,
   u = min U(c) >= the optimum t*, and a configuration whose optimum exceeds t* (1 + PCT/100)
   is not listed, so it may be skipped when L(c) > u (1 + PCT/100).
3. Configurations are visited in ascending (L, enumeration index) order and solved exactly
   (CP-SAT or MILP, formulations/); the visit stops at the first c with L(c) > tau or, with
   --within, L(c) > u (1 + PCT/100): every later one is at least as high, so none can enter.
4. The K best solved optima are the answer (ties: the smaller (L, index) key, as in the
   planner), each re-simulated by cost/simulate.py.

The first entry is the planner's optimum (tested), and the list equals a brute-force ranking of
every configuration's best split on small instances (tests/cli/test_top_k.py). Per-operator
tensor partitions are not offered here: their candidate table is pruned against the optimum
(solver/partition_plans.py), which would hide near-optimal layer plans.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from paraplan.cost.errors import InstanceError
from paraplan.cost.simulate import Breakdown
from paraplan.cost.specs import Instance, Plan
from paraplan.solver import bounds, partition_plans
from paraplan.solver.planner import FEASIBLE, OPTIMAL, REL_TOL, check_resimulation, coefficient_table


@dataclass(frozen=True)
class Ranked:
    plan: Plan
    iter_time_s: float
    breakdown: Breakdown


@dataclass(frozen=True)
class TopK:
    status: str  # optimal: the list is proved to be the K best; feasible: a time limit cut it
    plans: tuple[Ranked, ...]
    solved: int  # outer configurations solved exactly
    visited_of: int  # outer configurations left after memory pruning
    solve_time_s: float


def _solver(backend: str):
    if backend == "dp":
        from paraplan.formulations.split_dp import solve_split_dp
        return solve_split_dp
    if backend == "cpsat":
        from paraplan.formulations.cpsat import solve_split_cpsat
        return solve_split_cpsat
    from paraplan.formulations.milp import solve_split_milp
    return solve_split_milp


def top_k(inst: Instance, k: int, within_pct: float | None = None, backend: str = "cpsat",
          time_limit_s: float = 60.0) -> TopK:
    if k < 1:
        raise InstanceError("<arguments>", "--top", f"must be >= 1, got {k}", "ask for e.g. --top 5")
    if within_pct is not None and not within_pct >= 0:
        raise InstanceError("<arguments>", "--within", f"must be >= 0, got {within_pct}",
                            "give a percentage, e.g. --within 5")
    if partition_plans.enabled(inst):
        raise InstanceError(inst.source, "search.tensor_partitions",
                            "--top is not offered with per-operator partitions",
                            "remove spatial_temporal (e.g. --search tensor_partitions=megatron)")
    t0 = time.perf_counter()
    allow_rc = inst.search.full_recompute
    solve = _solver(backend)
    live, uppers = [], []
    for i, c in enumerate(coefficient_table(inst)):
        if bounds.memory_infeasible(c):
            continue
        live.append(((bounds.lower_bound_s(c), i), c))
        inc = bounds.incumbent(c, allow_rc)
        if inc is not None:
            uppers.append(inc[0])
    live.sort(key=lambda x: x[0])
    cutoff = float("inf")
    if within_pct is not None and uppers:
        cutoff = min(uppers) * (1 + within_pct / 100)
    # tau: K-th smallest of the incumbents (an upper bound on the K-th best optimum)
    tau_inc = heapq.nsmallest(k, uppers)[-1] if len(uppers) >= k else float("inf")
    found: list[tuple[float, tuple, object, np.ndarray, np.ndarray]] = []  # value, key, c, n, r
    status, solved = OPTIMAL, 0
    for key, c in live:
        tau = tau_inc if len(found) < k else min(tau_inc, sorted(f[0] for f in found)[k - 1])
        if key[0] > tau * (1 + REL_TOL) or key[0] > cutoff * (1 + REL_TOL):
            break
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            status = FEASIBLE
            break
        if inst.search.uniform_split:
            inc = bounds.incumbent(c, allow_rc)  # exact for a fixed split
            res = None if inc is None else (inc[0], inc[1], inc[2])
        else:
            sr = solve(c, allow_full_recompute=allow_rc, time_limit_s=remaining, threads=1)
            if sr.status not in (OPTIMAL, "infeasible"):
                status = FEASIBLE
            res = None if sr.layers_per_stage is None else (
                sr.objective_s, np.array(sr.layers_per_stage, float), np.array(sr.full_recompute_layers, float))
        solved += 1
        if res is not None:
            found.append((res[0], key, c, res[1], res[2]))
    found.sort(key=lambda f: (f[0], f[1]))
    best = found[0][0] if found else None
    chosen = [f for f in found if best is not None and f[0] <= best * (1 + (within_pct or 0) / 100)
              * (1 + REL_TOL)] if within_pct is not None else found
    ranked = []
    for val, _, c, n, r in chosen[:k]:
        p = Plan.of(c.outer, n, r, c.partitions)
        ranked.append(Ranked(p, val, check_resimulation(inst, p, val, 0.0, c)))
    return TopK(status, tuple(ranked), solved, len(live), time.perf_counter() - t0)
