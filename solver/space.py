"""The declared plan space, enumerated once and shared by every backend and exhaustive search.

A plan = an outer configuration (`cost.specs.Outer`: tp, pp, dp, cp, micro-batch, sequence
parallel, base recompute mode, ZeRO stage, virtual stages) + a layer split and per-stage full
recompute counts. This module lists the outer configurations; the inner choices are the
variables of formulations/ (and the loops of solver/exhaustive.py).

Rules (each one a property of the frameworks we export to, or an identity of the cost model):
- tp*pp*dp*cp = GPUs; tp a power of two dividing the heads (and the kv heads, or a multiple of
  them: KV heads are then replicated), inside one node unless `tp_across_nodes`.
- cp a power of two dividing seq_len and GPUs/tp (and seq_len/(tp*cp) integral with sequence
  parallel); `search.max_cp`, when given, narrows it.
- pp <= layers (and <= `search.max_pp` when given); dp divides the global batch.
- micro_batch divides global_batch/dp, and its memory lower bound fits (below); `search.max_micro_batch`,
  when given, narrows it.
- sequence parallel only with tp > 1.
- ZeRO > 0 only when there is more than one data-parallel rank to shard over (else it equals
  ZeRO-0); which stages combine with a pipeline is the framework's rule (FRAMEWORK_RULES).
- virtual stages v > 1 only with pp > 1, micro-batches a multiple of pp (Megatron-LM's
  interleaved schedule), layers >= v*pp and layers a multiple of v (each stage's layers
  split evenly into its v chunks). Default: every such v.
- base recompute `selective` only with standard attention: with FlashAttention the score
  matrix is never stored, so selective and none cost the same and one of them suffices.
- the framework (`job.framework`) runs the outer: FRAMEWORK_RULES below, one reason per rule.

Micro-batch cap from memory (no fixed cap). A micro-batch b is kept iff this lower bound on
some stage's peak memory fits the GPU (`hbm - memory_reserve`), for the most favourable
sequence-parallel flag and ZeRO stage the framework admits with (tp, cp, pp, dp):
    LB(b) = RUNTIME_ALLOWANCE + workspace(b)
            + max( logits(b) + state + ckpt(b),          the last stage: >= 1 layer + the logits
                   ceil(L/pp) * (state + ckpt(b)) )      the stage holding the most layers
where state = layer_state_bytes at that ZeRO stage and ckpt(b) = checkpoint_activation_bytes
(cost/memory.py). Why it is a lower bound on every plan with this outer: every stage holds
>= 1 layer and some stage holds >= ceil(L/pp); a layer costs at least its state plus, when fully
recomputed, its input checkpoint times the stage's in-flight micro-batches, which is >= 1 for
every stage and schedule (cost/coefficients.in_flight_micro_batches: min(pp-s, m) >= 1 for
1F1B; (2(pp-s-1) + (v-1)pp + 1)/v >= 1 and m*v/v >= 1 interleaved), and full recomputation
(act >= ckpt) is the least a layer can keep; the runtime allowance and the backward workspace
are on every stage, the logits on the last; every other term (embeddings, the ZeRO-3 gathered
layers, replicated weights of token-split partitions) is >= 0 and left out. LB is increasing in
b, so the kept values are the divisors up to a cap. The smallest divisor is always kept, so an
instance that fits nowhere is reported by its memory need (solver/planner.infeasible_reason)
rather than as an empty space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost import memory
from cost.specs import Attention, Framework, Instance, Outer, SearchSpace


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
    # True: plain (ZeRO-0) data parallelism only when it is the sole parallelism
    replicate_only_alone: bool = False

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
    # --num-layers-per-virtual-pipeline-stage (interleaved 1F1B) are all available.
    Framework.MEGATRON: FrameworkRules(
        zero_stages=(0, 1, 2, 3), zero_with_pipeline=(0, 1), tensor_parallel=True, pipeline=True,
        context_parallel=True, interleaving=True, sequence_parallel_optional=True),
    # DeepSpeed ZeRO 0-3, tp/pp through Megatron-DeepSpeed. deepspeed/runtime/pipe/engine.py:
    # PipelineEngine asserts zero_optimization_stage() < 2 ("ZeRO-2 and ZeRO-3 are incompatible
    # with pipeline parallelism"). Its pipeline runs DeepSpeed's own 1F1B TrainSchedule (no
    # interleaving). Its sequence parallelism is Ulysses (all-to-all over heads), not the ring
    # context parallelism cost/ prices, so cp = 1. Megatron-DeepSpeed keeps Megatron's
    # optional --sequence-parallel for tp.
    Framework.DEEPSPEED: FrameworkRules(
        zero_stages=(0, 1, 2, 3), zero_with_pipeline=(0, 1), tensor_parallel=True, pipeline=True,
        context_parallel=False, interleaving=False, sequence_parallel_optional=True),
    # torchtitan: FSDP2 fully_shard (ZeRO-3; reshard_after_forward=False is ZeRO-2), DDP
    # (dp_replicate, ZeRO-0) but no ZeRO-1. Its parallelize functions raise "DDP has not
    # supported > 1D parallelism" when DDP meets tp, pp or cp (with cp, FSDP shards over the
    # dp_shard_cp mesh instead). torchtitan does run FSDP inside a pipeline, but cost/ does not
    # price FSDP with pp > 1 yet, so ZeRO-2/3 stay with pp = 1 here. Its TP plan shards the
    # sequence for norms and dropout (SequenceParallel on the norms), so sp is always on with
    # tp > 1. Context parallelism and the interleaved schedules (Interleaved1F1B) are available.
    Framework.TORCHTITAN: FrameworkRules(
        zero_stages=(0, 2, 3), zero_with_pipeline=(0,), tensor_parallel=True, pipeline=True,
        context_parallel=True, interleaving=True, sequence_parallel_optional=False,
        replicate_only_alone=True),
    # MosaicML Composer / llm-foundry: PyTorch FSDP data parallelism, sharding_strategy
    # NO_SHARD (ZeRO-0), SHARD_GRAD_OP (ZeRO-2), FULL_SHARD (ZeRO-3); the published MPT
    # configurations use no tensor, pipeline or context parallelism, so tp = pp = cp = 1.
    Framework.COMPOSER: FrameworkRules(
        zero_stages=(0, 2, 3), zero_with_pipeline=(), tensor_parallel=False, pipeline=False,
        context_parallel=False, interleaving=False, sequence_parallel_optional=True),
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A `search:` value the framework can never run: the search key, the problem, the fix."""

    key: str
    problem: str
    fix: str


def framework_refusal(space: SearchSpace, framework: Framework,
                      given: frozenset[str]) -> Refusal | None:
    """The first value of a `search:` key the user listed (`given`) that `framework` cannot
    run in any combination the space allows; None when every listed value can run. Values the
    defaults bring in are filtered by `outer_configs`, never refused."""
    rules, name = FRAMEWORK_RULES[framework], framework.value
    pp_forced = "pp" in given and space.pp is not None and min(space.pp) > 1
    if "zero" in given:
        for z in space.zero:
            if z not in rules.zero_stages:
                return Refusal("zero", f"{name} has no ZeRO-{z}",
                               "use one of: " + ", ".join(map(str, rules.zero_stages)))
            if pp_forced and z not in rules.zero_with_pipeline:
                return Refusal("zero", f"{name} runs ZeRO-{z} only with pp = 1, but search.pp"
                               f" lists only pp > 1", "add 1 to search.pp or drop"
                               f" ZeRO-{z} from search.zero")
    if "tp" in given and space.tp is not None and not rules.tensor_parallel and max(space.tp) > 1:
        return Refusal("tp", f"{name} has no tensor parallelism", "use tp: [1]")
    if "pp" in given and space.pp is not None and not rules.pipeline and max(space.pp) > 1:
        return Refusal("pp", f"{name} has no pipeline parallelism", "use pp: [1]")
    if "cp" in given and space.cp is not None and not rules.context_parallel and max(space.cp) > 1:
        return Refusal("cp", f"{name} has no ring context parallelism", "use cp: [1]")
    if ("virtual_stages" in given and space.virtual_stages is not None and not rules.interleaving
            and max(space.virtual_stages) > 1):
        return Refusal("virtual_stages", f"{name} has no interleaved pipeline schedule",
                       "use virtual_stages: [1]")
    if "sequence_parallel" in given:
        if True in space.sequence_parallel and not rules.tensor_parallel:
            return Refusal("sequence_parallel", f"{name} has no tensor parallelism to shard the"
                           " sequence over", "use sequence_parallel: [false]")
        tp_forced = "tp" in given and space.tp is not None and min(space.tp) > 1
        if False in space.sequence_parallel and tp_forced and not rules.sequence_parallel_optional:
            return Refusal("sequence_parallel", f"{name} always shards the sequence with tp > 1,"
                           " and search.tp lists only tp > 1", "use sequence_parallel: [true]")
    return None


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


@dataclass(frozen=True)
class SpaceSummary:
    outer_configs: int
    splits_total: int  # outer configs x layer splits x recompute counts (exact count)


def tp_values(inst: Instance) -> list[int]:
    m, c, s = inst.model, inst.cluster, inst.search
    limit = c.num_gpus if s.tp_across_nodes else c.gpus_per_node
    vals = s.tp if s.tp is not None else _powers_of_two(limit)
    return [t for t in vals if t <= limit and c.num_gpus % t == 0 and m.heads % t == 0
            and (m.kv_heads % t == 0 or t % m.kv_heads == 0)]


def micro_batch_lower_bound_bytes(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                                  micro_batch: int, sp: bool, zero: int) -> float:
    """LB(b) of the module docstring: no plan with these degrees fits in less, per GPU."""
    m, b = inst.model, micro_batch
    state = memory.layer_state_bytes(m, tp, zero, dp * cp)
    ckpt = memory.checkpoint_activation_bytes(m, b, tp, cp, sp)
    every_stage = memory.RUNTIME_ALLOWANCE_BYTES + memory.backward_workspace_bytes(m, b, tp, cp)
    last_stage = memory.logits_activation_bytes(m, b, tp, cp) + state + ckpt
    fullest_stage = -(-m.layers // pp) * (state + ckpt)
    return every_stage + max(last_stage, fullest_stage)


def micro_batch_values(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                       sps: list[bool], zeros: list[int]) -> list[int]:
    """Micro-batches of the space for these degrees: the user's list, or the divisors of the
    per-replica batch (within max_micro_batch) whose memory lower bound fits for the most
    favourable admitted sp flag and ZeRO stage; the smallest divisor is always kept."""
    s = inst.search
    per_replica = inst.job.global_batch // dp
    if s.micro_batch is not None:
        return [b for b in s.micro_batch if per_replica % b == 0]
    divs = [d for d in _divisors(per_replica) if s.max_micro_batch is None or d <= s.max_micro_batch]
    if not divs or not sps or not zeros:
        return divs[:1]
    capacity = inst.cluster.gpu.hbm_bytes - s.memory_reserve_bytes
    kept = divs[:1]
    for b in divs[1:]:
        need = min(micro_batch_lower_bound_bytes(inst, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=b,
                                                  sp=sp, zero=z) for sp in sps for z in zeros)
        if need > capacity:
            break  # LB grows with b: no larger divisor fits either
        kept.append(b)
    return kept


def virtual_stage_values(inst: Instance, pp: int) -> list[int]:
    """The user's list, or every v whose chunks split the layers: v | layers and v*pp <= layers
    (v = 1 only without a pipeline)."""
    s, layers = inst.search, inst.model.layers
    if s.virtual_stages is not None:
        return list(s.virtual_stages)
    return [1] if pp == 1 else [v for v in _divisors(layers) if v * pp <= layers]


def outer_configs(inst: Instance) -> list[Outer]:
    """Every outer configuration of the declared space, in a fixed, documented order
    (tp, cp, pp, micro_batch, sp, zero, v, recompute ascending) that also breaks ties."""
    m, c, s, gb = inst.model, inst.cluster, inst.search, inst.job.global_batch
    rules = FRAMEWORK_RULES[inst.job.framework]
    n_gpus = c.num_gpus
    out: list[Outer] = []
    # with FlashAttention every base mode costs the same: keep the first one listed
    flash = inst.job.attention is Attention.FLASH
    recompute_modes = list(s.recompute[:1] if flash else s.recompute)
    for tp in tp_values(inst):
        cps = s.cp if s.cp is not None else _powers_of_two(n_gpus // tp)
        for cp in cps:
            if s.max_cp is not None and cp > s.max_cp or m.seq_len % cp or (n_gpus // tp) % cp:
                continue
            rest = n_gpus // (tp * cp)
            pps = s.pp if s.pp is not None else _divisors(rest)
            for pp in pps:
                if rest % pp or pp > m.layers or s.max_pp is not None and pp > s.max_pp:
                    continue
                dp = rest // pp
                if gb % dp:
                    continue
                per_replica = gb // dp
                sps = [sp for sp in s.sequence_parallel
                       if not (sp and (tp == 1 or m.seq_len % (cp * tp)))]
                zeros = [z for z in s.zero if not (z > 0 and dp * cp == 1)]
                vs = virtual_stage_values(inst, pp)

                def admitted(sp: bool, zero: int, v: int) -> bool:
                    return rules.admits(tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=zero, v=v)

                sps = [sp for sp in sps if any(admitted(sp, z, v) for z in zeros for v in vs)]
                zeros = [z for z in zeros if any(admitted(sp, z, v) for sp in sps for v in vs)]
                for mb in micro_batch_values(inst, tp=tp, cp=cp, pp=pp, dp=dp, sps=sps, zeros=zeros):
                    n_mb = per_replica // mb
                    for sp in sps:
                        for zero in zeros:
                            for v in vs:
                                if v > 1 and (pp == 1 or n_mb % pp or m.layers < v * pp
                                              or m.layers % v):
                                    continue
                                if not admitted(sp, zero, v):
                                    continue
                                for rc in recompute_modes:
                                    out.append(Outer(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=mb,
                                                     num_micro_batches=n_mb, sequence_parallel=sp,
                                                     recompute=rc, zero=zero, virtual_stages=v))
    return out


def count_splits(layers: int, pp: int, v: int, full_recompute: bool, uniform: bool) -> int:
    """Exact number of (layer split, recompute counts) pairs for one outer configuration:
    compositions of layers/v chunks into pp positive parts, times prod_s (n_s + 1) recompute
    choices; computed by dynamic programming over stages."""
    if layers % v:
        return 0
    chunks = layers // v
    if uniform:
        from cost.loader import default_layer_split
        split = default_layer_split(layers, pp, v)
        if not full_recompute:
            return 1
        total = 1
        for n in split:
            total *= n + 1
        return total
    if not full_recompute:
        return math.comb(chunks - 1, pp - 1)  # compositions of `chunks` into pp positive parts
    # Weighted compositions: stage s with k_s chunks has v*k_s + 1 recompute counts. Per stage
    # sum_{k>=1} (v k + 1) x^k = x (1 + v - x) / (1 - x)^2, so the count is the coefficient of
    # x^chunks in x^pp (1 + v - x)^pp (1 - x)^(-2 pp):
    #   sum_j C(pp, j) (1+v)^(pp-j) (-1)^j C(chunks - pp - j + 2pp - 1, 2pp - 1)
    # O(pp) big-integer terms instead of an O(pp * chunks^2) dynamic programme.
    total = 0
    for j in range(min(pp, chunks - pp) + 1):
        rest = chunks - pp - j
        total += (-1) ** j * math.comb(pp, j) * (1 + v) ** (pp - j) * math.comb(rest + 2 * pp - 1, 2 * pp - 1)
    return total


def summarize(inst: Instance, outers: list[Outer]) -> SpaceSummary:
    s = inst.search
    cache: dict[tuple[int, int], int] = {}
    total = 0
    for o in outers:
        key = (o.pp, o.virtual_stages)
        if key not in cache:
            cache[key] = count_splits(inst.model.layers, o.pp, o.virtual_stages, s.full_recompute,
                                      s.uniform_split)
        total += cache[key]
    return SpaceSummary(outer_configs=len(outers), splits_total=total)
