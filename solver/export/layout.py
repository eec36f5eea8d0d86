"""A plan of several replica classes or GPU types as its per-group launch layout
(`paraplan export PLAN --to layout --instance INSTANCE`).

No framework we export to runs such a plan (solver/commands/export.MIXED_REASON), so what can be
written is where everything goes: which ranks run which stage of which replica on which node
group, with the layers and micro-batches each holds, for a launcher (or a script) to place
processes by. It is a description, not a framework configuration.

Rank numbering (`LAYOUT_VERSION` 1). Node groups in the instance's order, each group's GPUs
numbered on from the last rank of the group before it. Within a group, the stages placed on it
in the order class, replica, stage; each takes tp * cp consecutive ranks (tp varying fastest, as
Megatron-LM numbers its tensor-parallel ranks), tp being the group's. A group's GPUs the plan
leaves unused (search.idle_gpus) are its last ranks, listed as idle.

The file (YAML):
- `layout_version`, `instance` (its name), `model` (`name`, `layers`), `global_batch`,
  `micro_batch`, `seq_len`;
- `modes`: what every class shares (`tp` or a tp per group, `cp`, `virtual_stages`,
  `sequence_parallel`, `recompute`, `zero`, `ep`, `etp`);
- `groups`: per node group `name`, `gpu`, `gpus`, `ranks` ([first, last]), `used`, `idle`
  ([first, last] or null);
- `classes`: per replica class `replicas`, `num_micro_batches` (per replica and iteration),
  `stages` (per stage `group`, `tp`, `first_layer`, `layers`, `full_recompute_layers`) and
  `ranks`: per replica, per stage, [first, last].

An asymmetric pipeline (cost/asymmetric.py; one class of one pipeline, stage s on stage_dp[s]
data-parallel ranks): stage s takes stage_dp[s] * tp * cp consecutive ranks of its group, its
data-parallel ranks in turn, and its entry in `stages` adds `data_parallel` (stage_dp[s]) and
`micro_batches_per_rank` (num_micro_batches / stage_dp[s], what each of its ranks runs).
"""

from __future__ import annotations

import yaml

from paraplan.cost.specs import Instance

from paraplan.cost.plan_specs import Plan

LAYOUT_VERSION = 1


def stage_ranks(inst: Instance, plan: Plan) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(class, replica, stage) -> its [first, last] rank, numbered as the module docstring says."""
    groups = inst.cluster.groups
    next_rank, first = [], 0
    for g in groups:
        next_rank.append(first)
        first += g.num_gpus
    ranks = {}
    for k, c in enumerate(plan.classes):
        for r in range(c.replicas):
            for s, g in enumerate(c.stage_groups):
                # an asymmetric pipeline's stage: its stage_dp[s] data-parallel ranks in a row
                width = (c.stage_dp[s] if c.stage_dp else 1) * plan.tp_of(g) * plan.cp
                ranks[k, r, s] = (next_rank[g], next_rank[g] + width - 1)
                next_rank[g] += width
    return ranks


def layout_mapping(inst: Instance, plan: Plan) -> dict:
    """The layout file's mapping (module docstring)."""
    names = [g.name for g in inst.cluster.groups]
    ranks = stage_ranks(inst, plan)
    used = plan.outer.gpus_per_group(len(names))
    groups, first = [], 0
    for g, group in enumerate(inst.cluster.groups):
        n = group.num_gpus
        idle = [first + used[g], first + n - 1] if used[g] < n else None
        groups.append({"name": group.name, "gpu": group.gpu.name, "gpus": n,
                       "ranks": [first, first + n - 1], "used": used[g], "idle": idle})
        first += n
    classes = []
    for k, c in enumerate(plan.classes):
        starts = [sum(c.layers_per_stage[:s]) for s in range(len(c.layers_per_stage))]
        stages = [{"group": names[g], "tp": plan.tp_of(g), "first_layer": starts[s],
                   "layers": c.layers_per_stage[s], "full_recompute_layers": c.full_recompute_layers[s]}
                  for s, g in enumerate(c.stage_groups)]
        for s, st in enumerate(stages if c.stage_dp else ()):  # written only where used
            st.update(data_parallel=c.stage_dp[s], micro_batches_per_rank=c.num_micro_batches // c.stage_dp[s])
        classes.append({"replicas": c.replicas, "num_micro_batches": c.num_micro_batches,
                        "stages": stages,
                        "ranks": [[list(ranks[k, r, s]) for s in range(len(c.stage_groups))]
                                  for r in range(c.replicas)]})
    tp = {names[g]: t for g, t in plan.group_tp} if plan.group_tp else plan.tp
    modes = {"tp": tp, "cp": plan.cp, "virtual_stages": plan.virtual_stages,
             "sequence_parallel": plan.sequence_parallel, "recompute": plan.recompute.value,
             "zero": plan.zero, "ep": plan.ep, "etp": plan.expert_tp}
    return {"layout_version": LAYOUT_VERSION, "instance": inst.name,
            "model": {"name": inst.model.name, "layers": inst.model.layers},
            "global_batch": inst.job.global_batch, "micro_batch": plan.micro_batch,
            "seq_len": inst.model.seq_len, "modes": modes, "groups": groups, "classes": classes}


def to_layout(inst: Instance, plan: Plan) -> str:
    """The layout file's text: a comment saying what it is, then the mapping."""
    return ("# paraplan launch layout (solver/export/layout.py): which ranks run which stage on"
            " which node group;\n# no framework runs this plan as one job configuration, so"
            " place processes by it\n"
            + yaml.safe_dump(layout_mapping(inst, plan), sort_keys=False, default_flow_style=None))
