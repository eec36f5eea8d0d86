"""A Plan written back as a plan file's mapping: the flat form where the instance is flat and the
plan its one class on every GPU, else replica classes (cost/readers/plan_reader.py reads both).
"""

from __future__ import annotations

from paraplan.cost.specs import Instance, Recompute
from paraplan.cost.plan_specs import Plan, ReplicaClass
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.readers.plan_reader import PLAN_FILE_INSTANCE_KEY, RECOMPUTE_FULL


# The keys in the order each form writes them (unchanged since each form's first file): a flat
# plan its one class's keys among the modes, a plan of classes its modes then `classes:`.
_FLAT_ORDER = ("tp", "pp", "dp", "cp", "micro_batch", "num_micro_batches", "sequence_parallel",
               "recompute", "zero", "virtual_stages", "layers_per_stage", "full_recompute_layers",
               "partitions", "ep", "etp", "embedding_in_split", "loss_in_split", "zero_bubble")
_CLASS_ORDER = ("tp", "cp", "virtual_stages", "embedding_in_split", "loss_in_split", "zero_bubble",
                "ep", "etp", "micro_batch", "sequence_parallel", "recompute", "zero", "family",
                "classes")


def plan_to_mapping(plan: Plan, inst: Instance | None = None) -> dict:
    """Plain YAML-safe mapping that plan_from_mapping / load_plan turn back into `plan` on
    `inst`: the flat form where `inst` is flat (cost/specs.Instance.flat) and the plan its one
    class on every GPU (Plan.is_flat_on; without `inst`, a plan of one class), else replica
    classes on `inst`'s groups. A key at its default is left out where the reader's default
    rebuilds it and files written before it existed read as they did (ep, etp, the split slots,
    zero_bubble; a class plan's cp and virtual_stages); `recompute: full` where every layer is
    fully recomputed under none (only then does `full` read back as the same plan)."""
    flat = inst is None or (inst.flat and plan.is_flat_on(inst.cluster))
    all_full = plan.recompute is Recompute.NONE and all(
        c.full_recompute_layers == c.layers_per_stage for c in plan.classes)
    names = [x.name for x in inst.cluster.groups] if inst is not None else []
    out = _shared_mapping(plan, flat, names, all_full)
    if flat:
        c = plan.one_class
        out.update(_class_mapping(c, [], all_full), pp=plan.pp, dp=c.replicas)
        out["partitions"] = dict(plan.partitions) or None
    else:
        out.update(family=plan.family, classes=[
            {"replicas": c.replicas, "stages": [names[g] for g in c.stage_groups],
             **_class_mapping(c, names, all_full)} for c in plan.classes])
    return {k: out[k] for k in (_FLAT_ORDER if flat else _CLASS_ORDER) if out.get(k) is not None}


def _shared_mapping(plan: Plan, flat: bool, names: list[str], all_full: bool) -> dict:
    """The settings every class shares, as plan_to_mapping writes them in either form (None:
    left out)."""
    return {"tp": {names[g]: t for g, t in plan.group_tp} if plan.group_tp and not flat else plan.tp,
            "cp": plan.cp if flat or plan.cp > 1 else None,
            "virtual_stages": plan.virtual_stages if flat or plan.virtual_stages > 1 else None,
            "micro_batch": plan.micro_batch, "sequence_parallel": plan.sequence_parallel,
            "recompute": RECOMPUTE_FULL if all_full else plan.recompute.value, "zero": plan.zero,
            "ep": plan.ep if plan.ep > 1 else None, "etp": plan.etp,
            "embedding_in_split": plan.embedding_in_split or None,
            "loss_in_split": plan.loss_in_split or None,
            "zero_bubble": plan.zero_bubble.value if plan.zero_bubble is not None else None}


def _class_mapping(c: ReplicaClass, names: list[str], all_full: bool) -> dict:
    """A class's keys that both forms write alike (a class plan's partitions by group name,
    its stage_dp where used)."""
    out = {"num_micro_batches": c.num_micro_batches, "layers_per_stage": list(c.layers_per_stage)}
    if not all_full:
        out["full_recompute_layers"] = list(c.full_recompute_layers)
    if c.partitions and names:  # a flat plan writes its one group's as its own
        out["partitions"] = {names[g]: dict(parts) for g, parts in c.partitions}
    if c.stage_dp:  # written only where used: symmetric plans read as before
        out["stage_dp"] = list(c.stage_dp)
    return out


def plan_file_mapping(inst: Instance, plan: Plan) -> dict:
    """What `paraplan plan -o` writes: the plan and the instance it was made for."""
    return {"plan": plan_to_mapping(plan), PLAN_FILE_INSTANCE_KEY: instance_to_mapping(inst)}
