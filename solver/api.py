"""paraplan's Python API: the functions the commands are built from, in one place.

    from paraplan.solver import api
    inst = api.load_instance("instances/llama3-8b-64xH100.yaml")
    inst = api.override_search(inst, {"tp": [1, 2, 4], "zero": [1]})   # like --search
    res = api.plan(inst)                    # SolveResult: status, plan, iter_time_s, bound_s, gap
    bd = api.simulate(inst, res.plan)       # Breakdown: exposed_s, overlapped_s, stages, mfu
    best = api.top_k(inst, 5, within_pct=3)  # SolveResult; .ranked: the 5 best distinct outer configurations
    mem = api.memory_by_category(inst, res.plan)   # per stage: weights, grads, ... runtime
    html = api.build_report(inst, res)      # the `paraplan report` page as a string

Every function validates its input the way the command line does: bad input raises
cost.errors.InstanceError (one message naming the file, the field and the fix); an argument of
the wrong kind (a path where an Instance belongs, None, an unknown backend) names the function
and the argument in place of the file and the field: `<api>: plan(inst): expected an Instance,
got the string 'x.yaml' ...`.
"""

from __future__ import annotations

import math
from typing import Any

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.readers.fields import describe
from paraplan.cost.readers.instance import load_instance, load_instance_parts
from paraplan.cost.readers.plan_reader import load_plan, plan_from_mapping
from paraplan.cost.readers.search import override_search
from paraplan.cost.memory_breakdown import CATEGORIES as MEMORY_CATEGORIES
from paraplan.cost.simulate import simulate as _simulate
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Plan
from paraplan.solver.report.compare import compare
from paraplan.solver.search import search
from paraplan.solver.planner import SolveResult
from paraplan.solver.solve import solve
from paraplan.solver.report.page import build_report as _build_report
from paraplan.solver.commands.schema import validate as validate_json

__all__ = ["load_instance", "load_instance_parts", "load_plan",
           "plan_from_mapping", "override_search", "plan", "search", "simulate", "top_k",
           "compare", "memory_by_category", "MEMORY_CATEGORIES", "build_report", "validate_json"]

# the backends `paraplan plan --backend` offers (solver/commands/planning.py)
BACKENDS = ("dp", "cpsat", "milp")

# what each argument must be, and how to get one: (type, what it is, the fix)
_KINDS = {
    "inst": (Instance, "an Instance", "load it first: api.load_instance(path)"),
    "plan": (Plan, "a Plan", "pass a plan: api.plan(inst).plan, api.load_plan(path, inst) or"
             " api.plan_from_mapping({...}, inst)"),
    "result": (SolveResult, "a SolveResult", "pass what api.plan(inst) returned"),
}


def _error(func: str, arg: str, problem: str, fix: str) -> InstanceError:
    return InstanceError("<api>", f"{func}({arg})", problem, fix)


def _check(func: str, **args: Any) -> None:
    """Each argument `name=value` is of the kind _KINDS[name] names, else one InstanceError
    naming the function and the argument (never an AttributeError deep inside)."""
    for name, value in args.items():
        kind, what, fix = _KINDS[name]
        if not isinstance(value, kind):
            hint = " (a path: load it first)" if isinstance(value, str) else ""
            raise _error(func, name, f"expected {what}, got {describe(value)}{hint}", fix)


def _check_solve(func: str, backend: Any, time_limit_s: Any) -> None:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise _error(func, "backend", f"unknown backend {describe(backend)}", "use one of "
                     + ", ".join(BACKENDS))
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) \
            or not (math.isfinite(time_limit_s) and time_limit_s > 0):
        raise _error(func, "time_limit_s", f"expected a finite number of seconds > 0, got"
                     f" {describe(time_limit_s)}", "give e.g. time_limit_s=60")


def plan(inst: Instance, backend: str = "dp", time_limit_s: float = 60.0, threads: int = 1,
         progress=None) -> SolveResult:
    """The optimal plan of `inst` over its declared space (`paraplan plan`; solver/solve.py):
    backend "dp", "cpsat" or "milp"; of any classes where the search allows them."""
    _check("plan", inst=inst)
    _check_solve("plan", backend, time_limit_s)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise _error("plan", "threads", f"expected an integer >= 1, got {describe(threads)}",
                     "give e.g. threads=1")
    return solve(inst, backend, time_limit_s, threads, progress)


def simulate(inst: Instance, p: Plan, **options) -> Any:
    """One iteration of plan `p` on `inst` (`paraplan simulate`; cost/simulate.py): a
    Breakdown. A plan that does not match the instance is an InstanceError, as on the command
    line."""
    _check("simulate", inst=inst, plan=p)
    try:
        return _simulate(inst, p, **options)
    except ConfigError as e:
        raise _error("simulate", "plan", str(e), "make the plan consistent with the instance") from None


def top_k(inst: Instance, k: int, within_pct: float | None = None, backend: str = "cpsat",
          time_limit_s: float = 60.0) -> SolveResult:
    """The k best distinct outer configurations of `inst` (`paraplan plan --top`;
    solver/solve.py), within `within_pct` percent of the optimum when given: the result's
    `ranked`, best first (planner.Ranked: plan, objective_s, breakdown, quantile_s)."""
    _check("top_k", inst=inst)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise _error("top_k", "k", f"expected an integer >= 1, got {describe(k)}", "ask for e.g. k=5")
    if within_pct is not None and (isinstance(within_pct, bool) or not isinstance(within_pct, (int, float))
                                   or not within_pct >= 0):
        raise _error("top_k", "within_pct", f"expected a percentage >= 0 or None, got"
                     f" {describe(within_pct)}", "give e.g. within_pct=3")
    _check_solve("top_k", backend, time_limit_s)
    return solve(inst, backend, time_limit_s, winners=k, within_pct=within_pct)


def memory_by_category(inst: Instance, p: Plan) -> list[dict[str, float]]:
    """Per pipeline stage, bytes per GPU in each of MEMORY_CATEGORIES (`paraplan memory`)."""
    from paraplan.cost.memory_breakdown import stage_categories_bytes
    from paraplan.solver.report.page import plan_coefficients
    _check("memory_by_category", inst=inst, plan=p)
    try:
        p.check_against(inst)
    except ConfigError as e:
        raise _error("memory_by_category", "plan", str(e), "make the plan consistent with the"
                     " instance") from None
    return stage_categories_bytes(inst, p, plan_coefficients(inst, p))


def build_report(inst: Instance, result: SolveResult, **options) -> str:
    """The `paraplan report` page of `result`, a SolveResult of api.plan(inst) or
    api.search(inst) (any plan: one class or several, on one group or many), as one HTML string
    (solver/report/page.py)."""
    _check("build_report", inst=inst, result=result)
    if result.plan is not None:
        try:
            result.plan.check_against(inst)
        except ConfigError as e:
            raise _error("build_report", "result", f"its plan does not match the instance: {e}",
                         "pass the result of api.plan(inst) for this inst") from None
    return _build_report(inst, result, **options)
