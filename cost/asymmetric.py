"""Asymmetric pipelines: a data-parallel degree per stage (issue 33).

In the plans of cost/plan_specs.py every stage of a pipeline has the same data-parallel degree:
a replica class is `replicas` copies of one pipeline. In an asymmetric pipeline stage s runs on
d_s data-parallel ranks of its node group, each rank tp_s GPUs (the group's tp)
(ClassShape.stage_dp), e.g. 16 A100 + 8 H100: stage 0 on the A100 as dp 4 x tp 4, stage 1 on
the H100 as dp 2 x tp 4. HexiScale (Yan et al., arXiv 2409.01143; its abstract: "asymmetric
partition of training computations in the scope of data-, pipeline-, and tensor model
parallelism" over heterogeneous GPUs) and Metis (Um et al., USENIX ATC'24: device groups of
different GPU types per stage) run such plans. The pricing below is not taken from either
paper's cost model: it is paraplan's own per-layer terms and 1F1B schedule term, extended to a
degree per stage as derived here. This first version prices 1F1B without interleaving (v = 1),
cp 1, dense models.

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
m max_s T_s + sum_s T_s - max_s T_s exactly; with unequal d the pacing stage is the one with
the largest (m_s - 1) T_s, whose ranks carry the most work (m_s T_s = M T_s / d_s): the
steady state is that stage's per-micro-batch time times the micro-batches each of its ranks
processes, plus the bubble (one pass through every other stage). As for
the symmetric schedule, a stage that waits mid-run for a slower neighbour's hand-off is not
priced apart (the path is a lower bound that 1F1B attains when the stages' rates d_s / T_s
are balanced).

Left out of this version (refused, naming the reason): interleaving, cp > 1, zero-bubble
schedules, MoE models, ZeRO where a stage has one rank (as one replica is refused), and tied
embeddings or multi-token prediction where the first and last stages' degrees differ (their
embedding copies' gradient reduction would span d_0 + d_{P-1} ranks, which the tie term,
priced between two ranks, does not model). Where two consecutive stages share a group, their
hand-off link is stage s's symmetric pipeline's (class_placement with d_s replicas per
stage), which says whether it crosses a node as if the next stage had d_s ranks too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost import schedule
from paraplan.cost.class_coefficients import class_coefficients
from paraplan.cost.coefficients import StageCoefficients
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.plan_specs import ClassOuter, ClassShape, Plan, ReplicaClass, is_asymmetric  # noqa: F401
from paraplan.cost.specs import Cluster, Instance, Recompute


def pipeline(*, stage_groups: tuple[int, ...], stage_dp: tuple[int, ...], tp: int, micro_batch: int,
             group_tp: tuple[tuple[int, int], ...] = (), sequence_parallel: bool = False,
             recompute: Recompute = Recompute.NONE, zero: int = 0) -> ClassOuter:
    """The outer configuration of an asymmetric pipeline: one class of one pipeline whose stage
    s sits on group stage_groups[s] as stage_dp[s] data-parallel ranks of that group's tp
    (ClassShape.stage_dp), with the modes every stage shares (cp 1, v 1)."""
    if len(stage_groups) != len(stage_dp) or len(stage_groups) < 2:
        raise ConfigError("an asymmetric pipeline needs >= 2 stages, each with a group and a"
                          " data-parallel degree")
    if min(stage_dp) < 1 or micro_batch < 1:
        raise ConfigError("an asymmetric pipeline's data-parallel degrees and micro-batch must be >= 1")
    return ClassOuter(tp=tp, micro_batch=micro_batch, group_tp=group_tp, sequence_parallel=sequence_parallel,
                      recompute=recompute, zero=zero, family="stage",
                      classes=(ClassShape(replicas=1, stage_groups=tuple(stage_groups), stage_dp=tuple(stage_dp)),))


def _shape(ho: ClassOuter) -> ClassShape:
    if len(ho.classes) != 1 or not ho.classes[0].stage_dp:
        raise ConfigError("not an asymmetric pipeline: one class with a data-parallel degree per stage")
    return ho.classes[0]


def stage_class_outer(ho: ClassOuter, s: int) -> ClassOuter:
    """The symmetric pipeline whose stage s prices `ho`'s stage s: the same groups, tp and
    modes, with stage s's degree as its replicas."""
    c = _shape(ho)
    return replace(ho, classes=(ClassShape(replicas=c.stage_dp[s], stage_groups=c.stage_groups),))


def refusal(inst: Instance, ho: ClassOuter) -> str | None:
    """Why `ho` is outside what this module prices (None: it prices it)."""
    c, m = _shape(ho), inst.model
    if ho.cp != 1 or ho.virtual_stages != 1 or ho.zero_bubble is not None or ho.ep != 1:
        return "asymmetric pipelines are priced with cp 1, v 1, 1F1B and ep 1 only"
    if m.moe is not None:
        return "asymmetric pipelines are priced for dense models only (model.moe is set)"
    if (m.tied_embeddings or m.mtp_layers) and c.stage_dp[0] != c.stage_dp[-1]:
        return ("tied embeddings / multi-token prediction with different first and last"
                " data-parallel degrees: the embedding copies' reduction is not priced")
    if ho.zero and min(c.stage_dp) == 1:
        return f"ZeRO-{ho.zero} shards each stage over its ranks, and a stage has one (as one replica)"
    total = inst.job.global_batch
    if total % ho.micro_batch:
        return f"job.global_batch {total} is not a multiple of micro_batch {ho.micro_batch}"
    M = total // ho.micro_batch
    bad = [d for d in c.stage_dp if M % d]
    if bad:
        return f"{M} micro-batches do not divide over data-parallel degree(s) {bad}"
    return None


def micro_batches_per_rank(inst: Instance, ho: ClassOuter) -> tuple[int, ...]:
    """m_s = M / d_s: the micro-batches each rank of stage s runs per step."""
    why = refusal(inst, ho)
    if why:
        raise ConfigError(why)
    M = inst.job.global_batch // ho.micro_batch
    return tuple(M // d for d in _shape(ho).stage_dp)


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


def coefficients(inst: Instance, ho: ClassOuter, cluster: Cluster | None = None,
                 net: NetEfficiency = NetEfficiency(), reserve_bytes: float = 0.0) -> AsymmetricCoefficients:
    """The per-stage terms of asymmetric pipeline `ho` on `cluster` (default: the nominal one)."""
    m = micro_batches_per_rank(inst, ho)
    per = stage_coefficients(inst, ho, cluster, net, reserve_bytes)
    rows = replace(per[0], **{f: np.array([getattr(c, f)[s] for s, c in enumerate(per)], float)
                              for f in _ROW_FIELDS},
                   stage_parts=[c.stage_parts[s] for s, c in enumerate(per)])
    return AsymmetricCoefficients(rows=rows, micro_batches=np.asarray(m, float))


def stage_coefficients(inst: Instance, ho: ClassOuter, cluster: Cluster | None = None,
                       net: NetEfficiency = NetEfficiency(), reserve_bytes: float = 0.0) -> list[StageCoefficients]:
    """Per stage s, the coefficients of stage_class_outer(ho, s) at m_s micro-batches with row
    s holding h_s micro-batches' activations: its row s is `ho`'s stage s (the other rows
    belong to that symmetric pipeline and are not read)."""
    hc = inst.cluster if cluster is None else cluster
    m = micro_batches_per_rank(inst, ho)
    dps = _shape(ho).stage_dp
    held = in_flight(dps, m)
    per = []
    for s in range(len(dps)):
        c = class_coefficients(inst, hc, stage_class_outer(ho, s), net, reserve_bytes, (m[s],))[0]
        counts = c.in_flight.copy()
        counts[s] = held[s]  # only row s is read
        per.append(schedule.with_in_flight(c, counts))
    return per


def stage_plan(plan: Plan, s: int) -> Plan:
    """The symmetric plan whose stage s is asymmetric `plan`'s stage s: stage_dp[s] replicas
    of the same pipeline (groups, split, recompute), each running m_s = M / stage_dp[s]
    micro-batches (stage_class_outer's plan; its activations held are 1F1B's, not h_s)."""
    k = plan.classes[0]
    if len(plan.classes) != 1 or not k.stage_dp:
        raise ConfigError("not an asymmetric pipeline: one class with a data-parallel degree per stage")
    return replace(plan, classes=(replace(k, replicas=k.stage_dp[s], stage_dp=(),
                                          num_micro_batches=k.num_micro_batches // k.stage_dp[s]),))


def symmetric_twin(plan: Plan) -> Plan:
    """`plan` as a symmetric plan where every stage has the same degree d: d replicas of the
    pipeline, each running M / d micro-batches, priced alike (module docstring: the step time
    and h_s are 1F1B's with equal d); any other plan unchanged."""
    k = plan.classes[0]
    if not k.stage_dp or len(set(k.stage_dp)) != 1:
        return plan
    return stage_plan(plan, 0)


def pipeline_time_s(t: np.ndarray, m: np.ndarray) -> np.ndarray:
    """max_s [m_s T_s + sum_{s' != s} T_{s'}] for stage times t (..., pp)."""
    return (m * t + (t.sum(axis=-1, keepdims=True) - t)).max(axis=-1)


def iteration_time_s(ac: AsymmetricCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The step time of splits n (..., pp) with r (..., pp) fully recomputed layers."""
    n, r = np.asarray(n, float), np.asarray(r, float)
    c = ac.rows
    return (pipeline_time_s(schedule.stage_times_s(c, n, r), ac.micro_batches)
            + schedule.sync_times_s(c, n).max(axis=-1))


def mem_bytes(ac: AsymmetricCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Peak memory per stage of splits n with r recomputed layers (..., pp)."""
    c = ac.rows
    return (c.stage_mem_bytes + np.asarray(n, float) * (c.layer_state_bytes + c.layer_act_bytes)
            - np.asarray(r, float) * (c.layer_act_bytes - c.layer_ckpt_bytes))


def plan_of(inst: Instance, ho: ClassOuter, n, r) -> Plan:
    """The plan of asymmetric pipeline `ho` with split n and recompute counts r: one class of
    replicas 1 running the batch's M micro-batches, its stages' degrees in stage_dp."""
    c = _shape(ho)
    return Plan(tp=ho.tp, micro_batch=ho.micro_batch, group_tp=ho.group_tp,
                sequence_parallel=ho.sequence_parallel, recompute=ho.recompute, zero=ho.zero,
                family="stage",
                classes=(ReplicaClass(replicas=1, stage_groups=c.stage_groups, stage_dp=c.stage_dp,
                                      num_micro_batches=inst.job.global_batch // ho.micro_batch,
                                      layers_per_stage=tuple(int(x) for x in n),
                                      full_recompute_layers=tuple(int(x) for x in r)),))


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
