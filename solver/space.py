"""The declared plan space, enumerated once and shared by every backend and exhaustive search.

A plan = an outer configuration (`cost.specs.Outer`: tp, pp, dp, cp, micro-batch, sequence
parallel, base recompute mode, ZeRO stage, virtual stages) + a layer split and per-stage full
recompute counts. This module lists the outer configurations; the inner choices are the
variables of formulations/ (and the loops of solver/exhaustive.py).

Rules (each one a property of the frameworks we export to, or an identity of the cost model):
- tp*pp*dp*cp = GPUs; tp a power of two dividing the heads (and the kv heads, or a multiple of
  them: KV heads are then replicated), inside one node unless `tp_across_nodes`.
- cp a power of two dividing seq_len (and seq_len/(tp*cp) integral with sequence parallel).
- pp <= layers; dp divides the global batch; micro_batch divides global_batch/dp.
- sequence parallel only with tp > 1.
- ZeRO-2/3 only with pp = 1 (DeepSpeed and Megatron-LM do not pipeline them); ZeRO > 0 only
  when there is more than one data-parallel rank to shard over (else it equals ZeRO-0).
- virtual stages v > 1 only with pp > 1, micro-batches a multiple of pp (Megatron-LM's
  interleaved schedule), layers >= v*pp and layers a multiple of v (each stage's layers
  split evenly into its v chunks).
- base recompute `selective` only with standard attention: with FlashAttention the score
  matrix is never stored, so selective and none cost the same and one of them suffices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost.specs import Attention, Instance, Outer


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


def outer_configs(inst: Instance) -> list[Outer]:
    """Every outer configuration of the declared space, in a fixed, documented order
    (tp, cp, pp, micro_batch, sp, zero, v, recompute ascending) that also breaks ties."""
    m, c, s, gb = inst.model, inst.cluster, inst.search, inst.job.global_batch
    n_gpus = c.num_gpus
    out: list[Outer] = []
    # with FlashAttention every base mode costs the same: keep the first one listed
    flash = inst.job.attention is Attention.FLASH
    recompute_modes = list(s.recompute[:1] if flash else s.recompute)
    for tp in tp_values(inst):
        cps = s.cp if s.cp is not None else _powers_of_two(s.max_cp)
        for cp in cps:
            if cp > s.max_cp or m.seq_len % cp or (n_gpus // tp) % cp:
                continue
            rest = n_gpus // (tp * cp)
            pps = s.pp if s.pp is not None else _divisors(rest)
            for pp in pps:
                if rest % pp or pp > m.layers or pp > s.max_pp:
                    continue
                dp = rest // pp
                if gb % dp:
                    continue
                per_replica = gb // dp
                mbs = s.micro_batch if s.micro_batch is not None else [
                    d for d in _divisors(per_replica) if d <= s.max_micro_batch]
                for mb in mbs:
                    if per_replica % mb:
                        continue
                    n_mb = per_replica // mb
                    for sp in s.sequence_parallel:
                        if sp and (tp == 1 or m.seq_len % (cp * tp)):
                            continue
                        for zero in s.zero:
                            if zero >= 2 and pp > 1 or zero > 0 and dp * cp == 1:
                                continue
                            for v in s.virtual_stages:
                                if v > 1 and (pp == 1 or n_mb % pp or m.layers < v * pp
                                              or m.layers % v):
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
