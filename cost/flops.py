"""Counting: FLOPs, HBM bytes and parameters of one transformer layer, embedding and output layer.

Pure arithmetic on shapes, no hardware. All counts are *forward* work on ONE GPU for ONE
micro-batch of `b` sequences, after tensor (`tp`) and context (`cp`) parallel splits; the
backward factors live in cost/coefficients.py.

Sources: matmul FLOPs = 2*m*n*k (Narayanan et al., SC'21, Sec. 5.1 / Appendix: 24*b*s*h^2 +
4*b*s^2*h per GPT layer forward); GQA shrinks K and V to kv_heads*head_dim columns;
SwiGLU has three hidden x ffn matrices (Shazeer 2020). Q and the attention output are
heads*head_dim wide (`ModelSpec.q_hidden`), which differs from hidden when a config sets
head_dim (Mistral-NeMo, Gemma). A bias adds one FLOP per output element of its projection
(fused into the GEMM's epilogue, so it is counted with the GEMM). Sliding-window layers compute
a band of the causal score matrix (`causal_score_fraction`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.specs import Mlp, ModelSpec

# FlashAttention-style kernels skip the fully-masked tiles of a causal mask: about half of
# the s x s score work is done (Dao 2023, FlashAttention-2, Sec. 3.1 "causal masking").
CAUSAL_ATTENTION_FRACTION = 0.5

BF16_BYTES = 2


def causal_score_fraction(seq_len: int, window_tokens: int | None) -> float:
    """Fraction of the s x s score matrix a causal kernel computes when each query sees at most
    the last w keys (FlashAttention-2's window_size, which skips the tiles outside the band).

    Query i attends to min(i + 1, w) keys: summed over i that is s*w - w^2/2 scores (to within
    w/2), against s^2/2 for full causal attention, so the fraction is w/s - w^2/(2 s^2); at
    w = s it is CAUSAL_ATTENTION_FRACTION, and a window at least as long as the sequence is
    plain causal attention."""
    if window_tokens is None or window_tokens >= seq_len:
        return CAUSAL_ATTENTION_FRACTION
    ratio = window_tokens / seq_len
    return ratio - ratio * ratio / 2


def attention_score_fraction(m: ModelSpec) -> float:
    """Mean over the layers of `causal_score_fraction`: every layer is priced alike, so a model
    whose windowed layers are only some of them is priced as its average layer (cost/model_notes.py
    says so in one line when the split between stages makes that inexact)."""
    window = causal_score_fraction(m.seq_len, m.sliding_window_tokens)
    n = m.windowed_layers
    return (n * window + (m.layers - n) * CAUSAL_ATTENTION_FRACTION) / m.layers


def attended_keys(m: ModelSpec) -> float:
    """Keys each query attends to, averaged over the layers, counted without the causal mask
    as PaLM's MFU does (s in a full layer, min(w, s) in a windowed one)."""
    n = m.windowed_layers
    w = m.sliding_window_tokens if n else m.seq_len
    return (n * min(w, m.seq_len) + (m.layers - n) * m.seq_len) / m.layers


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
    h, f, q, kv = m.hidden, m.ffn, m.q_hidden, m.kv_hidden
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    # 2*t*N*K per GEMM, plus t*K for a bias added to its K outputs
    qkv = tokens * (2 * h + m.qkv_bias) * (q + 2 * kv) / tp
    attn_out = tokens * (2 * q + m.attn_out_bias) * h / tp
    mlp = (tokens * (2 * h + m.mlp_bias) * f / tp,) * n_in + (tokens * (2 * f + m.mlp_bias) * h / tp,)
    # every local query attends to keys of the whole sequence: QK^T and PV, 2*t*s*q each,
    # of which a causal (or banded) kernel computes the fraction below
    core = 2 * (2 * tokens * m.seq_len * q / tp) * attention_score_fraction(m)
    return LayerMatmuls(qkv=qkv, attn_out=attn_out, mlp=mlp, attention_core=core)


def gemm_output_elements(m: ModelSpec, b: int, tp: int, cp: int) -> tuple[float, float]:
    """Elements one GPU's linear-layer GEMMs write for one layer: (forward, backward).

    A tiled GEMM writes each output tile once its K-loop ends, and that store does not overlap
    the tile's own multiply-adds, so it adds about out_bytes / HBM bandwidth to the FLOP time
    (CUTLASS's epilogue; relative to the FLOP time it is peak / (bandwidth x K), ~15% at K = 768
    on an A100, ~1% at K = 12288, which is why small-hidden models reach a lower MFU at the same
    FLOPs per call). Forward: QKV, attention-out (the full h before the row-parallel
    reduction), MLP-in and MLP-out. Backward: the input gradients (the same shapes reversed);
    the weight gradients' outputs are weight-sized and negligible beside them. Every
    per-operator partition writes each output element once too, so the count is the same.
    """
    t = b * m.seq_len / cp
    h, f, q, kv = m.hidden, m.ffn, m.q_hidden, m.kv_hidden
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    fwd = t * (q + 2 * kv) / tp + t * h + n_in * t * f / tp + t * h
    bwd = t * h + t * q / tp + n_in * t * h + t * f / tp
    return fwd, bwd


def torchtitan_block_mms(m: ModelSpec, tp: int) -> tuple[tuple[float, float], ...]:
    """torchtitan's aten.mm calls of one transformer block in call order, as (in, out)
    features per GPU: wq, wk, wv, wo, w1, [w3,] w2 (models/llama3 Attention and FeedForward;
    row-parallel wo and w2 produce full-width partial sums). Its op-level selective
    activation checkpointing saves the outputs of every other one (the 1st, 3rd, ...) and
    recomputes the rest in backward (parallelize_llama._apply_ac_to_transformer_block)."""
    h, hk, f, q = m.hidden, m.kv_hidden, m.ffn, m.q_hidden
    mlp_in = ((h, f / tp),) * (2 if m.mlp is Mlp.SWIGLU else 1)
    return ((h, q / tp), (h, hk / tp), (h, hk / tp), (q / tp, h), *mlp_in, (f / tp, h))


def torchtitan_sac_recomputed_flops(m: ModelSpec, b: int, tp: int, cp: int) -> tuple[float, ...]:
    """Forward FLOPs of the mm calls torchtitan's op-level selective AC recomputes (the 2nd,
    4th, ... of torchtitan_block_mms), per GPU per micro-batch."""
    t = b * m.seq_len / cp
    return tuple(2 * t * k * n for i, (k, n) in enumerate(torchtitan_block_mms(m, tp)) if i % 2 == 1)


def logits_flops(m: ModelSpec, b: int, tp: int, cp: int) -> float:
    """Output projection hidden -> vocab (vocab-parallel over tp)."""
    return 2 * b * m.seq_len / cp * m.hidden * m.vocab / tp


def layer_elementwise_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """HBM bytes read+written by the memory-bound kernels of one layer's forward pass.

    Counted per kernel (bf16 tensors, each read once and written once): the layer's norms
    (norms_per_layer x (read + write) of t*h), the bias+dropout+residual adds (sequential
    blocks: two, each read 2, write 1, mask 1 byte; parallel blocks: one add of both branches to
    the residual, read 3, write 1, two masks), the activation function (gelu: read f, write f;
    swiglu: read 2f, write f) and the rotary / softmax-statistics traffic folded into one
    read+write of Q and K. Norm and residual work is replicated over tp unless sequence
    parallelism splits it.
    """
    t = b * m.seq_len / cp
    f = m.ffn
    th = t * m.hidden
    norms = m.norms_per_layer * 2 * th * BF16_BYTES
    adds = (4 * th * BF16_BYTES + 2 * th) if m.parallel_blocks else 2 * (3 * th * BF16_BYTES + th)
    rep = (norms + adds) / (tp if sp else 1)
    act = (3 if m.mlp is Mlp.SWIGLU else 2) * t * f * BF16_BYTES / tp
    qk = 2 * t * (m.q_hidden + m.kv_hidden) * BF16_BYTES / tp
    return rep + act + qk


def fp8_cast_elements(m: ModelSpec, b: int, tp: int, cp: int, dynamic_scaling: bool = False,
                      fused_input_casts: bool = True) -> tuple[float, float, float]:
    """Elements one GPU casts to FP8 in stand-alone kernels for one layer: (forward activations,
    backward activations, weights per cast pass), each cast reading bf16 and writing FP8 twice
    (row-major and transposed).

    Transformer Engine's fused modules (Megatron-core's LayerNormLinear and LayerNormMLP,
    `fused_input_casts`) write the FP8 input of QKV and MLP-in from the norm and that of
    MLP-out from the activation, so the forward casts stand-alone only the attention output
    (the input of attention-out). Plain te.Linear layers (llm-foundry's `fc_type: te`, which
    its benchmarks set for FP8 on H100: scripts/train/benchmarking/submit_benchmarks.py) cast
    every linear layer's input in a kernel of their own. The backward casts every linear
    layer's output gradient, which comes from the layer above in bf16.

    torchao float8 with dynamic tensorwise scaling (torchtitan's float8 converter) needs the
    tensor's amax before it can scale, so even under torch.compile every GEMM input is cast in
    a kernel of its own after the one that produced it, and a weight is read once more for its
    amax and cast separately for forward and backward: twice a cast's traffic
    (torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_ovhd_s: kernels 1-4
    for weights; the activations' amax fused with their producer, as it assumes with fusion).
    How often the weights are cast (every micro-batch, or once per iteration where the
    framework caches them) is the caller's: cost/framework.Behaviour.fp8_weight_cache.
    """
    t = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    forward = t * m.q_hidden / tp
    if dynamic_scaling or not fused_input_casts:  # norms' outputs (QKV, MLP-in), MLP-out input
        forward += 2 * t * h + t * f / tp
    weights = (2 if dynamic_scaling else 1) * layer_params(m) / tp
    mlp_in = (2 if m.mlp is Mlp.SWIGLU else 1) * f
    backward = t * (m.q_hidden + 2 * m.kv_hidden) / tp + t * h + t * mlp_in / tp + t * h
    return forward, backward, weights


def layer_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of one layer, as a per-parameter gather sees them. GPT-style (gelu)
    layers: fused QKV, attention-out, fc1, fc2, each with a bias, and two LayerNorms with
    weight and bias (12); Llama-style (swiglu) layers: q, k, v, o, gate, up, down and two
    RMSNorm weights (9), plus the biases and norms their spec adds."""
    if m.mlp is Mlp.GELU:
        return 12
    norm_tensors = 2 if m.norm_bias else 1
    return (7 + 3 * m.qkv_bias + m.attn_out_bias + 3 * m.mlp_bias
            + m.norms_per_layer * norm_tensors)


def norm_params(m: ModelSpec) -> int:
    """Parameters of one norm: a scale per channel, and a bias per channel for LayerNorm."""
    return m.hidden * (2 if m.norm_bias else 1)


def linear_weight_params(m: ModelSpec) -> int:
    """GEMM weights of one layer (no biases, no norms): what FP8 GEMMs cast and cache. For an
    MoE model, of its attention view (the routed experts are cost/moe.py's)."""
    if m.moe is not None:
        return linear_weight_params(moe_attention_view(m))
    h, f = m.hidden, m.ffn
    return h * (m.q_hidden + 2 * m.kv_hidden) + m.q_hidden * h + (3 if m.mlp is Mlp.SWIGLU else 2) * h * f


def layer_weight_sizes(m: ModelSpec) -> tuple[int, ...]:
    """A layer's weight matrices in the order its forward uses them (parameters each; biases
    and norm scales left out): GPT-style fused QKV, attention-out, fc1, fc2; Llama-style q, k,
    v, o, gate, up, down (the module layout a per-parameter ZeRO-3 gather walks)."""
    h, q, hk, f = m.hidden, m.q_hidden, m.kv_hidden, m.ffn
    if m.mlp is Mlp.SWIGLU:
        return (h * q, h * hk, h * hk, q * h, h * f, h * f, f * h)
    return (h * (q + 2 * hk), q * h, h * f, f * h)


def layer_params(m: ModelSpec) -> int:
    """Parameters of one transformer layer: GEMM weights, biases and norms. For a
    mixture-of-experts model, of one MoE layer without its routed experts (attention, norms,
    router, shared MLP): what every rank of the data-parallel group holds 1/tp of; the experts
    are `expert_layer_params`."""
    if m.moe is not None:
        return layer_params(moe_attention_view(m)) + router_params(m)
    h, f = m.hidden, m.ffn
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    biases = ((m.q_hidden + 2 * m.kv_hidden) * m.qkv_bias + h * m.attn_out_bias
              + (n_in * f + h) * m.mlp_bias)
    return linear_weight_params(m) + biases + m.norms_per_layer * norm_params(m)


def embedding_params(m: ModelSpec) -> int:
    """The token embedding table (what a tied output layer shares)."""
    return m.vocab * m.hidden


def input_extra_params(m: ModelSpec) -> int:
    """Parameters of the first stage beside the token table: a learned position table (GPT-2,
    OPT) and a norm after the embedding (BLOOM)."""
    return m.position_embeddings * m.hidden + (norm_params(m) if m.embedding_norm else 0)


def output_params(m: ModelSpec) -> int:
    """Output projection plus final norm; zero extra matrix when tied to the embedding."""
    return (0 if m.tied_embeddings else m.vocab * m.hidden) + norm_params(m)


def model_params(m: ModelSpec) -> int:
    """Every parameter of the model (for an MoE model: all experts, `active_params` for the
    ones a token uses)."""
    rest = embedding_params(m) + input_extra_params(m) + output_params(m)
    if m.moe is not None:
        return _moe_body_params(m, m.moe.experts) + rest
    return m.layers * layer_params(m) + rest


def active_params(m: ModelSpec) -> int:
    """Parameters one token's forward pass uses: every dense parameter, and of each MoE layer's
    routed experts only its top_k (what MoE papers call active parameters)."""
    rest = embedding_params(m) + input_extra_params(m) + output_params(m)
    if m.moe is not None:
        return _moe_body_params(m, m.moe.top_k) + rest
    return model_params(m)


def model_flops_per_token(m: ModelSpec) -> float:
    """Training FLOPs per token without recomputation (3x forward), for MFU reporting.

    Uses the full (non-causal) attention count 12*layers*s*(heads*head_dim), as PaLM's MFU
    definition (Chowdhery et al. 2022, Appendix B: 12*L*H*Q*T) does, so MFU figures compare with
    published ones; a windowed layer counts the min(w, s) keys it attends to. An MoE model counts
    its active parameters (top_k routed experts per MoE layer), as published MoE MFU figures do
    (DeepSeek-V3's and Megatron-core's MoE reports count active FLOPs).
    """
    if m.moe is not None:
        body = _moe_body_params(m, m.moe.top_k)
    else:
        body = m.layers * layer_params(m)
    dense = 6 * (body + m.vocab * m.hidden)
    return dense + 12 * m.layers * attended_keys(m) * m.q_hidden


# --- mixture of experts (ModelSpec.moe) ------------------------------------------------------

def moe_attention_view(m: ModelSpec) -> ModelSpec:
    """An MoE layer without its router and routed experts, as a dense layer whose MLP is the
    shared MLP (ffn = shared_ffn; 0: no MLP at all): what cost/coefficients.megatron_layer
    prices beside cost/moe.py's expert terms."""
    assert m.moe is not None
    return _cached_view(m, "attention", lambda: replace(m, moe=None, ffn=m.moe.shared_ffn))


def moe_dense_view(m: ModelSpec) -> ModelSpec:
    """One of an MoE model's dense prefix layers (moe.dense_layers): the model's own layer
    without experts, its MLP of width ffn."""
    assert m.moe is not None
    return _cached_view(m, "dense", lambda: replace(m, moe=None))


# Pricing asks for the same views tens of thousands of times per plan (once per outer
# configuration and layer-parameter count), and a dataclass replace re-runs the spec's
# validation: keep the last views by the identity of their model, holding the model so that
# its id cannot be reused while its entry lives.
_VIEWS: dict[tuple[int, str], tuple[ModelSpec, ModelSpec]] = {}
_VIEWS_MAX = 256


def _cached_view(m: ModelSpec, kind: str, make) -> ModelSpec:
    hit = _VIEWS.get((id(m), kind))
    if hit is not None and hit[0] is m:
        return hit[1]
    view = make()
    if len(_VIEWS) >= _VIEWS_MAX:
        _VIEWS.clear()
    _VIEWS[(id(m), kind)] = (m, view)
    return view


def router_params(m: ModelSpec) -> int:
    """The router's hidden x experts gate weight (Mixtral, Qwen-MoE; DeepSeek-V3 adds a
    per-expert bias, counted too)."""
    assert m.moe is not None
    return m.hidden * m.moe.experts


def expert_params(m: ModelSpec) -> int:
    """One routed expert: an MLP of the model's kind and width expert_ffn (no biases)."""
    assert m.moe is not None
    return (3 if m.mlp is Mlp.SWIGLU else 2) * m.hidden * m.moe.expert_ffn


def expert_layer_params(m: ModelSpec) -> int:
    """Every routed expert of one MoE layer."""
    assert m.moe is not None
    return m.moe.experts * expert_params(m)


def _moe_body_params(m: ModelSpec, experts_used: int) -> int:
    """The transformer layers of an MoE model, with `experts_used` routed experts per MoE layer:
    dense layers (the model's ffn) first, then MoE layers."""
    assert m.moe is not None
    moe_layers = m.layers - m.moe.dense_layers
    dense_layer = layer_params(replace(m, moe=None))
    return (m.moe.dense_layers * dense_layer
            + moe_layers * (layer_params(m) + experts_used * expert_params(m)))
