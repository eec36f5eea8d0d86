"""Simulate one training iteration of a plan: time breakdown, throughput, memory per stage.

One simulator for every plan: `simulate` prices a plan of replica classes on a cluster of node
groups (each class's pipeline, the slowest replica, the slowest sync, memory per stage of every
class). A flat instance is a one-group cluster (cost/specs.Instance.flat) and its plan
the one-class case, priced by the same code. The iteration time is split into the exposed parts
of its critical path (`critical_path`): the slowest replica's slowest stage, its pipeline bubble,
then the slowest gradient sync and optimizer step.

The iteration time is computed from the same per-stage coefficients that the formulations
optimise over (cost/class_coefficients.py, cost/coefficients.py + cost/schedule.py), so a
solver's objective and this re-simulation agree by construction up to the solvers' integer
quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.class_coefficients import class_coefficients, iteration_time_s, replica_time_s
from paraplan.cost.coefficients import Placement, StageCoefficients
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import megatron_tflops_per_gpu, model_flops_per_token
from paraplan.cost.specs import Cluster
from paraplan.cost.plan_specs import Plan, is_asymmetric
from paraplan.cost.specs import Instance, PipelineSchedule


@dataclass(frozen=True)
class StageReport:
    """One pipeline stage of one replica class (of a DualPipe plan: device `stage`, which holds
    stages d and pp - 1 - d, its layers and times those of both)."""

    stage: int
    group: str  # the node group hosting it
    layers: int
    full_recompute_layers: int
    time_per_micro_batch_s: float
    sync_time_s: float
    mem_bytes: float
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.mem_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class ClassReport:
    """The simulated pipeline of one replica class: its time and each stage's report."""
    replicas: int
    num_micro_batches: int
    pipeline_time_s: float  # one replica, all its micro-batches
    stages: tuple[StageReport, ...]

    @property
    def stage_groups(self) -> tuple[str, ...]:
        return tuple(s.group for s in self.stages)


@dataclass(frozen=True)
class Breakdown:
    """Iteration time = pipeline_s + sync_s = sum(exposed_s.values()); `overlapped_s` is hidden
    behind compute. The parts are the slowest replica's class's (`bottleneck_class`), at its
    slowest stage (`bottleneck_stage`; a DualPipe plan's slowest device, `unit`)."""

    iter_time_s: float
    pipeline_s: float  # slowest replica
    sync_s: float  # slowest stage's exposed gradient sync + optimizer step
    tokens_per_s: float
    mfu: float  # against the peak of every GPU in the cluster, used or not
    # model TFLOP/s per GPU of the cluster, used or not, as Megatron-LM logs it
    # (cost/flops.megatron_flops_per_token), the figure NVIDIA's MoE tables publish
    megatron_tflops_per_gpu: float
    exposed_s: dict[str, float]
    overlapped_s: dict[str, float]
    classes: tuple[ClassReport, ...]
    bottleneck_class: int
    bottleneck_stage: int
    idle_gpus: int
    unit: str = "stage"  # what a row is: "device" for a DualPipe plan, each device holding two stages

    @property
    def stages(self) -> tuple[StageReport, ...]:
        """Every stage of every class, classes in order (a one-class plan: its stages)."""
        return tuple(s for k in self.classes for s in k.stages)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)

    @property
    def peak_mem_bytes(self) -> float:
        return max(s.mem_bytes for s in self.stages)

    def stage_rows(self) -> list[tuple[int, int, str, float, float, float]]:
        """(class, from 1; stage; group; time per micro-batch; memory; capacity) of every stage
        of every class, classes in order."""
        return [(i + 1, s.stage, s.group, s.time_per_micro_batch_s, s.mem_bytes, s.capacity_bytes)
                for i, k in enumerate(self.classes) for s in k.stages]


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
    exposed, overlapped = _parts(c, m, n[k], m * r[k] * c.recompute_time_s[k], (k,),
                                 float(passes.sum() - passes[k]) / v, sync_s)
    return exposed, overlapped, k


def _parts(c: StageCoefficients, m: float, layers: float, recompute_s: float, stages, bubble_s: float,
           sync_s: float) -> tuple[dict[str, float], dict[str, float]]:
    """(exposed, overlapped) seconds of a pacing unit running m micro-batches through `layers`
    layers of `stages` (a stage, or a DualPipe device's two): each named layer part m times per
    layer, the recomputation `recompute_s`, each stage part m times (a name may be both a layer
    and a stage part: slowest_rank), the bubble, then the sync; overlapped likewise, the
    data-parallel gradient sync once per layer."""
    exposed = {name: m * layers * val for name, val in c.layer_parts.items()}
    exposed["recompute"] = recompute_s
    for s in stages:
        for name, val in c.stage_parts[s].items():
            exposed[name] = exposed.get(name, 0.0) + m * val
    exposed["pipeline_bubble"] = bubble_s
    exposed["grad_sync_and_optimizer"] = sync_s
    overlapped = {name: float(m * layers * val) for name, val in c.overlapped_per_layer_s.items()
                  if name != "dp_grad_sync"}
    overlapped["dp_grad_sync"] = float(layers * c.overlapped_per_layer_s.get("dp_grad_sync", 0.0))
    return {key: float(val) for key, val in exposed.items()}, overlapped


def simulate(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
             reserve_bytes: float | None = None, coeffs: list[StageCoefficients] | None = None,
             cluster: Cluster | None = None, *, checked: bool = False,
             placements: tuple[Placement, ...] | None = None) -> Breakdown:
    """The breakdown of `plan` on `inst` (a flat instance: its one group), on network `cluster`
    (default: the nominal one), with `reserve_bytes` of every GPU kept back (default: the
    instance's search.memory_reserve_bytes) and `coeffs`, one per class, where the caller has
    them priced.

    For a caller that prices one plan on one instance's values many times (cost/moe_anchors.pricer,
    thousands of prices a row, each under other MoeParams, which neither reads): `checked`, the
    plan already passed check_against on an instance equal to `inst`, and `placements`, its
    classes' class_placement on this network, which read only the cluster and the plan. The
    check and the placement were a third of such a price (issue 32)."""
    if not checked:
        plan.check_against(inst)  # a flat instance's plan: one class on every GPU
    hc = inst.cluster if cluster is None else cluster
    reserve = inst.search.memory_reserve_bytes if reserve_bytes is None else reserve_bytes
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return _dualpipe(inst, plan, hc, net, reserve)
    if is_asymmetric(plan.outer):
        return _asymmetric(inst, plan, hc, net, reserve)
    if coeffs is None:
        coeffs = _coefficients(inst, plan, hc, net, reserve, placements)
    reports, splits, syncs = [], [], []
    for c, k in zip(coeffs, plan.classes):
        n = np.array(k.layers_per_stage, float)
        r = np.array(k.full_recompute_layers, float)
        t, d = schedule.stage_times_s(c, n, r), schedule.sync_times_s(c, n)
        mem = schedule.stage_mem_bytes(c, n, r)  # with the short chunks' correction (the flags)
        splits.append((n, r))
        syncs.append(float(d.max()))
        reports.append(ClassReport(
            replicas=k.replicas, num_micro_batches=k.num_micro_batches,
            pipeline_time_s=replica_time_s(c, k.num_micro_batches, n, r, plan.virtual_stages),
            stages=_stage_reports([hc.groups[g].name for g in k.stage_groups], n, r, t, d, mem,
                                  c.capacity_bytes)))
    pipes = [k.pipeline_time_s for k in reports]
    slowest = int(np.argmax(pipes))
    iter_time = max(pipes) + max(syncs)
    exposed, overlapped, stage = critical_path(coeffs[slowest], plan.classes[slowest].num_micro_batches,
                                               *splits[slowest], plan.virtual_stages, max(syncs))
    if abs(sum(exposed.values()) - iter_time) > 1e-9 * max(1.0, iter_time):
        # a class across node groups: its named parts are its first group's layer (class_coefficients),
        # so its slowest stage on another group is not split into parts: the pipeline as one
        exposed, overlapped = {"pipeline": max(pipes), "grad_sync_and_optimizer": max(syncs)}, {}
    return _breakdown(inst, plan, hc, iter_time, max(pipes), max(syncs), exposed, overlapped,
                      tuple(reports), slowest, stage)


def _stage_reports(groups: list[str], n, r, t, d, mem, capacity) -> tuple[StageReport, ...]:
    """The StageReport of each row s of per-row arrays (layers, recomputed layers, time per
    micro-batch, sync, memory, capacity) on node group groups[s]."""
    return tuple(StageReport(stage=s, group=g, layers=int(n[s]), full_recompute_layers=int(r[s]),
                             time_per_micro_batch_s=float(t[s]), sync_time_s=float(d[s]),
                             mem_bytes=float(mem[s]), capacity_bytes=float(capacity[s]))
                 for s, g in enumerate(groups))


def iter_time_s(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
                reserve_bytes: float | None = None, *, checked: bool = False,
                placements: tuple[Placement, ...] | None = None) -> float:
    """simulate(inst, plan, net, reserve_bytes, ...).iter_time_s, the same float, without the
    breakdown (each stage's report and memory, the critical path's parts, the throughput
    figures), which was about half of each of cost/moe_fit's grid prices, where only the time
    is read (issue 32). A DualPipe or asymmetric plan is simulated whole."""
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE or is_asymmetric(plan.outer):
        return simulate(inst, plan, net, reserve_bytes, checked=checked, placements=placements).iter_time_s
    if not checked:
        plan.check_against(inst)
    reserve = inst.search.memory_reserve_bytes if reserve_bytes is None else reserve_bytes
    coeffs = _coefficients(inst, plan, inst.cluster, net, reserve, placements)
    # the sum simulate reads: the slowest class's replica_time_s plus the slowest stage's sync
    return iteration_time_s(coeffs, [k.num_micro_batches for k in plan.classes],
                            [np.array(k.layers_per_stage, float) for k in plan.classes],
                            [np.array(k.full_recompute_layers, float) for k in plan.classes],
                            plan.virtual_stages)


def _coefficients(inst: Instance, plan: Plan, hc: Cluster, net: NetEfficiency, reserve_bytes: float,
                  placements: tuple[Placement, ...] | None) -> list[StageCoefficients]:
    """Each class's stage coefficients on `hc`, at its own micro-batch count and partitions."""
    return class_coefficients(inst, hc, plan.outer, net, reserve_bytes,
                              tuple(k.num_micro_batches for k in plan.classes),
                              tuple(k.partitions for k in plan.classes), placements)


def _breakdown(inst: Instance, plan: Plan, hc: Cluster, iter_time_s: float, pipeline_s: float,
               sync_s: float, exposed: dict, overlapped: dict, classes: tuple[ClassReport, ...],
               bottleneck_class: int, bottleneck_stage: int, unit: str = "stage") -> Breakdown:
    """The throughput figures of an iteration of `iter_time_s`, against every GPU of `hc`."""
    tokens_per_s = inst.job.global_batch * inst.model.seq_len / iter_time_s
    peak = sum(g.num_gpus * g.gpu.peak_flops_per_s for g in hc.groups)
    return Breakdown(iter_time_s=iter_time_s, pipeline_s=pipeline_s, sync_s=sync_s,
                     tokens_per_s=tokens_per_s,
                     mfu=tokens_per_s * model_flops_per_token(inst.model) / peak,
                     megatron_tflops_per_gpu=megatron_tflops_per_gpu(inst.model, tokens_per_s, hc.num_gpus),
                     exposed_s=exposed, overlapped_s=overlapped, classes=classes,
                     bottleneck_class=bottleneck_class, bottleneck_stage=bottleneck_stage,
                     idle_gpus=hc.num_gpus - sum(plan.outer.gpus_per_group(len(hc.groups))),
                     unit=unit)


def _asymmetric(inst: Instance, plan: Plan, hc: Cluster, net: NetEfficiency,
                reserve_bytes: float) -> Breakdown:
    """An asymmetric pipeline (cost/asymmetric.py, a data-parallel degree per stage): each
    stage's row is one of its ranks (time per micro-batch, memory); the pacing stage is the one
    whose path m_s T_s + sum_{s' != s} T_{s'} is longest. Its stages' named parts are priced on
    different sites and degrees, so the critical path is shown as the pipeline, then the sync."""
    from paraplan.cost import asymmetric  # here: only an asymmetric plan reads it (issue 33, start-up)
    k = plan.classes[0]
    ac = asymmetric.coefficients(inst, plan.outer, hc, net, reserve_bytes)
    n, r = np.array(k.layers_per_stage, float), np.array(k.full_recompute_layers, float)
    t, d = schedule.stage_times_s(ac.rows, n, r), schedule.sync_times_s(ac.rows, n)
    mem = asymmetric.mem_bytes(ac, n, r)
    pipe, sync = float(asymmetric.pipeline_time_s(t, ac.micro_batches)), float(d.max())
    pacing = int(np.argmax(ac.micro_batches * t + (t.sum() - t)))
    report = ClassReport(
        replicas=1, num_micro_batches=k.num_micro_batches, pipeline_time_s=pipe,
        stages=_stage_reports([hc.groups[g].name for g in k.stage_groups], n, r, t, d, mem,
                              ac.rows.capacity_bytes))
    return _breakdown(inst, plan, hc, pipe + sync, pipe, sync,
                      {"pipeline": pipe, "grad_sync_and_optimizer": sync}, {}, (report,), 0, pacing)


def _dualpipe(inst: Instance, plan: Plan, hc: Cluster, net: NetEfficiency,
              reserve_bytes: float) -> Breakdown:
    """A DualPipe plan (cost/dualpipe.py), one class on one group (the loaders refuse DualPipe
    on a mixed cluster): the breakdown of its bottleneck device d, which holds stages d and
    pp - 1 - d; its rows are devices, each with its two stages' layers and mean time per
    micro-batch."""
    if len(hc.groups) != 1 or len(plan.classes) != 1:
        raise ValueError("a DualPipe plan runs one replica class on one node group")
    from paraplan.cost import dualpipe  # here: only a DualPipe job reads it (issue 33's start-up)
    it = dualpipe.iteration(inst.group_alone(0, hc), plan, net, reserve_bytes)
    c, k, m = it.coeffs, it.bottleneck_device, plan.num_micro_batches
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    pair = (k, plan.pp - 1 - k)
    exposed, overlapped = _parts(c, m / 2, float(n[pair[0]] + n[pair[1]]),
                                 m / 2 * sum(r[s] * c.recompute_time_s[s] for s in pair), pair,
                                 it.bubble_s, float(it.sync_s.max()))
    assert abs(sum(exposed.values()) - it.iter_time_s) <= 1e-9 * max(1.0, it.iter_time_s)
    report = ClassReport(
        replicas=plan.dp, num_micro_batches=m, pipeline_time_s=float(it.steady_s.max() + it.bubble_s),
        stages=_stage_reports([hc.groups[0].name] * plan.pp, it.layers, it.recompute_layers,
                              it.time_per_micro_batch_s, it.sync_s, it.mem_bytes, it.capacity_bytes))
    return _breakdown(inst, plan, hc, it.iter_time_s, report.pipeline_time_s, float(it.sync_s.max()),
                      exposed, overlapped, (report,), 0, k, unit="device")
