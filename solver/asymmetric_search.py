"""The optimum over asymmetric pipelines (search.asymmetric_pipelines), proved by branch and bound.

Outer level: every asymmetric pipeline of the declared space (solver/asymmetric_space.py) is
priced (cost/asymmetric.coefficients) and keyed by cost/asymmetric.lower_bound_s, at most the
step time of each of its splits; they are solved in the order of that bound (ties in listing
order), and the search stops once the next bound is not below the incumbent: every pipeline
left is then proved no better. `incumbent_s` (e.g. the symmetric planner's optimum) prunes from
the start.

Inner level, one pipeline: the step time is S + max_s (m_s - 1) T_s + max_s D_s with S = sum_s
T_s (cost/asymmetric.py's max_s [m_s T_s + S - T_s] rewritten), every term non-decreasing as
stages are added. A depth-first search chooses (n_s, r_s) stage by stage; the value of the
stages chosen so far plus each stage left at its least time (one layer, no recompute: S grows
by it, (m_s - 1) T_s and the sync can only add) is at most the value of every completion, so a
branch whose value is not below the best is cut. A stage whose memory does not fit is skipped.
With a framework's recompute pattern (one parameter for every stage) the search runs once per
parameter value. Exact: the same (split, recompute) rows exhaustive search lists
(solver/exhaustive.exhaustive_asymmetric), with cuts that only drop rows that cannot win.

Under a quantile objective (search.objective pNN) a plan's value is its step time times its
objective factor, read as every plan's is (cost/trust.objective_factor_of: the GPU types of its
stages, its ZeRO stage, cp, pp and the cluster's GPU count) at the memory tier its fill falls in
(solver/memory_tiers.py: f_in within the fullest published row's fill F, f_out >= f_in beyond).
Each pipeline's split is searched once per tier, as the symmetric planner's tiers are: within F
(each stage's capacity capped at F of HBM) with every time scaled by f_in, then every split with
every time scaled by f_out (cost/objective.scaled_times, capped_memory: problem_of's scaling).
The first tier's value is each of its splits' own; the second's is at least each split's own,
and strictly below the first tier's only for a split beyond F (one within F is valued f_in T
there): so the lower of the two is the pipeline's optimum at each split's own factor, the first
tier's on a tie. The step time is a sum of the scaled times with integer multiples, so a tier's
value is f times the unscaled one and the pipeline's bound (lower_bound_s) times its least
factor bounds both tiers: the outer order and its cut stay exact.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from paraplan.cost.asymmetric import AsymmetricCoefficients, coefficients, lower_bound_s, plan_of, symmetric_twin
from paraplan.cost.errors import InstanceError
from paraplan.cost.objective import capped_memory, scaled_times
from paraplan.cost.plan_specs import ClassOuter, Plan
from paraplan.cost.simulate import simulate
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.specs import Instance
from paraplan.cost.trust import objective_factor_of
from paraplan.solver.asymmetric_space import asymmetric_outers, count_outers, recompute_choices
from paraplan.solver.class_layouts import MAX_LAYOUTS
from paraplan.solver.memory_tiers import plan_tier, tiers
from paraplan.solver.planner import FEASIBLE, INFEASIBLE, OPTIMAL, Ranked, SolveResult
from paraplan.solver.search import search

# most layer splits (without recompute counts) the asymmetric pipelines may hold: exhaustive
# search's default cap (solver/exhaustive.DEFAULT_MAX_CANDIDATES), which its agreement tests
# stay far below; the search lists and prices every pipeline, and the split search's cuts are
# not proved to visit fewer than all splits
MAX_SPLITS = 20_000_000
# re-simulation must reproduce the search's objective to this relative tolerance (float
# summation order only: the same coefficients, the same formula)
REL_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class AsymmetricResult:
    plan: Plan | None
    # the minimised value: the plan's step time times its objective factor (the time itself
    # under `mean`); inf: no asymmetric pipeline beats incumbent_s (or none fits)
    objective_s: float
    listed: int  # pipelines in the declared space
    solved: int  # pipelines whose split was searched (the rest cut by their bound)
    wall_time_s: float
    # (value, plan) of the `winners` best pipelines below incumbent_s, best first (plan: the first)
    ranked: tuple = ()


def _stage_options(ac: AsymmetricCoefficients, s: int, top: int, r_of) -> list[tuple]:
    """(n, r, T, D, m - 1) of stage s for n = 1..top and each recompute count r_of(n) lists,
    only those that fit the stage's memory."""
    c = ac.rows
    out = []
    for n in range(1, top + 1):
        for r in r_of(n):
            mem = (c.stage_mem_bytes[s] + n * (c.layer_state_bytes[s] + c.layer_act_bytes[s])
                   - r * (c.layer_act_bytes[s] - c.layer_ckpt_bytes[s]))
            if mem <= c.capacity_bytes[s]:
                t = c.stage_time_s[s] + n * c.layer_time_s[s] + r * c.recompute_time_s[s]
                d = c.stage_sync_time_s[s] + n * c.layer_sync_time_s[s]
                out.append((n, r, float(t), float(d)))
    return out


def _best_split(ac: AsymmetricCoefficients, layers: int, r_of, best_s: float):
    """(value, n, r) of the best split of `ac` below best_s, or None (module docstring)."""
    pp = len(ac.micro_batches)
    top = layers - pp + 1
    opts = [_stage_options(ac, s, top, r_of) for s in range(pp)]
    if any(not o for o in opts):
        return None
    c = ac.rows
    least = [float(c.stage_time_s[s] + c.layer_time_s[s]) for s in range(pp)]  # one layer, r 0
    rest = [sum(least[s:]) for s in range(pp)] + [0.0]
    mm1 = [float(x) - 1.0 for x in ac.micro_batches]
    found = [best_s, None]
    n_of, r_of_stage = [0] * pp, [0] * pp

    def dfs(s: int, left: int, S: float, P: float, D: float) -> None:
        if S + rest[s] + P + D >= found[0]:
            return
        if s == pp:
            if left == 0:
                found[0], found[1] = S + P + D, (tuple(n_of), tuple(r_of_stage))
            return
        for n, r, t, d in opts[s]:
            if n > left - (pp - s - 1) or (s == pp - 1 and n != left):
                continue
            n_of[s], r_of_stage[s] = n, r
            dfs(s + 1, left - n, S + t, max(P, mm1[s] * t), max(D, d))

    dfs(0, layers, 0.0, 0.0, 0.0)
    return None if found[1] is None else (found[0], *found[1])


def solve_split(inst: Instance, ao: ClassOuter, ac: AsymmetricCoefficients, best_s: float = math.inf):
    """(value, n, r) of `ao`'s best split below best_s under the framework's recompute rows,
    or None."""
    pattern, table = recompute_choices(inst, ao)
    L = inst.model.layers
    if pattern is None:
        return _best_split(ac, L, lambda n: (0,), best_s)
    if pattern is RecomputePattern.PER_STAGE:
        return _best_split(ac, L, lambda n: range(n + 1), best_s)
    best = None
    for row in table:  # one parameter value for every stage
        got = _best_split(ac, L, lambda n, row=row: (int(row[n]),), best_s)
        if got is not None:
            best, best_s = got, got[0]
    return best


def tiered(by_tier: list[Instance], ao: ClassOuter,
           ac: AsymmetricCoefficients) -> tuple[tuple[float, AsymmetricCoefficients], ...]:
    """(factor, coefficients) of pipeline `ao` per memory tier (`by_tier`: memory_tiers.tiers
    of the instance, the emptier first; module docstring): its times scaled by the objective's
    factor of `ao` at that tier and its capacities capped at the tier's fill, as
    solver/search.problem_of scales a symmetric configuration's. One tier at factor 1 under
    `mean`."""
    out = []
    for t in by_tier:
        f = objective_factor_of(t, ao)
        rows = capped_memory(scaled_times(ac.rows, f), t.search.memory_fill_cap, t.search.memory_reserve_bytes)
        out.append((f, dataclasses.replace(ac, rows=rows)))
    return tuple(out)


def _solve_tiers(inst: Instance, ao: ClassOuter, by_tier, bar_s: float):
    """(value, n, r) of `ao`'s best split below bar_s over its tiers (`tiered`), the earlier
    tier's on a tie (a later one must be strictly lower), or None."""
    best = None
    for _, ac in by_tier:
        got = solve_split(inst, ao, ac, bar_s if best is None else min(bar_s, best[0]))
        if got is not None:
            best = got
    return best


def search_asymmetric(inst: Instance, incumbent_s: float = math.inf, winners: int = 1) -> AsymmetricResult:
    """The optimum over the declared asymmetric pipelines on the nominal network, at
    search.objective (the predicted time, or the pNN time at each plan's own factor), proved
    by the bound order (module docstring); with `winners` K, the K best pipelines (each its own
    outer configuration, as --top ranks), a pipeline cut once its bound reaches the K-th best
    found or incumbent_s (a value at the same objective)."""
    t0 = time.perf_counter()
    size_problem(inst)
    outers = asymmetric_outers(inst)
    reserve = inst.search.memory_reserve_bytes
    raw = [coefficients(inst, ao, reserve_bytes=reserve) for ao in outers]
    by_tier = tiers(inst)
    priced = [tiered(by_tier, ao, ac) for ao, ac in zip(outers, raw)]
    # each tier's bound is its factor times the unscaled one (lower_bound_s is linear in the
    # times): the least factor bounds every tier's splits
    bounds = [min(f for f, _ in by) * lower_bound_s(ac, inst.model.layers) for ac, by in zip(raw, priced)]
    bar_s, kept, solved = incumbent_s, [], 0  # kept: (value, index, plan), best first
    for i in sorted(range(len(outers)), key=lambda i: (bounds[i], i)):
        if bounds[i] >= bar_s:
            break  # every pipeline left is bounded at least as high: proved
        solved += 1
        got = _solve_tiers(inst, outers[i], priced[i], bar_s)
        if got is not None:
            kept = sorted(kept + [(got[0], i, plan_of(inst, outers[i], got[1], got[2]))], key=lambda x: x[:2])[:winners]
            if len(kept) == winners:
                bar_s = min(incumbent_s, kept[-1][0])
    for val, _, plan in kept:
        check_resimulation(inst, plan, val)
    return AsymmetricResult(plan=kept[0][2] if kept else None, objective_s=kept[0][0] if kept else math.inf,
                            listed=len(outers), solved=solved, wall_time_s=time.perf_counter() - t0,
                            ranked=tuple((val, plan) for val, _, plan in kept))


def check_resimulation(inst: Instance, plan: Plan, objective_s: float) -> None:
    """The project's rule: the plan re-priced from its records alone gives the objective (its
    simulated time times its objective factor at its own memory tier, as every plan's)."""
    bd = simulate(inst, plan)
    value = bd.iter_time_s * objective_factor_of(plan_tier(inst, plan), plan)
    if abs(value - objective_s) > REL_TOL * max(1.0, objective_s) or not bd.fits:
        raise AssertionError(f"asymmetric plan re-simulates to {value!r} s (fits: {bd.fits})"
                             f" but the search's objective is {objective_s!r} s")


def with_asymmetric(inst: Instance, res: SolveResult, objective: str) -> SolveResult:
    """The planner's result `res` (the symmetric space) joined with the asymmetric pipelines'
    (search.asymmetric_pipelines): the asymmetric optimum where it is faster, searched with
    res's plan as incumbent. Both are proved over their spaces, so a proved `res` stays proved
    over the union, and a lone asymmetric plan (res infeasible) is optimal."""
    if objective != "nominal":
        raise InstanceError(inst.source, "search.asymmetric_pipelines", f"is planned on the nominal"
                            f" network only, not for the {objective} objective",
                            "plan the nominal objective, or remove asymmetric_pipelines")
    got = search_asymmetric(inst, _value_s(res) if res.plan is not None else math.inf)
    res = _adopt(inst, res, got)
    return res if got.plan is None else dataclasses.replace(
        res, ranked=(Ranked(got.plan, res.objective_s, res.breakdown, got.objective_s),))


def _value_s(res: SolveResult) -> float:
    """What `res`'s plan minimised (SolveResult.quantile_s; its time where that is not set)."""
    return res.objective_s if res.quantile_s is None else res.quantile_s


def _adopt(inst: Instance, res: SolveResult, got: AsymmetricResult) -> SolveResult:
    """`res` with the asymmetric search's count and time added, and its optimum `got.plan`
    (when one beat res's) as the plan, re-simulated."""
    more = dict(outer_configs=res.outer_configs + got.listed, solve_time_s=res.solve_time_s + got.wall_time_s)
    if got.plan is None or (res.plan is not None and got.objective_s >= _value_s(res)):
        return dataclasses.replace(res, **more)
    bd = simulate(inst, got.plan)
    status = OPTIMAL if res.status in (OPTIMAL, INFEASIBLE) else FEASIBLE
    bound = got.objective_s if status == OPTIMAL or res.bound_s is None else min(res.bound_s, got.objective_s)
    # objective_s: the plan's predicted time (the search's value where the factor is 1, the
    # simulator's where it divided it); quantile_s: what was minimised (check_resimulation)
    factor = objective_factor_of(plan_tier(inst, got.plan), got.plan)
    return dataclasses.replace(res, status=status, plan=got.plan,
                               objective_s=got.objective_s if factor == 1.0 else bd.iter_time_s,
                               quantile_s=got.objective_s, bound_s=bound, breakdown=bd,
                               per_scenario_s=(bd.iter_time_s,), reason="", **more)


def ranked_with_asymmetric(inst: Instance, res: SolveResult, objective: str, winners: int,
                           within_pct: float | None) -> SolveResult:
    """--top K over both spaces: res (the symmetric search's (value, plan) pairs in `ranked`,
    not yet re-simulated) joined with the K best asymmetric pipelines below its K-th value,
    the K best of the union (a symmetric plan first on a tie, as with_asymmetric keeps the
    incumbent), within `within_pct` percent of the union's best (search.within)."""
    from paraplan.solver.search import within
    if objective != "nominal":
        raise InstanceError(inst.source, "search.asymmetric_pipelines", f"is planned on the nominal"
                            f" network only, not for the {objective} objective",
                            "plan the nominal objective, or remove asymmetric_pipelines")
    kth = res.ranked[winners - 1][0] if len(res.ranked) >= winners else math.inf
    asked = winners
    while True:
        got = search_asymmetric(inst, kth, asked)
        # a pipeline of equal degrees is a symmetric plan (asymmetric.symmetric_twin): listed
        # once, as the symmetric plan, where the symmetric search found it too
        union, seen = [], set()
        for val, plan in sorted(list(res.ranked) + [(v, symmetric_twin(p)) for v, p in got.ranked],
                                key=lambda vp: vp[0]):
            if plan not in seen:
                seen.add(plan)
                union.append((val, plan))
        if len(union) >= winners or len(got.ranked) < asked:
            break
        asked += winners - len(union)  # twins took places: ask for as many more
    return dataclasses.replace(_adopt(inst, res, got), ranked=tuple(within(union[:winners], within_pct)))


def size_problem(inst: Instance) -> None:
    """Refuse a space of asymmetric pipelines too large to list (class_layouts.MAX_LAYOUTS
    pipelines, as the option families' layouts) or to search (MAX_SPLITS layer splits),
    naming the key and how to narrow it."""
    outers, splits = count_outers(inst)
    if outers > MAX_LAYOUTS or splits > MAX_SPLITS:
        raise InstanceError(inst.source, "search.asymmetric_pipelines",
                            f"the space holds {outers:,} asymmetric pipelines and {splits:,} layer"
                            f" splits (at most {MAX_LAYOUTS:,} and {MAX_SPLITS:,}: it is searched"
                            " on small instances)", "narrow search.tp, max_pp or micro_batch, or"
                            " remove asymmetric_pipelines")
