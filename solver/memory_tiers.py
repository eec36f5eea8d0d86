"""The planner's memory tiers: a quantile objective whose band widens with the plan's memory
fill, optimised exactly.

cost/trust.py counts a plan's memory fill (its fullest stage's priced peak over HBM) as one more
distance feature where it fills more than every published row of its scale band does (the
fullest of them fills F): a configuration's plans within F take the factor f_in of its distance
level, those beyond F the factor f_out >= f_in of the next level (f_in is the same at every fill
up to F, which the row filling F validates; f_out at every fill beyond it, which no row does).
The fill is set by the inner problem (the layer split and the recomputation), after the
configuration's factor is read, so one search cannot price both. Three searches of the declared
space, each exact for what it minimises:

  R  every plan (no cap), times scaled by f_in (search.factor_memory_fill = F): the relaxation;
  A  every plan filling at most F of HBM (search.memory_fill_cap = F: each stage's capacity
     min(HBM - reserve, F x HBM), cost/objective.capped_memory), times scaled by f_in;
  B  every plan (cap 1), times scaled by f_out.

Write v(P) = f(P) T(P) for a plan's own value (f(P): f_in within F, f_out beyond) and V* for the
least v over the space.

R first, with the whole time limit. R values every plan P at f_in T(P) <= v(P), so its optimum
R* <= V*. Where R's plan P_R is valued at its own factor (it fills within F, or its
configuration's factor does not change with the fill: f_in = f_out), v(P_R) = R* <= V*, so P_R is
optimal and the search ends: one search, as many as a plan without memory tiers, and the same
plan wherever no fill beyond F could win. With --top K the same holds of every plan R ranks:
where each is valued at its own factor, any other plan's v is at least its R value, at least
the K-th. R's bound (a time-limited R) bounds V* as R* does.

Otherwise A and B, in the time left. The optimum P* fills within F (A then finds a value
<= f_in T(P*) = V*) or beyond it (B finds one <= f_out T(P*) = V*); and no tier's value is below
its plan's own (A's plans fill within F; B scales every plan by f_out, at least its own factor).
So min(A, B) = V*, and the lesser of the tiers' bounds (and R's, at most V*) bounds it. P_R is
in hand at its own value U = v(P_R) >= V*: with one winner, A is searched under the ceiling U
and B under min(U, A's value) (search's ceiling_s: a configuration whose bound is above the
ceiling cannot hold the minimum, and a plan at the ceiling, a tie, still enters, so each
tier's answer is unchanged where it can win), and a tier with no plan at or below its ceiling
is settled. P_R itself competes last: its value is its own. On a tie A's plan is kept: B's
value of a plan within F is at least A's, so B wins only with a plan beyond F, and every plan
returned is valued at its own tier (plan_tier).

Where one tier is all there is (a `mean` objective, a mixture-of-experts model or a DualPipe
job, whose bands do not count memory; a scale whose fullest row fills all of HBM) there is no
relaxation: the search runs once, as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance
from paraplan.cost.trust import FILL_REL_TOL, memory_fill_caps, objective_factor_of, plan_memory_fill
from paraplan.solver.planner import FEASIBLE, INFEASIBLE, OPTIMAL, REL_TOL, TIMEOUT, SolveResult


def tier(inst: Instance, cap: float) -> Instance:
    """`inst` searched within memory tier `cap` (search.memory_fill_cap)."""
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, memory_fill_cap=cap))


def tiers(inst: Instance) -> list[Instance]:
    """`inst` once per memory tier, the emptier first (module docstring)."""
    return [tier(inst, cap) for cap in memory_fill_caps(inst)]


def relaxation(inst: Instance) -> Instance | None:
    """`inst` searched as the relaxation R (module docstring): every plan, each at the emptier
    tier's factor; None where there is one tier."""
    caps = memory_fill_caps(inst)
    if len(caps) == 1:
        return None
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, factor_memory_fill=caps[0]))


def plan_tier(inst: Instance, plan: Plan) -> Instance:
    """`inst` at the memory tier `plan` falls in: the objective's factor of `plan` read there
    (cost/trust.objective_factor_of) is its own."""
    caps = memory_fill_caps(inst)
    if len(caps) == 1:
        return inst
    fill = plan_memory_fill(inst, plan)
    return tier(inst, caps[0] if fill <= caps[0] * (1 + FILL_REL_TOL) else caps[-1])


def own_value_s(inst: Instance, relaxed: Instance, plan: Plan, value_s: float) -> float:
    """The value of `plan` at its own factor, from `value_s`, its value in the search of
    `relaxed` (the same plan's time at that search's factor)."""
    own, read = objective_factor_of(plan_tier(inst, plan), plan), objective_factor_of(relaxed, plan)
    return value_s if own == read else value_s * own / read


def search_tiers(inst: Instance, run: Callable[[Instance, float, float | None], SolveResult],
                 time_limit_s: float, winners: int = 1, within_pct: float | None = None) -> SolveResult:
    """The optimum of `inst` at each plan's own factor (module docstring), by `run(instance,
    seconds, ceiling_s)`: the relaxation with the whole limit, then, where its plans are not
    valued at their own factors, every memory tier of `inst`, the first with its share of what
    is left, the last with the rest. `winners`, `within_pct`: search's (--top K, --within)."""
    relaxed = relaxation(inst)
    if relaxed is None:
        return run(inst, time_limit_s, None)
    t0 = time.perf_counter()
    relax = run(relaxed, time_limit_s, None)
    if relax.plan is None or all(own_value_s(inst, relaxed, p, val) == val for val, p in relax.ranked):
        # no plan fits (R's space is B's, every plan's), none was found in the limit (R's
        # bound bounds every plan's own value), or R's plans are valued at their own factors
        relax.log.append("memory tiers: the relaxation's plans are valued at their own factors: one search")
        return relax
    held = None
    if winners == 1:  # R's plan at its own value: in hand, the tiers' ceiling
        u = own_value_s(inst, relaxed, relax.ranked[0][1], relax.quantile_s)
        held = dataclasses.replace(relax, status=OPTIMAL, quantile_s=u, bound_s=u, ranked=((u, relax.ranked[0][1]),),
                                   solve_time_s=0.0, unresolved=0, log=[])
    ts = tiers(inst)
    results = []
    for n, t in enumerate(ts):
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0 and (held is not None or any(r.plan is not None for r in results)):
            # the limit is spent and a plan is in hand: the tiers left are unsettled, not
            # searched (each search would go on past the limit for a first plan of its own)
            results.append(_not_searched(relax))
            continue
        ceiling = None if held is None else min([held.quantile_s] + [r.quantile_s for r in results if r.plan])
        results.append(run(t, max(left / (len(ts) - n), 1e-3), ceiling))
    out = merged(results + ([held] if held is not None else []), within_pct)
    bound = out.bound_s
    if bound is not None and relax.bound_s is not None:  # R's bound is at most every plan's own value
        bound = max(bound, min(relax.bound_s, out.quantile_s if out.plan is not None else relax.bound_s))
    return dataclasses.replace(out, bound_s=bound, solve_time_s=out.solve_time_s + relax.solve_time_s,
                               log=[f"relaxation: {line}" for line in relax.log] + out.log)


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
            "log": [f"memory tier {n + 1}: {line}" for n, r in enumerate(results) for line in r.log]}
