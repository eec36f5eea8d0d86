"""Counting: FLOPs, HBM bytes and parameters of one transformer layer, embedding and output layer.

Pure arithmetic on shapes, no hardware. All counts are *forward* work on ONE GPU for ONE
micro-batch of `b` sequences, after tensor (`tp`) and context (`cp`) parallel splits; the
backward factors live in cost/coefficients.py.

Sources: matmul FLOPs = 2*m*n*k (Narayanan et al., SC'21, Sec. 5.1 / Appendix: 24*b*s*h^2 +
4*b*s^2*h per GPT layer forward); GQA shrinks K and V to kv_heads*head_dim columns;
SwiGLU has three hidden x ffn matrices (Shazeer 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost.specs import Mlp, ModelSpec

# FlashAttention-style kernels skip the fully-masked tiles of a causal mask: about half of
# the s x s score work is done (Dao 2023, FlashAttention-2, Sec. 3.1 "causal masking").
CAUSAL_ATTENTION_FRACTION = 0.5

BF16_BYTES = 2


@dataclass(frozen=True, slots=True)
class LayerMatmuls:
    """Forward FLOPs of each matmul call of one layer, per GPU per micro-batch."""

    qkv: float
    attn_out: float
    mlp: tuple[float, ...]  # gelu: (fc1, fc2); swiglu: (gate, up, down)
    attention_core: float  # QK^T and PV together, causal fraction applied

    @property
    def linear_calls(self) -> tuple[float, ...]:
        return (self.qkv, self.attn_out, *self.mlp)

    @property
    def total(self) -> float:
        return sum(self.linear_calls) + self.attention_core


def layer_matmuls(m: ModelSpec, b: int, tp: int, cp: int) -> LayerMatmuls:
    tokens = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    qkv = 2 * tokens * h * (h + 2 * m.kv_hidden) / tp
    attn_out = 2 * tokens * h * h / tp
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    mlp = (2 * tokens * h * f / tp,) * n_in + (2 * tokens * f * h / tp,)
    # every local query attends to keys of the whole sequence: 2 matmuls of 2*t*s*h each
    core = 2 * (2 * tokens * m.seq_len * h / tp) * CAUSAL_ATTENTION_FRACTION
    return LayerMatmuls(qkv=qkv, attn_out=attn_out, mlp=mlp, attention_core=core)


def logits_flops(m: ModelSpec, b: int, tp: int, cp: int) -> float:
    """Output projection hidden -> vocab (vocab-parallel over tp)."""
    return 2 * b * m.seq_len / cp * m.hidden * m.vocab / tp


def layer_elementwise_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """HBM bytes read+written by the memory-bound kernels of one layer's forward pass.

    Counted per kernel (bf16 tensors, each read once and written once): two layer norms
    (2 x (read + write) of t*h), two bias+dropout+residual adds (read 2, write 1, mask 1 byte),
    the activation function (gelu: read f, write f; swiglu: read 2f, write f) and the rotary /
    softmax-statistics traffic folded into one read+write of Q and K. Norm and residual work is
    replicated over tp unless sequence parallelism splits it.
    """
    t = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    rep = (2 * 2 * t * h * BF16_BYTES) + 2 * (3 * t * h * BF16_BYTES + t * h)
    rep /= tp if sp else 1
    act = (3 if m.mlp is Mlp.SWIGLU else 2) * t * f * BF16_BYTES / tp
    qk = 2 * t * (h + m.kv_hidden) * BF16_BYTES / tp
    return rep + act + qk


def fp8_cast_elements(m: ModelSpec, b: int, tp: int, cp: int) -> tuple[float, float]:
    """Elements one GPU casts to FP8 in a stand-alone kernel for one layer: (forward, backward).

    Transformer Engine fuses the cast into the kernel that produces a linear layer's input
    where one exists (LayerNormLinear and LayerNormMLP: the norm writes FP8 for QKV and MLP-in,
    the activation writes FP8 for MLP-out; torch.compile does the same for torchao float8), so
    the forward casts stand-alone only the attention output (the input of attention-out) and
    the weights (1/tp share). The backward casts every linear layer's output gradient, which
    comes from the layer above in bf16.
    """
    t = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    forward = t * h / tp + layer_params(m) / tp
    mlp_in = (2 if m.mlp is Mlp.SWIGLU else 1) * f
    backward = t * (h + 2 * m.kv_hidden) / tp + t * h + t * mlp_in / tp + t * h
    return forward, backward


def layer_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of one layer, as a per-parameter gather sees them. GPT-style (gelu)
    layers: fused QKV, attention-out, fc1, fc2, each with a bias, and two LayerNorms with
    weight and bias (12); Llama-style (swiglu) layers: q, k, v, o, gate, up, down and two
    RMSNorm weights, no biases (9)."""
    return 12 if m.mlp is Mlp.GELU else 9


def layer_weight_sizes(m: ModelSpec) -> tuple[int, ...]:
    """A layer's weight matrices in the order its forward uses them (parameters each; biases
    and norm scales left out): GPT-style fused QKV, attention-out, fc1, fc2; Llama-style q, k,
    v, o, gate, up, down (the module layout a per-parameter ZeRO-3 gather walks)."""
    h, hk, f = m.hidden, m.kv_hidden, m.ffn
    if m.mlp is Mlp.SWIGLU:
        return (h * h, h * hk, h * hk, h * h, h * f, h * f, f * h)
    return (h * (h + 2 * hk), h * h, h * f, f * h)


def layer_params(m: ModelSpec) -> int:
    """Parameters of one transformer layer (weights, biases ignored; two norm scales)."""
    h, f = m.hidden, m.ffn
    attn = h * (h + 2 * m.kv_hidden) + h * h
    mlp = (3 if m.mlp is Mlp.SWIGLU else 2) * h * f
    return attn + mlp + 2 * h


def embedding_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden


def output_params(m: ModelSpec) -> int:
    """Output projection plus final norm; zero extra matrix when tied to the embedding."""
    return (0 if m.tied_embeddings else m.vocab * m.hidden) + m.hidden


def model_params(m: ModelSpec) -> int:
    return m.layers * layer_params(m) + embedding_params(m) + output_params(m)


def model_flops_per_token(m: ModelSpec) -> float:
    """Training FLOPs per token without recomputation (3x forward), for MFU reporting.

    Uses the full (non-causal) attention count 12*layers*s*h, as PaLM's MFU definition
    (Chowdhery et al. 2022, Appendix B) does, so MFU figures compare with published ones.
    """
    dense = 6 * (m.layers * layer_params(m) + m.vocab * m.hidden)
    return dense + 12 * m.layers * m.seq_len * m.hidden
