"""The framework's recompute pattern in the CP-SAT and MILP formulations: one solve per value.

A framework runs one recompute setting for every stage of every class (cost/recompute_patterns.py:
Megatron-LM's --recompute-num-layers N, torchtitan's every k-th block). With the value fixed, each
r_ks is a function of n_ks, which the formulations state as the constraint C2_pattern
(formulations/multiclass.py: allowed (n, r) pairs in CP-SAT; one binary per layer count in the
MILP). The inner problem's optimum is then the least over the values of the fixed-value optima:

    min over value i of  OPT_i,     OPT_i the formulation with C2_pattern of value i,

and its valid bound is the least of the values' bounds (an infeasible value bounds nothing
below, +inf). Values whose counts repeat on every class's every layer count give the same model
and are solved once. The split DP reads the same pattern in formulations/split_dp.py.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.formulations.multiclass import MultiClassProblem, MultiClassResult

Solve = Callable[[MultiClassProblem, float], MultiClassResult]

# A value's counts are a (stages x chunk counts) table per class, and C2_pattern states one
# allowed pair (CP-SAT) or one binary (MILP) per entry. Above this many entries (the million-layer
# probes of tests/robustness: 1,024 stages x 10^6 counts, 7.6 GiB a table) the tables alone
# would exhaust memory and the model could not be built within any time limit: the backend
# then answers as a time limit would (no plan, no bound), and the search keeps its other answers.
PATTERN_TABLE_CAP = 5_000_000


def tables_too_large(p: MultiClassProblem) -> bool:
    """Whether p's pattern tables exceed PATTERN_TABLE_CAP entries (the comment above): then
    neither a backend nor a bound may list its values."""
    return sum(p.pp(k) for k in range(p.classes)) * (p.slots // p.virtual_stages) > PATTERN_TABLE_CAP


def distinct_values(p: MultiClassProblem) -> list[int]:
    """The pattern's value indices whose counts differ on some class, stage and layer count (the
    first of each kind, in cost/recompute_patterns.options' order)."""
    seen, out = set(), []
    for i in range(p.recompute_values()):
        key = b"".join(p.recompute_counts(k, i)[0].tobytes() for k in range(p.classes))
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out


def solve_over_pattern(p: MultiClassProblem, solve: Solve, time_limit_s: float) -> MultiClassResult:
    """`solve` (a CP-SAT or MILP backend: problem, time limit) on p, once per value of p's
    pattern when the framework fixes one (module docstring), and their combined answer."""
    if (p.recompute_pattern is RecomputePattern.PER_STAGE or not p.allow_full_recompute
            or p.recompute_value is not None):
        return solve(p, time_limit_s)
    start = time.perf_counter()
    if tables_too_large(p):
        return combine([None], start)
    results = []
    for i in distinct_values(p):
        left = time_limit_s - (time.perf_counter() - start)
        if left <= 0:
            results.append(None)
            break
        results.append(solve(replace(p, recompute_value=i), left))
    return combine(results, start)


def combine(results: list[MultiClassResult | None], start: float) -> MultiClassResult:
    """The best of the values' answers (None: a value the time limit left unsolved); "optimal"
    only when every value was solved or proved infeasible."""
    done = [x for x in results if x is not None]
    found = [x for x in done if x.objective_s is not None]
    complete = len(done) == len(results) and all(x.status in ("optimal", "infeasible") for x in done)
    bounds = [math.inf if x.status == "infeasible" else x.bound_s for x in done]
    bound = (None if not complete or any(b is None for b in bounds) else min(bounds, default=math.inf))
    tol = max((x.tolerance_s for x in done), default=0.0)
    backend = done[0].backend if done else "cpsat"
    if not found:
        status = "infeasible" if complete else "timeout"
        return MultiClassResult.unsolved(status, backend, start, math.inf if status == "infeasible" else bound,
                                         tol)
    best = min(found, key=lambda x: x.objective_s)
    return replace(best, status="optimal" if complete else "feasible", bound_s=bound,
                   wall_time_s=time.perf_counter() - start, tolerance_s=tol)
