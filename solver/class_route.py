"""A homogeneous instance planned by the class planner, as a one-group mixed cluster (issue 12).

The one-group class space is the homogeneous space, and gives the optimum and plan the
homogeneous planner gave (tests/goldens: the bundled instances' optima and plans frozen from
it), so `paraplan plan` (and --top, --sensitivity, verify, report, sweep, bench and the API)
plans a homogeneous instance through solver/search.py: dense and mixture-of-experts
models alike (the class space has ep > 1 and prices a dense prefix as dense layers), on any
number of threads (`--threads` N solves N configurations at once, search). The
homogeneous planner it replaced is deleted; this module turns the class result back into the
homogeneous result record (`PlanResult`).

Timing against the homogeneous planner just before its deletion (main at f316bf7; `paraplan
plan`, a fresh process per run, alternating, fastest of 3 to 9 runs, solve seconds): the 11
dense instances 0.94-1.03x (they already took this route there), Mixtral 8x7B 2.48 -> 2.66,
Qwen3 235B 6.55 -> 6.44, DeepSeek-shaped on 2,048 H800 5.64 -> 5.79, on 1,152 GB200
2.17 -> 2.50; the same optimum on every one. Nearly all of it is pricing (cost/coefficients.build,
13.0 of 14.6 s profiled on the 2,048-GPU instance), the same builds on both routes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields

from paraplan.cost.errors import InstanceError
from paraplan.cost.groups_loader import as_flat_plan, as_one_group
from paraplan.cost.space_rules import several_classes
from paraplan.cost.simulate import Breakdown
from paraplan.cost.specs import Instance, Plan
from paraplan.cost.trust import objective_factor_of
from paraplan.solver import partition_plans
from paraplan.solver.search import search
from paraplan.solver.space import dualpipe_job, one_group_outers
from paraplan.solver.planner import (FEASIBLE, INFEASIBLE, OPTIMAL, PlanResult, SearchAccount, check_resimulation,
                                     coefficient_table, dualpipe_infeasible_reason, infeasible_reason)


def plan(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> PlanResult:
    """The optimal plan of a homogeneous instance over its declared space, by the class planner:
    backend "dp" solves each configuration that can still win by the exact split DP with the
    incumbent as cutoff (search._lone_dp: one class on one network), "cpsat" and "milp"
    by the multi-class formulations."""
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)) or threads < 1:
        raise ValueError(f"time_limit_s must be finite and > 0 and threads >= 1, got {time_limit_s}, {threads}")
    if several_classes(inst.search):  # the result record holds one class on every GPU
        key = "classes_per_group" if inst.search.classes_per_group > 1 else "idle_gpus"
        raise InstanceError(inst.source, f"search.{key}", "plans of several replica classes or with"
                            " idle GPUs are group-format plans, which this one-class result cannot hold",
                            "plan it as its one group: api.search(as_one_group(inst))"
                            " (what `paraplan plan` does)")
    het = search(as_one_group(inst), backend, time_limit_s, progress=progress, threads=threads,
                 resimulate=False)  # re-simulated once, below, by the simulator `plan` shows
    p = None if het.plan is None else as_flat_plan(het.plan)
    outers, plans = het.outer_configs, het.plans_total
    if partition_plans.enabled(inst):  # a homogeneous plan counts (outer, layer plan) pairs
        outers = sum(partition_plans.plans_per_outer(inst, o) for o in one_group_outers(inst))
    account = {f.name: getattr(het, f.name) for f in fields(SearchAccount)}
    res = PlanResult(**{**account, "outer_configs": outers}, plan=p, iter_time_s=het.objective_s,
                     space_size=plans, objective=inst.search.objective, quantile_s=het.quantile_s)
    if het.status == INFEASIBLE:  # the homogeneous planner's reason: the smallest memory need
        deadline = time.perf_counter() + max(time_limit_s - het.solve_time_s, 1.0)
        res.reason = (dualpipe_infeasible_reason(inst) if dualpipe_job(inst)
                      else infeasible_reason(inst, coefficient_table(inst, deadline)))
    elif het.status == FEASIBLE and not res.reason:
        res.reason = "time limit reached: not every configuration was solved or pruned"
    if p is not None:
        # re-simulated once, by the homogeneous simulator, against the plan's time: the
        # minimised value over its configuration's quantile factor (search.quantile_s), the
        # tolerance scaled alike; the time reported is the simulator's
        factor = het.quantile_s / het.objective_s
        res.breakdown = check_resimulation(inst, p, het.objective_s, het.tolerance_s / factor)
        if factor != 1.0:
            res.iter_time_s = res.breakdown.iter_time_s
    return res


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
    outer_configs: int  # of the declared space
    solve_time_s: float


def top(inst: Instance, k: int, within_pct: float | None = None, backend: str = "cpsat",
        time_limit_s: float = 60.0) -> TopK:
    """The best `k` plans with distinct outer configurations (`paraplan plan --top K [--within
    PCT]`), each its configuration's optimum, so that a user can trade a little time for a
    simpler configuration: the planner's own branch and bound with K winners (search.Winners:
    it prunes against the K-th best instead of the best), so the first is the planner's
    optimum. With `within_pct`, only plans at most that much slower than the best. The list
    equals a brute-force ranking of every configuration's best split on small instances
    (tests/cli/test_new_commands.py). Per-operator tensor partitions are not offered: a
    configuration's layer plans are pruned against the optimum (solver/class_partitions.py),
    which would hide near-optimal layer plans of it."""
    if k < 1:
        raise InstanceError("<arguments>", "--top", f"must be >= 1, got {k}", "ask for e.g. --top 5")
    if within_pct is not None and not within_pct >= 0:
        raise InstanceError("<arguments>", "--within", f"must be >= 0, got {within_pct}",
                            "give a percentage, e.g. --within 5")
    if partition_plans.enabled(inst):
        raise InstanceError(inst.source, "search.tensor_partitions",
                            "--top is not offered with per-operator partitions",
                            "remove spatial_temporal (e.g. --search tensor_partitions=megatron)")
    group = as_one_group(inst)
    het = search(group, backend, time_limit_s, resimulate=False, winners=k, within_pct=within_pct)
    ranked = []
    for val, p in het.ranked:  # each re-simulated once, by the simulator whose breakdown is shown
        flat, factor = as_flat_plan(p), objective_factor_of(group, p)  # val: at search.objective
        bd = check_resimulation(inst, flat, val / factor, het.tolerance_s / factor)
        ranked.append(Ranked(flat, bd.iter_time_s if factor != 1.0 else val, bd, val))
    status = OPTIMAL if het.status in (OPTIMAL, INFEASIBLE) else FEASIBLE
    return TopK(status, tuple(ranked), het.solved, het.outer_configs, het.solve_time_s)
