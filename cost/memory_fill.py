"""How full a plan fills its GPUs' memory, as the trust band counts it (cost/trust.py: a fill
beyond every published row of the plan's scale is a distance feature). Its own module because
both the stored cross-validation (cost/crossval.py, which stores each published row's fill) and
the band read it, and cost/trust.py reads the stored cross-validation."""

from __future__ import annotations

import numpy as np

from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance


def peak_memory_fraction(inst: Instance, plan: Plan) -> float | None:
    """The plan's fullest stage of any replica class: its priced peak memory over its GPU's HBM
    (no reserve), from the memory terms alone (cost/simulate.simulate prices the same with the
    times: a plan's command simulates it once); None for DualPipe, whose memory
    cost/dualpipe.py prices. One pricing for every plan shape: each class's stages as
    class_coefficients prices them on their groups (an asymmetric pipeline's by
    cost/asymmetric.py), so a one-class plan on every GPU of one group reads the stages its
    flat plan file prices (tests/cost/test_trust_one_band.py checks the two agree)."""
    from paraplan.cost import schedule
    from paraplan.cost.class_coefficients import class_coefficients
    from paraplan.cost.plan_specs import is_asymmetric
    from paraplan.cost.specs import PipelineSchedule
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return None
    if is_asymmetric(plan.outer):  # a data-parallel degree per stage: its own rows
        from paraplan.cost import asymmetric
        k = plan.classes[0]
        ac = asymmetric.coefficients(inst, plan.outer, reserve_bytes=0.0)
        return float(np.max(asymmetric.mem_bytes(ac, np.array(k.layers_per_stage, float),
                                                 np.array(k.full_recompute_layers, float)) / ac.rows.capacity_bytes))
    coeffs = class_coefficients(inst, inst.cluster, plan.outer, reserve_bytes=0.0,
                                num_micro_batches=tuple(k.num_micro_batches for k in plan.classes),
                                partitions=tuple(k.partitions for k in plan.classes))
    return max(float(np.max(schedule.stage_mem_bytes(c, np.array(k.layers_per_stage, float),
                                                     np.array(k.full_recompute_layers, float)) / c.capacity_bytes))
               for c, k in zip(coeffs, plan.classes, strict=True))


def row_memory_fill(row: dict) -> float | None:
    """A published row's peak_memory_fraction, priced as it ran (its layer split and
    recomputation, cost/calibration.row_to_instance_plan): the memory model is not fitted,
    so the fill is the same in and out of sample."""
    from paraplan.cost.calibration import row_to_instance_plan
    from paraplan.cost.readers.gpus import load_catalogue
    inst, plan = row_to_instance_plan(row, load_catalogue())
    return peak_memory_fraction(inst, plan)
