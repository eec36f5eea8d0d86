"""A homogeneous instance planned by the class planner, as a one-group mixed cluster (issue 12).

The one-group class space is the homogeneous space (tests/solver/
test_one_group_space_equals_homogeneous.py) and gives the same optimum and plan
(test_one_group_equals_homogeneous.py), so `paraplan plan` routes a homogeneous instance
through solver/hetero_planner.py, the step before the homogeneous planner's duplicates are
deleted. It is the route of every homogeneous instance (`routes`, `plan`): dense and
mixture-of-experts models alike (the class space has ep > 1 and prices a dense prefix as dense
layers, as the homogeneous one), on any number of threads (`--threads` N solves N
configurations at once, hetero_planner.plan_hetero). `PARAPLAN_CLASS_PLANNER=0` in the
environment forces the homogeneous planner (for measuring both routes), `=1` the class planner.

Measured on the 2-core machine (shared with other jobs), both routes in one process,
alternating, 4 runs each, the fastest of each (wall seconds, homogeneous / class, ratio):
tiny-gpt 0.099 / 0.102 (1.02), small-gpt 0.274 / 0.281 (1.03), Llama-3 8B on 64 H100
0.84 / 0.94 (1.13), on 128 H200 1.09 / 1.21 (1.12), GPT-3 175B on 256 H100 3.38 / 3.52 (1.04),
Llama-3 70B on 512 H100 3.24 / 3.03 (0.94), GPT-3 175B on 1,024 A100 4.46 / 4.74 (1.06; the
medians of those 6 runs 4.68 / 5.26, 1.12; one noisier series of 4 gave 1.23), Llama-3.1 405B
on 16,384 H100 2.68 / 3.12 (1.16); same status, plan, optimum and space counts on each. The
time outside cost/coefficients.build on GPT-3 175B on 1,024 A100 (one process, fastest of 3):
1.38 s of 4.81 s on the class route, 0.96 s of 4.35 s on the homogeneous one; the difference is
mostly building each configuration's Outer and problem record (~0.45 s for 24,144 of them)
after its HeteroOuter. One fresh process per run, fastest of 3, interleaved with main at
f6e726d: GPT-3 175B on 1,024 A100 5.05 / 5.09 s, where main's class route took 8.70 s
against its homogeneous 4.86 s (main: 1.05-2.3x on these eight instances). What
made it lean: the bounds of every configuration at once (solver/class_bounds.py), pricing in
passes (hetero_planner.problems_for), the space counted once per class shape and the split
DP as the inner solver of backend "dp" (hetero_planner._lone_dp), as on the homogeneous route.
"""

from __future__ import annotations

import math
import os
import time

from paraplan.cost.errors import InstanceError
from paraplan.cost.hetero_loader import hetero_plan_as_homogeneous, homogeneous_as_hetero
from paraplan.cost.specs import Instance
from paraplan.solver import partition_plans
from paraplan.solver.hetero_planner import plan_hetero
from paraplan.solver.planner import (FEASIBLE, INFEASIBLE, PlanResult, check_resimulation, coefficient_table,
                                     infeasible_reason, space_summary)
from paraplan.solver.space import outer_configs

SWITCH = "PARAPLAN_CLASS_PLANNER"


def routes(inst: Instance) -> bool:
    """Whether `paraplan plan` plans `inst` through the class planner (module docstring): yes,
    unless PARAPLAN_CLASS_PLANNER=0 forces the homogeneous planner."""
    switch = os.environ.get(SWITCH, "")
    if switch not in ("", "0", "1"):
        raise InstanceError("<environment>", SWITCH, f"is {switch!r}",
                            "set it to 0 (homogeneous planner) or 1 (class planner), or unset it")
    return switch != "0"


def plan(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> PlanResult:
    """The optimal plan of a homogeneous instance, by the route `routes` picks."""
    if routes(inst):
        return plan_as_one_group(inst, backend, time_limit_s, progress=progress, threads=threads)
    from paraplan.solver.planner import plan as homogeneous_plan
    return homogeneous_plan(inst, backend=backend, time_limit_s=time_limit_s, threads=threads,
                            progress=progress)


def plan_as_one_group(inst: Instance, backend: str = "cpsat", time_limit_s: float = 60.0,
                      progress=None, threads: int = 1) -> PlanResult:
    """plan(inst) by the class planner, with the same backend: "dp" solves each configuration
    that can still win by the exact split DP with the incumbent as cutoff, as the homogeneous
    planner does (hetero_planner._lone_dp: one class on one network)."""
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)) or threads < 1:
        raise ValueError(f"time_limit_s must be finite and > 0 and threads >= 1, got {time_limit_s}, {threads}")
    het = plan_hetero(homogeneous_as_hetero(inst), backend, time_limit_s, progress=progress,
                      threads=threads)
    p = None if het.plan is None else hetero_plan_as_homogeneous(het.plan)
    outers, plans = het.outer_configs, het.plans_total  # the same space (module docstring)
    if partition_plans.enabled(inst):  # the homogeneous planner counts (outer, layer plan) pairs
        summary = space_summary(inst, outer_configs(inst))
        outers, plans = summary.outer_configs, summary.splits_total
    res = PlanResult(status=het.status, plan=p, iter_time_s=het.objective_s, bound_s=het.bound_s,
                     solve_time_s=het.solve_time_s, backend=het.backend,
                     outer_configs=outers, space_size=plans,
                     solved=het.solved, pruned_by_bound=het.pruned_by_bound,
                     pruned_by_memory=het.pruned_by_memory,
                     pruned_by_dominance=het.pruned_by_dominance,
                     inner_infeasible=het.inner_infeasible, unresolved=het.unresolved,
                     tolerance_s=het.tolerance_s, reason=het.reason, log=het.log)
    if het.status == INFEASIBLE:  # the homogeneous planner's reason: the smallest memory need
        deadline = time.perf_counter() + max(time_limit_s - het.solve_time_s, 1.0)
        res.reason = infeasible_reason(inst, coefficient_table(inst, deadline))
    elif het.status == FEASIBLE and not res.reason:
        res.reason = "time limit reached: not every configuration was solved or pruned"
    if p is not None:
        res.breakdown = check_resimulation(inst, p, het.objective_s, het.tolerance_s)
    return res
