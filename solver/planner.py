"""Exact planner: decomposition over outer configurations with provably safe pruning.

1. Enumerate the declared space's outer configurations (solver/space.py) and build each one's
   per-stage coefficients (cost/coefficients.py).
2. Drop the configurations proved infeasible by memory and give the rest the memory-free
   lower bound (solver/bounds.py). In bound order, while a configuration can still win, its
   even split with minimal recompute is an incumbent.
3. Visit configurations in ascending bound order (ties: the space's enumeration order). A
   configuration whose bound is above the incumbent (or equal to it, with a later key) is
   pruned: its best plan cannot win. Otherwise its tight bound (memory and forced recompute)
   is tried, and if that cannot prune it either, its inner problem (layer split + per-stage
   recompute counts) is solved to optimality: by default by the exact dynamic programme of
   formulations/split_dp.py, given the incumbent as a cutoff (it may prove that nothing beats
   it, which also prunes), or by CP-SAT or MILP (formulations/), all single-threaded;
   `threads` > 1 solves that many configurations at once, which changes the time to the
   answer but not the answer.
4. When every configuration is solved or pruned, the incumbent is optimal over the space.
   With a time limit, the bound is min(incumbent, the best proven bound of every unresolved
   configuration), never below the planner's own bounds and never negative; none when the
   limit stopped the pricing of some configuration (step 1).

The time limit is wall-clock for the whole call, steps 1-2 included. Complete coefficient
tables are cached per instance (TABLE_CACHE_SIZE), so `verify` and repeated plans of one
instance price it once.

The returned plan is re-simulated by cost/simulate.py; a mismatch with the objective beyond the
quantisation tolerance raises `ResimulationMismatch`: it would be a bug, never a user error.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from paraplan.cost.coefficients import Placement, StageCoefficients, build, homogeneous_placement
from paraplan.cost.simulate import Breakdown, simulate
from paraplan.cost.specs import Instance, Outer, Plan
from paraplan.cost.units import bytes_to_gib
from paraplan.solver import bounds, partition_plans
from paraplan.solver.progress import search_status
from paraplan.solver.space import outer_configs, summarize

OPTIMAL, FEASIBLE, INFEASIBLE, TIMEOUT = "optimal", "feasible", "infeasible", "timeout"
CUTOFF = "cutoff"  # an inner result: no split beats the cutoff (formulations/result.py)
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


BACKENDS = ("dp", "cpsat", "milp")


def _inner_solver(backend: str):
    if backend == "dp":
        from paraplan.formulations.split_dp import solve_split_dp
        return solve_split_dp
    if backend == "cpsat":
        from paraplan.formulations.cpsat import solve_split_cpsat
        return solve_split_cpsat
    if backend == "milp":
        from paraplan.formulations.milp import solve_split_milp
        return solve_split_milp
    raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")


# how many configurations are built or bounded between two looks at the clock
CLOCK_EVERY = 64


# the last complete tables, by instance: `verify`, `--sensitivity`'s unchanged runs and repeated
# plans of one instance price it once (StageCoefficients are frozen, and nobody writes into
# their arrays)
TABLE_CACHE_SIZE = 2
_TABLES: dict[Instance, list[StageCoefficients]] = {}


def clear_table_cache() -> None:
    _TABLES.clear()


def coefficient_table(inst: Instance, deadline: float | None = None,
                      outers: list[Outer] | None = None) -> list[StageCoefficients]:
    """Per-stage coefficients of every outer configuration (or (outer, layer plan) pair). With a
    deadline (time.perf_counter() value) the building stops there: the list is then a prefix,
    and `complete(table)` says whether it is whole. Complete tables are cached per instance."""
    if inst in _TABLES:
        return _TABLES[inst]
    table = _build_table(inst, deadline, outers)
    if complete(table):
        if len(_TABLES) >= TABLE_CACHE_SIZE:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[inst] = table
    return table


def _build_table(inst: Instance, deadline: float | None, outers: list[Outer] | None) -> list[StageCoefficients]:
    reserve = inst.search.memory_reserve_bytes
    outers = outer_configs(inst) if outers is None else outers
    if partition_plans.enabled(inst):  # one entry per (outer, non-dominated layer plan)
        return partition_plans.partition_coefficients(inst, outers, reserve, deadline=deadline)
    table = _Table()
    table.expected = len(outers)
    # configurations differing only in micro-batching, modes or ZeRO share their placement
    # (homogeneous_placement reads only the degrees, ep included, and whether the pipeline
    # wraps around)
    placements: dict[tuple, Placement] = {}
    for i, o in enumerate(outers):
        if deadline is not None and i % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            break
        where = (o.tp, o.pp, o.dp, o.cp, o.virtual_stages > 1, o.ep)
        if where not in placements:
            placements[where] = homogeneous_placement(inst.cluster, o)
        table.append(build(inst, o, reserve_bytes=reserve, placement=placements[where]))
    return table


class _Table(list):
    """coefficient_table's list, with the number of configurations it should hold."""
    expected: int | None = None


def complete(table: list[StageCoefficients]) -> bool:
    expected = getattr(table, "expected", None)
    return expected is None or len(table) == expected


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


def plan(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> PlanResult:
    """The optimal plan over the declared space (module docstring). time_limit_s bounds the wall
    time of the whole call, coefficient building included."""
    t0 = time.perf_counter()
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)) or threads < 1:
        raise ValueError(f"time_limit_s must be finite and > 0 and threads >= 1, got {time_limit_s}, {threads}")
    deadline = t0 + time_limit_s
    solve_inner = _inner_solver(backend)
    allow_rc = inst.search.full_recompute
    outers = outer_configs(inst)
    coeffs = coefficient_table(inst, deadline, outers)
    all_built = complete(coeffs)
    summary = space_summary(inst, outers)
    res = PlanResult(status=TIMEOUT, plan=None, iter_time_s=None, bound_s=None, solve_time_s=0.0,
                     backend=backend, outer_configs=summary.outer_configs,
                     space_size=summary.splits_total)

    # A candidate's key is (lower bound, enumeration index). Tie rule (documented in the README):
    # among plans whose times agree within REL_TOL, the one whose outer configuration has the
    # smallest key wins. Every candidate that could still win under this rule is solved, so the
    # answer does not depend on the order solves finish in, nor on --threads.
    live: list[tuple[tuple[float, int], StageCoefficients, tuple | None]] = []
    best_val, best_key, best = float("inf"), (float("inf"), 0), None

    def better(val: float, key) -> bool:
        if val < best_val * (1 - REL_TOL):
            return True
        return val <= best_val * (1 + REL_TOL) and key < best_key

    unbounded = 0  # configurations the limit left without a lower bound
    for i, c in enumerate(coeffs):
        if i % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            unbounded = len(coeffs) - i
            break
        if bounds.memory_infeasible(c):
            res.pruned_by_memory += 1
            continue
        live.append(((bounds.lower_bound_s(c), i), c, None))
    unbounded += getattr(coeffs, "expected", len(coeffs)) - len(coeffs)
    all_built = all_built and unbounded == 0
    live.sort(key=lambda x: x[0])

    def can_win(lb: float, key) -> bool:
        return lb < best_val * (1 - REL_TOL) or (lb <= best_val * (1 + REL_TOL) and key < best_key)

    # incumbents (even split, least recompute) in bound order, while a configuration can still
    # win: one whose bound cannot beat the incumbent has no incumbent that could either
    for idx, (key, c, _) in enumerate(live):
        if not can_win(key[0], key) or (idx % CLOCK_EVERY == 0 and time.perf_counter() > deadline):
            break
        inc = bounds.incumbent(c, allow_rc)
        live[idx] = (key, c, inc)
        if inc is not None and better(inc[0], key):
            best_val, best_key, best = inc[0], key, (c, inc[1], inc[2])
    # candidates the tensor-partition pre-pass settled (solver/partition_plans.py)
    res.pruned_by_bound += getattr(coeffs, "pruned_by_bound", 0)
    res.pruned_by_memory += getattr(coeffs, "pruned_by_memory", 0)
    res.pruned_by_dominance = getattr(coeffs, "pruned_by_dominance", 0)
    res.log.append(f"{len(coeffs)} outer configs, {res.pruned_by_memory} infeasible by memory,"
                   f" incumbent {best_val:.6g} s from even splits")

    def solve(c: StageCoefficients, key, inc, remaining_s: float):
        """(status, objective_s, bound_s, n, r, tolerance_s) of one configuration's inner problem."""
        if inst.search.uniform_split:  # exact for a fixed split (monotone in r)
            inc = bounds.incumbent(c, allow_rc)
            return (OPTIMAL, inc[0], inc[0], inc[1], inc[2], 0.0) if inc else (INFEASIBLE, None, math.inf, None, None, 0.0)
        if backend == "dp":
            # only a split that could still win matters: a cutoff lets the exact search stop early
            cutoff = best_val * (1 + REL_TOL) if key < best_key else best_val * (1 - REL_TOL)
            hint = None if inc is None else (tuple(int(x) for x in inc[1]), tuple(int(x) for x in inc[2]))
            sr = solve_inner(c, allow_full_recompute=allow_rc, time_limit_s=remaining_s, threads=1,
                             hint=hint, cutoff_s=cutoff if math.isfinite(cutoff) else None)
        elif backend == "cpsat":
            sr = solve_inner(c, allow_full_recompute=allow_rc, time_limit_s=remaining_s, threads=1,
                             max_wall_s=remaining_s)
        else:
            sr = solve_inner(c, allow_full_recompute=allow_rc, time_limit_s=remaining_s, threads=1)
        n = None if sr.layers_per_stage is None else np.array(sr.layers_per_stage, float)
        r = None if sr.full_recompute_layers is None else np.array(sr.full_recompute_layers, float)
        # an "optimal" inner result is optimal up to its quantisation: objective - bound
        tol = sr.gap_s if sr.status == OPTIMAL and sr.gap_s is not None else 0.0
        return sr.status, sr.objective_s, sr.bound_s, n, r, max(0.0, tol)

    open_bounds: list[float] = []  # a valid lower bound of every configuration left open
    pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
    k = 0
    try:
        while k < len(live):
            if progress:
                progress(search_status(k, len(live), res, best_val, [live[k][0][0], *open_bounds]))
            if not can_win(live[k][0][0], live[k][0]):
                res.pruned_by_bound += len(live) - k  # sorted by bound: none after can win either
                break
            if time.perf_counter() >= deadline:
                open_bounds.extend(key[0] for key, _, _ in live[k:])
                res.unresolved += len(live) - k
                break
            batch = []
            while k < len(live) and len(batch) < (threads if pool else 1):
                key, c, inc = live[k]
                if not can_win(key[0], key):
                    break
                k += 1
                tight = bounds.tight_lower_bound_s(c, allow_rc)  # memory and forced recompute
                if not can_win(tight, key):
                    res.pruned_by_bound += 1
                    continue
                batch.append((key, c, inc, tight))
            if not batch:
                continue
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                open_bounds.extend(tight for _, _, _, tight in batch)
                res.unresolved += len(batch)
                continue
            if pool:
                outcomes = list(pool.map(lambda b: solve(b[1], b[0], b[2], remaining), batch))
            else:
                outcomes = [solve(batch[0][1], batch[0][0], batch[0][2], remaining)]
            for (key, c, inc, tight), (status, val, sub_bound, n, r, tol) in zip(batch, outcomes):
                if status == CUTOFF:  # the exact search proved it cannot win
                    res.pruned_by_bound += 1
                    continue
                res.solved += 1
                res.tolerance_s = max(res.tolerance_s, tol)
                if status == INFEASIBLE:
                    res.inner_infeasible += 1
                    continue
                if status != OPTIMAL:
                    res.unresolved += 1
                    # the best of the bounds proved for it (an inner bound may sit below the
                    # planner's own: quantisation, or a solver stopped early)
                    open_bounds.append(max(tight, sub_bound if sub_bound is not None else tight))
                if val is not None and better(val, key):
                    best_val, best_key, best = val, key, (c, n, r)
                    if progress:
                        progress(f"incumbent {best_val:.6g} s after {res.solved} inner solves")
    finally:
        if pool:
            pool.shutdown()

    res.unresolved += unbounded
    res.solve_time_s = time.perf_counter() - t0
    # no valid bound while some configuration was never bounded (the limit stopped building)
    bound = min(open_bounds, default=math.inf) if all_built else None
    if best is None:
        if res.unresolved:
            res.status = TIMEOUT
            res.bound_s = None if bound is None or not math.isfinite(bound) else max(0.0, bound)
            res.reason = ("time limit reached before any plan was found" if all_built else
                          "time limit reached while pricing the configurations (some not priced):"
                          " no bound")
        else:
            res.status = INFEASIBLE
            res.reason = infeasible_reason(inst, coeffs)
        return res

    c, n, r = best
    res.plan = Plan.of(c.outer, n, r, c.partitions)
    res.iter_time_s = best_val
    res.bound_s = None if bound is None else max(0.0, min(best_val, bound))
    res.status = OPTIMAL if res.unresolved == 0 else FEASIBLE
    if res.status == FEASIBLE:
        res.reason = ("time limit reached: not every configuration was solved or pruned" if all_built
                      else "time limit reached while pricing the configurations (some not priced):"
                      " the bound is unknown")
    res.breakdown = check_resimulation(inst, res.plan, best_val, res.tolerance_s, c)
    return res


def space_summary(inst: Instance, outers: list[Outer]):
    """The declared space's size as the planner reports it: summarize(), and with per-operator
    partitions every outer x every per-operator layer plan (_summarize_with_plans)."""
    if partition_plans.enabled(inst):
        return _summarize_with_plans(inst, outers)
    return summarize(inst, outers)


def _summarize_with_plans(inst: Instance, outers: list[Outer]):
    """summarize() of every (outer, per-operator layer plan) pair, without listing the pairs
    (millions on large instances): each outer counts once per plan."""
    pairs, splits = 0, 0
    per_shape: dict[tuple[int, int], int] = {}  # splits depend on (pp, v) only
    for o in outers:
        k = partition_plans.plans_per_outer(inst, o)
        shape = (o.pp, o.virtual_stages)
        if shape not in per_shape:
            per_shape[shape] = summarize(inst, [o]).splits_total
        pairs += k
        splits += k * per_shape[shape]
    return type(summarize(inst, []))(outer_configs=pairs, splits_total=splits)


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
