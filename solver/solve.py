"""The one entry into the planner: `solve(inst)` plans an instance of either kind by the one
search (solver/search.py) and returns the one result record (planner.SolveResult).

A cluster of node groups is searched as it is. A flat instance is searched as its one group
(the one-group class space is the flat space: tests/goldens pins the optima and plans), and
its one-class plan is re-simulated once on that group (search.check_resimulation, as every
plan is), whose breakdown `paraplan plan` shows. With `winners` K > 1 (`paraplan plan --top K`) the same branch
and bound keeps the K best plans of distinct outer configurations, each re-simulated once
(`ranked`).
"""

from __future__ import annotations

import dataclasses
import math
import time

from paraplan.cost.errors import InstanceError
from paraplan.cost.specs import Instance
from paraplan.cost.trust import objective_factor_of
from paraplan.solver import partition_plans
from paraplan.solver.memory_tiers import plan_tier
from paraplan.solver.search import check_resimulation, fewest_classes, search
from paraplan.solver.space import dualpipe_job, one_group_outers
from paraplan.solver.planner import (FEASIBLE, INFEASIBLE, Ranked, SolveResult, coefficient_table,
                                     dualpipe_infeasible_reason, infeasible_reason)


def solve(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0,
          threads: int = 1, progress=None, objective: str = "nominal", winners: int | None = None,
          within_pct: float | None = None) -> SolveResult:
    """The optimal plan of `inst` over its declared space (module docstring). Backend "dp"
    solves each configuration that can still win by the exact split DP (one class on one
    network), "cpsat" and "milp" by the multi-class formulations. `winners` K (`--top K`): the K
    best plans of distinct outer configurations in `ranked` (within `within_pct` percent of the
    best when given); the first is the optimum. Without it, `ranked` holds the one plan."""
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)) or threads < 1:
        raise ValueError(f"time_limit_s must be finite and > 0 and threads >= 1, got {time_limit_s}, {threads}")
    if winners is not None:
        _check_top(inst, winners, within_pct)
    if not inst.flat:
        return _solve_groups(inst, backend, time_limit_s, threads, progress, objective, winners, within_pct)
    res = search(inst, backend, time_limit_s, progress=progress, threads=threads, resimulate=False,
                 winners=winners or 1, within_pct=within_pct)  # re-simulated once, below
    if partition_plans.enabled(inst):  # a flat plan counts (outer, layer plan) pairs
        res.outer_configs = sum(partition_plans.plans_per_outer(inst, o) for o in one_group_outers(inst))
    if res.status == INFEASIBLE:  # the flat reason: the smallest memory need
        deadline = time.perf_counter() + max(time_limit_s - res.solve_time_s, 1.0)
        res.reason = (dualpipe_infeasible_reason(inst) if dualpipe_job(inst)
                      else infeasible_reason(inst, coefficient_table(inst, deadline)))
    elif res.status == FEASIBLE and not res.reason:
        res.reason = "time limit reached: not every configuration was solved or pruned"
    if winners is not None:
        ranked = []
        for val, p in res.ranked:  # each re-simulated once; val: at search.objective
            at = plan_tier(inst, p)  # the memory tier it was valued at (solver/memory_tiers.py)
            bd = check_resimulation(at, p, "nominal", val, res.tolerance_s)[1]
            ranked.append(Ranked(p, bd.iter_time_s if objective_factor_of(at, p) != 1.0 else val, bd, val))
        res.ranked = tuple(ranked)
        return res
    res.ranked = ()
    if res.plan is not None:
        # re-simulated once, against the minimised value (the plan's time times its
        # configuration's quantile factor); the time reported is the simulator's where the
        # factor divided it
        res.breakdown = check_resimulation(plan_tier(inst, res.plan), res.plan, "nominal", res.quantile_s,
                                           res.tolerance_s)[1]
        if res.quantile_s != res.objective_s:
            res.objective_s = res.breakdown.iter_time_s
        res.ranked = (Ranked(res.plan, res.objective_s, res.breakdown, res.quantile_s),)
    return res


def _solve_groups(inst: Instance, backend: str, time_limit_s: float, threads: int, progress,
                  objective: str, winners: int | None, within_pct: float | None) -> SolveResult:
    """A cluster of node groups: the search re-simulates its plan; --top's plans are shown as
    `plan` shows them (fewest_classes), each re-simulated once on the scenarios the objective
    reads."""
    if winners is None:
        res = search(inst, backend, time_limit_s, objective=objective, progress=progress, threads=threads)
        if res.plan is not None:
            res.ranked = (Ranked(res.plan, res.objective_s, res.breakdown, res.quantile_s),)
        return res
    res = search(inst, backend, time_limit_s, objective=objective, progress=progress, threads=threads,
                 resimulate=False, winners=winners, within_pct=within_pct)
    ranked = []
    for val, p in res.ranked:
        at = plan_tier(inst, p)  # the memory tier it was valued at (solver/memory_tiers.py)
        p = p if any(k.stage_dp for k in p.classes) else fewest_classes(at, p, objective)
        bd = check_resimulation(at, p, objective, val, res.tolerance_s)[1]
        ranked.append(Ranked(p, val / objective_factor_of(at, p), bd, val))
    return dataclasses.replace(res, ranked=tuple(ranked))


def _check_top(inst, k: int, within_pct: float | None) -> None:
    """--top's arguments, and the spaces it ranks: per-operator tensor partitions are pruned
    against the optimum (solver/class_partitions.py), which would hide near-optimal layer plans
    of a configuration, so they are not offered."""
    if k < 1:
        raise InstanceError("<arguments>", "--top", f"must be >= 1, got {k}", "ask for e.g. --top 5")
    if within_pct is not None and not within_pct >= 0:
        raise InstanceError("<arguments>", "--within", f"must be >= 0, got {within_pct}",
                            "give a percentage, e.g. --within 5")
    if partition_plans.enabled(inst):  # search.tensor_partitions, read alike on either kind
        raise InstanceError(inst.source, "search.tensor_partitions",
                            "--top is not offered with per-operator partitions",
                            "remove spatial_temporal (e.g. --search tensor_partitions=megatron)")
