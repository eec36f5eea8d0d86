"""A Plan written back as a plan file's mapping: the flat form where the instance is flat and the
plan its one class on every GPU, else replica classes (cost/readers/plan_reader.py reads both).
"""

from __future__ import annotations

from paraplan.cost.specs import Instance, Recompute
from paraplan.cost.plan_specs import Plan
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.readers.plan_reader import PLAN_FILE_INSTANCE_KEY, RECOMPUTE_FULL


def plan_to_mapping(plan: Plan, inst: Instance | None = None) -> dict:
    """Plain YAML-safe mapping that plan_from_mapping / load_plan turn back into `plan` on
    `inst`: the flat form where `inst` is flat (cost/specs.Instance.flat) and the plan its one
    class on every GPU (Plan.is_flat_on; without `inst`, a plan of one class), else replica
    classes on `inst`'s groups."""
    if inst is not None and not (inst.flat and plan.is_flat_on(inst.cluster)):
        return _class_plan_mapping(plan, inst)
    out = {
        "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "cp": plan.cp,
        "micro_batch": plan.micro_batch,
        "num_micro_batches": plan.num_micro_batches,
        "sequence_parallel": plan.sequence_parallel,
        "recompute": plan.recompute.value,
        "zero": plan.zero,
        "virtual_stages": plan.virtual_stages,
        "layers_per_stage": list(plan.layers_per_stage),
        "full_recompute_layers": list(plan.full_recompute_layers),
    }
    if plan.partitions:
        out["partitions"] = dict(plan.partitions)
    if plan.ep > 1:  # absent: 1 (dense plan files stay as they were)
        out["ep"] = plan.ep
    if plan.etp is not None:  # absent: etp = tp (plans without parallel folding stay as they were)
        out["etp"] = plan.etp
    for key in ("embedding_in_split", "loss_in_split"):  # absent: false (files stay as they were)
        if getattr(plan, key):
            out[key] = True
    if plan.zero_bubble is not None:  # absent: 1F1B / interleaved (files stay as they were)
        out["zero_bubble"] = plan.zero_bubble.value
    # Only with NONE does `full` read back as the same Plan (full maps to NONE).
    if plan.recompute is Recompute.NONE and plan.full_recompute_layers == plan.layers_per_stage:
        out["recompute"] = RECOMPUTE_FULL
        del out["full_recompute_layers"]
    return out


def plan_file_mapping(inst: Instance, plan: Plan) -> dict:
    """What `paraplan plan -o` writes: the plan and the instance it was made for."""
    return {"plan": plan_to_mapping(plan), PLAN_FILE_INSTANCE_KEY: instance_to_mapping(inst)}


def _class_plan_mapping(plan: Plan, inst: Instance) -> dict:
    """plan_to_mapping of a plan in the form of replica classes."""
    names = [x.name for x in inst.cluster.groups]
    all_full = plan.recompute is Recompute.NONE and all(
        c.full_recompute_layers == c.layers_per_stage for c in plan.classes)
    classes = []
    for c in plan.classes:
        item = {"replicas": c.replicas, "stages": [names[g] for g in c.stage_groups],
                "num_micro_batches": c.num_micro_batches,
                "layers_per_stage": list(c.layers_per_stage)}
        if not all_full:
            item["full_recompute_layers"] = list(c.full_recompute_layers)
        if c.partitions:
            item["partitions"] = {names[g]: dict(parts) for g, parts in c.partitions}
        if c.stage_dp:  # written only where used: symmetric plans read as before
            item["stage_dp"] = list(c.stage_dp)
        classes.append(item)
    # written only where used: plans without cp or interleaving read as before
    cp = {"cp": plan.cp} if plan.cp > 1 else {}
    v = {"virtual_stages": plan.virtual_stages} if plan.virtual_stages > 1 else {}
    ep = {"ep": plan.ep} if plan.ep > 1 else {}
    etp = {"etp": plan.etp} if plan.etp is not None else {}
    slots = {k: True for k in ("embedding_in_split", "loss_in_split") if getattr(plan, k)}
    zb = {"zero_bubble": plan.zero_bubble.value} if plan.zero_bubble is not None else {}
    tp = {names[g]: t for g, t in plan.group_tp} if plan.group_tp else plan.tp
    return {"tp": tp, **cp, **v, **slots, **zb, **ep, **etp, "micro_batch": plan.micro_batch,
            "sequence_parallel": plan.sequence_parallel,
            # Only with NONE does `full` read back as the same plan (full maps to NONE).
            "recompute": RECOMPUTE_FULL if all_full else plan.recompute.value,
            "zero": plan.zero, "family": plan.family, "classes": classes}
