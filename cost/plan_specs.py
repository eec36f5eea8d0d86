"""Frozen records for clusters of node groups, changing networks, and the one plan record.

A cluster is a list of node groups, each a homogeneous `NodeGroup` (one GPU
type, its NVLink and NIC), plus a link between every two groups (per GPU, one direction). A
network scenario is a whole cluster as it is while the scenario holds: the loader applies a
scenario's changes once (cost/readers/scenarios.py), so nothing downstream edits links.

A plan (`Plan`; the declared space is in solver/space.py) is the modes every replica shares and
its replica classes; a flat plan file's plan is the one-class case (`Plan.flat`), dp replicas of
pp stages on group 0 using every GPU, whose degrees and split read as one-class properties
(`pp`, `dp`, `num_micro_batches`, `layers_per_stage`, ...; `flat_outer` the Outer it is priced by).
In every plan:

- every replica runs 1F1B over its own pipeline (interleaved with `virtual_stages` v > 1 model
  chunks per stage, the same v for every class); tensor parallelism (`tp`) inside a node, or
  over whole nodes of a group (search.tp_across_nodes), and with one class a tp per group
  (`group_tp`: the stages on each group run its own); context parallelism (`cp`): each stage
  of a replica is tp * cp GPUs of its group, ranked tp fastest then cp, as on one group;
- a *replica class* is a set of identical replicas: how many (`replicas`), which group hosts
  each of its pipeline stages (`stage_groups`), how many micro-batches each replica runs per
  iteration (`num_micro_batches`; with several classes at least its stage count), its layer split, and the
  per-operator tensor partition of its layers on each group it uses (`partitions`, with
  search.tensor_partitions; cost/partition.py: one layer plan per class and group);
- stage-wise heterogeneity is one class whose stages sit on different groups; replica-wise
  heterogeneity is several classes, e.g. one per group, with different micro-batch counts.
All replicas synchronise gradients every iteration; the iteration ends with the slowest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from paraplan.cost.errors import ConfigError
from paraplan.cost import recompute_patterns
from paraplan.cost.framework_rules import recompute_pattern, rules_for
from paraplan.cost.pipeline_split import chunk_problem
from paraplan.cost.pipeline_split import chunk_layers
from paraplan.cost.specs import (Cluster, Instance, Outer, PipelineSchedule, Recompute, ZeroBubble,
                                 moe_fold_problem)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassShape:
    """The structural part of a replica class, fixed before the split is solved."""

    replicas: int
    stage_groups: tuple[int, ...]
    # an asymmetric pipeline (cost/asymmetric.py): stage s on stage_dp[s] data-parallel ranks
    # of its group, `replicas` 1; empty: `replicas` ranks on every stage
    stage_dp: tuple[int, ...] = ()

    @property
    def pp(self) -> int:
        return len(self.stage_groups)

    def ranks_of(self, s: int) -> int:
        """The data-parallel ranks of stage s."""
        return self.stage_dp[s] if self.stage_dp else self.replicas


@dataclass(frozen=True, slots=True, kw_only=True)
class _Modes:
    """What every replica class of a plan shares."""

    tp: int
    """tensor-parallel degree of every class: inside a node or whole nodes"""
    micro_batch: int
    """sequences per micro-batch"""
    cp: int = 1
    """context-parallel degree"""
    virtual_stages: int = 1
    """interleaved model chunks per stage

    Of 1F1B, the same for every class."""
    sequence_parallel: bool = False
    """Megatron's sequence parallelism"""
    recompute: Recompute = Recompute.NONE
    """recomputation of the layers not fully recomputed; full: every layer fully recomputed

    A plan file's `full` is read as none with every layer in full_recompute_layers
    (cost/readers/plan_reader.py)."""
    zero: int = 0
    """ZeRO stage (where the framework runs it)

    0 none, 1 optimizer states (Megatron's distributed optimizer), 2 also gradients, 3 also
    parameters."""
    family: str = "stage"
    """stage: one pipeline across groups; replica: replicas per group; mixed: both

    "mixed": a class across groups beside replica classes (solver/space.py); a label only."""
    ep: int = 1
    """expert-parallel degree (MoE)

    1: dense, or every replica holds every expert. Each ep group lies inside one replica
    class's tp x dp x cp ranks of one stage (cost/moe.py)."""
    etp: int | None = None
    """expert tensor-parallel degree (MoE)

    cost/specs.Outer.etp. None: each stage's tp; an etp equal to tp is stored as None (with one
    tp for every group)."""
    # a tensor-parallel degree per node group: ((group, tp), ...) by ascending group, naming
    # every group the plan uses, with `tp` the first stage's group's; empty: `tp` on every group
    # (solver/space.py says where the space has several)
    group_tp: tuple[tuple[int, int], ...] = ()
    embedding_in_split: bool = False
    """the embedding counts as a layer slot of the first stage
    (--account-for-embedding-in-pipeline-split)

    Of the first stage's first model chunk (cost/specs.Outer, cost/pipeline_split.py), in every
    class."""
    loss_in_split: bool = False
    """the loss counts as a layer slot of the last stage (--account-for-loss-in-pipeline-split)

    Of the last stage's last model chunk, in every class."""
    zero_bubble: ZeroBubble | None = None
    """torchtitan only: torch's zero-bubble schedule
    ([concepts.md](concepts.md#pipeline-schedules))

    Every class runs it (cost/specs.Outer.zero_bubble)."""

    def tp_of(self, group: int) -> int:
        """The tensor-parallel degree of the stages on `group`."""
        for g, t in self.group_tp:
            if g == group:
                return t
        return self.tp

    @property
    def tp_degrees(self) -> tuple[int, ...]:
        """The distinct tensor-parallel degrees of the plan (one unless group_tp)."""
        return tuple(sorted({t for _, t in self.group_tp} | {self.tp}))

    def __post_init__(self) -> None:
        if self.etp is not None and self.etp == self.tp and not self.group_tp:
            object.__setattr__(self, "etp", None)

    @property
    def expert_tp(self) -> int:
        """The expert tensor parallel degree (one tp for every group: tp where etp is None)."""
        return self.tp if self.etp is None else self.etp


def is_asymmetric(ho) -> bool:
    """Whether a configuration or plan's outer `ho` (ClassOuter) runs an asymmetric pipeline, a
    data-parallel degree per stage (cost/asymmetric.py prices it)."""
    return any(c.stage_dp for c in ho.classes)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassOuter(_Modes):
    """An outer configuration whose replicas form several classes, each of its own shape."""
    classes: tuple[ClassShape, ...]

    @property
    def replicas(self) -> int:
        return sum(c.replicas for c in self.classes)

    def gpus_per_group(self, num_groups: int) -> list[int]:
        used = [0] * num_groups
        for c in self.classes:
            for s, g in enumerate(c.stage_groups):
                used[g] += c.ranks_of(s) * self.tp_of(g) * self.cp
        return used


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaClass:
    """A plan's class of identical pipeline replicas: micro-batches, layer split, recompute."""
    replicas: int
    """replicas of this class"""
    stage_groups: tuple[int, ...]
    """the group hosting each pipeline stage

    Stored as indices into Cluster.groups."""
    num_micro_batches: int
    """micro-batches per replica and step"""
    layers_per_stage: tuple[int, ...]
    """layers of each stage"""
    full_recompute_layers: tuple[int, ...]
    """fully recomputed layers of each stage"""
    partitions: tuple[tuple[int, tuple[tuple[str, str], ...]], ...] = ()
    """one partition per operator, e.g. `{qkv: K2*P2x2, attn_core: heads@P2, ...}`
    ([partitions.md](partitions.md))

    Stored as ((group, ((operator, partition), ...)), ...) by ascending group: the layer plan of
    this class's stages on that group (cost/partition.py); a group not listed runs Megatron
    1-D."""
    stage_dp: tuple[int, ...] = ()
    """an asymmetric pipeline: each stage's data-parallel ranks, with replicas 1 and
    num_micro_batches the batch's ([mixed-clusters.md](mixed-clusters.md))

    cost/asymmetric.py: stage s on stage_dp[s] data-parallel ranks of its group, each running
    num_micro_batches / stage_dp[s] of the batch's micro-batches; empty: symmetric."""

    def __post_init__(self) -> None:
        pp = len(self.stage_groups)
        if self.stage_dp and (len(self.stage_dp) != pp or min(self.stage_dp) < 1 or self.replicas != 1):
            raise ConfigError("an asymmetric pipeline's class has replicas 1 and one data-parallel"
                              " degree >= 1 per stage (stage_dp)")
        groups = [g for g, _ in self.partitions]
        if groups != sorted(set(groups)) or not set(groups) <= set(self.stage_groups):
            raise ConfigError("a replica class's partitions name each of its groups at most once")
        if self.replicas < 1 or pp < 1:
            raise ConfigError("a replica class needs >= 1 replica and >= 1 stage")
        if len(self.layers_per_stage) != pp or len(self.full_recompute_layers) != pp:
            raise ConfigError(f"a replica class with {pp} stages needs {pp} layer and recompute counts")
        if self.num_micro_batches < 1:
            raise ConfigError("a replica class needs >= 1 micro-batch per replica")
        for n, r in zip(self.layers_per_stage, self.full_recompute_layers):
            if n < 1 or not 0 <= r <= n:
                raise ConfigError("each stage needs >= 1 layer and 0 <= recomputed layers <= layers")

    @property
    def shape(self) -> ClassShape:
        return ClassShape(replicas=self.replicas, stage_groups=self.stage_groups, stage_dp=self.stage_dp)

    def partitions_on(self, group: int) -> tuple[tuple[str, str], ...]:
        """The layer plan of this class's stages on `group` (empty: Megatron 1-D)."""
        return dict(self.partitions).get(group, ())


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan(_Modes):
    """A plan: the modes every replica shares and its replica classes. A homogeneous plan (the
    flat plan file, `Plan.flat`) is the one-class case: dp replicas whose pp stages all sit on
    group 0 with every GPU used; its degrees and split read as one-class properties (`pp`, `dp`,
    `num_micro_batches`, `layers_per_stage`, ...), which a plan of several classes has not."""

    classes: tuple[ReplicaClass, ...]
    """a non-empty list of replica classes"""

    @classmethod
    def flat(cls, *, layers_per_stage, full_recompute_layers, partitions=(), **outer) -> "Plan":
        """The one-class plan of a flat plan file: an Outer's degrees and modes (`outer`), the
        layer split and per-stage full-recompute counts, and the per-operator tensor partitions
        ((operator, partition), ...; empty: Megatron 1-D) of its stages on group 0."""
        return cls.of(Outer(**outer), layers_per_stage, full_recompute_layers, partitions)

    @classmethod
    def of(cls, o: Outer, layers_per_stage, full_recompute_layers, partitions=()) -> "Plan":
        """The one-class plan of Outer `o` (validated by Outer) with its layer split.

        `layers_per_stage[s]` transformer layers sit on pipeline stage s (non-uniform allowed;
        the embedding lives on stage 0 and the output layer on stage pp-1). Of those,
        `full_recompute_layers[s]` are fully recomputed; the rest use `recompute`. With
        `virtual_stages` v, stage s's model chunks each hold 1/v of its layers plus slots
        (cost/pipeline_split.py has the placement)."""
        n = tuple(int(x) for x in layers_per_stage)
        r = tuple(int(x) for x in full_recompute_layers)
        partitions = tuple(partitions)
        if len(n) != o.pp:
            raise ConfigError(f"plan.layers_per_stage needs {o.pp} entries (one per stage)")
        if len(r) != o.pp:
            raise ConfigError(f"plan.full_recompute_layers needs {o.pp} entries")
        if any(x < 1 or not 0 <= y <= x for x, y in zip(n, r)):
            raise ConfigError("each stage needs >= 1 layer and 0 <= recomputed layers <= layers")
        problem = chunk_problem(n, o.virtual_stages, o.embedding_in_split, o.loss_in_split)
        if problem:
            raise ConfigError(problem)
        plan = cls(tp=o.tp, micro_batch=o.micro_batch, cp=o.cp, virtual_stages=o.virtual_stages,
                   sequence_parallel=o.sequence_parallel, recompute=o.recompute, zero=o.zero,
                   ep=o.ep, etp=o.etp, embedding_in_split=o.embedding_in_split,
                   loss_in_split=o.loss_in_split, zero_bubble=o.zero_bubble,
                   classes=(ReplicaClass(replicas=o.dp, stage_groups=(0,) * o.pp,
                                         num_micro_batches=o.num_micro_batches,
                                         layers_per_stage=n, full_recompute_layers=r,
                                         partitions=((0, partitions),) if partitions else ()),))
        if partitions:
            # imported here: a plan without partitions (every plan by default) need not load
            # their rules (issue 33, start-up)
            from paraplan.cost.partition_names import LayerPlan, check_partitions
            check_partitions(LayerPlan(partitions=partitions, tp=o.tp, zero=o.zero,
                                       sequence_parallel=o.sequence_parallel))
        return plan

    @property
    def outer(self) -> ClassOuter:
        return ClassOuter(tp=self.tp, micro_batch=self.micro_batch, cp=self.cp,
                           virtual_stages=self.virtual_stages,
                           sequence_parallel=self.sequence_parallel, recompute=self.recompute,
                           zero=self.zero, classes=tuple(c.shape for c in self.classes),
                           family=self.family, ep=self.ep, etp=self.etp, group_tp=self.group_tp,
                           embedding_in_split=self.embedding_in_split, loss_in_split=self.loss_in_split,
                           zero_bubble=self.zero_bubble)

    # --- the one-class case -----------------------------------------------------------------

    def is_flat_on(self, cluster: Cluster) -> bool:
        """Whether this plan is the flat plan file's case on `cluster`: one node group, one
        replica class, every GPU used."""
        return (len(cluster.groups) == 1 and len(self.classes) == 1 and not self.group_tp
                and self.num_gpus == cluster.num_gpus)

    @property
    def one_class(self) -> ReplicaClass:
        """The plan's only replica class (ValueError for a plan of several)."""
        if len(self.classes) != 1:
            raise ValueError(f"a plan of {len(self.classes)} replica classes has no single"
                             " pp, dp or layer split: read its classes")
        return self.classes[0]

    @property
    def pp(self) -> int:
        return len(self.one_class.stage_groups)

    @property
    def dp(self) -> int:
        return self.one_class.replicas

    @property
    def num_micro_batches(self) -> int:
        return self.one_class.num_micro_batches

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        return self.one_class.layers_per_stage

    @property
    def full_recompute_layers(self) -> tuple[int, ...]:
        return self.one_class.full_recompute_layers

    @property
    def partitions(self) -> tuple[tuple[str, str], ...]:
        """The layer plan of the one class's first stage's group (empty: Megatron 1-D)."""
        c = self.one_class
        return c.partitions_on(c.stage_groups[0])

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def chunk_layers(self) -> tuple[tuple[int, ...], ...]:
        """Decoder layers of model chunk c on stage s, [s][c] (cost/pipeline_split.py)."""
        return chunk_layers(self.layers_per_stage, self.virtual_stages, self.embedding_in_split,
                            self.loss_in_split)

    def replace_flat(self, **changes) -> "Plan":
        """The one-class plan with some of its flat fields (an Outer's, `layers_per_stage`,
        `full_recompute_layers`, `partitions`) changed, validated as `flat` validates."""
        o = self.flat_outer
        fields = {f: getattr(o, f) for f in o.__dataclass_fields__}
        fields.update(layers_per_stage=self.layers_per_stage,
                      full_recompute_layers=self.full_recompute_layers, partitions=self.partitions)
        return Plan.flat(**{**fields, **changes})

    @property
    def flat_outer(self) -> Outer:
        """The one class's Outer: the key its stages are priced by (cost/coefficients.build)."""
        return Outer(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, micro_batch=self.micro_batch,
                     num_micro_batches=self.num_micro_batches,
                     sequence_parallel=self.sequence_parallel, recompute=self.recompute,
                     zero=self.zero, virtual_stages=self.virtual_stages, ep=self.ep, etp=self.etp,
                     embedding_in_split=self.embedding_in_split, loss_in_split=self.loss_in_split,
                     zero_bubble=self.zero_bubble)

    def check_against(self, inst: Instance) -> None:
        """Raise ConfigError unless this plan is a valid way to run `inst`: the rules in order,
        the first broken one named. A one-class plan of a flat instance (`inst.flat`) runs on
        every GPU: that rule first, then RULES, the rules of every cluster. A cluster of node
        groups, or a plan of several classes, adds GROUP_RULES."""
        flat = inst.flat and len(self.classes) == 1
        if flat:
            _one_class_on_every_gpu(self, inst)
        for rule in RULES if flat else RULES + GROUP_RULES:
            rule(self, inst)


# --- check_against's rules, in the order they are checked ----------------------------------

def _one_class_on_every_gpu(plan: Plan, inst: Instance) -> None:
    """The flat plan file's own rule: one replica class on the one cluster, every GPU used."""
    if len(plan.classes) != 1 or set(plan.one_class.stage_groups) != {0} or plan.group_tp:
        raise ConfigError("a flat instance runs one replica class on its one cluster")
    c = inst.cluster
    if plan.num_gpus != c.num_gpus:
        raise ConfigError(f"tp*pp*dp*cp = {plan.num_gpus} but the cluster has {c.num_gpus} GPUs")


def _stages_and_layers(plan: Plan, inst: Instance) -> None:
    G = len(inst.cluster.groups)
    for c in plan.classes:
        if any(not 0 <= g < G for g in c.stage_groups):
            raise ConfigError(f"stage_groups {c.stage_groups} names a group outside 0..{G - 1}")
        if sum(c.layers_per_stage) != inst.model.layers:
            raise ConfigError(f"{_of_class(plan)}layers_per_stage sums to {sum(c.layers_per_stage)},"
                              f" the model has {inst.model.layers}")


def _asymmetric_pipeline(plan: Plan, inst: Instance) -> None:
    """A class with a data-parallel degree per stage (cost/asymmetric.py): what its pricing
    covers, and every stage's ranks sharing the batch's micro-batches evenly."""
    odd = [c for c in plan.classes if c.stage_dp]
    if not odd:
        return
    if len(plan.classes) != 1 or len(inst.cluster.groups) < 2:
        raise ConfigError("an asymmetric pipeline (stage_dp) is a plan's one class, on two node"
                          " groups or more")
    if plan.cp != 1 or plan.virtual_stages != 1 or plan.zero_bubble is not None or plan.ep != 1:
        raise ConfigError("an asymmetric pipeline (stage_dp) is priced with cp 1, virtual_stages 1,"
                          " 1F1B and ep 1 only: set them so, or drop stage_dp")
    c = odd[0]
    bad = [d for d in c.stage_dp if c.num_micro_batches % d]
    if bad:
        raise ConfigError(f"stage_dp {list(c.stage_dp)}: {c.num_micro_batches} micro-batches do not"
                          f" divide over {bad} ranks")


def _of_class(plan: Plan) -> str:
    """The subject of a per-class message: a one-class plan's fields are the plan's own."""
    return "" if len(plan.classes) == 1 else "a class's "


def _group_tp(plan: Plan, inst: Instance) -> None:
    """group_tp's own rules (the space's, solver/space.py): one class, every group it
    uses named once, `tp` the first stage's group's, and not every degree the same."""
    if not plan.group_tp:
        return
    names = [x.name for x in inst.cluster.groups]
    groups = [g for g, _ in plan.group_tp]
    used = sorted({g for c in plan.classes for g in c.stage_groups})
    if len(plan.classes) != 1:
        raise ConfigError("a tp per group needs one replica class (stage-wise): replicas of"
                          " several classes reduce gradients in one ring, which needs one"
                          " weight sharding (one tp)")
    if groups != used:
        raise ConfigError(f"tp per group must name each group the plan uses once"
                          f" ({', '.join(names[g] for g in used)})")
    if plan.tp != plan.tp_of(plan.classes[0].stage_groups[0]):
        raise ConfigError("plan.tp must be the first stage's group's tp")
    if len({t for _, t in plan.group_tp}) == 1:
        raise ConfigError(f"every group runs tp={plan.tp}: write tp: {plan.tp}")
    if any(t < 1 for _, t in plan.group_tp):
        raise ConfigError("every group's tp must be >= 1")


def _gpus_per_group(plan: Plan, inst: Instance) -> None:
    hc = inst.cluster
    used = plan.outer.gpus_per_group(len(hc.groups))
    for g, grp in enumerate(hc.groups):
        if used[g] > grp.num_gpus:
            raise ConfigError(f"the plan uses {used[g]} GPUs of group {grp.name!r}, which has"
                              f" {grp.num_gpus}")
        gpn, t = grp.gpus_per_node, plan.tp_of(g)
        if used[g] and (gpn % t if t <= gpn else t % gpn or grp.num_gpus % t):
            raise ConfigError(f"tp={t} must divide group {grp.name!r}'s {gpn} GPUs per"
                              " node, or take whole nodes of it")


def _global_batch(plan: Plan, inst: Instance) -> None:
    seqs = sum(c.replicas * c.num_micro_batches for c in plan.classes) * plan.micro_batch
    if seqs != inst.job.global_batch:
        terms = "dp*micro_batch*num_micro_batches" if len(plan.classes) == 1 else \
            "sum of replicas*num_micro_batches*micro_batch"
        raise ConfigError(f"{terms} = {seqs} but global_batch = {inst.job.global_batch}")


def _heads(plan: Plan, inst: Instance) -> None:
    m = inst.model
    for t in plan.tp_degrees:
        if m.heads % t or m.kv_heads % t and t % m.kv_heads:
            raise ConfigError(f"tp={t} must divide the {m.heads} attention heads")


def _context_and_sequence_parallel(plan: Plan, inst: Instance) -> None:
    seq_len = inst.model.seq_len
    if plan.cp < 1 or seq_len % plan.cp:
        raise ConfigError(f"cp={plan.cp} must be >= 1 and divide seq_len {seq_len}")
    if plan.sequence_parallel and any(t == 1 or seq_len % (t * plan.cp) for t in plan.tp_degrees):
        raise ConfigError("sequence_parallel needs tp > 1, and tp * cp dividing seq_len, on"
                          " every group")


def _dense_prefix(plan: Plan, inst: Instance) -> None:
    m = inst.model
    if m.moe is None or not m.moe.dense_layers:
        return
    for c in plan.classes:
        first_chunk = chunk_layers(c.layers_per_stage, plan.virtual_stages, plan.embedding_in_split,
                                   plan.loss_in_split)[0][0]
        if first_chunk < m.moe.dense_layers:
            raise ConfigError(
                f"stage 0's first model chunk holds {first_chunk} layers, fewer than the model's"
                f" {m.moe.dense_layers} dense layers: paraplan prices the dense prefix on the first"
                f" stage; give it at least {plan.virtual_stages * m.moe.dense_layers} layers"
                + (" (without embedding_in_split)" if plan.embedding_in_split else ""))


def _selective_or_full(plan: Plan, inst: Instance) -> None:
    if inst.job.recompute_modules and any(any(c.full_recompute_layers) for c in plan.classes):
        raise ConfigError("full_recompute_layers: the job recomputes modules selectively"
                          " (job.recompute_modules), and Megatron-LM's --recompute-granularity"
                          " is either selective or full; set every count to 0, or remove"
                          " recompute_modules")


def _recompute_pattern(plan: Plan, inst: Instance) -> None:
    """The per-stage full-recompute counts must be ones the job's framework runs with one
    setting for every stage and class (cost/recompute_patterns.py, its FRAMEWORK_RULES entry).
    A DualPipe job runs DeepSeek's own code, which no framework we export to runs
    (solver/export/common.refuse_dualpipe): its model code picks each stage's layers, as the
    DualPipe problem (formulations/dualpipe.py) lets it."""
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return
    fw = inst.job.framework
    problem = recompute_patterns.refusal(
        recompute_pattern(fw, plan.recompute, inst.search.partial_recompute), fw.value,
        [c.layers_per_stage for c in plan.classes], [c.full_recompute_layers for c in plan.classes],
        plan.virtual_stages, plan.embedding_in_split, plan.loss_in_split)
    if problem:
        raise ConfigError(problem + "; use counts it runs, or plan the job again")


def _latent_attention(plan: Plan, inst: Instance) -> None:
    if inst.model.mla is None:
        return
    if any(c.partitions for c in plan.classes):
        raise ConfigError("plan.partitions: per-operator partitions are not priced for latent"
                          " attention's projections; remove partitions (Megatron 1-D)")
    if plan.zero == 3:
        raise ConfigError("zero=3: ZeRO-3 of latent attention's down projections (whole on every"
                          " tensor-parallel rank) is not priced yet; use zero 0, 1 or 2")


def _micro_batches_per_class(plan: Plan, inst: Instance) -> None:
    if len(plan.classes) > 1:
        for c in plan.classes:
            if c.num_micro_batches < len(c.stage_groups):
                raise ConfigError(f"with several classes, a class of {len(c.stage_groups)}"
                                  f" stages needs >= {len(c.stage_groups)} micro-batches per"
                                  " replica (solver/space.py)")


def _model_chunks(plan: Plan, inst: Instance) -> None:
    for c in plan.classes:  # the chunk rule of cost/pipeline_split.py, with the slots
        problem = chunk_problem(c.layers_per_stage, plan.virtual_stages, plan.embedding_in_split,
                                plan.loss_in_split)
        if problem:
            raise ConfigError(problem)


def _interleaved_stages(plan: Plan, inst: Instance) -> None:
    if plan.virtual_stages > 1 and any(len(c.stage_groups) == 1 for c in plan.classes):
        raise ConfigError(f"virtual_stages={plan.virtual_stages} needs pp > 1 in every class")


def _interleaved_micro_batches(plan: Plan, inst: Instance) -> None:
    v = plan.virtual_stages
    if v <= 1:
        return
    for c in plan.classes:
        pp = len(c.stage_groups)
        if c.num_micro_batches % pp:
            raise ConfigError(f"virtual_stages={v} needs every class's micro-batch count to be a"
                              " multiple of its pp")
        if len(plan.classes) > 1 and c.num_micro_batches < 2 * pp:
            raise ConfigError(f"virtual_stages={v} with several classes needs >= 2 pp"
                              " micro-batches per replica (solver/space.py)")


def _zero_and_expert_degrees(plan: Plan, inst: Instance) -> None:
    if plan.zero not in (0, 1, 2, 3):
        raise ConfigError("plan.zero must be 0, 1, 2 or 3")
    if plan.ep < 1 or plan.expert_tp < 1:
        raise ConfigError("plan.ep and plan.etp must be >= 1")
    if plan.etp is not None and plan.group_tp:
        raise ConfigError("etp with a tp per group is not priced: leave etp out (each group's"
                          " experts split as its tp)")


def _expert_fold(plan: Plan, inst: Instance) -> None:
    if plan.ep > 1 or plan.etp is not None:
        # an expert group lies inside one class's tp x data x context parallel ranks of a stage
        for c in plan.classes:
            problem = moe_fold_problem(inst.model, plan.tp, c.replicas * plan.cp, plan.sequence_parallel,
                                       plan.ep, plan.expert_tp)
            if problem:
                raise ConfigError(problem if len(plan.classes) == 1 else
                                  f"{problem} (a class has {c.replicas} replicas x cp {plan.cp})")


def _partitions(plan: Plan, inst: Instance) -> None:
    if not any(c.partitions for c in plan.classes):
        return
    from paraplan.cost.partition_names import LayerPlan, check_partitions  # as in Plan.flat
    for c in plan.classes:
        for g, parts in c.partitions:
            check_partitions(LayerPlan(partitions=parts, tp=plan.tp_of(g), zero=plan.zero,
                                       sequence_parallel=plan.sequence_parallel))


def _zero_shards(plan: Plan, inst: Instance) -> None:
    if plan.zero and plan.outer.replicas * plan.cp == 1 and not plan.classes[0].stage_dp:
        raise ConfigError(f"ZeRO-{plan.zero} shards over replicas and context-parallel ranks,"
                          " and the plan has one of each")
    # an asymmetric pipeline shards each stage over its own ranks (cost/asymmetric.py)
    if plan.zero and plan.classes[0].stage_dp and min(plan.classes[0].stage_dp) * plan.cp == 1:
        raise ConfigError(f"ZeRO-{plan.zero} shards each stage over its data-parallel ranks, and"
                          " a stage of the plan has one (stage_dp)")


def _framework_runs_it(plan: Plan, inst: Instance) -> None:
    rules = rules_for(inst.job.framework, inst.job.optimizer)  # the optimizer narrows ZeRO
    for c, t in itertools.product(plan.classes, plan.tp_degrees):
        if not rules.admits(tp=t, pp=len(c.stage_groups), cp=plan.cp, dp=plan.outer.replicas,
                            sp=plan.sequence_parallel, zero=plan.zero, v=plan.virtual_stages):
            raise ConfigError(f"{inst.job.framework.value} does not run ZeRO-{plan.zero} with"
                              f" tp={t}, cp={plan.cp}, virtual_stages={plan.virtual_stages},"
                              f" sequence_parallel={plan.sequence_parallel} and"
                              f" {len(c.stage_groups)} pipeline stages (cost/framework_rules.py)")


RULES = (_stages_and_layers, _asymmetric_pipeline, _group_tp, _gpus_per_group, _global_batch, _heads,
         _context_and_sequence_parallel, _dense_prefix, _selective_or_full, _recompute_pattern,
         _latent_attention,
         _micro_batches_per_class, _interleaved_stages, _model_chunks, _zero_and_expert_degrees, _expert_fold,
         _partitions, _zero_shards)
# What a plan over node groups must also keep, and a flat plan need not: the flat plan is also
# the record `simulate` prices what-ifs and each exporter's emitted configuration with (a
# framework's refusals of it are cost/framework_rules.unpriced_reason's, read where a plan file
# or a published row is loaded), and its interleaved schedule prices any micro-batch count
# (cost/schedule.py) where the class schedule of several groups needs whole rounds of pp.
GROUP_RULES = (_interleaved_micro_batches, _framework_runs_it)
