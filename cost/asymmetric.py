"""Asymmetric pipelines: a data-parallel degree per stage (issue 33).

In the plans of cost/plan_specs.py every stage of a pipeline has the same data-parallel degree:
a replica class is `replicas` copies of one pipeline. In an asymmetric pipeline stage s runs on
d_s data-parallel ranks of its node group, each rank tp_s GPUs (the group's tp), as HexiScale's
asymmetric partitions (Yan et al., arXiv 2409.01143: a data-parallel degree per pipeline stage,
each stage's group its own size) and Metis's device groups (Um et al., USENIX ATC'24: a stage
on a device group, its data-parallel degree that group's) allow. E.g. 16 A100 + 8 H100: stage 0
on the A100 as dp 4 x tp 4, stage 1 on the H100 as dp 2 x tp 4. This first version prices
1F1B without interleaving (v = 1), cp 1, dense models.

Every stage processes the whole global batch each step: M = global_batch / micro_batch
micro-batches, of which each of stage s's ranks runs m_s = M / d_s (forward and backward).

Pricing (the same model, no second layer pricer). Stage s is priced as stage s of the
symmetric pipeline with the same stage groups and tp per group and d_s replicas
(class_coefficients.class_coefficients of a one-class ClassOuter, at m_s micro-batches): its
layer and recompute times on its group at its tp, its hand-off links, its gradient ring over
its own d_s ranks (its own parameter shard: nobody else holds stage s's layers), its ZeRO shard
over d_s, its capacity. Its row of those coefficients is stage s's row here. Between stages
the activation of each micro-batch crosses once: with d_s != d_{s+1} a rank of stage s sends to
(or receives from) several ranks of the next stage, but per micro-batch a rank still moves one
micro-batch's activation over its own link, so the per-micro-batch hand-off term is the
symmetric one and a rank pays it for each of its m_s micro-batches.

Memory. In 1F1B a rank holds the activations of the micro-batches it has run forward and whose
backward has not yet come back. To keep every rank downstream busy, the micro-batches in flight
between stage s and the end are one per rank of stages s..P-1, sum_{s' >= s} d_{s'}, spread over
stage s's d_s ranks:

    h_s = min(m_s, ceil(sum_{s' >= s} d_{s'} / d_s))

With equal d this is 1F1B's min(m, P - s) (Narayanan et al. SC'21 Sec. 2.2;
coefficients.in_flight_micro_batches). The stage's activation columns are rescaled to h_s
(schedule.with_in_flight).

Step time. T_s (one micro-batch's forward and backward on one rank of stage s, exposed
communication included) and D_s (the stage's gradient sync and optimizer step after its last
backward) are the linear terms of cost/coefficients.py on that row. A rank of stage s is busy
m_s T_s; before its first micro-batch arrives and after its last backward leaves, one
micro-batch passes forward and back through every other stage (the fill and drain), so the
longest path through stage s is m_s T_s + sum_{s' != s} T_{s'}, and the pipeline lasts the
longest of these paths:

    pipeline_time = max_s [ m_s T_s + sum_{s' != s} T_{s'} ]
    iteration_time = pipeline_time + max_s D_s

With equal d (m_s = m) the maximum is at the slowest stage and this is cost/schedule.py's
m max_s T_s + sum_s T_s - max_s T_s exactly; with unequal d the pacing stage is the one whose
ranks carry the most work, m_s T_s = M T_s / d_s, the steady state "the slowest stage's
per-micro-batch time times the micro-batches each of its ranks processes" plus the bubble. As for
the symmetric schedule, a stage that waits mid-run for a slower neighbour's hand-off is not
priced apart (the path is a lower bound that 1F1B attains when the stages' rates d_s / T_s
are balanced).

Left out of this version (refused, naming the reason): interleaving, cp > 1, zero-bubble
schedules, MoE models, and tied embeddings or multi-token prediction where the first and last
stages' degrees differ (their embedding copies' gradient reduction would span d_0 + d_{P-1}
ranks, which the tie term, priced between two ranks, does not model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.cost.specs import Cluster, Instance, Recompute


@dataclass(frozen=True, slots=True, kw_only=True)
class AsymmetricOuter:
    """An asymmetric pipeline before its split: stage s on group `stage_groups[s]` as
    `stage_dp[s]` data-parallel ranks of that group's tp (`tp_of`), and the modes every stage
    shares (as cost/plan_specs.ClassOuter's, cp 1 and v 1)."""

    stage_groups: tuple[int, ...]
    stage_dp: tuple[int, ...]
    tp: int
    micro_batch: int
    group_tp: tuple[tuple[int, int], ...] = ()
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    zero: int = 0

    def __post_init__(self) -> None:
        if len(self.stage_groups) != len(self.stage_dp) or len(self.stage_groups) < 2:
            raise ConfigError("an asymmetric pipeline needs >= 2 stages, each with a group and a"
                              " data-parallel degree")
        if min(self.stage_dp) < 1 or self.micro_batch < 1:
            raise ConfigError("an asymmetric pipeline's data-parallel degrees and micro-batch"
                              " must be >= 1")

    @property
    def pp(self) -> int:
        return len(self.stage_groups)

    def tp_of(self, group: int) -> int:
        return dict(self.group_tp).get(group, self.tp)

    def stage_class_outer(self, s: int) -> ClassOuter:
        """The symmetric pipeline whose stage s prices this pipeline's stage s: the same
        groups, tp and modes, with stage s's degree as its replicas."""
        return ClassOuter(tp=self.tp, micro_batch=self.micro_batch, group_tp=self.group_tp,
                          sequence_parallel=self.sequence_parallel, recompute=self.recompute,
                          zero=self.zero, family="stage",
                          classes=(ClassShape(replicas=self.stage_dp[s], stage_groups=self.stage_groups),))

    def gpus_per_group(self, num_groups: int) -> list[int]:
        used = [0] * num_groups
        for g, d in zip(self.stage_groups, self.stage_dp):
            used[g] += d * self.tp_of(g)
        return used


def refusal(inst: Instance, ao: AsymmetricOuter) -> str | None:
    """Why `ao` is outside what this module prices (None: it prices it)."""
    m = inst.model
    if m.moe is not None:
        return "asymmetric pipelines are priced for dense models only (model.moe is set)"
    if (m.tied_embeddings or m.mtp_layers) and ao.stage_dp[0] != ao.stage_dp[-1]:
        return ("tied embeddings / multi-token prediction with different first and last"
                " data-parallel degrees: the embedding copies' reduction is not priced")
    total = inst.job.global_batch
    if total % ao.micro_batch:
        return f"job.global_batch {total} is not a multiple of micro_batch {ao.micro_batch}"
    M = total // ao.micro_batch
    bad = [d for d in ao.stage_dp if M % d]
    if bad:
        return f"{M} micro-batches do not divide over data-parallel degree(s) {bad}"
    return None


def micro_batches_per_rank(inst: Instance, ao: AsymmetricOuter) -> tuple[int, ...]:
    """m_s = M / d_s: the micro-batches each rank of stage s runs per step."""
    why = refusal(inst, ao)
    if why:
        raise ConfigError(why)
    M = inst.job.global_batch // ao.micro_batch
    return tuple(M // d for d in ao.stage_dp)


def in_flight(stage_dp: tuple[int, ...], m: tuple[int, ...]) -> np.ndarray:
    """h_s = min(m_s, ceil(sum_{s' >= s} d_{s'} / d_s)) (module docstring, Memory)."""
    tail = np.cumsum(np.asarray(stage_dp[::-1], np.int64))[::-1]
    return np.array([min(ms, -(-int(t) // d)) for ms, t, d in zip(m, tail, stage_dp)], float)


# the per-stage arrays of StageCoefficients that a stage's row is taken from
_ROW_FIELDS = ("layer_time_s", "recompute_time_s", "stage_time_s", "layer_sync_time_s",
               "stage_sync_time_s", "layer_state_bytes", "layer_act_bytes", "layer_ckpt_bytes",
               "stage_mem_bytes", "capacity_bytes", "in_flight", "stage_act_bytes", "stage_state_bytes")


@dataclass(frozen=True)
class AsymmetricCoefficients:
    """Stage s's row of the coefficients of stage_class_outer(s), per stage: `rows` holds the
    per-stage arrays (shapes (pp,)) as a StageCoefficients whose `outer` is stage 0's (its
    num_micro_batches is stage 0's m_0; each stage's own is `micro_batches[s]`)."""

    rows: StageCoefficients
    micro_batches: np.ndarray  # m_s, (pp,)


def coefficients(inst: Instance, ao: AsymmetricOuter, cluster: Cluster | None = None,
                 net: NetEfficiency = NetEfficiency(), reserve_bytes: float = 0.0) -> AsymmetricCoefficients:
    """The per-stage terms of `ao` on `cluster` (default: the nominal one)."""
    hc = inst.cluster if cluster is None else cluster
    m = micro_batches_per_rank(inst, ao)
    held = in_flight(ao.stage_dp, m)
    per = []
    for s in range(ao.pp):
        c = class_coefficients(inst, hc, ao.stage_class_outer(s), net, reserve_bytes, (m[s],))[0]
        symmetric = c.in_flight.copy()
        symmetric[s] = held[s]  # only row s is read
        per.append(schedule.with_in_flight(c, symmetric))
    rows = replace(per[0], **{f: np.array([getattr(per[s], f)[s] for s in range(ao.pp)], float)
                              for f in _ROW_FIELDS},
                   stage_parts=[per[s].stage_parts[s] for s in range(ao.pp)])
    return AsymmetricCoefficients(rows=rows, micro_batches=np.asarray(m, float))


def pipeline_time_s(t: np.ndarray, m: np.ndarray) -> np.ndarray:
    """max_s [m_s T_s + sum_{s' != s} T_{s'}] for stage times t (..., pp)."""
    return (m * t + (t.sum(axis=-1, keepdims=True) - t)).max(axis=-1)


def iteration_time_s(ac: AsymmetricCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The step time of splits n (..., pp) with r (..., pp) fully recomputed layers."""
    n, r = np.asarray(n, float), np.asarray(r, float)
    c = ac.rows
    return (pipeline_time_s(schedule.stage_times_s(c, n, r), ac.micro_batches)
            + schedule.sync_times_s(c, n).max(axis=-1))


def fits(ac: AsymmetricCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Whether splits n with r recomputed layers fit every stage's memory."""
    c = ac.rows
    mem = (c.stage_mem_bytes + np.asarray(n, float) * (c.layer_state_bytes + c.layer_act_bytes)
           - np.asarray(r, float) * (c.layer_act_bytes - c.layer_ckpt_bytes))
    return (mem <= c.capacity_bytes).all(axis=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class AsymmetricPlan:
    """An asymmetric pipeline with its split: `outer` and, per stage, its layers and fully
    recomputed layers."""

    outer: AsymmetricOuter
    layers_per_stage: tuple[int, ...]
    full_recompute_layers: tuple[int, ...]

    def __post_init__(self) -> None:
        pp = self.outer.pp
        if len(self.layers_per_stage) != pp or len(self.full_recompute_layers) != pp:
            raise ConfigError(f"an asymmetric plan of {pp} stages needs {pp} layer and recompute counts")
        if any(n < 1 or not 0 <= r <= n for n, r in zip(self.layers_per_stage, self.full_recompute_layers)):
            raise ConfigError("each stage needs >= 1 layer and 0 <= recomputed layers <= layers")


@dataclass(frozen=True, slots=True)
class AsymmetricBreakdown:
    iter_time_s: float
    stage_time_s: tuple[float, ...]
    sync_time_s: tuple[float, ...]
    mem_bytes: tuple[float, ...]
    fits: bool


def simulate(inst: Instance, plan: AsymmetricPlan, cluster: Cluster | None = None,
             net: NetEfficiency = NetEfficiency(), reserve_bytes: float | None = None) -> AsymmetricBreakdown:
    """The plan priced from its records alone (the re-simulation the search's answer must
    match); `reserve_bytes` defaults to the instance's planning reserve."""
    if sum(plan.layers_per_stage) != inst.model.layers:
        raise ConfigError(f"the plan's stages hold {sum(plan.layers_per_stage)} layers; the model"
                          f" has {inst.model.layers}")
    reserve = inst.search.memory_reserve_bytes if reserve_bytes is None else reserve_bytes
    ac = coefficients(inst, plan.outer, cluster, net, reserve)
    n, r = np.array(plan.layers_per_stage, float), np.array(plan.full_recompute_layers, float)
    c = ac.rows
    mem = c.stage_mem_bytes + n * (c.layer_state_bytes + c.layer_act_bytes) - r * (c.layer_act_bytes - c.layer_ckpt_bytes)
    return AsymmetricBreakdown(iter_time_s=float(iteration_time_s(ac, n, r)),
                               stage_time_s=tuple(schedule.stage_times_s(c, n, r).tolist()),
                               sync_time_s=tuple(schedule.sync_times_s(c, n).tolist()),
                               mem_bytes=tuple(mem.tolist()), fits=bool((mem <= c.capacity_bytes).all()))


def lower_bound_s(ac: AsymmetricCoefficients, layers: int) -> float:
    """At most the step time of every split of `layers` (any recompute counts): the paced
    term max_s m_s T_s with T_s >= a_s + n_s t_s (recompute only adds) relaxed to real n_s
    summing to `layers`, whose least maximum equalises m_s (a_s + n_s t_s) = Z:
    Z = (layers + sum_s a_s / t_s) / sum_s 1 / (m_s t_s); plus the fill and drain's
    sum_{s' != s} a_{s'} >= 0 (dropped) and max_s D_s >= max_s stage_sync_time_s."""
    c = ac.rows
    a, t, m = c.stage_time_s, c.layer_time_s, ac.micro_batches
    z = (layers + float((a / t).sum())) / float((1.0 / (m * t)).sum())
    return z + float(c.stage_sync_time_s.max())
