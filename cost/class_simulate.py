"""Simulate one iteration of a heterogeneous plan on one network: per-class pipeline times,
the slowest replica, sync, memory per stage, throughput.

Computed from the same class coefficients the inner formulations optimise over
(cost/class_coefficients.py), so a solver's objective and this re-simulation agree up to the
solvers' stated tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import megatron_tflops_per_gpu, model_flops_per_token
from paraplan.cost.class_coefficients import class_coefficients, group_pricing_instance, replica_time_s
from paraplan.cost.plan_specs import Cluster, ClusterInstance, ClassPlan
from paraplan.cost.specs import PipelineSchedule


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

    @property
    def fits(self) -> bool:
        return all(m <= c for k in self.classes for m, c in zip(k.mem_bytes, k.capacity_bytes))

    def stage_rows(self) -> list[tuple[int, int, str, float, float, float]]:
        """(class, from 1; stage; group; time per micro-batch; memory; capacity) of every stage
        of every class: the table `plan`, `simulate` and `report` show."""
        return [(i + 1, s, g, t, mem, cap) for i, k in enumerate(self.classes)
                for s, (g, t, mem, cap) in enumerate(zip(k.stage_groups, k.stage_time_s, k.mem_bytes,
                                                         k.capacity_bytes))]


def simulate_classes(inst: ClusterInstance, plan: ClassPlan, cluster: Cluster | None = None,
                    net: NetEfficiency = NetEfficiency()) -> PlanBreakdown:
    plan.check_against(inst)
    hc = cluster if cluster is not None else inst.cluster
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return _dualpipe(inst, plan, hc, net)
    coeffs = class_coefficients(inst, hc, plan.outer, net, inst.search.memory_reserve_bytes,
                                tuple(k.num_micro_batches for k in plan.classes),
                                tuple(k.partitions for k in plan.classes))
    reports, pipes, syncs = [], [], []
    for c, k in zip(coeffs, plan.classes):
        n = np.array(k.layers_per_stage, float)
        r = np.array(k.full_recompute_layers, float)
        pipes.append(replica_time_s(c, k.num_micro_batches, n, r, plan.virtual_stages))
        syncs.append(float(schedule.sync_times_s(c, n).max()))
        reports.append(ClassReport(
            replicas=k.replicas, stage_groups=tuple(hc.groups[g].name for g in k.stage_groups),
            num_micro_batches=k.num_micro_batches, pipeline_time_s=pipes[-1],
            stage_time_s=tuple(float(x) for x in schedule.stage_times_s(c, n, r)),
            mem_bytes=tuple(float(x) for x in schedule.stage_mem_bytes(c, n, r)),
            capacity_bytes=tuple(float(x) for x in c.capacity_bytes)))
    iter_time = max(pipes) + max(syncs)
    tokens_per_s = inst.job.global_batch * inst.model.seq_len / iter_time
    peak = sum(g.num_gpus * g.cluster.gpu.peak_flops_per_s for g in hc.groups)
    used = sum(plan.outer.gpus_per_group(len(hc.groups)))
    return PlanBreakdown(iter_time_s=iter_time, pipeline_s=max(pipes), sync_s=max(syncs),
                           tokens_per_s=tokens_per_s,
                           mfu=tokens_per_s * model_flops_per_token(inst.model) / peak,
                           classes=tuple(reports), idle_gpus=hc.num_gpus - used,
                           megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s,
                                                                           hc.num_gpus))


def _dualpipe(inst: ClusterInstance, plan: ClassPlan, hc: Cluster, net: NetEfficiency) -> PlanBreakdown:
    """A DualPipe plan, one class on one group (the loaders refuse DualPipe on a mixed
    cluster), priced by cost/dualpipe.iteration as `simulate` prices it on its homogeneous
    instance; its rows are devices (device d holds stages d and pp - 1 - d): the time per
    micro-batch of its two stages' mean, and its memory."""
    from paraplan.cost import dualpipe
    from paraplan.cost.groups_loader import as_flat_plan

    if len(hc.groups) != 1 or len(plan.classes) != 1:
        raise ValueError("a DualPipe plan runs one replica class on one node group")
    it = dualpipe.iteration(group_pricing_instance(inst, hc, 0), as_flat_plan(plan), net,
                            inst.search.memory_reserve_bytes)
    k = plan.classes[0]
    pipeline = float(it.steady_s.max() + it.bubble_s)
    tokens_per_s = inst.job.global_batch * inst.model.seq_len / it.iter_time_s
    peak = hc.num_gpus * hc.groups[0].cluster.gpu.peak_flops_per_s
    report = ClassReport(replicas=k.replicas, stage_groups=tuple(hc.groups[g].name for g in k.stage_groups),
                         num_micro_batches=k.num_micro_batches, pipeline_time_s=pipeline,
                         stage_time_s=tuple(float(x) for x in it.time_per_micro_batch_s),
                         mem_bytes=tuple(float(x) for x in it.mem_bytes),
                         capacity_bytes=tuple(float(x) for x in it.capacity_bytes))
    return PlanBreakdown(iter_time_s=it.iter_time_s, pipeline_s=pipeline, sync_s=float(it.sync_s.max()),
                           tokens_per_s=tokens_per_s,
                           mfu=tokens_per_s * model_flops_per_token(inst.model) / peak,
                           classes=(report,), idle_gpus=hc.num_gpus - plan.outer.gpus_per_group(1)[0],
                           megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s,
                                                                           hc.num_gpus))
