"""The range of a layer's terms over every layer plan of one tp group (issue 33: with per-operator
partitions the option families' memory and sync terms, solver/bounds/option_recompute.py and
option_sync.py, were not read, as a layer plan may hold fewer bytes or sync otherwise than
Megatron's layer; the families' bound then sat at 9.3 s against an optimum near 11.1 s on
32 A100 + 32 H100, and best first wandered).

A layer plan (cost/partition.layer_terms) differs from Megatron's layer (coefficients.
megatron_layer, the table's base) only in (cost/partition.VECTOR) fwd_s, bwd_s, act_bytes,
workspace_bytes, replicated_params and grad_sync_s, and in rc_fwd_s = fwd_s - (the base's fwd_s -
rc_fwd_s), a plan-independent gap; its ckpt_bytes are the base's. What the bounds read of them:
- memory (cost/stage_memory): state = the 1/tp share's bytes + replicated_params x bytes per
  parameter >= Megatron's (replicated_params >= 0); workspace = the base's + the largest double
  buffer >= Megatron's; the checkpoint is Megatron's; only the stash (act_bytes) may be less.
  So every memory term but the stash is read at Megatron's, and the stash at the least over the
  plans (`least_act_bytes`);
- the recompute a layer repeats: rc_fwd_s at its least, the least fwd_s less the gap
  (`least_rc_fwd_s`);
- the gradient sync (coefficients._layer_costs): a GPU holds lp = layer_params / tp +
  replicated_params >= layer_params / tp parameters, and the token-split group's all-reduce
  grad_sync_s >= 0 adds to the hideable g, so g is at least Megatron's floor; the exposed part
  falls with the backward, so it is read at the largest backward of any plan (`most_bwd_s`).
Each is the minimum (maximum) over every plan of the table (cost/partition.all_plans, token
splits included: a superset of the plans any ZeRO stage allows, partition_names.
token_split_allowed) and Megatron's own layer, so it is at most (at least) every plan's. Where
the tp group offers no plan beyond Megatron's (partition_names.spatial_temporal_allowed) the
range is Megatron's layer alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.class_coefficients import class_outers, group_site
from paraplan.cost.coefficients import megatron_layer, stage_outer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.plan_specs import ClassOuter, ClassShape
from paraplan.solver.partition_plans import enabled, plan_rows


@dataclass(frozen=True)
class PlanRange:
    """Over every layer plan of one (group, tp, cp, micro-batch, sp, recompute) on one
    scenario's site, Megatron's layer included: the least stash per micro-batch (bytes, before
    fragmentation), the least recomputed forward and the largest backward (seconds)."""

    least_act_bytes: float
    least_rc_fwd_s: float
    most_bwd_s: float


def plan_range(inst, i: int, g: int, tp: int, cp: int, micro_batch: int, sp: bool, recompute,
               memo: dict) -> PlanRange:
    """The PlanRange of a stage on group g at tp, cp, the micro-batch size, sp flag and recompute
    mode, on scenario i (Megatron's layer alone without per-operator partitions), kept in `memo`."""
    key = ("plan range", i, g, tp, cp, micro_batch, sp, recompute)
    got = memo.get(key)
    if got is not None:
        return got
    o = ClassOuter(tp=tp, cp=cp, micro_batch=micro_batch, sequence_parallel=sp, recompute=recompute,
                   classes=(ClassShape(replicas=1, stage_groups=(g,)),))
    cluster = inst.scenarios[i].cluster
    site = group_site(cluster, o, g, rings=False)
    lo = stage_outer(class_outers(inst.job, o)[0], site)
    net = NetEfficiency()
    mt = megatron_layer(inst, lo, site, net)
    act, rc, bwd = mt.act_bytes, mt.rc_fwd_s, mt.bwd_s
    if enabled(inst):
        from paraplan.cost import partition as P  # read with partitions on only (start-up, issue 33)
        if P.spatial_temporal_allowed(lo):
            table = P.table_for(inst.group_alone(g, cluster), lo, site, net)
            rows = plan_rows(table, True)
            gap = table.base.fwd_s - table.base.rc_fwd_s
            act = min(act, float(rows[:, P.VECTOR.index("act_bytes")].min()))
            rc = min(rc, float(rows[:, 0].min()) - gap)
            bwd = max(bwd, float(rows[:, 1].max()))
    got = memo[key] = PlanRange(least_act_bytes=act, least_rc_fwd_s=rc, most_bwd_s=bwd)
    return got
