"""Which per-stage counts of fully recomputed layers a framework can run.

A plan fully recomputes r_s of the n_s layers on stage s (Plan.full_recompute_layers). The
frameworks do not let each stage pick its own count: one setting applies to every stage and
every model chunk, so the counts a job can run form a one-parameter family per split. Each
framework's family is a field of its rules (cost/framework_rules.FRAMEWORK_RULES); every backend
of the inner problem (formulations/, solver/exhaustive.py) and the plan validator
(cost/plan_specs.RULES) read it here, so the proof covers exactly the plans the job runs.

Patterns (p is the parameter, one per job; rows of chunk layers as
cost/pipeline_split.chunk_layers gives them)
    PER_STAGE        any 0 <= r_s <= n_s: the training script's model code picks the blocks it
                     checkpoints on each stage (DeepSpeed's deepspeed.checkpointing is called
                     by the model's layers; Composer runs no pipeline, so one stage)
    FIRST_PER_CHUNK  p = N >= 0: every model chunk recomputes its first min(N, c) of its c layers,
                     r_s = sum over the chunks of stage s of min(N, c). Megatron-LM's
                     --recompute-granularity full --recompute-method block --recompute-num-layers N
                     (megatron/core/recompute.py at d98e8a6, checkpointed_forward: layer_idx <
                     recompute_num_layers within each TransformerBlock, one per model chunk);
                     N = 0 is no full recompute; N >= every chunk recomputes every layer (the
                     --recompute-method uniform of N = 1 has the same count)
    EVERY_KTH        p = k >= 1: every k-th block of a rank, counted over the rank's chunks by one
                     per-process counter, r_s = floor(n_s / k) (torchtitan v0.2.x
                     activation_checkpoint mode "selective", selective_ac_option "k":
                     torchtitan/distributed/activation_checkpoint.py _apply_layer_sac; k = 1 is
                     mode "full"); k > n_s on every stage is mode "none"
    ALL_OR_NONE      r_s = 0 on every stage, or r_s = n_s on every stage: a framework whose
                     recompute granularity takes one value (Megatron-LM's
                     --recompute-granularity; torchtitan's mode) cannot recompute some layers
                     fully beside the selective recompute of the others
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache

import numpy as np


class RecomputePattern(str, Enum):
    PER_STAGE = "per_stage"
    FIRST_PER_CHUNK = "first_per_chunk"
    EVERY_KTH = "every_kth"
    ALL_OR_NONE = "all_or_none"


# what each pattern is called where a refusal names it
_RUNS = {
    RecomputePattern.FIRST_PER_CHUNK: "one --recompute-num-layers N for every model chunk of every"
                                      " stage (the first min(N, chunk layers) of each chunk)",
    RecomputePattern.EVERY_KTH: "every block, every k-th block of each rank (floor(layers / k)"
                                " per stage), or none",
    RecomputePattern.ALL_OR_NONE: "full recompute of every layer or of none beside selective"
                                  " recompute: its recompute granularity takes one value",
}


def chunk_cuts(pp: int, v: int, embedding: bool, loss: bool) -> np.ndarray:
    """(pp, v) int array: the layers chunk c of stage s has fewer than the stage's chunk size,
    (n_s + offset_s) / v (cost/pipeline_split.chunk_layers: the embedding's slot in stage 0's
    first chunk, the loss's in the last stage's last)."""
    d = np.zeros((pp, v), np.int64)
    d[0, 0] += int(embedding)
    d[pp - 1, v - 1] += int(loss)
    return d


def parameter_count(pattern: RecomputePattern, max_stage_layers: int, max_chunk_layers: int) -> int:
    """How many parameter values `options` lists (duplicates included) for splits whose stages
    hold at most max_stage_layers layers and whose chunks at most max_chunk_layers."""
    if pattern is RecomputePattern.FIRST_PER_CHUNK:
        return max_chunk_layers + 1  # N = 0 .. the largest chunk
    if pattern is RecomputePattern.EVERY_KTH:
        return max_stage_layers + 1  # none, then k = the largest stage .. 1
    if pattern is RecomputePattern.ALL_OR_NONE:
        return 2
    raise ValueError(f"{pattern} has no parameter: every per-stage count runs")


def options(pattern: RecomputePattern, n: np.ndarray, v: int, embedding: bool = False,
            loss: bool = False, max_stage_layers: int | None = None,
            max_chunk_layers: int | None = None) -> np.ndarray:
    """(P, ..., pp) int64: the recompute counts r of layer counts n (..., pp) under each of the
    pattern's P parameter values (parameter_count), in the order none first, then by growing
    recompute. The bounds default to n's own largest stage and chunk; pass the shape's to get
    the same P for every split of it."""
    n = np.asarray(n, np.int64)
    pp = n.shape[-1]
    cuts = chunk_cuts(pp, v, embedding, loss)
    size = (n + cuts.sum(axis=1)) // v  # layers of a full chunk, per stage
    if max_chunk_layers is None:
        max_chunk_layers = int(size.max(initial=0))
    if max_stage_layers is None:
        max_stage_layers = int(n.max(initial=0))
    if pattern is RecomputePattern.ALL_OR_NONE:
        return np.stack([np.zeros_like(n), n])
    if pattern is RecomputePattern.FIRST_PER_CHUNK:
        N = np.arange(max_chunk_layers + 1, dtype=np.int64).reshape((-1,) + (1,) * (n.ndim + 1))
        chunks = size[..., None] - cuts  # (..., pp, v)
        return np.minimum(N, chunks[None]).sum(axis=-1)
    if pattern is RecomputePattern.EVERY_KTH:
        k = np.arange(max_stage_layers + 1, 0, -1, dtype=np.int64).reshape((-1,) + (1,) * n.ndim)
        return n[None] // k
    raise ValueError(f"{pattern} has no parameter: every per-stage count runs")


def value_counts(pattern: RecomputePattern, i: int, n: np.ndarray, v: int, embedding: bool = False,
                 loss: bool = False, max_stage_layers: int | None = None,
                 max_chunk_layers: int | None = None) -> np.ndarray:
    """options(...)[i] alone, without listing the other values (a million-layer model has a
    million of them): the counts (..., pp) of layer counts n under the pattern's i-th value."""
    n = np.asarray(n, np.int64)
    if pattern is RecomputePattern.ALL_OR_NONE:
        return n.copy() if i else np.zeros_like(n)
    if pattern is RecomputePattern.FIRST_PER_CHUNK:
        cuts = chunk_cuts(n.shape[-1], v, embedding, loss)
        size = (n + cuts.sum(axis=1)) // v
        return np.minimum(i, size[..., None] - cuts).sum(axis=-1)  # N = i
    if pattern is RecomputePattern.EVERY_KTH:
        top = int(n.max(initial=0)) if max_stage_layers is None else max_stage_layers
        return n // (top + 1 - i)  # k = top + 1 - i
    raise ValueError(f"{pattern} has no parameter: every per-stage count runs")


def _bounds(layers, v: int, embedding: bool, loss: bool) -> tuple[int, int]:
    """(largest stage, largest chunk) over the rows of `layers` (one per class)."""
    n = [np.asarray(x, np.int64) for x in layers]
    top_c = max(int(((x + chunk_cuts(x.size, v, embedding, loss).sum(axis=1)) // v).max()) for x in n)
    return max(int(x.max()) for x in n), top_c


def covering_value(pattern: RecomputePattern, layers, recompute, v: int, embedding: bool = False,
                   loss: bool = False) -> int:
    """The first value index whose counts reach `recompute` on every stage of every class (one
    row per class), by bisection: options' counts grow with the index in every stage; the last
    value (every layer, or the most the pattern gives) when none does."""
    top_n, top_c = _bounds(layers, v, embedding, loss)

    def reaches(i: int) -> bool:
        return all((value_counts(pattern, i, n, v, embedding, loss, top_n, top_c)
                    >= np.asarray(r, np.int64)).all() for n, r in zip(layers, recompute))

    lo, hi = 0, parameter_count(pattern, top_n, top_c) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not reaches(mid) else (lo, mid)
    return lo


def runs(pattern: RecomputePattern, layers, recompute, v: int, embedding: bool = False,
         loss: bool = False) -> bool:
    """Whether one parameter value gives every row of `recompute` from the same row of `layers`
    (one row per replica class: a job has one setting for all of them). The counts grow with
    the value, so if some value gives them, the first value that reaches them does."""
    if pattern is RecomputePattern.PER_STAGE:
        return True
    top_n, top_c = _bounds(layers, v, embedding, loss)
    i = covering_value(pattern, layers, recompute, v, embedding, loss)
    return all((value_counts(pattern, i, n, v, embedding, loss, top_n, top_c)
                == np.asarray(r, np.int64)).all() for n, r in zip(layers, recompute))


def refusal(pattern: RecomputePattern, framework: str, layers, recompute, v: int,
            embedding: bool = False, loss: bool = False) -> str | None:
    """Why `framework` cannot run these per-stage counts (None when it can): the one physical
    reason, what the framework runs. Kept per argument (_refusal): every simulate checks its
    plan here (cost/plan_specs.check_against), and a fit prices the same plans under each trial
    value (cost/fit.py; runs' bisection, numpy on a few stages, was 9% of a fold's refit under
    a profiler, issue 32)."""
    return _refusal(pattern, framework, tuple(tuple(int(x) for x in n) for n in layers),
                    tuple(tuple(int(x) for x in r) for r in recompute), v, embedding, loss)


@lru_cache(maxsize=4096)
def _refusal(pattern: RecomputePattern, framework: str, layers: tuple[tuple[int, ...], ...],
             recompute: tuple[tuple[int, ...], ...], v: int, embedding: bool,
             loss: bool) -> str | None:
    if runs(pattern, layers, recompute, v, embedding, loss):
        return None
    shown = "; ".join(f"{list(map(int, r))} of {list(map(int, n))}" for n, r in zip(layers, recompute))
    return (f"full_recompute_layers {shown} layers per stage: {framework} runs {_RUNS[pattern]},"
            " and no such setting gives these counts")
