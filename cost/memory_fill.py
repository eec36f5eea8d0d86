"""How full a plan fills its GPUs' memory, as the trust band counts it (cost/trust.py: a fill
beyond every published row of the plan's scale is a distance feature). Its own module because
both the stored cross-validation (cost/crossval.py, which stores each published row's fill) and
the band read it, and cost/trust.py reads the stored cross-validation."""

from __future__ import annotations

import numpy as np

from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance


def peak_memory_fraction(inst: Instance, plan: Plan) -> float | None:
    """The plan's fullest stage: its priced peak memory over its GPU's HBM (no reserve), from
    the memory terms alone (cost/simulate.simulate prices the same with the times: a plan's
    command simulates it once); None for DualPipe, whose memory cost/dualpipe.py prices."""
    from paraplan.cost import schedule
    from paraplan.cost.coefficients import build
    from paraplan.cost.partition import plan_layer_fn
    from paraplan.cost.specs import PipelineSchedule
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return None
    c = build(inst, plan.flat_outer, layer_fn=plan_layer_fn(plan.partitions))
    mem = schedule.stage_mem_bytes(c, np.array(plan.layers_per_stage, float),
                                   np.array(plan.full_recompute_layers, float))
    return float(np.max(mem / c.capacity_bytes))


def row_memory_fill(row: dict) -> float | None:
    """A published row's peak_memory_fraction, priced as it ran (its layer split and
    recomputation, cost/calibration.row_to_instance_plan): the memory model is not fitted,
    so the fill is the same in and out of sample."""
    from paraplan.cost.calibration import row_to_instance_plan
    from paraplan.cost.readers.gpus import load_catalogue
    inst, plan = row_to_instance_plan(row, load_catalogue())
    return peak_memory_fraction(inst, plan)
