"""Simulate one training iteration of a plan: time breakdown, throughput, memory per stage.

The iteration time is computed from the same per-stage coefficients that the formulations
optimise over (cost/coefficients.py + cost/schedule.py), so a solver's objective and this
re-simulation agree by construction up to the solvers' integer quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost import dualpipe, schedule
from paraplan.cost.coefficients import StageCoefficients, build
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import megatron_tflops_per_gpu, model_flops_per_token
from paraplan.cost.partition import plan_layer_fn
from paraplan.cost.specs import Instance, PipelineSchedule, Plan


@dataclass(frozen=True)
class StageReport:
    stage: int
    layers: int
    full_recompute_layers: int
    time_per_micro_batch_s: float
    sync_time_s: float
    mem_bytes: float
    capacity_bytes: float


@dataclass(frozen=True)
class Breakdown:
    """Iteration time = sum(exposed_s.values()); `overlapped_s` is hidden behind compute."""

    iter_time_s: float
    tokens_per_s: float
    mfu: float
    exposed_s: dict[str, float]
    overlapped_s: dict[str, float]
    stages: tuple[StageReport, ...]
    bottleneck_stage: int
    # model TFLOP/s per GPU as Megatron-LM logs it (cost/flops.megatron_flops_per_token), the
    # figure NVIDIA's MoE tables publish
    megatron_tflops_per_gpu: float

    @property
    def fits(self) -> bool:
        return all(s.mem_bytes <= s.capacity_bytes for s in self.stages)

    @property
    def peak_mem_bytes(self) -> float:
        return max(s.mem_bytes for s in self.stages)


def simulate(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
             reserve_bytes: float = 0.0, coeffs: StageCoefficients | None = None) -> Breakdown:
    plan.check_against(inst)
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return _simulate_dualpipe(inst, plan, net, reserve_bytes)
    c = coeffs if coeffs is not None else build(inst, plan.outer, net, reserve_bytes,
                                                layer_fn=plan_layer_fn(plan.partitions))
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    m, v = plan.num_micro_batches, plan.virtual_stages

    t = schedule.stage_times_s(c, n, r)
    d = schedule.sync_times_s(c, n)
    mem = schedule.stage_mem_bytes(c, n, r) + schedule.uneven_chunk_mem_bytes(
        c, n, r, plan.embedding_in_split, plan.loss_in_split)
    iter_time = float(schedule.iteration_time_s(c, n, r))

    k = int(np.argmax(t))
    exposed = {name: m * n[k] * val for name, val in c.layer_parts.items()}
    exposed["recompute"] = m * r[k] * c.recompute_time_s[k]
    for name, val in c.stage_parts[k].items():  # (slowest_rank: a layer part and a stage part)
        exposed[name] = exposed.get(name, 0.0) + m * val
    exposed["pipeline_bubble"] = float(t.sum() - t[k]) / v
    exposed["grad_sync_and_optimizer"] = float(d.max())
    exposed = {key: float(val) for key, val in exposed.items()}
    assert abs(sum(exposed.values()) - iter_time) <= 1e-9 * max(1.0, iter_time)

    overlapped = {name: float(m * n[k] * val) for name, val in c.overlapped_per_layer_s.items()
                  if name != "dp_grad_sync"}
    overlapped["dp_grad_sync"] = float(n[k] * c.overlapped_per_layer_s.get("dp_grad_sync", 0.0))

    tokens = inst.job.global_batch * inst.model.seq_len
    tokens_per_s = tokens / iter_time
    mfu = tokens_per_s * model_flops_per_token(inst.model) / (
        inst.cluster.num_gpus * inst.cluster.gpu.peak_flops_per_s)
    stages = tuple(
        StageReport(stage=s, layers=int(n[s]), full_recompute_layers=int(r[s]),
                    time_per_micro_batch_s=float(t[s]), sync_time_s=float(d[s]),
                    mem_bytes=float(mem[s]), capacity_bytes=float(c.capacity_bytes[s]))
        for s in range(plan.pp))
    return Breakdown(iter_time_s=iter_time, tokens_per_s=tokens_per_s, mfu=mfu, exposed_s=exposed,
                     overlapped_s=overlapped, stages=stages, bottleneck_stage=k,
                     megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s,
                                                                             inst.cluster.num_gpus))


def _simulate_dualpipe(inst: Instance, plan: Plan, net: NetEfficiency,
                       reserve_bytes: float) -> Breakdown:
    """A DualPipe plan (cost/dualpipe.py): the breakdown of its bottleneck device d, which
    holds stages d and pp - 1 - d; `stages` lists devices."""
    it = dualpipe.iteration(inst, plan, net, reserve_bytes)
    c, k, m = it.coeffs, it.bottleneck_device, plan.num_micro_batches
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    pair = (k, plan.pp - 1 - k)
    layers_k = float(n[pair[0]] + n[pair[1]])
    exposed = {name: m / 2 * layers_k * val for name, val in c.layer_parts.items()}
    exposed["recompute"] = m / 2 * sum(r[s] * c.recompute_time_s[s] for s in pair)
    for s in pair:
        for name, val in c.stage_parts[s].items():
            exposed[name] = exposed.get(name, 0.0) + m / 2 * val
    exposed["pipeline_bubble"] = it.bubble_s
    exposed["grad_sync_and_optimizer"] = float(it.sync_s.max())
    exposed = {key: float(val) for key, val in exposed.items()}
    assert abs(sum(exposed.values()) - it.iter_time_s) <= 1e-9 * max(1.0, it.iter_time_s)
    overlapped = {name: float(m / 2 * layers_k * val) for name, val in c.overlapped_per_layer_s.items()
                  if name != "dp_grad_sync"}
    overlapped["dp_grad_sync"] = float(layers_k * c.overlapped_per_layer_s.get("dp_grad_sync", 0.0))
    tokens_per_s = inst.job.global_batch * inst.model.seq_len / it.iter_time_s
    mfu = tokens_per_s * model_flops_per_token(inst.model) / (
        inst.cluster.num_gpus * inst.cluster.gpu.peak_flops_per_s)
    stages = tuple(
        StageReport(stage=d, layers=int(it.layers[d]), full_recompute_layers=int(it.recompute_layers[d]),
                    time_per_micro_batch_s=float(it.time_per_micro_batch_s[d]),
                    sync_time_s=float(it.sync_s[d]), mem_bytes=float(it.mem_bytes[d]),
                    capacity_bytes=float(it.capacity_bytes[d]))
        for d in range(plan.pp))
    return Breakdown(iter_time_s=it.iter_time_s, tokens_per_s=tokens_per_s, mfu=mfu,
                     exposed_s=exposed, overlapped_s=overlapped, stages=stages, bottleneck_stage=k,
                     megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s,
                                                                             inst.cluster.num_gpus))
