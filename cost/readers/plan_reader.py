"""The one plan reader: a plan file in either form, flat or of replica classes.

A plan file, flat or of replica classes, sits at top level or under a `plan:` key (`paraplan
plan -o` also writes the instance it was made for beside it, under `instance:`; see
`plan_file_instance`). Its keys, defaults and ranges: docs/schema.md ("Plan file"), generated
from the plan records' field docstrings and cost/schema_keys.py. `recompute: full` becomes
`Recompute.NONE` with every layer in `full_recompute_layers` (unless that list is given);
`plan_to_mapping` writes it back the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.framework_rules import unpriced_reason
from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.schedule import schedule_problem as torch_schedule_problem
from paraplan.cost.hf_layout import shown as _shown
from paraplan.cost.specs import Framework, Instance, Recompute, ZeroBubble
from paraplan.cost.pipeline_split import megatron_split
from paraplan.cost.plan_specs import Plan, ReplicaClass
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.fields import (Section, check_int, config_errors_as, describe,
                                          did_you_mean_or_known, enum_values, list_items)
from paraplan.cost.readers.instance import PLAN_FILE_INSTANCE_KEY, instance_from_mapping


RECOMPUTE_FULL = "full"


def default_layer_split(layers: int, pp: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """Layers per pipeline stage when the plan gives none: as even as possible.

    The split is done in chunks of `virtual_stages` layers, so every stage stays divisible by
    it. Leftover chunks go one each to the middle stages 1..pp-2, because the first and last
    stages also carry the embedding and the output layer. Only when the leftover is pp-1 does
    one more go to stage 0: the embedding lookup is nearly free, while the last stage's output
    projection and loss cost about a layer of compute. E.g. 10 layers on 4 stages: [2, 3, 3, 2];
    7 layers on 4 stages: [2, 2, 2, 1].
    """
    assert layers % virtual_stages == 0 and layers // virtual_stages >= pp >= 1
    chunks, leftover = divmod(layers // virtual_stages, pp)
    counts = [chunks] * pp
    for stage in [*range(1, pp - 1), 0][:leftover]:
        counts[stage] += 1
    return tuple(c * virtual_stages for c in counts)


def plan_from_mapping(mapping: Any, inst: Instance, path: str | Path = "<memory>") -> Plan:
    """A Plan for `inst` from a plan mapping (bare, or as a plan file writes it: {'plan': {...}},
    with the instance it was made for under `instance:`, which plan_file_instance reads), in
    either form: replica classes (`classes:`), or a flat plan, the one class on every GPU of a
    one-group cluster.

    One reader for both: the modes every class shares are read once, then each class, a flat
    plan's keys (pp, dp, its split) being the one class's. What differs is written where it
    differs: a flat plan's class sits on group 0 with `pp` stages and `dp` replicas, may leave out
    num_micro_batches (the global batch's share) and gives its split as Megatron-core does
    (first/last_stage_layers), and is checked on that group alone (Instance.group_alone)."""
    path = str(path)
    if isinstance(mapping, dict) and "plan" in mapping and set(mapping) <= {"plan", PLAN_FILE_INSTANCE_KEY}:
        mapping = mapping["plan"]
    flat = len(inst.cluster.groups) == 1 and not (isinstance(mapping, dict) and "classes" in mapping)
    sec = Section(mapping, path, "plan", _PLAN_KEYS if flat else _CLASS_PLAN_KEYS)
    names = tuple(x.name for x in inst.cluster.groups)
    micro_batch = sec.integer("micro_batch")
    by_group = _group_tp(sec, names, path)  # tp: {GROUP: N, ...}, a tp per group
    tp = 0 if by_group else sec.integer("tp")
    v = sec.integer("virtual_stages", 1)
    recompute = sec.choice("recompute", (*enum_values(Recompute), RECOMPUTE_FULL),
                           Recompute.NONE.value)
    modes = dict(micro_batch=micro_batch, cp=sec.integer("cp", 1), virtual_stages=v,
                 zero=sec.integer("zero", 0), ep=sec.integer("ep", 1),
                 etp=sec.integer("etp", None),  # absent: etp = tp (Megatron-core's default)
                 sequence_parallel=sec.boolean("sequence_parallel", False),
                 recompute=Recompute.NONE if recompute == RECOMPUTE_FULL else Recompute(recompute),
                 embedding_in_split=sec.boolean("embedding_in_split", False),
                 loss_in_split=sec.boolean("loss_in_split", False),
                 zero_bubble=plan_zero_bubble(sec, inst))
    if not flat:
        modes["family"] = sec.choice("family", FAMILIES, FAMILIES[0])
    items = [("plan", sec)] if flat else [(field, Section(raw, path, field, _CLASS_KEYS))
                                         for field, raw in list_items(sec, "classes", each="class")]
    classes = tuple(_replica_class(sec, c, field, inst, names, flat, recompute == RECOMPUTE_FULL)
                    for field, c in items)
    if by_group:  # `tp` is the first stage's group's (ClassOuter.group_tp)
        first = classes[0].stage_groups[0]
        if first not in dict(by_group):
            raise sec.error("tp", f"names no tp for group {names[first]!r}, which hosts the first"
                            " stage", "give every group the plan uses its tp")
        tp = dict(by_group)[first]
    on = inst.group_alone(0) if flat else inst
    m = on.model
    agree = (f"make the plan agree with instance '{on.name}': groups"
             f" {', '.join(f'{g.name} ({g.num_gpus} GPUs)' for g in on.cluster.groups)},"
             f" {m.layers} layers, global_batch {on.job.global_batch}, {m.heads} heads,"
             f" {m.kv_heads} kv_heads, seq_len {m.seq_len}")
    with config_errors_as(path, "plan", agree):
        plan = Plan(tp=tp, group_tp=by_group, classes=classes, **modes)
        plan.check_against(on)
    return _plan_runs(sec, on, plan)


def _replica_class(sec: Section, c: Section, field: str, inst: Instance, names: tuple[str, ...],
                   flat: bool, all_full: bool) -> ReplicaClass:
    """The replica class `c` (at `field`) of the plan section `sec`: one of its `classes:`, or,
    `flat`, the flat plan's own keys (`pp` stages on group 0, `dp` replicas)."""
    path, layers = c.path, inst.model.layers
    if flat:
        stage_key, stages = "pp", (0,) * c.integer("pp")
    elif not c.has("stages"):
        raise c.error("stages", "missing required key 'stages'",
                      "add 'stages: [GROUP, ...]', the group hosting each pipeline stage")
    else:
        stage_key, stages = "stages", c.list_of(
            "stages", lambda v, f: _group_index(path, names, v, f), "group names")
    pp, v = len(stages), sec.integer("virtual_stages", 1)
    replicas_key = "dp" if flat else "replicas"
    replicas = c.integer(replicas_key)
    split = plan_layer_split(sec, c, layers, pp, v)
    if split is None:
        if layers % v:
            raise sec.error("virtual_stages", f"the model's {layers} layers do not divide into"
                            f" chunks of virtual_stages={v}", "choose virtual_stages dividing the"
                            " layer count, or give layers_per_stage")
        if layers // v < pp:
            raise c.error(stage_key, f"{pp} stages x virtual_stages={v} exceed the model's"
                          f" {layers} layers", "use fewer pipeline stages")
        split = default_layer_split(layers, pp, v)
    full = c.int_list("full_recompute_layers", pp)
    if full is None:
        full = split if all_full else (0,) * pp
    if c.has("num_micro_batches") or not flat:
        num_micro_batches = c.integer("num_micro_batches")
    else:
        batch, micro_batch = inst.job.global_batch, sec.integer("micro_batch")
        if batch % (replicas * micro_batch):
            raise c.error("num_micro_batches", f"cannot be derived: global_batch={batch} is not"
                          f" divisible by {replicas_key}*micro_batch={replicas * micro_batch}",
                          f"choose {replicas_key} and micro_batch whose product divides global_batch")
        num_micro_batches = batch // (replicas * micro_batch)
    if flat:
        parts = plan_partitions(c)
        partitions = ((0, parts),) if parts else ()
    else:
        partitions = _class_partitions(c, names, stages)
    with config_errors_as(path, field, "correct the replica class"):
        return ReplicaClass(replicas=replicas, stage_groups=stages, num_micro_batches=num_micro_batches,
                            layers_per_stage=split, full_recompute_layers=full, partitions=partitions,
                            stage_dp=c.int_list("stage_dp", pp) or ())


def _plan_runs(sec: Section, inst: Instance, plan: Plan) -> Plan:
    """`plan`, read from `sec`, once what the reader refuses beyond the records' rules is ruled out: a zero-bubble
    schedule on a shape torch does not run it with (one class only), and what no command may
    price, ZeRO-2/3 inside a pipeline (framework_rules.unpriced_reason), refused as the plan is
    read, so simulate, memory, compare, report and export all refuse it."""
    if plan.zero_bubble is not None:
        c0 = plan.classes[0]
        problem = ("the space plans a zero-bubble schedule for one replica class" if len(plan.classes) > 1
                   else torch_schedule_problem(TorchSchedule(plan.zero_bubble.value), len(c0.stage_groups),
                                               plan.virtual_stages, c0.num_micro_batches))
        if problem:
            raise sec.error("zero_bubble", problem, "leave zero_bubble out, or give the plan a shape"
                            " torch runs the schedule with")
    unpriced = unpriced_reason(inst.job.framework, plan.zero, max(len(c.stage_groups) for c in plan.classes))
    if unpriced:
        problem, fix = unpriced.split("; ", 1)
        raise sec.error("zero", problem, fix + " (or plan the instance: the planner never proposes it)")
    return plan


def plan_zero_bubble(sec, inst) -> ZeroBubble | None:
    """A plan section's zero_bubble (torch's zero-bubble schedule, cost/zero_bubble.py): only
    torchtitan runs one (the plan's shape is checked against torch's rules once it is read)."""
    if not sec.has("zero_bubble"):
        return None
    kind = ZeroBubble(sec.choice("zero_bubble", enum_values(ZeroBubble)))
    if inst.job.framework is not Framework.TORCHTITAN:
        raise sec.error("zero_bubble", f"{kind.value} is a torch.distributed.pipelining schedule;"
                        f" framework {inst.job.framework.value} does not run it",
                        "leave zero_bubble out (1F1B, interleaved with virtual_stages > 1)")
    return kind


def plan_layer_split(sec: Section, c: Section, layers: int, pp: int, v: int) -> tuple[int, ...] | None:
    """The layers per stage of the class `c` of plan section `sec` (a flat plan is its own one
    class), or None where it leaves them to default_layer_split. It is given as
    `layers_per_stage`, or as Megatron-core gives it (cost/pipeline_split.py): a flat plan's
    `first_stage_layers` / `last_stage_layers` with the other stages even
    (--decoder-first/last-pipeline-num-layers), or the plan's `embedding_in_split` /
    `loss_in_split` alone, every stage then holding as many layers with the embedding / loss
    counted as one (--account-for-embedding/loss-in-pipeline-split). Each stage's layers, with
    those counted, must fill its v model chunks equally."""
    from paraplan.cost.pipeline_split import chunk_problem
    embedding = sec.boolean("embedding_in_split", False)
    loss = sec.boolean("loss_in_split", False)
    ends = {key: sec.integer(key) for key in SPLIT_KEYS[:2] if sec.has(key)}  # flat plans': c is sec
    if (embedding or loss) and pp == 1:
        raise sec.error("embedding_in_split" if embedding else "loss_in_split",
                        "counts the embedding or loss as a pipeline layer, but pp = 1",
                        "remove it (it only places layers between pipeline stages)")
    split = c.int_list("layers_per_stage", pp)
    if split is not None and ends:
        raise sec.error(next(iter(ends)), "given beside layers_per_stage, which already fixes"
                        " every stage's layers", f"remove {next(iter(ends))}, or layers_per_stage")
    if split is None and (ends or embedding or loss):
        stated = [*ends, *(k for k, on in zip(SPLIT_KEYS[2:], (embedding, loss)) if on)]
        split, _, _ = stated_megatron_split(
            sec, stated, layers, pp, v, f"(the model has {layers} layers, pp={pp}, virtual_stages={v})",
            "give counts Megatron-core can split (cost/pipeline_split.py), or the whole split as layers_per_stage")
    if split is not None:
        problem = chunk_problem(split, v, embedding, loss)
        if problem:
            raise c.error("layers_per_stage", problem,
                          "give each stage a multiple of virtual_stages layers, counting the"
                          " embedding (stage 0) and loss (last stage) as one layer where"
                          " embedding_in_split / loss_in_split say so")
    return split


# A split as Megatron-core is told it (cost/pipeline_split.py), in plan files and published rows:
# --decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split
SPLIT_KEYS = ("first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split")


def stated_megatron_split(sec: Section, stated: list[str], layers: int, pp: int, v: int, context: str,
                          fix: str) -> tuple[tuple[int, ...], bool, bool]:
    """(layers per stage, embedding_in_split, loss_in_split) as Megatron-core builds them from
    the `stated` SPLIT_KEYS of `sec` (the others absent); where it refuses them, InstanceError
    at the first stated key: the refusal, then `context` (the layers and degrees), and `fix`."""
    ends = {k: sec.integer(k) for k in SPLIT_KEYS[:2] if k in stated}
    embedding, loss = (k in stated and sec.boolean(k, False) for k in SPLIT_KEYS[2:])
    try:
        split = megatron_split(layers, pp, v, first=ends.get(SPLIT_KEYS[0]), last=ends.get(SPLIT_KEYS[1]),
                               embedding=embedding, loss=loss)
    except ConfigError as e:
        raise sec.error(stated[0], f"{e} {context}", fix) from None
    return split, embedding, loss


def plan_partitions(sec: Section, key: str = "partitions") -> tuple[tuple[str, str], ...]:
    """`partitions: {qkv: K, attn_core: heads, ..., stream: B2x2}` (cost/partition.py; the
    stream is optional: absent, Megatron's layout of the plan's sequence_parallel flag);
    absent: Megatron. `key`: the field of `sec` holding it."""
    if not sec.has(key):
        return ()
    from paraplan.cost.partition import OPS, PLAN_OPS, STREAM
    sub = sec.section(key, PLAN_OPS)
    out = []
    for op in OPS:
        out.append((op, sub.string(op)))
    if sub.has(STREAM):
        out.append((STREAM, sub.string(STREAM)))
    return tuple(out)


def load_plan(path: str | Path, inst: Instance) -> Plan:
    """The plan file at `path` for `inst`, in either form (plan_from_mapping)."""
    return plan_from_mapping(read_yaml(path), inst, path)


def plan_file_instance(data: Any, path: str | Path) -> Instance | None:
    """The instance the plan file `data` (as read from `path`) carries under `instance:`; None
    when it carries none (plan files written before paraplan wrote it, or written by hand)."""
    if not isinstance(data, dict) or PLAN_FILE_INSTANCE_KEY not in data:
        return None
    return instance_from_mapping(data[PLAN_FILE_INSTANCE_KEY], path, PLAN_FILE_INSTANCE_KEY)
FAMILIES = ("stage", "replica", "mixed")  # cost/plan_specs.Plan.family
# what every class shares; a flat plan adds its one class's keys, a plan of classes lists them
_MODE_KEYS = ("tp", "cp", "virtual_stages", "micro_batch", "sequence_parallel", "recompute", "zero", "ep",
              "etp", "embedding_in_split", "loss_in_split", "zero_bubble")
_PLAN_KEYS = (*_MODE_KEYS, "pp", "dp", "num_micro_batches", "layers_per_stage", "full_recompute_layers",
              "partitions", "first_stage_layers", "last_stage_layers")
_CLASS_PLAN_KEYS = (*_MODE_KEYS, "family", "classes")
_CLASS_KEYS = ("replicas", "stages", "num_micro_batches", "layers_per_stage",
               "full_recompute_layers", "partitions", "stage_dp")


def _group_tp(sec: Section, names: tuple[str, ...], path: str) -> tuple[tuple[int, int], ...]:
    """`tp: {GROUP: N, ...}` as ((group, tp), ...) by ascending group; () for `tp: N`."""
    if not isinstance(sec.raw.get("tp"), dict):
        return ()
    sub = sec.section("tp", names)
    out = tuple(sorted((names.index(n), check_int(sub.raw[n], path, sub.field(n), "tp"))
                       for n in names if sub.has(n)))
    if len(out) < 2:
        raise sec.error("tp", "a tp per group names each group the plan uses",
                        f"give each of {', '.join(names)} that the plan uses its tp, or write one"
                        " number, e.g. tp: 4")
    if len({t for _, t in out}) == 1:
        raise sec.error("tp", "a tp per group needs at least two different degrees",
                        "write one number, e.g. tp: 4, when every group runs the same")
    return out


def _class_partitions(c: Section, names: tuple[str, ...], stages: tuple[int, ...]):
    """`partitions: {GROUP: {qkv: K, attn_core: heads, ...}}`: the layer plan of the class's
    stages on each group named (a flat plan's `partitions:`; absent: Megatron 1-D)."""
    if not c.has("partitions"):
        return ()
    used = tuple(dict.fromkeys(names[g] for g in stages))
    sub = c.section("partitions", used)
    out = []
    for name in used:
        if sub.has(name):
            parts = plan_partitions(sub, name)
            out.append((names.index(name), parts))
    return tuple(sorted(out))


def _group_index(path: str, names: tuple[str, ...], value: Any, field: str) -> int:
    if isinstance(value, str) and value in names:
        return names.index(value)
    shown = _shown(value) if isinstance(value, str) else describe(value)
    raise InstanceError(path, field, f"no group named {shown}",
                        did_you_mean_or_known(value if isinstance(value, str) else "", names, "groups"))
