"""The planner's memory tiers: a quantile objective whose band widens with the plan's memory
fill, optimised exactly.

cost/trust.py counts a plan's memory fill (its fullest stage's priced peak over HBM) as one more
distance feature where it fills more than every published row of its scale band does (the
fullest of them fills F): a configuration's plans within F take the factor f_in of its distance
level, those beyond F the factor f_out >= f_in of the next level. The fill is set by the inner
problem (the layer split and the recomputation), after the configuration's factor is read, so
the search runs once per tier (cost/trust.memory_fill_caps):

  A  every plan filling at most F of HBM (search.memory_fill_cap = F: each stage's capacity
     min(HBM - reserve, F x HBM), cost/objective.capped_memory), times scaled by f_in;
  B  every plan (cap 1), times scaled by f_out;

and the better answer is the optimum. Why exactly: the optimum P* fills within F (A then finds a
value <= f_in T(P*)) or beyond it (B finds one <= f_out T(P*)); and no tier's value is below its
plan's own objective (A's plans fill within F; B scales every plan by f_out, at least its own
factor). So min(A, B) is the quantile optimum and the lesser of the tiers' bounds bounds it. On a
tie A's plan is kept: B's value of a plan within F is at least A's, so B wins only with a plan
beyond F, and every plan returned is valued at its own tier (plan_tier). Where one tier is all
there is (a `mean` objective, a mixture-of-experts model or a DualPipe job, whose bands do not
count memory; a scale whose fullest row fills all of HBM) the search runs once, as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance
from paraplan.cost.trust import FILL_REL_TOL, class_plan_memory_fill, memory_fill_caps
from paraplan.solver.planner import FEASIBLE, INFEASIBLE, OPTIMAL, REL_TOL, TIMEOUT, SolveResult


def tier(inst: Instance, cap: float) -> Instance:
    """`inst` searched within memory tier `cap` (search.memory_fill_cap)."""
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, memory_fill_cap=cap))


def tiers(inst: Instance) -> list[Instance]:
    """`inst` once per memory tier, the emptier first (module docstring)."""
    return [tier(inst, cap) for cap in memory_fill_caps(inst)]


def plan_tier(inst: Instance, plan: Plan) -> Instance:
    """`inst` at the memory tier `plan` falls in: the objective's factor of `plan` read there
    (cost/trust.objective_factor_of) is its own."""
    caps = memory_fill_caps(inst)
    if len(caps) == 1:
        return inst
    fill = class_plan_memory_fill(inst, plan)
    return tier(inst, caps[0] if fill <= caps[0] * (1 + FILL_REL_TOL) else caps[-1])


def search_tiers(inst: Instance, run: Callable[[Instance, float], SolveResult],
                 time_limit_s: float, within_pct: float | None = None) -> SolveResult:
    """`run(tier instance, seconds)` on every memory tier of `inst` and the better answer
    (module docstring). The first tier has its share of the limit, the last what is left.
    `within_pct`: the ranked plans' cut (search's), applied again to the merged best."""
    ts = tiers(inst)
    if len(ts) == 1:
        return run(inst, time_limit_s)
    t0 = time.perf_counter()
    results = []
    for n, t in enumerate(ts):
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0 and any(r.plan is not None for r in results):
            # the limit is spent and a plan is in hand: the tiers left are unsettled, not
            # searched (each search would go on past the limit for a first plan of its own)
            results.append(_not_searched(results[-1]))
            continue
        results.append(run(t, max(left / (len(ts) - n), 1e-3)))
    return merged(results, within_pct)


def _not_searched(last: SolveResult) -> SolveResult:
    """A tier the limit left no time for: no plan, every configuration unresolved, and the one
    bound that holds without a look at its plans, 0."""
    return dataclasses.replace(last, status=TIMEOUT, plan=None, objective_s=None, quantile_s=None, bound_s=0.0,
                               ranked=(), solve_time_s=0.0, unresolved=last.outer_configs, log=[],
                               reason="time limit reached before this memory tier was searched")


def merged(results: list[SolveResult], within_pct: float | None = None) -> SolveResult:
    """One result of the tiers' `results` (emptier tier first): the lowest minimised value,
    the earlier tier on a tie; optimal only when every tier is settled (optimal, or no plan
    fits it), else feasible with the unsettled tier's reason; the least of the tiers' bounds;
    the ranked plans merged per outer configuration (a configuration in the K best overall is
    in the K best of the tier that values it lowest: the configurations ranked above it there
    are valued at least as low overall)."""
    found = [r for r in results if r.plan is not None]
    open_bounds = [r.bound_s for r in results if r.status != INFEASIBLE]
    if not found:
        last = results[-1]  # every plan's tier: its reason names the whole space
        status = TIMEOUT if any(r.status == TIMEOUT for r in results) else last.status
        bound = None if any(b is None for b in open_bounds) or not open_bounds else min(open_bounds)
        return dataclasses.replace(last, status=status, bound_s=bound, **_counts(results))
    best = min(found, key=lambda r: r.quantile_s)  # min keeps the first of equal values
    settled = all(r.status in (OPTIMAL, INFEASIBLE) for r in results)
    bound = None if any(b is None for b in open_bounds) else min(open_bounds + [best.quantile_s])
    ranked: dict = {}
    for r in found:
        for val, p in r.ranked:
            key = p.outer
            if key not in ranked or val < ranked[key][0]:
                ranked[key] = (val, p)
    k = max(len(r.ranked) for r in found)
    top = sorted(ranked.values(), key=lambda x: x[0])[:k]
    most = best.quantile_s * (1 + within_pct / 100) * (1 + REL_TOL) if within_pct is not None else float("inf")
    reason = best.reason or next((r.reason for r in results if r.status not in (OPTIMAL, INFEASIBLE)), "")
    return dataclasses.replace(best, status=OPTIMAL if settled else FEASIBLE, bound_s=bound, reason=reason,
                               ranked=tuple(x for x in top if x[0] <= most), **_counts(results))


def _counts(results: list[SolveResult]) -> dict:
    """The tiers' time summed and their logs; the configurations left unresolved, the most of
    any tier's (each tier accounts for the same declared space: priced, solved and pruned stay
    the returned tier's own, so that they still add up to its outer configurations)."""
    return {"solve_time_s": sum(r.solve_time_s for r in results),
            "unresolved": max(r.unresolved for r in results),
            "log": [f"memory tier {n + 1} of {len(results)}: {line}" for n, r in enumerate(results) for line in r.log]}
