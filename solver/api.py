"""paraplan's Python API: the functions the commands are built from, in one place.

    from paraplan.solver import api
    inst = api.load_instance("instances/llama3-8b-64xH100.yaml")
    inst = api.override_search(inst, {"tp": [1, 2, 4], "zero": [1]})   # like --search
    res = api.plan(inst)                    # PlanResult: status, plan, iter_time_s, bound_s, gap
    bd = api.simulate(inst, res.plan)       # Breakdown: exposed_s, overlapped_s, stages, mfu
    best = api.top_k(inst, 5, within_pct=3)  # the 5 best distinct outer configurations
    mem = api.memory_by_category(inst, res.plan)   # per stage: weights, grads, ... runtime
    html = api.build_report(inst, res)      # the `paraplan report` page as a string

Every function validates its input the way the command line does: bad input raises
cost.errors.InstanceError (one message naming the file, the field and the fix).
"""

from __future__ import annotations

from paraplan.cost.hetero_loader import load_hetero_instance
from paraplan.cost.loader import load_instance, load_instance_parts, load_plan, override_search, plan_from_mapping
from paraplan.cost.memory_breakdown import CATEGORIES as MEMORY_CATEGORIES
from paraplan.cost.simulate import simulate
from paraplan.solver.report.compare import compare
from paraplan.solver.hetero_planner import plan_hetero
from paraplan.solver.class_route import plan
from paraplan.solver.report.page import build_hetero_report, build_report
from paraplan.solver.commands.schema import validate as validate_json
from paraplan.solver.top_k import top_k

__all__ = ["load_instance", "load_instance_parts", "load_hetero_instance", "load_plan",
           "plan_from_mapping", "override_search", "plan", "plan_hetero", "simulate", "top_k",
           "compare", "memory_by_category", "MEMORY_CATEGORIES", "build_report",
           "build_hetero_report", "validate_json"]


def memory_by_category(inst, p) -> list[dict[str, float]]:
    """Per pipeline stage, bytes per GPU in each of MEMORY_CATEGORIES (`paraplan memory`)."""
    from paraplan.cost.memory_breakdown import stage_categories_bytes
    from paraplan.solver.report.page import plan_coefficients
    return stage_categories_bytes(inst, p, plan_coefficients(inst, p))
