"""A homogeneous instance planned by the class planner, as a one-group mixed cluster (issue 12).

The one-group class space is the homogeneous space, and gives the optimum and plan the
homogeneous planner gave (tests/goldens: the bundled instances' optima and plans frozen from
it), so `paraplan plan` (and --top, --sensitivity, verify, report, sweep, bench and the API)
plans a homogeneous instance through solver/hetero_planner.py: dense and mixture-of-experts
models alike (the class space has ep > 1 and prices a dense prefix as dense layers), on any
number of threads (`--threads` N solves N configurations at once, plan_hetero). The
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
from dataclasses import fields

from paraplan.cost.errors import InstanceError
from paraplan.cost.hetero_loader import hetero_plan_as_homogeneous, homogeneous_as_hetero
from paraplan.cost.space_rules import several_classes
from paraplan.cost.specs import Instance
from paraplan.solver import partition_plans
from paraplan.solver.hetero_planner import plan_hetero
from paraplan.solver.hetero_space import dualpipe_job, one_group_outers
from paraplan.solver.planner import (FEASIBLE, INFEASIBLE, PlanResult, SearchAccount, check_resimulation,
                                     coefficient_table, dualpipe_infeasible_reason, infeasible_reason)


def plan(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> PlanResult:
    """The optimal plan of a homogeneous instance over its declared space, by the class planner:
    backend "dp" solves each configuration that can still win by the exact split DP with the
    incumbent as cutoff (hetero_planner._lone_dp: one class on one network), "cpsat" and "milp"
    by the multi-class formulations."""
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)) or threads < 1:
        raise ValueError(f"time_limit_s must be finite and > 0 and threads >= 1, got {time_limit_s}, {threads}")
    if several_classes(inst.search):  # the result record holds one class on every GPU
        key = "classes_per_group" if inst.search.classes_per_group > 1 else "idle_gpus"
        raise InstanceError(inst.source, f"search.{key}", "plans of several replica classes or with"
                            " idle GPUs are group-format plans, which this one-class result cannot hold",
                            "plan it as its one group: api.plan_hetero(homogeneous_as_hetero(inst))"
                            " (what `paraplan plan` does)")
    het = plan_hetero(homogeneous_as_hetero(inst), backend, time_limit_s, progress=progress, threads=threads)
    p = None if het.plan is None else hetero_plan_as_homogeneous(het.plan)
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
        # the planner checked its objective against cost (hetero_planner.check_resimulation);
        # here the homogeneous simulator prices the plan's time (its tolerance scaled alike)
        res.breakdown = check_resimulation(inst, p, het.objective_s, het.tolerance_s * het.objective_s / het.quantile_s)
    return res
