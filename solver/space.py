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
- MoE models (cost/space_rules.ep_values, moe_problem): ep divides the experts and dp*cp (default:
  every such divisor; dense models ep = 1); tp > 1 only with sequence parallelism; ZeRO 0-2.
- ZeRO > 0 only when there is more than one data-parallel rank to shard over (else it equals
  ZeRO-0); which stages combine with a pipeline is the framework's rule (cost/framework_rules.py).
- virtual stages v > 1 only with pp > 1, micro-batches a multiple of pp (Megatron-LM's
  interleaved schedule), layers >= v*pp and layers a multiple of v (each stage's layers
  split evenly into its v chunks). Default: every such v.
- base recompute `selective` only with standard attention: with FlashAttention the score
  matrix is never stored, so selective and none cost the same and one of them suffices.
- the framework (`job.framework`) runs the outer: cost/framework_rules.py, one reason per rule.

Micro-batch cap from memory (no fixed cap). A micro-batch b is kept iff this lower bound on
some stage's peak memory fits the GPU (`hbm - memory_reserve`), for the most favourable
sequence-parallel flag and ZeRO stage the framework admits with (tp, cp, pp, dp); the
mixed-cluster space caps its micro-batches with the same functions (capped_micro_batches,
micro_batch_lower_bound_parts), per replica class and group (solver/hetero_space.py):
    LB(b) = runtime + f * workspace(b)
            + max( f * logits(b) + state + f * ckpt(b),      the last stage: >= 1 layer + logits
                   ceil(L/pp) * (state + f * ckpt(b)) )      the stage holding the most layers
where state = layer_state_bytes at that ZeRO stage (plus cached fp8 weights), ckpt(b) =
checkpoint_activation_bytes, runtime = runtime_bytes and f = 1 + ALLOCATOR_FRAGMENTATION, all
as cost/memory.py and cost/coefficients.py price them. Why it is a lower bound on every plan with this outer: every stage holds
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

from paraplan.cost import memory
from paraplan.cost.flops import moe_attention_view
from paraplan.cost.framework_rules import rules_for
from paraplan.cost.space_rules import cp_problem, ep_values, moe_problem, pp_problem, tp_problem
from paraplan.cost.specs import Attention, Instance, Outer


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
    limit = c.num_gpus if s.tp_across_nodes else c.domain_gpus
    vals = s.tp if s.tp is not None else _powers_of_two(limit)
    # the loader refuses a listed value with a problem (cost/space_rules.py): same rule
    return [t for t in vals
            if tp_problem(t, m, c.num_gpus, c.domain_gpus, s.tp_across_nodes) is None]


def micro_batch_lower_bound_parts(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                                  micro_batch: int, sp: bool, zero: int,
                                  zero_ranks: int | None = None) -> tuple[float, float]:
    """LB(b) of the module docstring in its two parts, per GPU: (the last stage's, the fullest
    stage's). `zero_ranks`: the ranks ZeRO shards over (default dp * cp; a mixed-cluster class
    shards over every replica of the plan, solver/hetero_space.py)."""
    m, b, fw = inst.model, micro_batch, inst.job.framework
    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    ranks = dp * cp if zero_ranks is None else zero_ranks
    state = (memory.layer_state_bytes(m, tp, zero, ranks, fw, inst.job.optimizer)
             + memory.fp8_weight_bytes(m, tp, inst.job.precision, fw))
    ckpt = memory.checkpoint_activation_bytes(m, b, tp, cp, sp) * frag
    # an MoE layer's workspace is its attention view's (cost/coefficients.moe_layer)
    view = moe_attention_view(m) if m.moe is not None else m
    every_stage = (memory.runtime_bytes(tp, cp, dp, pp)
                   + memory.backward_workspace_bytes(view, b, tp, cp) * frag)
    last_stage = memory.logits_activation_bytes(m, b, tp, cp, fw) * frag + state + ckpt
    fullest_stage = -(-m.layers // pp) * (state + ckpt)
    return every_stage + last_stage, every_stage + fullest_stage


def micro_batch_lower_bound_bytes(inst: Instance, *, tp: int, cp: int, pp: int, dp: int,
                                  micro_batch: int, sp: bool, zero: int) -> float:
    """LB(b) of the module docstring: no plan with these degrees fits in less, per GPU."""
    return max(micro_batch_lower_bound_parts(inst, tp=tp, cp=cp, pp=pp, dp=dp,
                                             micro_batch=micro_batch, sp=sp, zero=zero))


def capped_micro_batches(candidates: list[int], fits) -> list[int]:
    """The micro-batch cap from memory: the ascending `candidates` up to the first whose lower
    bound does not fit (`fits(b)`: LB(b) fits; LB grows with b, so no larger one fits either).
    The smallest candidate is always kept: an instance that fits nowhere is reported by its
    memory need, not as an empty space. The one rule of both spaces (solver/hetero_space.py)."""
    kept = candidates[:1]
    for b in candidates[1:]:
        if not fits(b):
            break
        kept.append(b)
    return kept


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
    return capped_micro_batches(divs, lambda b: min(
        micro_batch_lower_bound_bytes(inst, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=b, sp=sp, zero=z)
        for sp in sps for z in zeros) <= capacity)


def virtual_stage_values(inst: Instance, pp: int) -> list[int]:
    """The user's list, or every v whose chunks split the layers: v | layers and v*pp <= layers
    (v = 1 only without a pipeline)."""
    s, layers = inst.search, inst.model.layers
    if s.virtual_stages is not None:
        return list(s.virtual_stages)
    return [1] if pp == 1 else [v for v in _divisors(layers) if v * pp <= layers]


def outer_configs(inst: Instance) -> list[Outer]:
    """Every outer configuration of the declared space, in a fixed, documented order
    (tp, cp, pp, micro_batch, sp, zero, v, recompute, ep ascending) that also breaks ties."""
    m, c, s, gb = inst.model, inst.cluster, inst.search, inst.job.global_batch
    rules = rules_for(inst.job.framework, inst.job.optimizer)
    n_gpus = c.num_gpus
    out: list[Outer] = []
    # with FlashAttention every base mode costs the same: keep the first one listed
    flash = inst.job.attention is Attention.FLASH
    recompute_modes = list(s.recompute[:1] if flash else s.recompute)
    for tp in tp_values(inst):
        cps = s.cp if s.cp is not None else _powers_of_two(n_gpus // tp)
        for cp in cps:
            if cp_problem(cp, m, n_gpus // tp, s.max_cp, flash) is not None:  # the loader's rule
                continue
            rest = n_gpus // (tp * cp)
            pps = s.pp if s.pp is not None else _divisors(rest)
            for pp in pps:
                if pp_problem(pp, m, rest, s.max_pp) is not None:  # the loader's rule
                    continue
                dp = rest // pp
                if gb % dp:
                    continue
                per_replica = gb // dp
                sps = [sp for sp in s.sequence_parallel
                       if not (sp and (tp == 1 or m.seq_len % (cp * tp)))
                       and moe_problem(m, tp, sp, 0) is None]
                zeros = [z for z in s.zero if not (z > 0 and dp * cp == 1)
                         and moe_problem(m, tp, tp > 1, z) is None]
                eps = ep_values(m, s.ep, dp * cp)
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
                                    for ep in eps:
                                        out.append(Outer(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=mb,
                                                         num_micro_batches=n_mb, sequence_parallel=sp,
                                                         recompute=rc, zero=zero, virtual_stages=v,
                                                         ep=ep))
    return out


def count_splits(layers: int, pp: int, v: int, full_recompute: bool, uniform: bool) -> int:
    """Exact number of (layer split, recompute counts) pairs for one outer configuration:
    compositions of layers/v chunks into pp positive parts, times prod_s (n_s + 1) recompute
    choices; computed by dynamic programming over stages."""
    if layers % v:
        return 0
    chunks = layers // v
    if uniform:
        from paraplan.cost.loader import default_layer_split
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
