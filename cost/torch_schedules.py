"""A plan's layer split priced under each pipeline schedule torchtitan runs.

torchtitan 0.2 takes torch.distributed.pipelining's schedules by name
(parallelism.pipeline_parallel_schedule): 1F1B, Interleaved1F1B and the zero-bubble
InterleavedZeroBubble and ZBVZeroBubble (cost/schedule.py prices them; TorchSchedule). For one
plan (its degrees, micro-batches and split fixed) each schedule that torch runs with the plan's
pp, virtual stages and micro-batch count (schedule.schedule_problem) is priced on the same
coefficients as cost/simulate.py: its iteration time (schedule.schedule_iteration_time_s) and
its peak memory with the activations it holds (schedule.schedule_in_flight), ZBVZeroBubble with
the output layer on rank 0 where its V puts it (schedule.v_shaped). 1F1B and
Interleaved1F1B reproduce cost/simulate.py's time and memory exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def planned_schedule(plan: Plan) -> TorchSchedule:
    """The schedule the planner priced the plan with: 1F1B, interleaved with v > 1."""
    return TorchSchedule.INTERLEAVED_1F1B if plan.virtual_stages > 1 else TorchSchedule.ONE_F_ONE_B


def schedule_prices(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
                    reserve_bytes: float = 0.0) -> list[SchedulePrice]:
    """Every TorchSchedule torch runs for the plan (none without a pipeline), in enum order."""
    m, v, pp = plan.num_micro_batches, plan.virtual_stages, plan.pp
    kinds = [k for k in TorchSchedule if schedule.schedule_problem(k, pp, v, m) is None]
    if not kinds:
        return []
    c = build(inst, plan.flat_outer, net, reserve_bytes, layer_fn=plan_layer_fn(plan.partitions))
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    o = plan.flat_outer
    w_share = schedule.weight_grad_share(inst.model, o.micro_batch, o.tp, o.cp, o.sequence_parallel)
    out = []
    for kind in kinds:
        ck = schedule.with_in_flight(c, schedule.schedule_in_flight(kind, pp, m, v))
        if kind is TorchSchedule.ZBV_ZERO_BUBBLE:
            ck = schedule.v_shaped(ck)  # the output layer on rank 0
        mem = schedule.stage_mem_bytes(ck, n, r)
        worst = int(np.argmax(mem / ck.capacity_bytes))
        out.append(SchedulePrice(
            kind=kind, iter_time_s=float(schedule.schedule_iteration_time_s(ck, n, r, kind, w_share)),
            peak_mem_bytes=float(mem[worst]), capacity_bytes=float(ck.capacity_bytes[worst]),
            fits=bool(schedule.fits(ck, n, r))))
    return out


def fastest_fitting(prices: list[SchedulePrice]) -> SchedulePrice | None:
    """The fastest schedule that fits memory; the earlier in enum order on a tie."""
    fitting = [p for p in prices if p.fits]
    return min(fitting, key=lambda p: p.iter_time_s) if fitting else None
