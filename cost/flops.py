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

Multi-head latent attention (`ModelSpec.mla`; DeepSeek-V2, arXiv 2405.04434 Sec. 2.1) replaces
the one QKV GEMM by the projections of `attention_projections`, as Megatron-core's
MLASelfAttention runs them (megatron/core/transformer/multi_latent_attention.py and
models/gpt/gpt_layer_specs.py at d98e8a64, the Transformer Engine spec): the down projections
(hidden -> q_lora_rank, hidden -> kv_lora_rank + qk_rope_head_dim) are TELinear in
parallel_mode "duplicated", whole on every tensor-parallel rank and run on the rank's own
tokens (the sequence-parallel shard, else the whole sequence); the up projections (q_lora_rank
-> heads x (nope + rope), kv_lora_rank -> heads x (nope + v), or hidden -> heads x (nope +
rope) without query compression) are column-parallel with the latent RMSNorms fused in
(TELayerNormColumnParallelLinear), the output projection (heads x v_head_dim -> hidden)
row-parallel. The attention core's QK^T runs over nope + rope per head, PV over v_head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import wraps
from typing import NamedTuple

from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.specs import Mlp, ModelSpec


def memoised_by_model(maxsize: int):
    """Memoise a pure function of (model, *shape) by the model's identity and the rest of its
    arguments (cost/identity_cache.py: hashing a ModelSpec, some thirty fields hashed anew on
    every call, cost more than most of these counts)."""
    def wrap(fn):
        memo = IdentityCache(maxsize)

        @wraps(fn)
        def cached(m, *args, **kwargs):
            key = (id(m), args, tuple(kwargs.items())) if kwargs else (id(m), args)
            return memo.read(key, m, fn, m, *args, **kwargs)
        return cached
    return wrap


# The per-layer counts below are pure in their (frozen) arguments, and the planner asks for
# them once per outer configuration (tens of thousands per plan): memoised.
_per_model = memoised_by_model(maxsize=64)
_per_shape = memoised_by_model(maxsize=4096)

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


class Projection(NamedTuple):
    """One GEMM of the attention's input projections on one GPU: `tokens` rows of `k_in`
    inputs to `n_out` / `split` outputs, `n_out` being the whole layer's and `split` the
    tensor-parallel degree of a column-parallel projection, or 1 for one whose weight is whole on
    every rank (MLA's down projections, `replicated`)."""

    tokens: float
    k_in: int
    n_out: int
    split: int
    replicated: bool = False


@_per_shape
def attention_projections(m: ModelSpec, b: int, tp: int, cp: int, sp: bool = False) -> tuple[Projection, ...]:
    """The attention's input projections of one layer on one GPU, in call order (module
    docstring). Multi-head / grouped-query attention: the one fused QKV GEMM, hidden ->
    (q + 2 kv) / tp. Latent attention (Megatron-core's MLASelfAttention): q down (hidden ->
    q_lora_rank) and q up (q_lora_rank -> heads x (nope + rope) / tp), or q (hidden -> heads x
    (nope + rope) / tp) without query compression; kv down (hidden -> kv_lora_rank + rope) and
    kv up (kv_lora_rank -> heads x (nope + v) / tp). The down projections are whole on every
    rank and see the rank's tokens: t / tp with sequence parallelism (the layer input is the
    sequence shard and the latents are gathered before the up projections), else all t."""
    t = b * m.seq_len / cp
    h = m.hidden
    if m.mla is None:
        return (Projection(t, h, m.q_hidden + 2 * m.kv_hidden, tp),)
    a = m.mla
    t_down = t / tp if sp else t
    q = ((Projection(t_down, h, a.q_lora_rank, 1, replicated=True),
          Projection(t, a.q_lora_rank, m.heads * a.qk_head_dim, tp)) if a.q_lora_rank is not None
         else (Projection(t, h, m.heads * a.qk_head_dim, tp),))
    return (*q, Projection(t_down, h, a.kv_lora_rank + a.qk_rope_head_dim, 1, replicated=True),
            Projection(t, a.kv_lora_rank, m.heads * (a.qk_nope_head_dim + a.v_head_dim), tp))


@dataclass(frozen=True, slots=True)
class LayerMatmuls:
    """Forward FLOPs of each matmul call of one layer, per GPU per micro-batch."""

    attn_in: tuple[float, ...]  # the fused QKV GEMM, or MLA's projections (attention_projections)
    attn_out: float
    mlp: tuple[float, ...]  # gelu: (fc1, fc2); swiglu: (gate, up, down)
    attention_core: float  # QK^T and PV together, causal fraction applied
    # per attn_in call: its weight is whole on every tp rank (MLA's down projections)
    attn_in_replicated: tuple[bool, ...] = (False,)

    def groups(self, per_call: list[float]) -> tuple[float, float, float, float]:
        """Values aligned with `linear_calls` (e.g. GEMM seconds) summed by the tensor-parallel
        collective each sits beside: (the column-parallel attention input projections,
        attention-out, MLP-in, MLP-out). Replicated projections run before the first
        collective's consumer and sit beside none."""
        n = len(self.attn_in)
        col = (per_call[0] if n == 1 else
               sum(v for v, rep in zip(per_call[:n], self.attn_in_replicated) if not rep))
        return col, per_call[n], sum(per_call[n + 1:-1]), per_call[-1]

    @property
    def linear_calls(self) -> tuple[float, ...]:
        return (*self.attn_in, self.attn_out, *self.mlp)


@_per_shape
def layer_matmuls(m: ModelSpec, b: int, tp: int, cp: int, sp: bool = False) -> LayerMatmuls:
    """`sp` (sequence parallelism) matters only to MLA's down projections (attention_projections)."""
    tokens = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    q, _, _, o = m.attention_widths
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    # 2*t*N*K per GEMM, plus t*K for a bias added to its K outputs
    proj = attention_projections(m, b, tp, cp, sp)
    attn_in = tuple([p.tokens * (2 * p.k_in + m.qkv_bias) * p.n_out / p.split for p in proj])
    attn_out = tokens * (2 * o + m.attn_out_bias) * h / tp
    mlp = (tokens * (2 * h + m.mlp_bias) * f / tp,) * n_in + (tokens * (2 * f + m.mlp_bias) * h / tp,)
    # every local query attends to keys of the whole sequence: QK^T over the query width and
    # PV over the value (= output) width, 2*t*s*width each, of which a causal (or banded)
    # kernel computes the fraction below
    qk, pv = 2 * tokens * m.seq_len * q / tp, 2 * tokens * m.seq_len * o / tp
    core = (qk + pv) * attention_score_fraction(m)
    return LayerMatmuls(attn_in=attn_in, attn_out=attn_out, mlp=mlp, attention_core=core,
                        attn_in_replicated=(False,) if m.mla is None else tuple([p.replicated for p in proj]))


@_per_shape
def gemm_output_elements(m: ModelSpec, b: int, tp: int, cp: int, sp: bool = False) -> tuple[float, float]:
    """Elements one GPU's linear-layer GEMMs write for one layer: (forward, backward).

    A tiled GEMM writes each output tile once its K-loop ends, and that store does not overlap
    the tile's own multiply-adds, so it adds about out_bytes / HBM bandwidth to the FLOP time
    (CUTLASS's epilogue; relative to the FLOP time it is peak / (bandwidth x K), ~15% at K = 768
    on an A100, ~1% at K = 12288, which is why small-hidden models reach a lower MFU at the same
    FLOPs per call). Forward: QKV (or MLA's projections), attention-out (the full h before the
    row-parallel reduction), MLP-in and MLP-out. Backward: the input gradients (the same shapes
    reversed); the weight gradients' outputs are weight-sized and negligible beside them. Every
    per-operator partition writes each output element once too, so the count is the same.
    """
    t = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    proj_out = proj_in = 0.0
    for p in attention_projections(m, b, tp, cp, sp):
        proj_out += p.tokens * p.n_out / p.split
        proj_in += p.tokens * p.k_in
    fwd = proj_out + t * h + n_in * t * f / tp + t * h
    bwd = proj_in + t * m.attention_widths[3] / tp + n_in * t * h + t * f / tp
    return fwd, bwd


def torchtitan_block_mms(m: ModelSpec, tp: int) -> tuple[tuple[float, float], ...]:
    """torchtitan's aten.mm calls of one transformer block in call order, as (in, out)
    features per GPU: wq, wk, wv, wo, w1, [w3,] w2 (models/llama3 Attention and FeedForward;
    row-parallel wo and w2 produce full-width partial sums). Its op-level selective
    activation checkpointing saves the outputs of every other one (the 1st, 3rd, ...) and
    recomputes the rest in backward (parallelize_llama._apply_ac_to_transformer_block)."""
    assert m.mla is None, "latent attention is priced for framework megatron only (cost/readers/checks.py)"
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


@_per_shape
def layer_elementwise_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """HBM bytes read+written by the memory-bound kernels of one layer's forward pass.

    Counted per kernel (bf16 tensors, each read once and written once): the layer's norms
    (norms_per_layer x (read + write) of t*h), the bias+dropout+residual adds (sequential
    blocks: two, each read 2, write 1, mask 1 byte; parallel blocks: one add of both branches to
    the residual, read 3, write 1, two masks), the activation function (gelu: read f, write f;
    swiglu: read 2f, write f) and the rotary / softmax-statistics traffic folded into one
    read+write of Q and K. Norm and residual work is replicated over tp unless sequence
    parallelism splits it. Latent attention adds its latents' RMSNorms (read + write of the
    q_lora_rank and kv_lora_rank latents, on the down projections' tokens: the sequence shard
    with sp, else every token on every rank); its Q and K are heads x (nope + rope) wide (the
    rotary parts are applied and concatenated onto the non-rotary ones, one read + write).
    """
    t = b * m.seq_len / cp
    f = m.ffn
    th = t * m.hidden
    norms = m.norms_per_layer * 2 * th * BF16_BYTES
    if m.mla is not None:
        norms += 2 * t * (latent_width(m) - m.mla.qk_rope_head_dim) * BF16_BYTES
    adds = (4 * th * BF16_BYTES + 2 * th) if m.parallel_blocks else 2 * (3 * th * BF16_BYTES + th)
    rep = (norms + adds) / (tp if sp else 1)
    act = (3 if m.mlp is Mlp.SWIGLU else 2) * t * f * BF16_BYTES / tp
    q, k, _, _ = m.attention_widths
    qk = (2 + 2 * m.qk_norm) * t * (q + k) * BF16_BYTES / tp  # q_norm/k_norm: one more pass
    return rep + act + qk


def tp_gather_width(m: ModelSpec) -> int:
    """Per token, what the attention's first tensor-parallel collective carries (with sequence
    parallelism the all-gather before the input projections; without it, the backward
    all-reduce of their input gradient): the layer input, hidden wide; with latent attention
    the latents and the rotary key (latent_width), and the layer input as well when the query
    is projected from it directly (no q_lora_rank: a column-parallel linear on hidden)."""
    if m.mla is None:
        return m.hidden
    return latent_width(m) + (m.hidden if m.mla.q_lora_rank is None else 0)


def latent_width(m: ModelSpec) -> int:
    """Latent attention: what the down projections write per token, q_lora_rank (when the
    query is compressed) + kv_lora_rank + qk_rope_head_dim; what sequence parallelism gathers
    over the tensor-parallel group before the up projections, in place of the layer input
    (Megatron-core's MLASelfAttention gathers the latents and the rotary key, not hidden)."""
    assert m.mla is not None
    return (m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim


@_per_shape
def fp8_cast_elements(m: ModelSpec, b: int, tp: int, cp: int, dynamic_scaling: bool = False,
                      fused_input_casts: bool = True, sp: bool = False) -> tuple[float, float, float]:
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
    forward = t * m.attn_out_width / tp
    if dynamic_scaling or not fused_input_casts:  # norms' outputs (QKV, MLP-in), MLP-out input
        forward += 2 * t * h + t * f / tp
    elif m.mla is not None:
        # Megatron-core's MLA spec runs the layer norm on its own (TENorm) and the down
        # projections as plain TELinear, each casting the norm's output itself (the fused q/kv
        # down projection is an option, mla_down_proj_fusion, not the default); the latents'
        # norms are fused into the up projections
        forward += sum(p.tokens * p.k_in for p in attention_projections(m, b, tp, cp, sp) if p.replicated)
    weights = (2 if dynamic_scaling else 1) * layer_params_per_gpu(m, tp)
    mlp_in = (2 if m.mlp is Mlp.SWIGLU else 1) * f
    proj_out = sum(p.tokens * p.n_out / p.split for p in attention_projections(m, b, tp, cp, sp))
    backward = proj_out + t * h + t * mlp_in / tp + t * h
    return forward, backward, weights


@_per_model
def layer_param_tensors(m: ModelSpec) -> int:
    """Parameter tensors of one layer, as a per-parameter gather sees them. GPT-style (gelu)
    layers: fused QKV, attention-out, fc1, fc2, each with a bias, and two LayerNorms with
    weight and bias (12); Llama-style (swiglu) layers: q, k, v, o, gate, up, down and two
    RMSNorm weights (9), plus the biases and norms their spec adds. Latent attention: its
    projections (attention_projections), the output projection and one norm per latent in
    place of q, k, v and o. A q/k norm adds two tensors (q_norm, k_norm), attention sinks one."""
    norm_tensors = 2 if m.norm_bias else 1
    if m.mla is not None:
        attention = (len(attention_projections(m, 1, 1, 1)) + 1 + m.attn_out_bias
                     + (1 + (m.mla.q_lora_rank is not None)) * norm_tensors)
        n_mlp = 3 if m.mlp is Mlp.SWIGLU else 2
        return attention + n_mlp * (1 + m.mlp_bias) + m.norms_per_layer * norm_tensors
    if m.mlp is Mlp.GELU:
        return 12 + 2 * m.qk_norm + m.attention_sinks
    return (7 + 3 * m.qkv_bias + m.attn_out_bias + 3 * m.mlp_bias
            + m.norms_per_layer * norm_tensors + 2 * m.qk_norm + m.attention_sinks)


def norm_params(m: ModelSpec) -> int:
    """Parameters of one norm: a scale per channel, and a bias per channel for LayerNorm."""
    return m.hidden * (2 if m.norm_bias else 1)


@_per_model
def linear_weight_params(m: ModelSpec) -> int:
    """GEMM weights of one layer (no biases, no norms): what FP8 GEMMs cast and cache. For an
    MoE model, of its attention view (the routed experts are cost/moe.py's)."""
    if m.moe is not None:
        return linear_weight_params(moe_attention_view(m))
    h, f = m.hidden, m.ffn
    return attention_in_weights(m) + m.attn_out_width * h + (3 if m.mlp is Mlp.SWIGLU else 2) * h * f


@_per_model
def attention_in_weights(m: ModelSpec) -> int:
    """Weights of the attention's input projections (attention_projections' k_in x n_out,
    summed; written out because pricing asks for it per outer configuration)."""
    h = m.hidden
    if m.mla is None:
        return h * (m.q_hidden + 2 * m.kv_hidden)
    a = m.mla
    q_up = (a.q_lora_rank if a.q_lora_rank is not None else h) * m.q_width  # or q from hidden
    return replicated_layer_params(m) + q_up + a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim)


@_per_model
def replicated_layer_params(m: ModelSpec) -> int:
    """Weights of one layer that every tensor-parallel rank holds whole rather than 1/tp of:
    latent attention's down projections (TELinear "duplicated"; their gradients are summed
    over the tp group once per iteration under sequence parallelism, Megatron-core's
    finalize_model_grads._allreduce_non_tensor_model_parallel_grads). Norm scales, which are
    whole on every rank too, are counted in the 1/tp share as for every other layer."""
    if m.mla is None:
        return 0
    return m.hidden * ((m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)


def layer_params_per_gpu(m: ModelSpec, tp: int) -> float:
    """Parameters of one layer (`layer_params`) that one tensor-parallel rank holds: a 1/tp
    share, the replicated weights whole."""
    rep = replicated_layer_params(m)
    return (layer_params(m) - rep) / tp + rep


@_per_model
def layer_weight_sizes(m: ModelSpec) -> tuple[int, ...]:
    """A layer's weight matrices in the order its forward uses them (parameters each; biases
    and norm scales left out): GPT-style fused QKV, attention-out, fc1, fc2; Llama-style q, k,
    v, o, gate, up, down (the module layout a per-parameter ZeRO-3 gather walks)."""
    h, q, hk, f = m.hidden, m.q_hidden, m.kv_hidden, m.ffn
    if m.mla is not None:  # MLA's projections in call order, then o and the MLP
        proj = tuple(p.k_in * p.n_out for p in attention_projections(m, 1, 1, 1))
        mlp = (h * f, h * f, f * h) if m.mlp is Mlp.SWIGLU else (h * f, f * h)
        return (*proj, m.attn_out_width * h, *mlp)
    if m.mlp is Mlp.SWIGLU:
        return (h * q, h * hk, h * hk, q * h, h * f, h * f, f * h)
    return (h * (q + 2 * hk), q * h, h * f, f * h)


@_per_model
def layer_params(m: ModelSpec) -> int:
    """Parameters of one transformer layer: GEMM weights, biases and norms. For a
    mixture-of-experts model, of one MoE layer without its routed experts (attention, norms,
    router, shared MLP): what every rank of the data-parallel group holds 1/tp of; the routed
    experts are `expert_params` each."""
    if m.moe is not None:
        return layer_params(moe_attention_view(m)) + router_params(m)
    h, f = m.hidden, m.ffn
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    biases = ((m.q_hidden + 2 * m.kv_hidden) * m.qkv_bias + h * m.attn_out_bias
              + (n_in * f + h) * m.mlp_bias)
    norms = m.norms_per_layer * norm_params(m) + 2 * m.head_dim * m.qk_norm  # q_norm, k_norm
    # one attention-sink logit per head (its cost, one more score per query row, is not priced)
    sinks = m.heads * m.attention_sinks
    if m.mla is not None:  # the latents' RMSNorms (q_lora_rank and kv_lora_rank channels)
        norms += ((m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank) * (2 if m.norm_bias else 1)
    return linear_weight_params(m) + biases + norms + sinks


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
    published ones; a windowed layer counts the min(w, s) keys it attends to. Latent
    attention's QK^T is heads x (nope + rope) wide and its PV heads x v_head_dim:
    6*layers*s*(q_width + attn_out_width), the same count for heads x head_dim in both. An MoE model counts
    its active parameters (top_k routed experts per MoE layer), as published MoE MFU figures do
    (DeepSeek-V3's and Megatron-core's MoE reports count active FLOPs).
    """
    if m.moe is not None:
        body = _moe_body_params(m, m.moe.top_k)
    else:
        body = m.layers * layer_params(m)
    dense = 6 * (body + m.vocab * m.hidden)
    return dense + 6 * m.layers * attended_keys(m) * (m.q_width + m.attn_out_width)


def megatron_flops_per_token(m: ModelSpec) -> float:
    """Model FLOPs per token of one forward and backward as Megatron-LM logs them (its
    `num_floating_point_operations`, megatron/training/training.py, read at 001b00c), the count
    behind the TFLOP/s per GPU that NVIDIA's MoE tables report (Megatron-MoE-ModelZoo,
    arXiv 2603.07685): 3 x 2 FLOPs per multiply-add of every GEMM, causal attention at half the
    s x s scores (no window), the logits over `vocab`, no router, norms or recomputation; an MoE
    layer counts its top_k routed experts and the shared expert; each multi-token-prediction
    layer one more transformer layer (MoE when the model's last layer is), its projection
    (2h x h) and another logit GEMM. Older Megatron-LM versions count attention whole; paraplan's
    own MFU does too (PaLM's definition, model_flops_per_token). tests/validation/
    test_moe_anchor.py reproduces the ModelZoo tables' step-time and TFLOP/s pairs with it."""
    s, h, heads, mtp = m.seq_len, m.hidden, m.heads, m.mtp_layers
    ffn_matrices = 3 if m.mlp is Mlp.SWIGLU else 2
    moe = m.moe
    dense_layers = m.layers if moe is None else moe.dense_layers
    moe_layers = m.layers - dense_layers + (mtp if moe is not None else 0)
    dense_layers += mtp if moe is None else 0
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q_term = h * heads * qk if a.q_lora_rank is None else a.q_lora_rank * (h + heads * qk + 1)
        attention = (q_term + a.kv_lora_rank * (h + heads * (a.qk_nope_head_dim + a.v_head_dim) + 1)
                     + h * a.qk_rope_head_dim + heads * a.v_head_dim * h
                     + s * heads * qk / 2 + s * heads * a.v_head_dim / 2)
    else:
        q, kv = heads * m.head_dim, m.kv_heads * m.head_dim
        attention = h * (q + 2 * kv) + q * s / 2 * 2 + q * h
    expert_width = 0 if moe is None else moe.expert_ffn * moe.top_k + moe.shared_ffn
    mlp = h * ffn_matrices * (m.ffn * dense_layers + expert_width * moe_layers)
    return 6 * (mlp + attention * (m.layers + mtp) + mtp * (3 * h + 2 * h * h)
                + h * m.vocab * (mtp + 1))


def megatron_tflops_per_gpu(m: ModelSpec, tokens_per_s: float, num_gpus: int) -> float:
    """Model TFLOP/s per GPU in Megatron-LM's count (megatron_flops_per_token), every GPU of the
    cluster counted, as Megatron-LM divides by its world size."""
    return tokens_per_s * megatron_flops_per_token(m) / num_gpus / 1e12


# --- mixture of experts (ModelSpec.moe) ------------------------------------------------------

def moe_attention_view(m: ModelSpec) -> ModelSpec:
    """An MoE layer without its router and routed experts, as a dense layer whose MLP is the
    shared MLP (ffn = shared_ffn; 0: no MLP at all): what cost/coefficients.megatron_layer
    prices beside cost/moe.py's expert terms."""
    assert m.moe is not None
    return _cached_view(m, "attention", lambda: replace(m, moe=None, ffn=m.moe.shared_ffn,
                                                         expert_bias=False))


def moe_dense_view(m: ModelSpec) -> ModelSpec:
    """One of an MoE model's dense prefix layers (moe.dense_layers): the model's own layer
    without experts, its MLP of width ffn."""
    assert m.moe is not None
    return _cached_view(m, "dense", lambda: replace(m, moe=None, expert_bias=False))


# Pricing asks for the same views tens of thousands of times per plan (once per outer
# configuration and layer-parameter count), and a dataclass replace re-runs the spec's
# validation: the last views, kept by the identity of their model.
_VIEWS = IdentityCache(256)


def _cached_view(m: ModelSpec, kind: str, make) -> ModelSpec:
    return _VIEWS.read((id(m), kind), m, make)


def router_params(m: ModelSpec) -> int:
    """The router's hidden x experts gate weight (Mixtral, Qwen-MoE, DeepSeek), and with
    `expert_bias` its per-expert bias (gpt-oss's GptOssTopKRouter.bias). DeepSeek-V3's
    e_score_correction_bias is not counted: it is set by its balancing rule, not trained
    (arXiv 2412.19437 Sec. 2.1.2), and transformers holds it as a buffer."""
    assert m.moe is not None
    return (m.hidden + m.expert_bias) * m.moe.experts


def expert_params(m: ModelSpec) -> int:
    """One routed expert: an MLP of the model's kind and width expert_ffn, and with
    `expert_bias` the biases of its MLP-in (n_in x expert_ffn: gpt-oss's gate_up_proj_bias) and
    MLP-out (hidden: down_proj_bias). A bias adds one FLOP per output element, a
    1 / (2 x hidden) share of its GEMM's: not priced."""
    assert m.moe is not None
    n_in = 2 if m.mlp is Mlp.SWIGLU else 1
    fe = m.moe.expert_ffn
    return (n_in + 1) * m.hidden * fe + (n_in * fe + m.hidden) * m.expert_bias


def _moe_body_params(m: ModelSpec, experts_used: int) -> int:
    """The transformer layers of an MoE model, with `experts_used` routed experts per MoE layer:
    dense layers (the model's ffn) first, then MoE layers."""
    assert m.moe is not None
    moe_layers = m.layers - m.moe.dense_layers
    dense_layer = layer_params(moe_dense_view(m))
    return (m.moe.dense_layers * dense_layer
            + moe_layers * (layer_params(m) + experts_used * expert_params(m)))
