"""What each training framework can run at all, as the declared space and the loader see it.

cost/framework.py says how a framework runs what it runs (and so what it costs); this module
says which plans it can run: solver/space.py filters outer configurations through
`FRAMEWORK_RULES`, and the loader refuses a `search:` value a framework can never run
(`framework_refusal`). Both live in cost/ so that the loader never imports solver/.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.specs import Framework, Optimizer, Recompute, SearchSpace


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkRules:
    """What one training framework can run, as the space sees it."""

    zero_stages: tuple[int, ...]  # ZeRO stages it has at all
    zero_with_pipeline: tuple[int, ...]  # of those, the ones it (or our cost model) runs with pp > 1
    tensor_parallel: bool
    pipeline: bool
    context_parallel: bool
    interleaving: bool
    sequence_parallel_optional: bool  # False: with tp > 1 the sequence is always sharded
    # the per-stage full-recompute counts it runs (cost/recompute_patterns.py)
    recompute_pattern: RecomputePattern
    # True: some layers fully recomputed beside selective recompute of the others
    full_beside_selective: bool
    # True: plain (ZeRO-0) data parallelism only when it is the sole parallelism
    replicate_only_alone: bool = False
    # runs torch.distributed.pipelining's zero-bubble schedules (cost/zero_bubble.py) on the
    # configurations torch runs them with (cost/schedule.schedule_problem)
    zero_bubble: bool = False

    def admits(self, *, tp: int, pp: int, cp: int, dp: int, sp: bool, zero: int, v: int) -> bool:
        if zero not in self.zero_stages or pp > 1 and zero not in self.zero_with_pipeline:
            return False
        if tp > 1 and not self.tensor_parallel or pp > 1 and not self.pipeline:
            return False
        if cp > 1 and not self.context_parallel or v > 1 and not self.interleaving:
            return False
        if tp > 1 and not sp and not self.sequence_parallel_optional:
            return False
        if (self.replicate_only_alone and zero == 0 and dp * cp > 1
                and (tp > 1 or pp > 1 or cp > 1)):
            return False
        return True


# One reason per rule; what was checked is cited (read-only, public code and docs).
FRAMEWORK_RULES: dict[Framework, FrameworkRules] = {
    # Megatron-LM / Megatron-core / NeMo. ZeRO-1 is the distributed optimizer
    # (--use-distributed-optimizer), which runs with any pp; ZeRO-2/3 are the FSDP paths
    # (--use-torch-fsdp2, Megatron-FSDP), and megatron/training/arguments.py asserts
    # "--use-torch-fsdp2 is not supported with pipeline parallelism". tp with optional
    # --sequence-parallel, --context-parallel-size (ring attention) and
    # --num-layers-per-virtual-pipeline-stage (interleaved 1F1B) are all available. Full
    # recompute is --recompute-method block --recompute-num-layers N, the first N layers of
    # every model chunk (megatron/core/recompute.py), and --recompute-granularity is full or
    # selective, not both (TransformerConfig; arguments.py: no recompute method with selective).
    Framework.MEGATRON: FrameworkRules(
        zero_stages=(0, 1, 2, 3), zero_with_pipeline=(0, 1), tensor_parallel=True, pipeline=True,
        context_parallel=True, interleaving=True, sequence_parallel_optional=True,
        recompute_pattern=RecomputePattern.FIRST_PER_CHUNK, full_beside_selective=False),
    # DeepSpeed ZeRO 0-3, tp/pp through Megatron-DeepSpeed. deepspeed/runtime/pipe/engine.py:
    # PipelineEngine asserts zero_optimization_stage() < 2 ("ZeRO-2 and ZeRO-3 are incompatible
    # with pipeline parallelism"). Its pipeline runs DeepSpeed's own 1F1B TrainSchedule (no
    # interleaving). Its sequence parallelism is Ulysses (all-to-all over heads), not the ring
    # context parallelism cost/ prices, so cp = 1. Megatron-DeepSpeed keeps Megatron's
    # optional --sequence-parallel for tp. Which layers are recomputed is the model code's:
    # the layers call deepspeed.checkpointing.checkpoint themselves, and each rank builds only
    # its own stage's layers (PipelineModule), so each stage may checkpoint its own count
    # (solver/export/deepspeed.py leaves the choice to the training script).
    Framework.DEEPSPEED: FrameworkRules(
        zero_stages=(0, 1, 2, 3), zero_with_pipeline=(0, 1), tensor_parallel=True, pipeline=True,
        context_parallel=False, interleaving=False, sequence_parallel_optional=True,
        recompute_pattern=RecomputePattern.PER_STAGE, full_beside_selective=True),
    # torchtitan: FSDP2 fully_shard (ZeRO-3; reshard_after_forward=False is ZeRO-2), DDP
    # (dp_replicate, ZeRO-0) but no ZeRO-1. Its parallelize functions raise "DDP has not
    # supported > 1D parallelism" when DDP meets tp, pp or cp (with cp, FSDP shards over the
    # dp_shard_cp mesh instead). FSDP inside a pipeline is ZeRO-3 only: with pp > 1
    # apply_fsdp's default policy keeps parameters gathered after forward (reshard_after_forward
    # = not pp_enabled, v0.2.0 29624e37fa torchtitan/models/llama3/infra/parallelize.py), and
    # torch.distributed.pipelining keeps them and the gradients unsharded until the step's
    # REDUCE_GRAD (cost/memory.py prices it, gathered_per_step); its "never" policy, ZeRO-2
    # here, then runs the same steps, so ZeRO-2 with pp > 1 would be ZeRO-3 twice. Its TP plan shards the
    # sequence for norms and dropout (SequenceParallel on the norms), so sp is always on with
    # tp > 1. Context parallelism and the interleaved schedules (Interleaved1F1B) are available,
    # and so are torch's zero-bubble InterleavedZeroBubble and ZBVZeroBubble
    # (parallelism.pipeline_parallel_schedule, looked up by get_schedule_class in
    # torch/distributed/pipelining/schedules.py; torchtitan 0.2's pipeline_llm builds them with
    # two stages per rank or more, ZBVZeroBubble as a V).
    # Its activation_checkpoint section applies one mode to every block of every rank: "full",
    # "selective" with an integer k (every k-th block of a rank, one counter per process over
    # its model parts: v0.2.2 torchtitan/distributed/activation_checkpoint.py _apply_layer_sac,
    # distributed/pipeline_parallel.py pipeline_llm parallelizing each part in turn), "selective"
    # with "op" (the op-level policy priced as its selective recompute), or "none".
    Framework.TORCHTITAN: FrameworkRules(
        zero_stages=(0, 2, 3), zero_with_pipeline=(0, 3), tensor_parallel=True, pipeline=True,
        context_parallel=True, interleaving=True, sequence_parallel_optional=False,
        recompute_pattern=RecomputePattern.EVERY_KTH, full_beside_selective=False,
        replicate_only_alone=True, zero_bubble=True),
    # MosaicML Composer / llm-foundry: PyTorch FSDP data parallelism, sharding_strategy
    # NO_SHARD (ZeRO-0), SHARD_GRAD_OP (ZeRO-2), FULL_SHARD (ZeRO-3); the published MPT
    # configurations use no tensor, pipeline or context parallelism, so tp = pp = cp = 1: one
    # stage, whose count of checkpointed blocks is the model's choice (llm-foundry's
    # activation_checkpointing_target).
    Framework.COMPOSER: FrameworkRules(
        zero_stages=(0, 2, 3), zero_with_pipeline=(), tensor_parallel=False, pipeline=False,
        context_parallel=False, interleaving=False, sequence_parallel_optional=True,
        recompute_pattern=RecomputePattern.PER_STAGE, full_beside_selective=True),
}


# Optimizers that fix the ZeRO stage. NeMo's distributed_fused_adam (Apex DistributedFusedAdam)
# always shards its state and the reduced gradient shard over the data-parallel group and keeps
# a full gradient buffer (cost/memory.py): ZeRO-1, with any pp. Its unsharded mode
# (disable_distributed_parameters) is not priced.
OPTIMIZER_ZERO_STAGES: dict[Optimizer, tuple[int, ...]] = {
    Optimizer.APEX_DISTRIBUTED_ADAM: (1,),
    Optimizer.APEX_DISTRIBUTED_ADAM_BF16: (1,),
    # Megatron-core's precision-aware optimizer runs only inside the distributed optimizer
    # (megatron/core/optimizer/__init__.py at d98e8a6: "--use-precision-aware-optimizer only
    # supported with distributed optimizer"); Megatron-FSDP's ZeRO-2/3 are not priced with it
    Optimizer.ADAM_BF16_MOMENTS: (1,),
}


def rules_for(framework: Framework, optimizer: Optimizer = Optimizer.ADAM) -> FrameworkRules:
    """The framework's rules, narrowed to the ZeRO stages its optimizer runs."""
    rules = FRAMEWORK_RULES[framework]
    stages = OPTIMIZER_ZERO_STAGES.get(optimizer)
    if stages is None:
        return rules
    return replace(rules, zero_stages=tuple(z for z in rules.zero_stages if z in stages),
                   zero_with_pipeline=tuple(z for z in rules.zero_with_pipeline if z in stages))


def recompute_pattern(framework: Framework, recompute: Recompute, partial: bool = True) -> RecomputePattern:
    """The per-stage full-recompute counts `framework` runs beside `recompute` (the mode of the
    layers not fully recomputed): its rules' pattern, or every layer or none where its
    granularity takes one value and the others recompute selectively, or where its release
    recomputes no part of the layers alone (`partial` False: SearchSpace.partial_recompute,
    release_space)."""
    rules = FRAMEWORK_RULES[framework]
    if not partial or recompute is Recompute.SELECTIVE and not rules.full_beside_selective:
        return RecomputePattern.ALL_OR_NONE
    return rules.recompute_pattern


@dataclass(frozen=True, slots=True)
class Refusal:
    """A `search:` value the framework can never run: the search key, the problem, the fix."""

    key: str
    problem: str
    fix: str
    rule: str = ""  # the rule that refused it: a name in cost/space_rules.SEARCH_RULES, "" for the framework's


def framework_refusal(space: SearchSpace, framework: Framework,
                      given: frozenset[str]) -> Refusal | None:
    """The first value of a `search:` key the user listed (`given`) that `framework` cannot
    run in any combination the space allows; None when every listed value can run. Values the
    defaults bring in are filtered by `outer_configs`, never refused.

    The rules of FRAMEWORK_REFUSAL_RULES in order, as cost/space_rules.SEARCH_RULES: the first
    refusal is the one reported. Its `rule` stays "" (a framework's refusal, not a search rule)."""
    listed = _Listed(space, FRAMEWORK_RULES[framework], framework.value, given)
    for _name, rule in FRAMEWORK_REFUSAL_RULES:
        refusal = rule(listed)
        if refusal is not None:
            return refusal
    return None


@dataclass(frozen=True, slots=True)
class _Listed:
    """One `search:` section, the keys the user listed and the rules of its framework."""

    space: SearchSpace
    rules: FrameworkRules
    name: str  # the framework's name, as the messages show it
    given: frozenset[str]

    def exceeds_one(self, key: str, values: tuple[int, ...] | None) -> bool:
        """Whether the user listed `key` and some value of it is above 1."""
        return key in self.given and values is not None and max(values) > 1

    def only_above_one(self, key: str, values: tuple[int, ...] | None) -> bool:
        """Whether the user listed `key` and every value of it is above 1."""
        return key in self.given and values is not None and min(values) > 1


def _zero_refusal(listed: _Listed) -> Refusal | None:
    """A listed ZeRO stage the framework lacks, or runs only at the pp = 1 search.pp excludes."""
    if "zero" not in listed.given:
        return None
    rules, name = listed.rules, listed.name
    pp_forced = listed.only_above_one("pp", listed.space.pp)
    for z in listed.space.zero:
        if z not in rules.zero_stages:
            return Refusal("zero", f"{name} has no ZeRO-{z}",
                           "use one of: " + ", ".join(map(str, rules.zero_stages)))
        if pp_forced and z not in rules.zero_with_pipeline:
            return Refusal("zero", f"{name} runs ZeRO-{z} only with pp = 1, but search.pp"
                           f" lists only pp > 1", "add 1 to search.pp or drop"
                           f" ZeRO-{z} from search.zero")
    return None


# The degrees a framework runs above 1 only with a feature: (search key, FrameworkRules field,
# what the framework lacks without it). A listed value > 1 of a framework without it is refused.
_DEGREE_FEATURES = (
    ("tp", "tensor_parallel", "tensor parallelism"),
    ("pp", "pipeline", "pipeline parallelism"),
    ("cp", "context_parallel", "ring context parallelism"),
    ("virtual_stages", "interleaving", "interleaved pipeline schedule"),
)


def _degree_refusal(key: str, feature: str, what: str):
    """The rule refusing a listed `key` > 1 for a framework without `feature` (_DEGREE_FEATURES)."""
    def refusal(listed: _Listed) -> Refusal | None:
        if not getattr(listed.rules, feature) and listed.exceeds_one(key, getattr(listed.space, key)):
            return Refusal(key, f"{listed.name} has no {what}", f"use {key}: [1]")
        return None
    return refusal


def _sequence_parallel_refusal(listed: _Listed) -> Refusal | None:
    """A listed sequence_parallel value the framework cannot run: true without tensor
    parallelism, or false where it always shards and search.tp lists only tp > 1."""
    if "sequence_parallel" not in listed.given:
        return None
    rules, name, values = listed.rules, listed.name, listed.space.sequence_parallel
    if True in values and not rules.tensor_parallel:
        return Refusal("sequence_parallel", f"{name} has no tensor parallelism to shard the"
                       " sequence over", "use sequence_parallel: [false]")
    tp_forced = listed.only_above_one("tp", listed.space.tp)
    if False in values and tp_forced and not rules.sequence_parallel_optional:
        return Refusal("sequence_parallel", f"{name} always shards the sequence with tp > 1,"
                       " and search.tp lists only tp > 1", "use sequence_parallel: [true]")
    return None


# framework_refusal's rules, in the order the values are reported: (search key, rule). The loader
# raises only the first refusal, so this order is the message a file with several faults gets.
FRAMEWORK_REFUSAL_RULES = (
    ("zero", _zero_refusal),
    *((key, _degree_refusal(key, feature, what)) for key, feature, what in _DEGREE_FEATURES),
    ("sequence_parallel", _sequence_parallel_refusal),
)


def unpriced_reason(framework: Framework, zero: int, pp: int) -> str | None:
    """Why cost/ cannot price a plan of this framework, ZeRO stage and pipeline degree, or None.

    ZeRO-2/3 (FSDP) inside a pipeline is priced where the framework runs it
    (FrameworkRules.zero_with_pipeline: torchtitan's ZeRO-3, gathered once per step,
    cost/memory.gathered_per_step) and refused elsewhere: Megatron-LM and DeepSpeed assert
    against it, Composer has no pipeline, and torchtitan's ZeRO-2 with pp > 1 runs as its
    ZeRO-3 (above). The planner never proposes a refused one (FRAMEWORK_RULES); a plan file
    holding it is refused as it is read (cost/readers/plan_reader.plan_from_mapping,
    either form), so every command that reads a plan refuses it,
    and `accuracy` reports such a row as not modelled, rather than mis-price it."""
    runs = FRAMEWORK_RULES[framework].zero_with_pipeline
    if zero >= 2 and pp > 1 and zero not in runs:
        inside = [z for z in runs if z >= 2]
        fix = (f"use zero {inside[0]} or 0 with pp > 1, or pp 1" if inside
               else "use zero 0 or 1 with pp > 1, or pp 1" if 1 in runs else "use pp 1")
        return (f"zero={zero} with pp={pp}: {framework.value} does not run ZeRO-{zero} (FSDP)"
                f" inside a pipeline; {fix}")
    return None


# When a framework first ran a parallel feature: a published run of an older release could not
# use it, so re-planning that run's workload (tests/validation/test_plausibility.py, the promise
# of an optimum over the published run) searches only what its release ran. Megatron-LM (the
# tags and their megatron/arguments.py are cost/releases.py's): pipeline parallelism and
# interleaved 1F1B came with v2.0 (January 2021; Narayanan et al., SC'21, arXiv 2104.04473),
# v1.0 had neither; sequence parallelism and selective activation recomputation with
# Korthikanti et al. (arXiv 2205.05198, May 2022); the distributed optimizer (ZeRO-1,
# --use-distributed-optimizer) in 2022 as well; sharded gradients and parameters (ZeRO-2/3) only
# with Megatron-core's own FSDP (--use-custom-fsdp with --data-parallel-sharding-strategy
# optim_grads / optim_grads_params, core_v0.12.0, 2025): before it a Megatron-LM run sharded
# nothing of its model state (the ZeRO-3 baseline of Narayanan et al. SC'21 Sec. 5.2 ran
# DeepSpeed, a row of its own framework). A release is known by its year: the year of the
# version a row or instance names (cost/releases.py), or for a row whose version no source
# names the year its release came out (`release_year` in cost/published/ran.yaml); a row or
# instance that states neither is the current release, with every feature.
MEGATRON_FEATURE_YEARS = {"pipeline": 2021, "interleaving": 2021, "sequence_parallel": 2022,
                          "selective_recompute": 2022, "distributed_optimizer": 2022, "fsdp": 2025,
                          # --use-flash-attn (FlashAttention, arXiv 2205.14135) came to Megatron-LM
                          # in 2023: a run of an older release may have stored the scores
                          "fused_attention": 2023,
                          # --account-for-embedding-in-pipeline-split / --account-for-loss-in-
                          # pipeline-split: Megatron-core 0.11.0 (2025-02, cost/pipeline_split.py)
                          "split_slots": 2025}


# Features first in a release of a known month, (year, month) (a release known by its year alone
# counts as that year's last: cost/calibration.Ran.release_month). Megatron-LM's
# --activations-checkpoint-method block, full recompute of the first N layers of each model chunk
# and none of the others, came with commit c1e0689d92 ("Checkpoint a set number of individual
# Transformer layers", 2021-08-10), first tagged in v2.5 (2021-08-10). Before it
# --checkpoint-activations checkpointed every layer (megatron/model/transformer.py at v2.0,
# ParallelTransformer._checkpointed_forward: every layer, in units of --checkpoint-num-layers),
# so a stage recomputed all of its layers or none; DeepSpeed runs of the time trained Megatron's
# model code (release_space), whose checkpointing was the same.
# Megatron-LM's own data-parallel gradient reduction overlapped the backward from
# --overlap-grad-reduce on (commit 2d5220a424, 2023-08-16); before it train_step reduced every
# gradient after forward_backward_func returned (megatron/training.py: v2.0
# model.allreduce_params, 23.04 optimizer.reduce_model_grads), cost/framework.grad_reduce_overlaps.
MEGATRON_FEATURE_MONTHS = {"partial_recompute": (2021, 8), "overlap_grad_reduce": (2023, 8)}


def release_has(feature: str, year: int, month: int | None) -> bool:
    """Whether a Megatron-LM release of `year` (and `month`, None: unknown, counted as December)
    ran `feature` (MEGATRON_FEATURE_MONTHS, else MEGATRON_FEATURE_YEARS)."""
    if feature in MEGATRON_FEATURE_MONTHS:
        return (year, month or 12) >= MEGATRON_FEATURE_MONTHS[feature]
    return year >= MEGATRON_FEATURE_YEARS[feature]


def may_run_unfused_attention(framework: Framework, year: int | None) -> bool:
    """Whether a run of this release could have run the unfused attention core (scores stored):
    a current release (year None) runs fused attention by default."""
    return (year is not None and framework is Framework.MEGATRON
            and year < MEGATRON_FEATURE_YEARS["fused_attention"])


@lru_cache(maxsize=256)  # a few releases; read per published row and trial of a fit (cost/fit.py)
def release_space(framework: Framework, year: int | None, month: int | None = None) -> SearchSpace:
    """The declared space a Megatron-LM release of `year` (and `month`, where known: features
    dated by month, MEGATRON_FEATURE_MONTHS) runs (every feature when None: the current release;
    cost/releases.Release gives a named version's year and month). A
    DeepSpeed run of a stated year ran Megatron's model code (Megatron-DeepSpeed; the ZeRO-3
    baseline of Narayanan et al. SC'21 Sec. 5.2): its sequence parallelism, selective
    recomputation and interleaving follow Megatron-LM's years, its ZeRO stages are DeepSpeed's
    own (1-3 since ZeRO-Infinity, April 2021). Other frameworks: every feature (their rules
    above already hold what they run)."""
    if year is None or framework not in (Framework.MEGATRON, Framework.DEEPSPEED):
        return SearchSpace()
    # fused attention: a fact of the row
    has = {f: release_has(f, year, month) for f in (*MEGATRON_FEATURE_YEARS, *MEGATRON_FEATURE_MONTHS)}
    zero = ((0,) + ((1,) if has["distributed_optimizer"] else ()) + ((2, 3) if has["fsdp"] else ())
            if framework is Framework.MEGATRON else SearchSpace().zero)
    return SearchSpace(
        pp=None if has["pipeline"] else (1,),
        virtual_stages=None if has["interleaving"] else (1,),
        sequence_parallel=(False, True) if has["sequence_parallel"] else (False,),
        recompute=(Recompute.NONE, Recompute.SELECTIVE) if has["selective_recompute"] else (Recompute.NONE,),
        partial_recompute=has["partial_recompute"], zero=zero)


# the search keys a release narrows (release_space), each with the feature it names
_RELEASE_KEYS = {"pp": "pipeline parallelism", "virtual_stages": "interleaved 1F1B",
                 "sequence_parallel": "sequence parallelism", "recompute": "selective recomputation",
                 "zero": "sharded model state (the distributed optimizer, Megatron-FSDP)"}


def release_search(space: SearchSpace, framework: Framework, year: int | None,
                   given: frozenset[str], version: str, month: int | None = None) -> tuple[SearchSpace, Refusal | None]:
    """`space` narrowed to what the job's framework release runs (release_space of its year and
    month; `version` names it in the refusal): a key the user did not list takes the release's
    values, a listed value the release cannot run is refused; partial recomputation, which no
    key lists, is off where the release predates it. The current release narrows nothing."""
    allowed = release_space(framework, year, month)
    kw = {} if allowed.partial_recompute else {"partial_recompute": False}
    for key, feature in _RELEASE_KEYS.items():
        mine, theirs = getattr(space, key), getattr(allowed, key)
        if theirs is None or theirs == getattr(SearchSpace(), key):
            continue
        if key not in given:
            kw[key] = theirs if mine is None else tuple(x for x in mine if x in theirs) or theirs
            continue
        bad = [x for x in (mine or ()) if x not in theirs]
        if mine is None or bad:
            shown = getattr(bad[0], "value", bad[0]) if bad else "any"
            return space, Refusal(key, f"{framework.value} {version} cannot run {key} {shown}: it"
                                  f" predates {feature} (cost/releases.py)",
                                  "use " + ", ".join(str(getattr(x, "value", x)).lower() for x in theirs)
                                  + ", or a later job.framework_version")
    return (replace(space, **kw) if kw else space), None
