"""Multi-period plan selection: which plan to run in each period of a known network timeline.

Sets
    P = {0..p-1}   periods, in time order; period p has scenario sigma(p) and duration H_p [s]
    J              candidate plans

Parameters
    t[j][sigma]  [s]  iteration time of candidate j in scenario sigma (re-simulated by cost/)
    S            [s]  training time lost at each change of plan (cost/switching.py)

Variables
    y[p][j] in {0,1}   candidate j runs in period p;  sum_j y[p][j] = 1
    w[p]    in {0,1}   the plan changes at the start of period p (p >= 1)
    l[p][j] >= 0       iterations lost in period p because the change to j took S seconds

Constraints
    w[p] >= y[p][j] - y[p-1][j]                             (a change is counted)
    l[p][j] >= (S_p / t[j][sigma(p)]) * (y[p][j] + w[p] - 1)  (lost only if j runs and changed)
    with S_p = min(S, H_p): a change never costs more than the period it starts

Objective
    maximise  sum_p sum_j ( H_p / t[j][sigma(p)] * y[p][j] - l[p][j] )   iterations completed

i.e. the most training over the timeline, which for a job longer than the timeline is the
shortest training time. Solved by SCIP through OR-Tools (exact up to its tolerances).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.formulations.result import SolverError


@dataclass(frozen=True)
class TimelineChoice:
    status: str  # "optimal" | "feasible"
    plan_per_period: tuple[int, ...]
    switches: tuple[int, ...]  # periods at whose start the plan changes
    iterations: float


def choose_plans(times_s: list[list[float]], periods: list[tuple[int, float]], switch_s: float,
                 time_limit_s: float = 30.0) -> TimelineChoice:
    """times_s[j][sigma]; periods = [(sigma, duration_s)]; returns the best choice of plans."""
    from ortools.linear_solver import pywraplp

    J, P = len(times_s), len(periods)
    if J == 0 or P == 0:
        raise ValueError("choose_plans needs at least one candidate and one period")
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        raise SolverError("backend 'scip': this OR-Tools build has no SCIP solver")
    solver.SuppressOutput()
    y = [[solver.BoolVar(f"y_p{p}_j{j}") for j in range(J)] for p in range(P)]
    w = [None] + [solver.BoolVar(f"w_p{p}") for p in range(1, P)]
    gain = []
    for p, (sigma, dur) in enumerate(periods):
        solver.Add(sum(y[p]) == 1)
        for j in range(J):
            rate = 1.0 / times_s[j][sigma]
            gain.append(dur * rate * y[p][j])
            if p == 0:
                continue
            solver.Add(w[p] >= y[p][j] - y[p - 1][j])
            lost = solver.NumVar(0, solver.infinity(), f"l_p{p}_j{j}")
            solver.Add(lost >= min(switch_s, dur) * rate * (y[p][j] + w[p] - 1))
            gain.append(-1 * lost)
    solver.Maximize(sum(gain))
    solver.SetTimeLimit(max(1, math.ceil(time_limit_s * 1000)))
    code = solver.Solve()
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        raise SolverError(f"SCIP returned status {code} for the timeline selection")
    chosen = tuple(max(range(J), key=lambda j: y[p][j].solution_value()) for p in range(P))
    switches = tuple(p for p in range(1, P) if chosen[p] != chosen[p - 1])
    return TimelineChoice(status="optimal" if code == pywraplp.Solver.OPTIMAL else "feasible",
                          plan_per_period=chosen, switches=switches,
                          iterations=timeline_iterations(times_s, periods, switch_s, chosen))


def timeline_iterations(times_s, periods, switch_s: float, chosen) -> float:
    """Exact iterations completed by a choice of plans (the objective, re-evaluated)."""
    total = 0.0
    for p, (sigma, dur) in enumerate(periods):
        j = chosen[p]
        lost = min(switch_s, dur) if p > 0 and chosen[p] != chosen[p - 1] else 0.0
        total += (dur - lost) / times_s[j][sigma]
    return total
