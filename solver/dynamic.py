"""Changing networks: regret of robust/expected plans, re-planning after an event, and plans
for a known bandwidth timeline.

Regret. A plan chosen for several scenarios is compared, scenario by scenario, with the optimum
for that scenario alone (each one proved by solver/search.py).

Re-planning. After an event (a network change) the running plan keeps working, at its new
speed t_cur. The new optimum t_new (warm-started from the running plan, which is a feasible
incumbent) is worth switching to iff  S + N * t_new < N * t_cur, with S the switching time
(cost/switching.py) and N the remaining iterations: given, or the remaining hours divided by
t_cur (the hours left if training goes on with the running plan). Break-even: N* = S/(t_cur - t_new).

Timeline. The periods' plans are chosen by the multi-period MILP of formulations/timeline.py
over a candidate set that provably holds the best plan of every choice: every extreme point of
the plans' times on the timeline's scenarios (solver/weight_space.py, found by weighted
solves of the planner). A run of consecutive periods kept on one plan does sum_s W_s / t_s
iterations (W_s >= 0: its time in scenario s, less the switch at its start), convex and
non-increasing in the plan's times, so its best plan is one of those extreme points
(weight_space's docstring); the MILP then picks the runs and their plans exactly. So the
choice is optimal over the whole declared space, up to the planner's tolerances, when every
weighted solve was proved ("complete"). The bound
    U = sum_p H_p / t*_sigma(p)
(every period at its scenario's optimum, no switching) is reported too: the gap to U is what
switching and keeping plans cost, not a gap in the proof.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Scenario
from paraplan.cost.switching import switch_time_s
from paraplan.cost.trust import objective_factor_of
from paraplan.formulations.timeline import TimelineChoice, choose_plans
from paraplan.solver.planner import SolveResult
from paraplan.solver.memory_tiers import plan_tier
from paraplan.solver.search import search
from paraplan.solver.planner import REL_TOL
from paraplan.solver.weight_space import extreme_points


@dataclass(frozen=True)
class Regret:
    scenario: str
    plan_time_s: float
    optimum_s: float
    optimum_status: str

    @property
    def regret(self) -> float:
        return self.plan_time_s / self.optimum_s - 1


def scenario_optima(inst: Instance, backend: str, time_limit_s: float) -> list[SolveResult]:
    return [search(inst.with_cluster(sc.cluster), backend, time_limit_s) for sc in inst.scenarios]


def regrets(inst: Instance, plan: Plan, optima: list[SolveResult],
            times_s: tuple[float, ...] | None = None) -> list[Regret]:
    """The plan against each scenario's optimum; `times_s`: the plan's time on each scenario
    where the caller has them all (SolveResult.per_scenario_s of a robust or expected plan, whose
    re-simulation priced it on every scenario), else simulated here."""
    if times_s is not None and len(times_s) != len(inst.scenarios):
        times_s = None  # a nominal plan's: the nominal network's only
    out = []
    for i, (sc, opt) in enumerate(zip(inst.scenarios, optima)):
        t = times_s[i] if times_s is not None else simulate(inst, plan, cluster=sc.cluster).iter_time_s
        out.append(Regret(scenario=sc.name, plan_time_s=t,
                          optimum_s=opt.objective_s if opt.objective_s is not None else float("nan"),
                          optimum_status=opt.status))
    return out


@dataclass
class ReplanResult:
    event: str
    current_time_s: float  # the running plan on the changed network
    before_time_s: float  # the running plan before the change
    new: SolveResult
    switch_s: float
    remaining_iterations: float
    stay_s: float
    switch_total_s: float
    solve_time_s: float

    @property
    def pays_off(self) -> bool:
        return self.new.objective_s is not None and self.switch_total_s < self.stay_s

    @property
    def break_even_iterations(self) -> float | None:
        if self.new.objective_s is None or self.new.objective_s >= self.current_time_s:
            return None
        return self.switch_s / (self.current_time_s - self.new.objective_s)


def replan(inst: Instance, current: Plan, event: Scenario, remaining_s: float | None,
           remaining_iterations: int | None, backend: str = "cpsat",
           time_limit_s: float = 60.0) -> ReplanResult:
    t0 = time.perf_counter()
    changed = inst.with_cluster(event.cluster)
    before = simulate(inst, current).iter_time_s
    t_cur = simulate(changed, current).iter_time_s
    new = search(changed, backend, time_limit_s, warm_plan=current)
    n = float(remaining_iterations) if remaining_iterations is not None else remaining_s / t_cur
    sw = switch_time_s(inst.model, inst.switching)
    t_new = new.objective_s if new.objective_s is not None else float("inf")
    return ReplanResult(event=event.name, current_time_s=t_cur, before_time_s=before, new=new,
                        switch_s=sw, remaining_iterations=n, stay_s=n * t_cur,
                        switch_total_s=sw + n * t_new, solve_time_s=time.perf_counter() - t0)


@dataclass
class TimelineResult:
    choice: TimelineChoice
    candidates: list[Plan]
    candidate_labels: list[str]
    times_s: list[list[float]]  # [candidate][scenario]
    upper_bound_iterations: float
    static_iterations: float  # the best single candidate kept through the whole timeline
    follow_iterations: float  # switch to each period's scenario optimum, paying every change
    switch_s: float
    solve_time_s: float
    # every scenario optimum and every weighted solve proved within the time limit: only then
    # do the candidates hold every run's best plan (module docstring)
    complete: bool = True

    @property
    def gap(self) -> float | None:
        if not self.upper_bound_iterations or self.upper_bound_iterations == float("inf"):
            return None
        return 1 - self.choice.iterations / self.upper_bound_iterations

    @property
    def status(self) -> str:
        """"optimal" (over the whole declared space, module docstring) only when complete and
        the selection MILP proved its choice; "feasible" otherwise."""
        return self.choice.status if self.complete else "feasible"


def _weighted(inst: Instance, weights: dict[int, float]) -> Instance:
    scen = tuple(dataclasses.replace(inst.scenarios[i], probability=w) for i, w in sorted(weights.items()))
    return dataclasses.replace(inst, scenarios=scen, timeline=())


def objective_time_s(inst: Instance, plan: Plan, cluster=None) -> float:
    """`plan`'s iteration time as the planner minimises it, on `cluster` (default: the
    instance's): the predicted time times the quantile objective's factor
    (cost/trust.objective_factor_of at the plan's memory tier, solver/memory_tiers.py; 1 for
    `mean`). The timeline counts iterations in these
    units, so that a scenario optimum's proved bound (in the same units) bounds every choice and
    the weighted solves' minimised times are the times the choice reads."""
    return simulate(inst, plan, cluster=cluster).iter_time_s * objective_factor_of(plan_tier(inst, plan), plan)


class NoTimelinePlan(Exception):
    """No scenario's search returned a plan, so there is no candidate to choose from: every
    scenario proved infeasible (`status` "infeasible"), or the time limit stopped a search
    before any plan ("timeout")."""

    def __init__(self, status: str, solve_time_s: float):
        super().__init__(status)
        self.status = status
        self.solve_time_s = solve_time_s


def _iterations_upper_bound(periods: list[tuple[int, float]], optimum: dict[int, SolveResult]) -> float:
    """Iterations no choice of plans exceeds: each period at most H_p / (a lower bound of its
    scenario's optimum); inf without a positive bound for every period's scenario (a limit that
    bound nothing)."""
    bounds_s = [optimum[s].bound_s for s, _ in periods]
    if not all(b is not None and b > 0 for b in bounds_s):
        return float("inf")
    return sum(dur / b for (_, dur), b in zip(periods, bounds_s))


def plan_timeline(inst: Instance, backend: str = "cpsat", time_limit_s: float = 60.0,
                  progress=None) -> TimelineResult:
    from paraplan.formulations.timeline import timeline_iterations

    t0 = time.perf_counter()
    deadline = t0 + time_limit_s  # one limit for every solve below (solver/commands/limits.py)
    complete = True

    def remaining() -> float | None:
        """Seconds left for the next solve, or None (and the result incomplete) when spent."""
        nonlocal complete
        left = deadline - time.perf_counter()
        if left < 1e-3:
            complete = False
            return None
        return left

    if not inst.timeline:
        raise ValueError("the instance has no timeline: add a `timeline:` section")
    periods = [(p.scenario, p.duration_s) for p in inst.timeline]
    used = sorted({s for s, _ in periods})
    cands: list[Plan] = []
    labels: list[str] = []

    def add(plan: Plan | None, label: str) -> int | None:
        if plan is None:
            return None
        if plan in cands:
            return cands.index(plan)
        cands.append(plan)
        labels.append(label)
        return len(cands) - 1

    optimum: dict[int, SolveResult] = {}
    for s in used:
        # every scenario needs its optimum (or a bound): each keeps at least a slice of the limit
        left = max(deadline - time.perf_counter(), 1e-3) / (len(used) - used.index(s))
        optimum[s] = search(inst.with_cluster(inst.scenarios[s].cluster), backend, left)
        complete = complete and optimum[s].status == "optimal"
        add(optimum[s].plan, f"optimum of {inst.scenarios[s].name}")
        if progress:
            progress(f"scenario {inst.scenarios[s].name}: {optimum[s].status} {optimum[s].objective_s}")
    # the extreme points of the plans' times on the used scenarios (module docstring)
    if len(used) > 1:
        def solve(lam):
            left = remaining()
            if left is None:
                return None
            w = {s: float(x) for s, x in zip(used, lam) if x > 0}
            res = search(_weighted(inst, w), backend, left, objective="expected")
            if res.plan is None:
                return None
            t = [objective_time_s(inst, res.plan, inst.scenarios[s].cluster) for s in used]
            if res.status != "optimal":  # a plan, but no proof: kept as a candidate only
                add(res.plan, "weighted, unproved")
                return None
            return res.plan, t, res.tolerance_s + REL_TOL * max(1.0, res.quantile_s)
        start = [(optimum[s].plan, [objective_time_s(inst, optimum[s].plan, inst.scenarios[u].cluster)
                                    for u in used]) for s in used if optimum[s].plan is not None]
        plans, _, found_all = extreme_points(
            solve, len(used), start,
            progress=(lambda m: progress(f"timeline: {m}")) if progress else None)
        complete = complete and found_all
        for c in plans:
            add(c, "extreme point of the scenarios' times")
    if not cands:  # the selection MILP needs a candidate (formulations/timeline.choose_plans)
        proved = all(optimum[s].status == "infeasible" for s in used)
        raise NoTimelinePlan("infeasible" if proved else "timeout", time.perf_counter() - t0)
    n_scen = len(inst.scenarios)
    times = [[objective_time_s(inst, c, inst.scenarios[s].cluster) if s in used else float("inf")
              for s in range(n_scen)] for c in cands]
    sw = switch_time_s(inst.model, inst.switching)
    choice = choose_plans(times, periods, sw)
    upper = _iterations_upper_bound(periods, optimum)
    static = [timeline_iterations(times, periods, sw, [j] * len(periods)) for j in range(len(cands))]
    # always switching to each period's scenario optimum; a limit that left a scenario without
    # one (no plan within it) has that period follow the fastest candidate found for it
    follow_plan = [cands.index(optimum[s].plan) if optimum[s].plan is not None
                   else min(range(len(cands)), key=lambda j: times[j][s]) for s, _ in periods]
    return TimelineResult(choice=choice, candidates=cands, candidate_labels=labels, times_s=times,
                          upper_bound_iterations=upper, static_iterations=max(static),
                          follow_iterations=timeline_iterations(times, periods, sw, follow_plan),
                          switch_s=sw, solve_time_s=time.perf_counter() - t0, complete=complete)
