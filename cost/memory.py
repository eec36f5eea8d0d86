"""Peak memory per GPU: model state (weights, gradients, optimizer) and stashed activations.

Model state, Adam with mixed precision (Rajbhandari et al. 2020, ZeRO, Sec. 3.1, with
Megatron-LM's fp32 gradient buffer): per parameter 2 bytes bf16 weight + 4 bytes fp32 gradient
+ 12 bytes optimizer (fp32 master weight, momentum, variance). ZeRO stage k shards, over the
data-parallel group (dp*cp ranks, as Megatron's distributed optimizer does): 1 the optimizer
state, 2 also the gradients, 3 also the weights. ZeRO-3 keeps one gathered layer (and one being
prefetched) unsharded.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", Sec. 4, Table 2): per layer and micro-batch
    s*b*h*(34 + 5*a*s/h)                       no parallelism, standard attention
    s*b*h*(10 + 24/t + 5*a*s/(h*t))            tensor parallel t
    s*b*h/t*(34 + 5*a*s/h)                     tensor + sequence parallel
    s*b*h/t*34                                 + selective recomputation
    2*s*b*h (/t with sp)                       full recomputation: the layer input only
generalised here term by term to GQA (K, V of kv_hidden width), any ffn width and SwiGLU,
and to context parallelism (s -> s/cp). With FlashAttention (the default), no s x s score
matrix is stored, so the 5*a*s/h term vanishes and selective equals none in memory.
"""

from __future__ import annotations

from cost.flops import BF16_BYTES, embedding_params, layer_params, output_params
from cost.specs import Mlp, ModelSpec

WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPTIMIZER_BYTES = 12

# Allowance for what the formulas above do not count: CUDA context (~0.5 GiB), NCCL buffers
# and allocator fragmentation. One documented constant, not a per-row fudge.
RUNTIME_ALLOWANCE_BYTES = 1 * 1024**3


def state_bytes_per_param(zero: int, shard: int) -> float:
    """Bytes per parameter on one GPU for weights + gradients + optimizer state."""
    w = WEIGHT_BYTES / (shard if zero >= 3 else 1)
    g = GRAD_BYTES / (shard if zero >= 2 else 1)
    o = OPTIMIZER_BYTES / (shard if zero >= 1 else 1)
    return w + g + o


def layer_state_bytes(m: ModelSpec, tp: int, zero: int, shard: int) -> float:
    return layer_params(m) / tp * state_bytes_per_param(zero, shard)


def embedding_state_bytes(m: ModelSpec, tp: int, zero: int, shard: int, first: bool, last: bool) -> float:
    """Input embedding on the first stage, output layer on the last (a copy of a tied embedding
    lives on the last stage too when they differ, as in Megatron-LM)."""
    n = 0
    if first:
        n += embedding_params(m)
    if last:
        n += output_params(m) if (first or not m.tied_embeddings) else embedding_params(m) + m.hidden
    return n / tp * state_bytes_per_param(zero, shard)


def layer_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool, flash: bool) -> float:
    """Stashed activations of one layer for one micro-batch, no full recomputation."""
    t = b * m.seq_len / cp
    h, hk, f = m.hidden, m.kv_hidden, m.ffn
    # norm inputs (2x2th), QKV and MLP inputs (2x2th), two dropout masks (2x th): Korthikanti's "10"
    replicated = 10 * t * h
    # Q and K (QK^T operands), V, attention-output-projection input
    split = BF16_BYTES * t * ((h + hk) + hk + h)
    split += BF16_BYTES * t * f * (3 if m.mlp is Mlp.SWIGLU else 2)
    total = replicated / (tp if sp else 1) + split / tp
    if not flash:
        total += 5 * m.heads * m.seq_len * t / tp  # softmax output, dropout mask and output
    return total


def selective_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """As `layer_activation_bytes` with the attention core recomputed: no score matrix."""
    return layer_activation_bytes(m, b, tp, cp, sp, flash=True)


def checkpoint_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """A fully recomputed layer keeps only its input."""
    return BF16_BYTES * b * m.seq_len / cp * m.hidden / (tp if sp else 1)


def logits_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int) -> float:
    """Last stage: bf16 logits plus the fp32 softmax copy the cross-entropy keeps for backward."""
    return b * m.seq_len / cp * m.vocab / tp * (BF16_BYTES + 4)


def backward_workspace_bytes(m: ModelSpec, b: int, tp: int, cp: int) -> float:
    """Transient gradient buffers while one layer runs backward: the widest intermediate
    (the MLP's ffn-wide activation, or the QKV output) and its gradient, in bf16."""
    t = b * m.seq_len / cp
    widest = max(m.ffn * (2 if m.mlp is Mlp.SWIGLU else 1), m.hidden + 2 * m.kv_hidden) / tp
    return 2 * BF16_BYTES * t * widest
