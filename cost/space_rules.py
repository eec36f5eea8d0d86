"""Which `search:` values an instance's shape can never run: refused at load time, like the
framework's (cost/framework_rules.py, whose `Refusal` this module returns).

A value the user lists under `search:` that no plan of the instance can use is an input error,
never a silent filter that ends in "infeasible": tp=3 with 16 heads, tp=16 on 8-GPU nodes
without `tp_across_nodes`, pp=64 with 32 layers, cp=3, a cp that does not divide seq_len, a
micro-batch that divides no per-replica batch, a memory reserve as large as the GPU. Each rule
below is one of solver/space.py's (which uses `tp_problem`, `cp_problem` and `pp_problem` to
filter the defaults, so the two cannot drift apart); each value is judged on its own, against the
instance and the other keys' admissible values. Values the defaults bring in are filtered by the
space, never refused; a space that is empty only through a combination of individually possible
values is reported by the planner and by exhaustive search as empty, with the reason.

One table, SEARCH_RULES, holds the rules for one node group and for several; each refusal names
its rule. Clusters of several groups (solver/space.py) have no uniform_split: listing it there
is refused instead of dropped. `mixed_families` needs two node groups, so a one-group cluster
refuses it, in either file form.

`SearchSpace.several_classes` says when a homogeneous file's search asks for plans only the
group format holds (several replica classes on its one group, or GPUs left idle): the commands
then show it as the one-group cluster it is (solver/plan_text.shown_as_groups).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field, replace

from paraplan.cost.framework_rules import MEGATRON_FEATURE_YEARS, Refusal
from paraplan.cost.specs import (Attention, Cluster, NodeGroup, Framework, JobSpec, ModelSpec,
                                 PipelineSchedule, SearchSpace)
from paraplan.cost.units import bytes_to_gib


MIXED_FAMILIES_ONE_GROUP = Refusal(
    "mixed_families", "a pipeline across groups beside replica classes needs two node groups;"
    " this cluster has one", "remove mixed_families")


def _powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(max(limit, 1).bit_length()) if 1 << k <= limit]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def split_slots_run(job: JobSpec, space: SearchSpace) -> bool:
    """Whether the job's framework release counts the embedding / loss as a pipeline layer slot
    (Megatron-core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-
    split, from core 0.11.0: framework_rules.MEGATRON_FEATURE_YEARS), so that the space offers
    those splits (solver/space.py). Not with search.uniform_split (the baseline's even split)
    nor with per-operator layer plans beside Megatron's (search.tensor_partitions: the layer-plan
    bounds of solver/class_partitions.py read whole chunks of v layers)."""
    year = job.release.year if job.framework_version is not None else None
    return (job.framework is Framework.MEGATRON and not space.uniform_split
            and tuple(space.tensor_partitions) == ("megatron",)
            and (year is None or year >= MEGATRON_FEATURE_YEARS["split_slots"]))


def slot_modes(layers: int, v: int, slots: bool) -> list[tuple[bool, bool]]:
    """The (embedding_in_split, loss_in_split) pairs a split into v model chunks per stage can
    run: those with v dividing layers + the slots counted (cost/pipeline_split.py R4 with any
    count per stage). With v = 1 the slots change no chunk, so none are offered; without
    `slots` (split_slots_run) only v dividing the layers. The unflagged pair first, so that on
    a tie the space's order keeps the plan without the flags."""
    if v == 1 or not slots:
        return [(False, False)] if layers % v == 0 else []
    return [(e, l) for e in (False, True) for l in (False, True) if (layers + e + l) % v == 0]


def tp_problem(t: int, model: ModelSpec, gpus: int, gpus_per_node: int,
               across_nodes: bool) -> str | None:
    """Why tensor-parallel degree `t` cannot run, or None."""
    if not across_nodes and t > gpus_per_node:
        return (f"tp={t} spans more than the {gpus_per_node} GPUs of a node, and"
                " search.tp_across_nodes is false")
    if gpus % t:
        return f"tp={t} does not divide the cluster's {gpus} GPUs"
    if model.heads % t:
        return f"tp={t} does not divide the model's {model.heads} attention heads"
    if model.kv_heads % t and t % model.kv_heads:
        return (f"tp={t} neither divides the model's {model.kv_heads} key/value heads nor is a"
                " multiple of them")
    return None


def group_tp_problem(t: int, model: ModelSpec, group: NodeGroup, across_nodes: bool) -> str | None:
    """Why tensor-parallel degree `t` cannot run on one node group of a mixed cluster, or None:
    the homogeneous rule (tp_problem) on the group's GPUs and NVLink domain, and a tp group
    across domains takes whole domains (the group's classes are laid out in blocks of tp GPUs
    from its first GPU)."""
    domain = group.domain_gpus
    problem = tp_problem(t, model, group.num_gpus, domain, across_nodes)
    if problem is None and t > domain and t % domain:
        problem = f"tp={t} spans part of an NVLink domain of {domain} GPUs"
    return problem


def cp_problem(c: int, model: ModelSpec, gpus: int, max_cp: int | None,
               flash: bool = True) -> str | None:
    """Why cp = c cannot run, or None. Ring attention exists only in fused attention kernels:
    Megatron-core's unfused DotProductAttention asserts "Context parallelism is only supported
    by TEDotProductAttention!", and torch's context_parallel dispatches only the flash and
    memory-efficient SDPA backends, so `attention: standard` runs with cp = 1."""
    if c > 1 and not flash:
        return f"cp={c} needs fused attention (attention: flash); unfused attention has no ring"
    if model.seq_len % c:
        return f"cp={c} does not divide the sequence length {model.seq_len}"
    if gpus % c:
        return f"cp={c} does not divide the cluster's {gpus} GPUs"
    if max_cp is not None and c > max_cp:
        return f"cp={c} exceeds search.max_cp={max_cp}"
    return None


def pp_problem(p: int, model: ModelSpec, gpus: int, max_pp: int | None) -> str | None:
    if p > model.layers:
        return f"pp={p} stages exceed the model's {model.layers} layers (a stage holds >= 1)"
    if gpus % p:
        return f"pp={p} does not divide the cluster's {gpus} GPUs"
    if max_pp is not None and p > max_pp:
        return f"pp={p} exceeds search.max_pp={max_pp}"
    return None


def ep_values(model: ModelSpec, listed: tuple[int, ...] | None, ranks: int) -> list[int]:
    """The expert-parallel degrees of the space for a plan whose stage has `ranks` GPUs per
    expert tensor-parallel group (tp x dp x cp / etp; etp = tp: the data-parallel x
    context-parallel group): the listed values (default: every divisor of the expert count)
    that divide both the experts and `ranks` (the ep group lies inside that group, cost/moe.py;
    on a mixed cluster inside one replica class's, so `ranks` is then the gcd of the classes').
    A dense model runs ep = 1 only. The one rule solver/space.py uses (expert_layouts)."""
    if model.moe is None:
        return [1]
    vals = listed if listed is not None else _divisors(model.moe.experts)
    return [e for e in vals if model.moe.experts % e == 0 and ranks % e == 0]


def etp_values(model: ModelSpec, listed: tuple[int, ...] | None, tp: int) -> list[int]:
    """The expert tensor-parallel degrees of the space for a plan of tensor-parallel degree tp,
    tp first where it is one of them (Megatron-core's default, and every plan before parallel
    folding). Default: tp and 1, the setting Megatron-core's MoE README recommends for
    fine-grained experts (megatron/core/transformer/moe/README.md at d98e8a64dd,
    --expert-tensor-parallel-size: "Recommended to set to 1 for fine-grained MoE models"):
    each GPU runs whole experts, no expert all-gather. Every divisor of tp as the default would
    triple the MoE instances' outer configurations (each priced); list them under search.etp
    to search them. Listed: exactly those values that divide the experts' ffn width (a value
    equal to the configuration's tp is its default layout). A dense model runs etp = tp only."""
    if model.moe is None:
        return [tp]
    vals = set(listed if listed is not None else (tp, 1))
    return [e for e in [tp] + sorted(vals - {tp}) if e in vals and model.moe.expert_ffn % e == 0]


def expert_layouts(model: ModelSpec, space: SearchSpace, tp: int, ranks: int,
                   sp: bool) -> list[tuple[int, int | None]]:
    """(ep, etp) of the space for a stage of tensor-parallel degree tp over `ranks` data x
    context parallel ranks (on a mixed cluster the gcd of the classes' replicas x cp), etp as a
    plan stores it (None: = tp), in a fixed order: etp = tp first with ep as ep_values orders
    it (the space before parallel folding), then each other etp (etp_values). Each pair
    satisfies cost/specs.moe_fold_problem: etp * ep divides tp * ranks, etp != tp only with
    sequence parallelism or tp = 1; an empty list where no listed etp fits (the configuration
    is then not in the space)."""
    out: list[tuple[int, int | None]] = []
    for etp in etp_values(model, space.etp, tp):
        if (tp * ranks) % etp or etp != tp and tp > 1 and not sp:
            continue
        out += [(ep, None if etp == tp else etp) for ep in ep_values(model, space.ep, tp * ranks // etp)]
    return out


def expert_ranks_modulus(model: ModelSpec, space: SearchSpace, tp: int) -> int:
    """K such that expert_layouts(model, space, tp, ranks, sp) reads `ranks` only through
    gcd(tp x ranks, K): the experts times the least common multiple of etp_values. Why: with
    g that gcd, each etp listed divides K, so it divides tp x ranks exactly where it divides g;
    and then ep_values' test of an ep e (e divides the experts and tp x ranks / etp) is that
    e x etp divides g, e x etp dividing K too. So the ranks of one g share their layouts (with
    search.idle_gpus every replica count is a layout of its own: solver/space._Listing keys
    the expert layouts by g)."""
    experts = model.moe.experts if model.moe is not None else 1
    return experts * math.lcm(*etp_values(model, space.etp, tp))


def moe_problem(model: ModelSpec, tp: int, sp: bool, zero: int) -> str | None:
    """Why an outer configuration cannot run an MoE model, or a model with latent attention
    (ZeRO-3 of its replicated down projections is not priced), or None. ZeRO-3 of an MoE
    model shards the expert weights over the expert-data-parallel group (cost/coefficients)."""
    if model.mla is not None and zero == 3:
        return MLA_ZERO3
    if model.moe is None:
        return None
    if tp > 1 and not sp:
        return ("Megatron-core runs MoE layers with tp > 1 only with sequence parallelism"
                " (its MoE README)")
    return None


MLA_ZERO3 = ("ZeRO-3 of latent attention's down projections, whole on every tensor-parallel rank,"
             " is not priced yet (cost/flops.attention_projections)")


def mla_refusal(space: SearchSpace, model: ModelSpec, given: frozenset[str]) -> Refusal | None:
    """A listed `search:` value that a model with latent attention can never use."""
    if model.mla is None:
        return None
    if "zero" in given and set(space.zero) == {3}:
        return Refusal("zero", MLA_ZERO3, "use zero 0, 1 or 2")
    if "tensor_partitions" in given and "spatial_temporal" in space.tensor_partitions:
        return Refusal("tensor_partitions", per_operator_problem(model), "remove spatial_temporal")
    return None


def per_operator_problem(model: ModelSpec) -> str | None:
    """Why per-operator tensor partitions (cost/partition.py) cannot price `model`'s layers, or
    None: they price dense layers of standard attention only. The one rule `search:
    tensor_partitions` (mla_refusal, moe_refusal) and `paraplan partition` refuse by."""
    if model.mla is not None:
        return "per-operator partitions are not priced for latent attention's projections"
    if model.moe is not None:
        return "per-operator partitions are not priced for MoE layers"
    return None


def moe_refusal(space: SearchSpace, model: ModelSpec, given: frozenset[str]) -> Refusal | None:
    """A listed `search:` value, or a framework, that the model's experts (or its latent
    attention, mla_refusal) can never use."""
    refusal = mla_refusal(space, model, given)
    if refusal is not None:
        return refusal
    if model.moe is None:
        if "ep" in given and space.ep is not None and max(space.ep) > 1:
            return Refusal("ep", f"ep={max(space.ep)} needs a mixture-of-experts model, and"
                           f" {model.name} is dense (no model.moe)", "use ep: [1] or drop the key")
        if "etp" in given and space.etp is not None:
            return Refusal("etp", f"etp (expert tensor parallel) needs a mixture-of-experts model,"
                           f" and {model.name} is dense (no model.moe)", "drop the key")
        return None
    if "etp" in given and space.etp is not None:
        for e in space.etp:
            if model.moe.expert_ffn % e:
                return Refusal("etp", f"etp={e} does not divide the experts' ffn width"
                               f" {model.moe.expert_ffn}", "use a divisor of expert_ffn; drop it"
                               " from the list")
    if "ep" in given and space.ep is not None:
        for e in space.ep:
            if model.moe.experts % e:
                return Refusal("ep", f"ep={e} does not divide the model's {model.moe.experts}"
                               " experts", "use a divisor of the expert count; drop it from the list")
    if "tensor_partitions" in given and "spatial_temporal" in space.tensor_partitions:
        return Refusal("tensor_partitions", per_operator_problem(model), "remove spatial_temporal")
    return None


def search_refusal(space: SearchSpace, model: ModelSpec, cluster: Cluster, job: JobSpec,
                   given: frozenset[str]) -> Refusal | None:
    """The first listed `search:` value (keys in `given`) that no plan of the instance can run,
    on one node group or many: the rules of SEARCH_RULES in order, each on the degrees the
    previous ones admitted (_Admitted), the refusal naming its rule (Refusal.rule).

    On several groups, until the mixed-cluster space is the one-group one (issue 12), a key it
    cannot honour is refused, never dropped (uniform_split, per-operator partitions), and a tp,
    cp or virtual_stages value is refused only where no group can use it."""
    ctx = _Admitted(space, model, list(cluster.groups), job, given)
    column = 1 if len(ctx.groups) == 1 else 2
    for row in SEARCH_RULES:
        refusal = row[column](ctx) if row[column] is not None else None
        if refusal is not None:
            return replace(refusal, rule=row[0])
    return None


_DROP = "drop it from the list"


@dataclass
class _Admitted:
    """One instance's search and the degrees its one-group rules admitted so far."""

    space: SearchSpace
    model: ModelSpec
    groups: list[NodeGroup]
    job: JobSpec
    given: frozenset[str]
    tps: list[int] = field(default_factory=list)
    cps: list[int] = field(default_factory=list)
    pps: list[int] = field(default_factory=list)

    @property
    def group(self) -> NodeGroup:
        return self.groups[0]

    @property
    def flash(self) -> bool:
        return self.job.attention is Attention.FLASH

    @property
    def slots(self) -> bool:
        return split_slots_run(self.job, self.space)


def _moe_rule(c: _Admitted) -> Refusal | None:
    return moe_refusal(c.space, c.model, c.given)


def _mixed_families_rule(c: _Admitted) -> Refusal | None:
    return MIXED_FAMILIES_ONE_GROUP if "mixed_families" in c.given and c.space.mixed_families else None


ASYMMETRIC_ONE_GROUP = Refusal(
    "asymmetric_pipelines", "a pipeline across groups with a data-parallel degree per stage needs"
    " two node groups; this cluster has one", "remove asymmetric_pipelines")


def _asymmetric_rule(c: _Admitted) -> Refusal | None:
    """asymmetric_pipelines on one node group (its space lists pipelines across groups)."""
    return ASYMMETRIC_ONE_GROUP if c.space.asymmetric_pipelines else None


def _tp_rule(c: _Admitted) -> Refusal | None:
    n, space = c.group.num_gpus, c.space
    for t in (space.tp if space.tp is not None else _powers_of_two(n)):
        problem = tp_problem(t, c.model, n, c.group.domain_gpus, space.tp_across_nodes)
        if problem is None:
            c.tps.append(t)
        elif "tp" in c.given:
            fix = ("set search.tp_across_nodes: true, or " + _DROP if "node" in problem
                   else f"use a divisor of the heads and of the GPUs; {_DROP}")
            return Refusal("tp", problem, fix)
    return None


def _cp_rule(c: _Admitted) -> Refusal | None:
    n, space = c.group.num_gpus, c.space
    for cp in (space.cp if space.cp is not None else _powers_of_two(n)):
        problem = cp_problem(cp, c.model, n, space.max_cp, c.job.attention is Attention.FLASH)
        if problem is None:
            if any((n // t) % cp == 0 for t in c.tps):
                c.cps.append(cp)
            elif "cp" in c.given and c.tps:
                return Refusal("cp", f"cp={cp} divides none of the GPU counts left by tp"
                               f" ({', '.join(str(n // t) for t in c.tps)})", _DROP)
        elif "cp" in c.given:
            fix = ("set job.attention: flash, or " + _DROP if "fused" in problem
                   else f"use a divisor of the sequence length and of the GPUs; {_DROP}")
            return Refusal("cp", problem, fix)
    return None


def _pp_rule(c: _Admitted) -> Refusal | None:
    n, space = c.group.num_gpus, c.space
    for p in (space.pp if space.pp is not None else _divisors(n)):
        problem = pp_problem(p, c.model, n, space.max_pp)
        if problem is None:
            c.pps.append(p)
        elif "pp" in c.given:
            return Refusal("pp", problem, _DROP)
    return None


def _micro_batch_rule(c: _Admitted) -> Refusal | None:
    if "micro_batch" not in c.given or c.space.micro_batch is None:
        return None
    n, gb = c.group.num_gpus, c.job.global_batch
    per_replica = sorted({gb // (n // (t * cp * p)) for t in c.tps for cp in c.cps for p in c.pps
                          if n % (t * cp * p) == 0 and gb % (n // (t * cp * p)) == 0}, reverse=True)
    # with no factorisation at all (the planner reports the empty space), at least the
    # global batch itself must be divisible
    per_replica = per_replica or [gb]
    for b in c.space.micro_batch:
        if not any(r % b == 0 for r in per_replica):
            shown = ", ".join(map(str, per_replica[:6])) + (", ..." if len(per_replica) > 6 else "")
            return Refusal("micro_batch", f"micro_batch={b} divides none of the per-replica"
                           f" batches (global_batch / dp: {shown})", f"use a divisor of one of them; {_DROP}")
    return None


def _virtual_stages_rule(c: _Admitted) -> Refusal | None:
    if "virtual_stages" not in c.given or c.space.virtual_stages is None:
        return None
    layers, slots = c.model.layers, split_slots_run(c.job, c.space)
    for v in c.space.virtual_stages:
        if v > 1 and not slot_modes(layers, v, slots):
            return Refusal("virtual_stages", f"virtual_stages={v} does not divide the"
                           f" model's {layers} layers" + (" (nor with the embedding and loss counted"
                                                          " as layers)" if slots else ""), _DROP)
        if v > 1 and not any(p > 1 and v * p <= layers + 2 * slots for p in c.pps):
            return Refusal("virtual_stages", f"virtual_stages={v} needs pp > 1 with"
                           f" {v} x pp <= {layers} layers, and no admissible pp has it", _DROP)
    return None


def _sequence_parallel_rule(c: _Admitted) -> Refusal | None:
    if ("sequence_parallel" in c.given and False not in c.space.sequence_parallel
            and not any(t > 1 for t in c.tps)):
        return Refusal("sequence_parallel", "sequence parallelism needs tp > 1, and no"
                       " admissible tp is", "add false to search.sequence_parallel")
    return None


def _zero_rule(c: _Admitted) -> Refusal | None:
    if "zero" in c.given and 0 not in c.space.zero and c.group.num_gpus == 1:
        return Refusal("zero", f"ZeRO-{min(c.space.zero)} shards over data-parallel ranks, and"
                       " the cluster has one GPU", "use zero: [0]")
    return None


def _reserve_rule(c: _Admitted) -> Refusal | None:
    return reserve_refusal(c.space, c.group)


def _dualpipe_rule(c: _Admitted) -> Refusal | None:
    """A listed `search:` value that a DualPipe job (job.pipeline_schedule: dualpipe) can never
    run, by DualPipe's own rule (cost/dualpipe.schedule_problem: an even pp >= 2, one chunk per
    stage, an even number of micro-batches >= 2 pp). A pp is judged with the most micro-batches
    any plan has, global_batch (dp = micro_batch = 1); a virtual_stages value with a pipeline
    DualPipe runs (pp 2, 4 micro-batches), so that only the value's own rule can fail."""
    space, job, given = c.space, c.job, c.given
    if job.pipeline_schedule is not PipelineSchedule.DUALPIPE:
        return None
    from paraplan.cost.dualpipe import schedule_problem  # here: only a DualPipe job reads it
    fix = "drop it from the list, or use job.pipeline_schedule: 1f1b"
    if "virtual_stages" in given and space.virtual_stages is not None:
        for v in space.virtual_stages:
            problem = schedule_problem(2, v, 4)
            if problem is not None:
                return Refusal("virtual_stages", f"virtual_stages={v}: {problem}", fix)
    if "max_pp" in given and space.max_pp is not None and space.max_pp < 2:
        return Refusal("max_pp", f"max_pp={space.max_pp}: {schedule_problem(space.max_pp, 1, 4)}",
                       "allow pp >= 2 (max_pp: 2 or more), or use job.pipeline_schedule: 1f1b")
    if "pp" in given and space.pp is not None:
        for p in space.pp:
            problem = schedule_problem(p, 1, job.global_batch)
            if problem is not None:
                most = ("" if p < 2 or p % 2 else f" (dp = micro_batch = 1: the most micro-batches"
                        f" global_batch {job.global_batch} gives)")
                return Refusal("pp", f"pp={p}: {problem}{most}", fix)
    return None


def reserve_refusal(space: SearchSpace, group: NodeGroup) -> Refusal | None:
    hbm = group.gpu.hbm_bytes
    if space.memory_reserve_bytes >= hbm:
        return Refusal("memory_reserve_gib", f"a reserve of"
                       f" {bytes_to_gib(space.memory_reserve_bytes):g} GiB leaves nothing of the"
                       f" {group.gpu.name}'s {bytes_to_gib(hbm):g} GiB",
                       "give a reserve smaller than the GPU's memory")
    return None


def _group_cp_rule(c: _Admitted) -> Refusal | None:
    if "cp" not in c.given or c.space.cp is None:
        return None
    for cp in c.space.cp:
        problems = [cp_problem(cp, c.model, cl.num_gpus, c.space.max_cp, c.flash) for cl in c.groups]
        if not c.flash and cp > 1:
            return Refusal("cp", problems[0], "set job.attention: flash, or " + _DROP)
        if all(problems):
            return Refusal("cp", problems[0] + " (on every group)", _DROP)
    return None


def _group_virtual_stages_rule(c: _Admitted) -> Refusal | None:
    if "virtual_stages" not in c.given or c.space.virtual_stages is None:
        return None
    layers = c.model.layers
    for v in c.space.virtual_stages:
        if not slot_modes(layers, v, c.slots) or layers + 2 * c.slots < 2 * v:
            return Refusal("virtual_stages", f"virtual_stages={v} does not split the model's"
                           f" {layers} layers into chunks of two stages or more", _DROP)
    return None


def _group_uniform_split_rule(c: _Admitted) -> Refusal | None:
    if "uniform_split" in c.given and c.space.uniform_split:
        return Refusal("uniform_split", "the mixed-cluster planner does not restrict itself to"
                       " even layer splits", "remove uniform_split (`paraplan bench --mixed`"
                       " reports the uniform-split baseline)")
    return None


def _group_tp_rule(c: _Admitted) -> Refusal | None:
    if "tp" not in c.given or c.space.tp is None:
        return None
    for t in c.space.tp:
        problems = [group_tp_problem(t, c.model, cl, c.space.tp_across_nodes) for cl in c.groups]
        if all(problems):
            fix = ("set search.tp_across_nodes: true, or " + _DROP
                   if "node" in problems[0] and not c.space.tp_across_nodes else _DROP)
            return Refusal("tp", problems[0] + " (on every group)", fix)
    return None


def _group_pp_rule(c: _Admitted) -> Refusal | None:
    if "pp" not in c.given or c.space.pp is None:
        return None
    for p in c.space.pp:
        if p > c.model.layers:
            return Refusal("pp", f"pp={p} stages exceed the model's {c.model.layers} layers", _DROP)
    return None


def _group_reserve_rule(c: _Admitted) -> Refusal | None:
    return next((r for cl in c.groups if (r := reserve_refusal(c.space, cl)) is not None), None)


# search_refusal's rules, in the order the values are reported: (name, rule on one node group,
# rule on several; None: the rule does not apply there). On one group tp before cp before pp,
# each judged on the degrees the earlier ones admitted, then the values those degrees bound.
SEARCH_RULES = (
    ("moe", _moe_rule, _moe_rule),
    ("mixed_families", _mixed_families_rule, None),
    ("asymmetric_pipelines", _asymmetric_rule, None),
    ("uniform_split", None, _group_uniform_split_rule),
    ("tp", _tp_rule, _group_tp_rule),
    ("cp", _cp_rule, _group_cp_rule),
    ("pp", _pp_rule, _group_pp_rule),
    ("dualpipe", _dualpipe_rule, None),
    ("micro_batch", _micro_batch_rule, None),
    ("virtual_stages", _virtual_stages_rule, _group_virtual_stages_rule),
    ("sequence_parallel", _sequence_parallel_rule, None),
    ("zero", _zero_rule, None),
    ("memory_reserve", _reserve_rule, _group_reserve_rule),
)
