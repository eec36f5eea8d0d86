"""Exact planner: decomposition over outer configurations with provably safe pruning.

1. Enumerate the declared space's outer configurations (solver/space.py) and build each one's
   per-stage coefficients (cost/coefficients.py).
2. Drop the configurations proved infeasible by memory (solver/bounds.py), compute a valid
   lower bound for the rest, and an incumbent from the even split with minimal recompute.
3. Visit configurations in ascending bound order (ties: the space's enumeration order). A
   configuration whose bound is above the incumbent (or equal to it, with a later key) is
   pruned: its best plan cannot win. Otherwise its inner problem (layer split + per-stage
   recompute counts) is solved to optimality by CP-SAT or MILP (formulations/), single-threaded
   and seeded; `threads` > 1 solves that many configurations at once, which changes the time
   to the answer but not the answer.
4. When every configuration is solved or pruned, the incumbent is optimal over the space.
   With a time limit, the best bound is min(incumbent, bounds of the unresolved ones).

The returned plan is re-simulated by cost/simulate.py; a mismatch with the objective beyond the
quantisation tolerance raises `ResimulationMismatch`: it would be a bug, never a user error.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from cost.coefficients import StageCoefficients, build
from cost.simulate import Breakdown, simulate
from cost.specs import Instance, Outer, Plan
from cost.units import bytes_to_gib
from solver import bounds, partition_plans
from solver.progress import search_status
from solver.space import outer_configs, summarize

OPTIMAL, FEASIBLE, INFEASIBLE, TIMEOUT = "optimal", "feasible", "infeasible", "timeout"
# Relative tolerance under which two iteration times count as equal (ties, pruning, checks).
REL_TOL = 1e-9


class ResimulationMismatch(AssertionError):
    """The solver's objective and the simulator disagree: a bug in cost/ or formulations/."""


@dataclass
class PlanResult:
    status: str
    plan: Plan | None
    iter_time_s: float | None
    bound_s: float | None
    solve_time_s: float
    backend: str
    outer_configs: int
    space_size: int
    solved: int = 0
    pruned_by_bound: int = 0
    pruned_by_memory: int = 0
    pruned_by_dominance: int = 0  # (outer, layer plan) pairs dominated by a candidate pair
    inner_infeasible: int = 0
    unresolved: int = 0
    tolerance_s: float = 0.0
    reason: str = ""
    breakdown: Breakdown | None = None
    log: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float | None:
        if self.iter_time_s is None or self.bound_s is None:
            return None
        return max(0.0, (self.iter_time_s - self.bound_s) / self.iter_time_s)


def _inner_solver(backend: str):
    if backend == "cpsat":
        from formulations.cpsat import solve_split_cpsat
        return solve_split_cpsat
    if backend == "milp":
        from formulations.milp import solve_split_milp
        return solve_split_milp
    raise ValueError(f"unknown backend {backend!r}: use cpsat or milp")


def coefficient_table(inst: Instance) -> list[StageCoefficients]:
    reserve = inst.search.memory_reserve_bytes
    if partition_plans.enabled(inst):  # one entry per (outer, non-dominated layer plan)
        return partition_plans.partition_coefficients(inst, outer_configs(inst), reserve)
    return [build(inst, o, reserve_bytes=reserve) for o in outer_configs(inst)]


def infeasible_reason(inst: Instance, coeffs: list[StageCoefficients]) -> str:
    if not coeffs:
        return ("the declared space is empty: no tp*pp*dp*cp factorisation of "
                f"{inst.cluster.num_gpus} GPUs satisfies the search constraints and divides the"
                f" global batch {inst.job.global_batch}")
    best = min(coeffs, key=bounds.min_peak_mem_bytes)
    o = best.outer
    need = bounds.min_peak_mem_bytes(best)
    return (f"no plan fits memory: the smallest peak need found is {bytes_to_gib(need):.1f} GiB per GPU"
            f" (tp={o.tp}, pp={o.pp}, cp={o.cp}, dp={o.dp}, micro_batch={o.micro_batch}, zero={o.zero},"
            f" every layer fully recomputed); {inst.cluster.gpu.name} has"
            f" {bytes_to_gib(best.capacity_bytes[0]):.1f} GiB usable")


def plan(inst: Instance, backend: str = "cpsat", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> PlanResult:
    t0 = time.perf_counter()
    solve_inner = _inner_solver(backend)
    allow_rc = inst.search.full_recompute
    coeffs = coefficient_table(inst)
    if partition_plans.enabled(inst):  # the space: every outer x every per-operator layer plan
        summary = summarize(inst, [o for o in outer_configs(inst)
                                   for _ in range(partition_plans.plans_per_outer(inst, o))])
    else:
        summary = summarize(inst, [c.outer for c in coeffs])
    res = PlanResult(status=TIMEOUT, plan=None, iter_time_s=None, bound_s=None, solve_time_s=0.0,
                     backend=backend, outer_configs=summary.outer_configs,
                     space_size=summary.splits_total)

    # A candidate's key is (lower bound, enumeration index). Tie rule (documented in the README):
    # among plans whose times agree within REL_TOL, the one whose outer configuration has the
    # smallest key wins. Every candidate that could still win under this rule is solved, so the
    # answer does not depend on the order solves finish in, nor on --threads.
    live: list[tuple[tuple[float, int], StageCoefficients]] = []
    best_val, best_key, best = float("inf"), (float("inf"), 0), None

    def better(val: float, key) -> bool:
        if val < best_val * (1 - REL_TOL):
            return True
        return val <= best_val * (1 + REL_TOL) and key < best_key

    for i, c in enumerate(coeffs):
        if bounds.memory_infeasible(c):
            res.pruned_by_memory += 1
            continue
        key = (bounds.lower_bound_s(c), i)
        live.append((key, c))
        inc = bounds.incumbent(c, allow_rc)
        if inc is not None and better(inc[0], key):
            best_val, best_key, best = inc[0], key, (c, inc[1], inc[2])
    live.sort(key=lambda x: x[0])
    # candidates the tensor-partition pre-pass settled (solver/partition_plans.py)
    res.pruned_by_bound += getattr(coeffs, "pruned_by_bound", 0)
    res.pruned_by_memory += getattr(coeffs, "pruned_by_memory", 0)
    res.pruned_by_dominance = getattr(coeffs, "pruned_by_dominance", 0)
    res.log.append(f"{len(coeffs)} outer configs, {res.pruned_by_memory} infeasible by memory,"
                   f" incumbent {best_val:.6g} s from even splits")

    def solve(c: StageCoefficients, remaining_s: float):
        if inst.search.uniform_split:
            inc = bounds.incumbent(c, allow_rc)  # exact for a fixed split (monotone in r)
            return (OPTIMAL, inc[0], inc[0], inc[1], inc[2], 0.0) if inc else (INFEASIBLE, None, None, None, None, 0.0)
        sr = solve_inner(c, allow_full_recompute=allow_rc, time_limit_s=remaining_s, threads=1)
        n = None if sr.layers_per_stage is None else np.array(sr.layers_per_stage, float)
        r = None if sr.full_recompute_layers is None else np.array(sr.full_recompute_layers, float)
        # an "optimal" inner result is optimal up to its quantisation: objective - bound
        tol = sr.gap_s if sr.status == OPTIMAL and sr.gap_s is not None else 0.0
        return sr.status, sr.objective_s, sr.bound_s, n, r, max(0.0, tol)

    def can_win(key) -> bool:
        lb = key[0]
        return lb < best_val * (1 - REL_TOL) or (lb <= best_val * (1 + REL_TOL) and key < best_key)

    open_bounds: list[float] = []
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    k = 0
    try:
        while k < len(live):
            if progress:
                progress(search_status(k, len(live), res, best_val, [live[k][0][0], *open_bounds]))
            if not can_win(live[k][0]):
                res.pruned_by_bound += len(live) - k  # sorted by bound: none after can win either
                break
            remaining = time_limit_s - (time.perf_counter() - t0)
            if remaining <= 0:
                open_bounds.extend(key[0] for key, _ in live[k:])
                res.unresolved += len(live) - k
                break
            batch = [live[k]]
            while pool and len(batch) < threads and k + len(batch) < len(live) \
                    and can_win(live[k + len(batch)][0]):
                batch.append(live[k + len(batch)])
            k += len(batch)
            if pool:
                outcomes = list(pool.map(lambda kc: solve(kc[1], remaining), batch))
            else:
                outcomes = [solve(batch[0][1], remaining)]
            for (key, c), (status, val, sub_bound, n, r, tol) in zip(batch, outcomes):
                res.solved += 1
                res.tolerance_s = max(res.tolerance_s, tol)
                if status == INFEASIBLE:
                    res.inner_infeasible += 1
                    continue
                if status != OPTIMAL:
                    res.unresolved += 1
                    open_bounds.append(sub_bound if sub_bound is not None else key[0])
                if val is not None and better(val, key):
                    best_val, best_key, best = val, key, (c, n, r)
                    if progress:
                        progress(f"incumbent {best_val:.6g} s after {res.solved} inner solves")
    finally:
        if pool:
            pool.shutdown()

    res.solve_time_s = time.perf_counter() - t0
    if best is None:
        if res.unresolved:
            res.status = TIMEOUT
            res.bound_s = min(open_bounds) if open_bounds else None
            res.reason = "time limit reached before any plan was found"
        else:
            res.status = INFEASIBLE
            res.reason = infeasible_reason(inst, coeffs)
        return res

    c, n, r = best
    res.plan = Plan.of(c.outer, n, r, c.partitions)
    res.iter_time_s = best_val
    res.bound_s = min([best_val] + open_bounds)
    res.status = OPTIMAL if res.unresolved == 0 else FEASIBLE
    res.breakdown = check_resimulation(inst, res.plan, best_val, res.tolerance_s, c)
    return res


def check_resimulation(inst: Instance, p: Plan, objective_s: float, tolerance_s: float,
                       coeffs: StageCoefficients | None = None) -> Breakdown:
    bd = simulate(inst, p, reserve_bytes=inst.search.memory_reserve_bytes)
    tol = tolerance_s + REL_TOL * max(1.0, objective_s)
    if abs(bd.iter_time_s - objective_s) > tol:
        raise ResimulationMismatch(
            f"plan re-simulates to {bd.iter_time_s!r} s but the solver's objective is"
            f" {objective_s!r} s (tolerance {tol:.3g} s)")
    if not bd.fits:
        raise ResimulationMismatch("the solver's plan does not fit memory when re-simulated")
    return bd
