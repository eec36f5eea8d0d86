"""A plan's simulated breakdown with its memory per GPU by category (`paraplan memory`): the one
place that dispatches on the plan's shape for it (a symmetric plan of replica classes, or an
asymmetric pipeline with a data-parallel degree per stage, cost/asymmetric.py)."""

from __future__ import annotations

from paraplan.cost import asymmetric
from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.memory_breakdown import asymmetric_categories_bytes, class_categories_bytes
from paraplan.cost.plan_specs import Plan
from paraplan.cost.simulate import Breakdown, simulate
from paraplan.cost.specs import Instance


def plan_memory(inst: Instance, plan: Plan, reserve_bytes: float) -> tuple[Breakdown, list[list[dict[str, float]]]]:
    """(simulate's breakdown, bytes per category per class and stage) of a plan on node groups
    (a flat instance: its one group), `reserve_bytes` of every GPU kept back: the one place
    `memory` dispatches on the plan's shape. A symmetric plan is priced once
    (class_coefficients, shared with simulate); an asymmetric pipeline (cost/asymmetric.py) by
    asymmetric_categories_bytes, its one class's stages each on its own degree."""
    if asymmetric.is_asymmetric(plan.outer):
        return simulate(inst, plan, reserve_bytes=reserve_bytes), [asymmetric_categories_bytes(inst, plan, reserve_bytes)]
    coeffs = class_coefficients(inst, inst.cluster, plan.outer, reserve_bytes=reserve_bytes,
                                num_micro_batches=tuple(k.num_micro_batches for k in plan.classes),
                                partitions=tuple(k.partitions for k in plan.classes))
    return simulate(inst, plan, reserve_bytes=reserve_bytes, coeffs=coeffs), class_categories_bytes(inst, plan, coeffs)
