"""Simulate one training iteration of a plan: time breakdown, throughput, memory per stage.

One simulator for every plan: `simulate_classes` prices a plan of replica classes on a cluster
of node groups (each class's pipeline, the slowest replica, the slowest sync, memory per stage of
every class); `simulate` prices a homogeneous plan, the one-class case, stage by stage. Both
split the iteration time into the exposed parts of its critical path the same way
(`critical_path`): the slowest replica's slowest stage, its pipeline bubble, then the slowest
gradient sync and optimizer step.

The iteration time is computed from the same per-stage coefficients that the formulations
optimise over (cost/coefficients.py, cost/class_coefficients.py + cost/schedule.py), so a
solver's objective and this re-simulation agree by construction up to the solvers' integer
quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost import dualpipe, schedule
from paraplan.cost.class_coefficients import class_coefficients, replica_time_s
from paraplan.cost.coefficients import StageCoefficients, build
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import megatron_tflops_per_gpu, model_flops_per_token
from paraplan.cost.partition import plan_layer_fn
from paraplan.cost.plan_specs import Cluster, ClusterInstance, Plan
from paraplan.cost.specs import Instance, PipelineSchedule


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


def critical_path(c: StageCoefficients, m: int, n: np.ndarray, r: np.ndarray, v: int,
                  sync_s: float) -> tuple[dict[str, float], dict[str, float], int]:
    """(exposed, overlapped, pacing stage) of one replica's 1F1B pipeline (interleaved with v
    model chunks, or under c's zero-bubble schedule) over its stages with `m` micro-batches,
    followed by a sync and step of `sync_s`: the exposed parts of its pacing stage k (the
    slowest; under a zero-bubble schedule the one whose path is longest) times m, the bubble
    (the other stages' passes over v), then the sync; they sum to schedule.pipeline_time_s +
    sync_s."""
    t = schedule.stage_times_s(c, n, r)
    saving = schedule.drain_savings_s(c, n)
    # each stage's pass through the fill and drain: T_s, or under a zero-bubble schedule
    # T_s - k W_s, with the pacing stage the one whose path is longest (schedule.pipeline_time_s)
    passes = t if saving is None else np.maximum(t - saving, 0.0)
    k = int(np.argmax(t)) if saving is None else int(np.argmax(m * t + (passes.sum() - passes) / v))
    exposed = {name: m * n[k] * val for name, val in c.layer_parts.items()}
    exposed["recompute"] = m * r[k] * c.recompute_time_s[k]
    for name, val in c.stage_parts[k].items():  # (slowest_rank: a layer part and a stage part)
        exposed[name] = exposed.get(name, 0.0) + m * val
    exposed["pipeline_bubble"] = float(passes.sum() - passes[k]) / v
    exposed["grad_sync_and_optimizer"] = sync_s
    exposed = {key: float(val) for key, val in exposed.items()}
    overlapped = {name: float(m * n[k] * val) for name, val in c.overlapped_per_layer_s.items()
                  if name != "dp_grad_sync"}
    overlapped["dp_grad_sync"] = float(n[k] * c.overlapped_per_layer_s.get("dp_grad_sync", 0.0))
    return exposed, overlapped, k


def simulate(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
             reserve_bytes: float = 0.0, coeffs: StageCoefficients | None = None) -> Breakdown:
    plan.check_against(inst)
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return _simulate_dualpipe(inst, plan, net, reserve_bytes)
    c = coeffs if coeffs is not None else build(inst, plan.flat_outer, net, reserve_bytes,
                                                layer_fn=plan_layer_fn(plan.partitions))
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)

    t = schedule.stage_times_s(c, n, r)
    d = schedule.sync_times_s(c, n)
    mem = schedule.stage_mem_bytes(c, n, r)  # with the short chunks' correction (plan.outer's flags)
    iter_time = float(schedule.iteration_time_s(c, n, r))
    exposed, overlapped, k = critical_path(c, plan.num_micro_batches, n, r, plan.virtual_stages,
                                           float(d.max()))
    assert abs(sum(exposed.values()) - iter_time) <= 1e-9 * max(1.0, iter_time)

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
    """A DualPipe plan (cost/dualpipe.py): the breakdown of its bottleneck device."""
    return _dualpipe_breakdown(dualpipe.iteration(inst, plan, net, reserve_bytes), inst.model,
                               inst.job.global_batch, inst.cluster.num_gpus,
                               inst.cluster.gpu.peak_flops_per_s, plan)


def _dualpipe_breakdown(it, model, global_batch: int, num_gpus: int, peak_flops_per_s: float,
                        plan: Plan) -> Breakdown:
    """The breakdown of DualPipe iteration `it` (cost/dualpipe.iteration) at its bottleneck
    device d, which holds stages d and pp - 1 - d; `stages` lists devices."""
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
    tokens_per_s = global_batch * model.seq_len / it.iter_time_s
    mfu = tokens_per_s * model_flops_per_token(model) / (num_gpus * peak_flops_per_s)
    stages = tuple(
        StageReport(stage=d, layers=int(it.layers[d]), full_recompute_layers=int(it.recompute_layers[d]),
                    time_per_micro_batch_s=float(it.time_per_micro_batch_s[d]),
                    sync_time_s=float(it.sync_s[d]), mem_bytes=float(it.mem_bytes[d]),
                    capacity_bytes=float(it.capacity_bytes[d]))
        for d in range(plan.pp))
    return Breakdown(iter_time_s=it.iter_time_s, tokens_per_s=tokens_per_s, mfu=mfu,
                     exposed_s=exposed, overlapped_s=overlapped, stages=stages, bottleneck_stage=k,
                     megatron_tflops_per_gpu=megatron_tflops_per_gpu(model, tokens_per_s, num_gpus))


# --- plans of replica classes on clusters of node groups ---------------------------------------

@dataclass(frozen=True)
class ClassReport:
    replicas: int
    stage_groups: tuple[str, ...]
    num_micro_batches: int
    pipeline_time_s: float  # one replica, 1F1B, all its micro-batches
    stage_time_s: tuple[float, ...]  # per micro-batch
    mem_bytes: tuple[float, ...]
    capacity_bytes: tuple[float, ...]


@dataclass(frozen=True)
class PlanBreakdown:
    """Iteration time = pipeline_s + sync_s = sum(exposed_s.values()): the critical path's parts
    (critical_path) in the slowest replica's class, as Breakdown splits a homogeneous plan's."""

    iter_time_s: float
    pipeline_s: float  # slowest replica
    sync_s: float  # slowest stage's exposed gradient sync + optimizer step
    tokens_per_s: float
    mfu: float  # against the peak of every GPU in the cluster, used or not
    classes: tuple[ClassReport, ...]
    idle_gpus: int
    # model TFLOP/s per GPU of the cluster, used or not, as Megatron-LM logs it
    # (cost/flops.megatron_flops_per_token)
    megatron_tflops_per_gpu: float
    exposed_s: dict[str, float]
    overlapped_s: dict[str, float]

    @property
    def fits(self) -> bool:
        return all(m <= c for k in self.classes for m, c in zip(k.mem_bytes, k.capacity_bytes))

    @property
    def peak_mem_bytes(self) -> float:
        return max(m for k in self.classes for m in k.mem_bytes)

    def stage_rows(self) -> list[tuple[int, int, str, float, float, float]]:
        """(class, from 1; stage; group; time per micro-batch; memory; capacity) of every stage
        of every class: the table `plan`, `simulate` and `report` show."""
        return [(i + 1, s, g, t, mem, cap) for i, k in enumerate(self.classes)
                for s, (g, t, mem, cap) in enumerate(zip(k.stage_groups, k.stage_time_s, k.mem_bytes,
                                                         k.capacity_bytes))]


def simulate_classes(inst: ClusterInstance, plan: Plan, cluster: Cluster | None = None,
                     net: NetEfficiency = NetEfficiency()) -> PlanBreakdown:
    plan.check_against(inst)
    hc = cluster if cluster is not None else inst.cluster
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return _dualpipe_classes(inst, plan, hc, net)
    coeffs = class_coefficients(inst, hc, plan.outer, net, inst.search.memory_reserve_bytes,
                                tuple(k.num_micro_batches for k in plan.classes),
                                tuple(k.partitions for k in plan.classes))
    reports, pipes, syncs, splits = [], [], [], []
    for c, k in zip(coeffs, plan.classes):
        n = np.array(k.layers_per_stage, float)
        r = np.array(k.full_recompute_layers, float)
        splits.append((n, r))
        pipes.append(replica_time_s(c, k.num_micro_batches, n, r, plan.virtual_stages))
        syncs.append(float(schedule.sync_times_s(c, n).max()))
        reports.append(ClassReport(
            replicas=k.replicas, stage_groups=tuple(hc.groups[g].name for g in k.stage_groups),
            num_micro_batches=k.num_micro_batches, pipeline_time_s=pipes[-1],
            stage_time_s=tuple(float(x) for x in schedule.stage_times_s(c, n, r)),
            mem_bytes=tuple(float(x) for x in schedule.stage_mem_bytes(c, n, r)),
            capacity_bytes=tuple(float(x) for x in c.capacity_bytes)))
    iter_time = max(pipes) + max(syncs)
    slowest = int(np.argmax(pipes))
    exposed, overlapped, _ = critical_path(coeffs[slowest], plan.classes[slowest].num_micro_batches,
                                           *splits[slowest], plan.virtual_stages, max(syncs))
    if abs(sum(exposed.values()) - iter_time) > 1e-9 * max(1.0, iter_time):
        # a class across node groups: its named parts are its first group's layer (class_coefficients),
        # so its slowest stage on another group is not split into parts: the pipeline as one
        exposed, overlapped = {"pipeline": max(pipes), "grad_sync_and_optimizer": max(syncs)}, {}
    tokens_per_s = inst.job.global_batch * inst.model.seq_len / iter_time
    peak = sum(g.num_gpus * g.cluster.gpu.peak_flops_per_s for g in hc.groups)
    used = sum(plan.outer.gpus_per_group(len(hc.groups)))
    return PlanBreakdown(iter_time_s=iter_time, pipeline_s=max(pipes), sync_s=max(syncs),
                         tokens_per_s=tokens_per_s,
                         mfu=tokens_per_s * model_flops_per_token(inst.model) / peak,
                         classes=tuple(reports), idle_gpus=hc.num_gpus - used,
                         megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s,
                                                                         hc.num_gpus),
                         exposed_s=exposed, overlapped_s=overlapped)


def _dualpipe_classes(inst: ClusterInstance, plan: Plan, hc: Cluster,
                      net: NetEfficiency) -> PlanBreakdown:
    """A DualPipe plan, one class on one group (the loaders refuse DualPipe on a mixed
    cluster), priced by cost/dualpipe.iteration as `simulate` prices it on its homogeneous
    instance; its rows are devices (device d holds stages d and pp - 1 - d): the time per
    micro-batch of its two stages' mean, and its memory."""
    if len(hc.groups) != 1 or len(plan.classes) != 1:
        raise ValueError("a DualPipe plan runs one replica class on one node group")
    (k,) = plan.classes
    # the one class as this route always priced it: without its layer plan or embedding/loss slots
    flat = Plan.of(replace(plan.flat_outer, embedding_in_split=False, loss_in_split=False),
                   k.layers_per_stage, k.full_recompute_layers)
    it = dualpipe.iteration(inst.group_alone(0, hc), flat, net,
                            inst.search.memory_reserve_bytes)
    bd = _dualpipe_breakdown(it, inst.model, inst.job.global_batch, hc.num_gpus,
                             hc.groups[0].cluster.gpu.peak_flops_per_s, flat)
    report = ClassReport(replicas=k.replicas, stage_groups=tuple(hc.groups[g].name for g in k.stage_groups),
                         num_micro_batches=k.num_micro_batches,
                         pipeline_time_s=float(it.steady_s.max() + it.bubble_s),
                         stage_time_s=tuple(float(x) for x in it.time_per_micro_batch_s),
                         mem_bytes=tuple(float(x) for x in it.mem_bytes),
                         capacity_bytes=tuple(float(x) for x in it.capacity_bytes))
    return PlanBreakdown(iter_time_s=it.iter_time_s, pipeline_s=report.pipeline_time_s,
                         sync_s=float(it.sync_s.max()), tokens_per_s=bd.tokens_per_s, mfu=bd.mfu,
                         classes=(report,), idle_gpus=hc.num_gpus - plan.outer.gpus_per_group(1)[0],
                         megatron_tflops_per_gpu=bd.megatron_tflops_per_gpu,
                         exposed_s=bd.exposed_s, overlapped_s=bd.overlapped_s)
