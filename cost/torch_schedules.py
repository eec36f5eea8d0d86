"""A plan's layer split priced under each pipeline schedule torchtitan runs.

torchtitan 0.2 takes torch.distributed.pipelining's schedules by name
(parallelism.pipeline_parallel_schedule): 1F1B, Interleaved1F1B and the zero-bubble
InterleavedZeroBubble and ZBVZeroBubble (cost/zero_bubble.py). The planner searches them for a
torchtitan job (solver/space.py); for one plan (its degrees, micro-batches and split fixed) each
schedule that torch runs with the plan's pp, virtual stages and micro-batch count
(schedule.schedule_problem) is priced here as the simulator prices the plan run with it
(cost/simulate.py, the outer's zero_bubble mode set): its iteration time and its peak memory,
ZBVZeroBubble with the output layer on rank 0 where its V puts it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.coefficients import build
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.partition import plan_layer_fn
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Plan


@dataclass(frozen=True, slots=True)
class SchedulePrice:
    kind: TorchSchedule
    iter_time_s: float
    peak_mem_bytes: float  # of the stage nearest its capacity
    capacity_bytes: float  # that stage's capacity (HBM less the reserve)
    fits: bool


def schedule_prices(inst: Instance, plan: Plan, reserve_bytes: float = 0.0) -> list[SchedulePrice]:
    """Every TorchSchedule torch runs for the plan (none without a pipeline), in enum order."""
    m, v, pp = plan.num_micro_batches, plan.virtual_stages, plan.pp
    # a V places decoder layers only (solver/export/common.model_chunks: torch's schedules count
    # no embedding or loss slot), so a split holding Megatron's slots is not run as one
    slots = plan.embedding_in_split or plan.loss_in_split
    kinds = [k for k in TorchSchedule if schedule.schedule_problem(k, pp, v, m) is None
             and not (slots and k is TorchSchedule.ZBV_ZERO_BUBBLE)]
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    out = []
    for kind in kinds:
        c = build(inst, replace(plan.flat_outer, zero_bubble=kind.mode), NetEfficiency(), reserve_bytes,
                  layer_fn=plan_layer_fn(plan.partitions))
        mem = schedule.stage_mem_bytes(c, n, r)
        worst = int(np.argmax(mem / c.capacity_bytes))
        out.append(SchedulePrice(
            kind=kind, iter_time_s=float(schedule.iteration_time_s(c, n, r)),
            peak_mem_bytes=float(mem[worst]), capacity_bytes=float(c.capacity_bytes[worst]),
            fits=bool(schedule.fits(c, n, r))))
    return out


def fastest_fitting(prices: list[SchedulePrice]) -> SchedulePrice | None:
    """The fastest schedule that fits memory; the earlier in enum order on a tie."""
    fitting = [p for p in prices if p.fits]
    return min(fitting, key=lambda p: p.iter_time_s) if fitting else None
