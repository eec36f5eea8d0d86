"""The best K plans with distinct outer configurations (`paraplan plan --top K [--within PCT]`).

Each listed plan is the optimum of its own outer configuration (degrees, micro-batching,
modes), so a user can trade a little time for a simpler configuration. How they are obtained,
exactly, by the planner's own branch and bound generalised from 1 to K winners:

1. Every outer configuration c of the declared space (the class space of the instance as a
   one-group cluster, solver/hetero_space.py, which is the homogeneous space) has a valid lower
   bound L(c) on its best time (solver/bounds/batched.py) and, when an even or balanced split
   fits, an incumbent U(c) >= its best time (solver/hetero_planner.incumbent).
2. tau = the K-th smallest value among {U(c)} and the optima solved so far is an upper bound on
   the K-th best optimum: K distinct configurations are known to reach it. With --within PCT,
   u = min U(c) >= the optimum t*, and a configuration whose optimum exceeds t* (1 + PCT/100)
   is not listed, so it may be skipped when L(c) > u (1 + PCT/100).
3. Configurations are visited in ascending (L, enumeration index) order and solved exactly by
   the planner's inner solver for the backend (the split DP, CP-SAT or the MILP,
   solver/hetero_planner._solve_inner, with no cutoff); the visit stops at the first c with
   L(c) > tau or, with --within, L(c) > u (1 + PCT/100): every later one is at least as
   high, so none can enter.
4. The K best solved optima are the answer (ties: the smaller (L, index) key, as in the
   planner), each re-simulated by cost/simulate.py.

The first entry is the planner's optimum (tested), and the list equals a brute-force ranking of
every configuration's best split on small instances (tests/cli/test_new_commands.py). Per-operator
tensor partitions are not offered here: their candidates are pruned against the optimum
(solver/class_partitions.py), which would hide near-optimal layer plans.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from paraplan.cost.errors import InstanceError
from paraplan.cost.hetero_loader import hetero_plan_as_homogeneous, homogeneous_as_hetero
from paraplan.cost.simulate import Breakdown
from paraplan.cost.trust import objective_factor_of
from paraplan.cost.specs import Instance, Plan
from paraplan.solver import partition_plans
from paraplan.solver.bounds.batched import lower_bounds_s
from paraplan.solver.hetero_planner import _plan_of, _solve_inner, incumbent, problems_for
from paraplan.solver.hetero_space import hetero_outers, micro_batch_vectors
from paraplan.solver.planner import FEASIBLE, INFEASIBLE, OPTIMAL, REL_TOL, check_resimulation


@dataclass(frozen=True)
class Ranked:
    plan: Plan
    iter_time_s: float  # the plan's predicted iteration time
    breakdown: Breakdown
    quantile_s: float  # what the plans are ranked by: iter_time_s at search.objective


@dataclass(frozen=True)
class TopK:
    status: str  # optimal: the list is proved to be the K best; feasible: a time limit cut it
    plans: tuple[Ranked, ...]
    solved: int  # outer configurations solved exactly
    visited_of: int  # outer configurations left after memory pruning
    solve_time_s: float


PRICE_CHUNK = 64  # outer configurations priced between two looks at the clock


def _priced_within(het, outers, t0: float, time_limit_s: float):
    """problems_for of `outers`, in chunks, stopping at the time limit once some configuration
    is priced (the list then covers a prefix of `outers`, and whether it is all of them)."""
    problems: list = []
    for start in range(0, len(outers), PRICE_CHUNK):
        problems.extend(problems_for(het, outers[start:start + PRICE_CHUNK], "nominal"))
        if (time.perf_counter() - t0 > time_limit_s and start + PRICE_CHUNK < len(outers)
                and any(p is not None for p in problems)):
            return problems, False
    return problems, True


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
    het = homogeneous_as_hetero(inst)
    uniform = inst.search.uniform_split  # the class planner's reading of it (plan_hetero)
    outers = hetero_outers(het, uniform=uniform)
    problems, priced_all = _priced_within(het, outers, t0, time_limit_s)
    live = [(o, p, i) for i, (o, p) in enumerate(zip(outers, problems)) if p is not None]

    def mvecs(j: int):
        o, p, _ = live[j]
        return micro_batch_vectors(o.classes, p.total_micro_batches, uniform, o.virtual_stages, p.paired)

    lbs = lower_bounds_s([p for _, p, _ in live], mvecs, uniform)
    incs = [incumbent(p, mvecs(j), uniform) for j, (_, p, _) in enumerate(live)]
    uppers = [inc[0] for inc in incs if inc is not None]
    order = sorted(range(len(live)), key=lambda j: (lbs[j], live[j][2]))
    cutoff = float("inf")
    if within_pct is not None and uppers:
        cutoff = min(uppers) * (1 + within_pct / 100)
    # tau: K-th smallest of the incumbents (an upper bound on the K-th best optimum)
    tau_inc = heapq.nsmallest(k, uppers)[-1] if len(uppers) >= k else float("inf")
    found: list[tuple[float, tuple, Plan, float]] = []  # value, key, plan, its objective factor
    status, solved = (OPTIMAL if priced_all else FEASIBLE), 0
    for j in order:
        o, p, i = live[j]
        key = (lbs[j], i)
        tau = tau_inc if len(found) < k else min(tau_inc, sorted(f[0] for f in found)[k - 1])
        if key[0] > tau * (1 + REL_TOL) or key[0] > cutoff * (1 + REL_TOL):
            break
        remaining = time_limit_s - (time.perf_counter() - t0)
        if remaining <= 0:
            status = FEASIBLE
            break
        inc = incs[j]
        if uniform:  # split and batch fixed: the incumbent is this configuration's optimum
            res = None if inc is None else (inc[0], inc[1], inc[2], inc[3])
        else:
            hint = None if inc is None else (inc[1], [x.astype(int).tolist() for x in inc[2]],
                                             [x.astype(int).tolist() for x in inc[3]])
            sr = _solve_inner(p, backend, remaining, hint)
            if sr.status not in (OPTIMAL, INFEASIBLE):
                status = FEASIBLE
            res = None if sr.layers_per_stage is None else (
                sr.objective_s, sr.micro_batches, sr.layers_per_stage, sr.full_recompute_layers)
        solved += 1
        if res is not None:
            found.append((res[0], key, hetero_plan_as_homogeneous(_plan_of(o, *res[1:])),
                          objective_factor_of(het, o)))
    found.sort(key=lambda f: (f[0], f[1]))
    best = found[0][0] if found else None
    chosen = [f for f in found if best is not None and f[0] <= best * (1 + (within_pct or 0) / 100)
              * (1 + REL_TOL)] if within_pct is not None else found
    ranked = [Ranked(plan, val / f, check_resimulation(inst, plan, val / f, 0.0), val)
              for val, _, plan, f in chosen[:k]]
    return TopK(status, tuple(ranked), solved, len(live), time.perf_counter() - t0)
