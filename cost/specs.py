"""Frozen records for everything the simulator reads: model, GPU, cluster, job, outer
configuration (the plan, whose flat form is its one-class case, is cost/plan_specs.Plan).

All numbers are in internal units (seconds, bytes, FLOP/s, bytes/s); the loader converts the
YAML's unit-carrying keys before building these. Records validate their own invariants in
`__post_init__` with `ConfigError`; file-level messages (which file, which key) are the
loader's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from paraplan.cost.errors import ConfigError
from paraplan.cost.fabric import FabricTier
from paraplan.cost.objective import DEFAULT_OBJECTIVE, parse_objective
from paraplan.cost.releases import Framework, Release, current_release, find_release, known_versions
from paraplan.cost.units import GIB_BYTES


class Mlp(str, Enum):
    GELU = "gelu"  # two matmuls: hidden -> ffn -> hidden
    SWIGLU = "swiglu"  # three matmuls: gate and up (hidden -> ffn), down (ffn -> hidden)


class Recompute(str, Enum):
    """Activation recomputation of the layers that are *not* fully recomputed.

    Full recomputation is a per-stage layer count (`Plan.full_recompute_layers`), as in
    Megatron-LM's `--recompute-method block --recompute-num-layers N`.
    """

    NONE = "none"
    SELECTIVE = "selective"  # Korthikanti et al. 2022: recompute only the attention core


class Precision(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    # FP8 linears (Transformer Engine / torchao float8: per-tensor scaled e4m3 forward, e5m2
    # gradients); attention, norms and the optimizer stay in bf16/fp32
    FP8 = "fp8"


class Attention(str, Enum):
    FLASH = "flash"  # fused kernel: no s x s score matrix stored, scores recomputed in backward
    STANDARD = "standard"  # unfused softmax(QK^T)V: scores stored (Korthikanti's 5as/h term)


class PipelineSchedule(str, Enum):
    """How pipeline stages order their forward and backward passes (job.pipeline_schedule)."""

    # Megatron-LM's 1F1B, interleaved where the plan has virtual_stages > 1
    # (cost/schedule.py); what the planner's formulations optimise over
    ONE_F_ONE_B = "1f1b"
    # DeepSeek-V3's bidirectional DualPipe (arXiv 2412.19437 Sec. 3.2.1; deepseek-ai/DualPipe):
    # priced by cost/dualpipe.py, planned on one GPU type (formulations/dualpipe.py)
    DUALPIPE = "dualpipe"


class ZeroBubble(str, Enum):
    """torch.distributed.pipelining's zero-bubble schedules, by the names torchtitan's
    parallelism.pipeline_parallel_schedule takes (cost/zero_bubble.py prices them): a mode of
    the outer configuration that a torchtitan plan may run in place of Interleaved1F1B."""

    INTERLEAVED = "InterleavedZeroBubble"  # Qi et al.'s ZB-H1, interleaved (torch's ZB1P)
    V = "ZBVZeroBubble"  # Qi et al.'s ZB-V: two chunks per rank placed as a V


class MoeDispatcher(str, Enum):
    """How an MoE layer's tokens reach their experts (job.moe_dispatcher, cost/moe.py)."""

    # Megatron-core's MoEAlltoAllTokenDispatcher: NCCL all-to-all, one bf16 copy per routed
    # (token, expert) pair to the expert's rank
    ALLTOALL = "alltoall"
    # DeepSeek's DeepEP normal kernels (deepseek-ai/DeepEP): one copy per destination node over
    # the network, forwarded over NVLink inside it; FP8 dispatch in FP8 jobs, bf16 combine
    DEEPEP = "deepep"


class Optimizer(str, Enum):
    """The optimizer and how its state is laid out in memory (cost/memory.state_layout)."""

    ADAM = "adam"  # Adam with mixed precision as the framework runs it: fp32 master weights, two fp32 moments
    # NeMo's `distributed_fused_adam` (Apex DistributedFusedAdam) as NeMo 24.07 sets it up for
    # bf16 O2 training with optim.grad_sync_dtype=bf16 (every NeMo-Framework-Launcher 24.07
    # training example passes it): bf16 gradient buffer, fp32 moments, int16 remainders of the
    # fp32 master weight. Megatron-core models (framework megatron) only.
    APEX_DISTRIBUTED_ADAM = "apex_distributed_adam"
    # the same with optim.dtype=bf16 (NeMo-Framework-Launcher 24.07 nemotron_340b.yaml): bf16
    # moments and no master weight at all
    APEX_DISTRIBUTED_ADAM_BF16 = "apex_distributed_adam_bf16"
    # Adam with fp32 master weights and gradients but bf16 first and second moments
    # (DeepSeek-V3, arXiv 2412.19437 Sec. 3.3.3 "Low-Precision Optimizer States"; in
    # Megatron-core the precision-aware optimizer, --use-precision-aware-optimizer
    # --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, which needs the distributed optimizer).
    # Framework megatron only.
    ADAM_BF16_MOMENTS = "adam_bf16_moments"


# NeMo's Apex optimizers, which reduce the gradients themselves rather than Megatron-LM's DDP
APEX_OPTIMIZERS = frozenset({Optimizer.APEX_DISTRIBUTED_ADAM, Optimizer.APEX_DISTRIBUTED_ADAM_BF16})


class GradReduceDtype(str, Enum):
    """The dtype data-parallel gradients are accumulated, kept and reduced in (job.grad_reduce_dtype).

    It changes the numerics of training, so it is the user's statement, never a search choice:
    the planner prices what the job says, and a job that says nothing gets its framework's
    default (`JobSpec.grad_reduce`, GRAD_REDUCE_DEFAULTS). Where it is priced:
        memory  the gradient buffer of frameworks that keep the gradient in the reduce dtype
                (Megatron-core's main_grad buffer, DeepSpeed's 16-bit gradients;
                cost/memory.state_layout); FSDP frameworks keep the reduced shard in the fp32
                parameter's dtype whatever they reduce in
        time    the bytes of the gradient reduce-scatter / all-reduce (cost/coefficients.py)
    """

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"  # fp16 training's own 16-bit dtype

    @property
    def bytes(self) -> int:
        return 4 if self is GradReduceDtype.FP32 else 2


class RecomputeModule(str, Enum):
    """Parts of every layer recomputed in backward whatever the plan's recompute choice
    (job.recompute_modules): Megatron-core's --recompute-modules names (TransformerConfig
    recompute_modules at Megatron-LM d98e8a6), each an output-discarding checkpoint: the
    module's output is not stored and is rebuilt from its stored input before backward.
    DeepSeek-V3 recomputes the first two and the SwiGLU output (arXiv 2412.19437 Sec. 3.2.3
    "Recomputation of RMSNorm and MLA Up-Projection"; Sec. 3.3.3 "(2) Inputs of the SwiGLU
    operator in MoE ... recompute its output in the backward pass")."""

    LAYERNORM = "layernorm"  # input_layernorm and pre_mlp_layernorm: their outputs
    MLA_UP_PROJ = "mla_up_proj"  # latent attention's up projections and RoPE: Q, K, V
    MOE_ACT = "moe_act"  # the routed experts' activation function: its output
    # the whole routed-expert part of an MoE layer (router, dispatch, experts, combine): its
    # input kept, the rest rerun before backward, all-to-alls included (Megatron-core's "moe")
    MOE = "moe"


class OffloadModule(str, Enum):
    """Inputs stashed for backward in host memory instead of HBM (job.offload_modules):
    Megatron-core's fine-grained activation offloading (--fine-grained-activation-offloading
    --offload-modules; TransformerConfig offload_modules at Megatron-LM d98e8a6). Each module's
    input is copied to the host after its forward and back before its backward, on a side
    stream. Priced for the routed experts' two inputs, the ones Megatron-core's MoE recipes
    offload (yanring/Megatron-MoE-ModelZoo best_practice/qwen3/run_gb200_235b.sh, 020b813:
    expert_fc1 moe_act); Megatron's other names (attention, norms) are not priced and are
    refused at load."""

    EXPERT_FC1 = "expert_fc1"  # MLP-in's input: the routed token copies
    MOE_ACT = "moe_act"  # the activation's input: MLP-in's outputs


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeSpec:
    """The mixture-of-experts layers of a model (Shazeer et al. 2017; Fedus et al. 2022, Switch;
    Jiang et al. 2024, Mixtral; DeepSeek-AI 2024, DeepSeek-V3): the MLP of every layer after the
    first `dense_layers` is replaced by a router (a hidden x experts linear, softmax / top-k),
    `experts` routed experts of width `expert_ffn` of which each token visits `top_k`, and an
    optional always-on shared MLP of total width `shared_ffn` (Qwen2-MoE's shared expert,
    DeepSeek's n_shared_experts x moe_intermediate_size). Every expert has the model's MLP kind
    (`ModelSpec.mlp`). The dense layers keep the model's `ffn`.

    `capacity_factor` None is dropless routing (Megatron-core's default, what Mixtral, Qwen3-MoE
    and DeepSeek-V3 train with); a number caps each expert at capacity_factor x its mean load
    (GShard, Switch), so the busiest expert never processes more than that.

    `imbalance` is the busiest expert-parallel rank's routed tokens over the mean, applied to
    the expert GEMMs and the all-to-all (cost/moe.py gives its default and the source).
    """

    experts: int
    """routed experts per MoE layer"""
    top_k: int
    """experts each token is routed to; at most `experts`"""
    expert_ffn: int
    """one expert's MLP width (the model's `mlp` kind)"""
    shared_ffn: int = 0
    """width of the always-on shared expert MLP; 0: none"""
    dense_layers: int = 0
    """dense layers (width `ffn`) before the first MoE layer"""
    capacity_factor: float | None = None
    """tokens an expert takes over its mean share; the rest are dropped

    None: dropless routing."""
    imbalance: float | None = None
    """the busiest expert-parallel rank's routed tokens over the mean (cost/moe.py)

    None: cost/moe.DEFAULT_IMBALANCE."""
    max_nodes_per_token: int | None = None
    """node-limited routing (DeepSeek-V3's M): nodes one token's experts may span; counts with
    the deepep dispatcher

    DeepSeek-V3, arXiv 2412.19437 Sec. 3.2.2: "each token will be sent to at most M nodes",
    M = 4. The router picks each token's experts on at most this many of the expert-parallel
    group's NVLink domains; None: unrestricted (cost/moe.py)."""

    def __post_init__(self) -> None:
        if self.experts < 2:
            raise ConfigError("model.moe.experts must be >= 2 (one expert is a dense MLP)")
        if not 1 <= self.top_k <= self.experts:
            raise ConfigError("model.moe.top_k must lie in [1, experts]")
        if self.expert_ffn < 1 or self.shared_ffn < 0 or self.dense_layers < 0:
            raise ConfigError("model.moe.expert_ffn must be >= 1, shared_ffn and dense_layers >= 0")
        if self.capacity_factor is not None and self.capacity_factor < 1.0:
            raise ConfigError("model.moe.capacity_factor must be >= 1 (or left out: dropless)")
        if self.imbalance is not None and self.imbalance < 1.0:
            raise ConfigError("model.moe.imbalance must be >= 1 (the busiest rank over the mean)")
        if self.max_nodes_per_token is not None and self.max_nodes_per_token < 1:
            raise ConfigError("model.moe.max_nodes_per_token must be >= 1 (or left out: unrestricted)")


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv 2405.04434 Sec. 2.1;
    DeepSeek-V3, arXiv 2412.19437 Sec. 2.1), as Megatron-core's MLASelfAttention runs it
    (megatron/core/transformer/multi_latent_attention.py at d98e8a64): the layer input is
    projected down to a query latent of `q_lora_rank` (None: no query compression, Q is
    projected from the layer input directly, as in DeepSeek-V2-Lite) and to a key/value latent of
    `kv_lora_rank` plus one shared rotary key of `qk_rope_head_dim`; each latent is RMS-normed,
    then projected up to every head's query (`qk_nope_head_dim` + `qk_rope_head_dim`), key
    (the same width, its rotary part the shared one) and value (`v_head_dim`). Sizes are
    unit-free element counts. Every head has its own key and value (kv_heads = heads)."""

    q_lora_rank: int | None
    """width of the query latent; null: Q is projected from the layer input directly
    (DeepSeek-V2-Lite)"""
    kv_lora_rank: int
    """width of the key/value latent"""
    qk_nope_head_dim: int
    """a head's non-rotary query/key width"""
    qk_rope_head_dim: int
    """the rotary query/key width, one rotary key shared by every head"""
    v_head_dim: int
    """a head's value width"""

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.mla.{name} must be >= 1")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ConfigError("model.mla.q_lora_rank must be >= 1 (or null: no query compression)")

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: the non-rotary part and the rotary part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A dense decoder-only transformer, as far as its shape changes time and memory.

    The fields after `dropout` describe variations of the Llama/GPT layer that Hugging Face
    configs carry (cost/hf_config.py reads them); their defaults are the plain layer the
    published calibration rows describe: head dimension hidden / heads, no biases, two norms
    with a scale only, sequential attention then MLP, rotary or ALiBi positions (no learned
    position table), full causal attention in every layer.
    """

    name: str
    """the model's name"""
    layers: int
    """transformer layers (MoE and dense together)"""
    hidden: int
    """model width; divisible by `heads` unless `head_dim` is given"""
    heads: int
    """attention (query) heads; divisible by `kv_heads`"""
    kv_heads: int
    """key/value heads (grouped-query attention)"""
    ffn: int
    """MLP width of a dense layer"""
    vocab: int
    """vocabulary size"""
    seq_len: int
    """tokens per training sequence"""
    mlp: Mlp = Mlp.GELU
    """MLP kind: gelu has two matmuls, swiglu three"""
    tied_embeddings: bool = False
    """the output layer shares the embedding's weights"""
    dropout: float = 0.0
    """attention and hidden dropout probability; its masks are stored for backward

    Modern LLMs train with 0, which stores no dropout masks (GPT-3-era models used 0.1)."""
    attention_head_dim: int | None = None
    """width of one attention head

    As the model declares it; None: hidden // heads (read it as the `head_dim` property).
    Mistral-NeMo (5,120 wide, 32 heads of 128) and Gemma-2 (3,584 wide, 16 heads of 256)
    project to heads * head_dim != hidden."""
    qkv_bias: bool = False
    """biases on the Q, K and V projections

    Qwen2, GPT-2, OPT, BLOOM."""
    attn_out_bias: bool = False
    """a bias on the attention output projection"""
    mlp_bias: bool = False
    """biases on every MLP projection"""
    norm_bias: bool = False
    """LayerNorm with a bias (2 parameters per channel) rather than RMSNorm"""
    norms_per_layer: int = 2
    """norms per layer: 1 shared (GPT-J, Falcon), 2, or 4 (Gemma-2's pre and post norms)"""
    parallel_blocks: bool = False
    """attention and MLP side by side on one norm (GPT-J, NeoX, Falcon)

    Attention and MLP read the same input and their outputs are added (GPT-NeoX
    use_parallel_residual, Falcon parallel_attn), instead of the MLP reading attention's
    output."""
    position_embeddings: int = 0
    """rows of a learned position table, at least seq_len; 0 for rotary or ALiBi

    A learned absolute position table: GPT-2, OPT."""
    embedding_norm: bool = False
    """a norm after the token embedding (BLOOM)"""
    qk_norm: bool = False
    """per-head RMSNorm of Q and K (Qwen3, Gemma-3): 2 x head_dim parameters per layer, priced
    as one more read and write of Q and K

    Qwen3, Qwen3-MoE and Gemma-3 call them q_norm and k_norm: one head_dim scale each, shared
    by the heads."""
    attention_sinks: bool = False
    """a learned sink logit per query head (gpt-oss): heads parameters per layer; its extra
    score per row is not priced

    gpt-oss's GptOssAttention.sinks."""
    sliding_window_tokens: int | None = None
    """causal attention to the last N keys only (Mistral, Gemma-2)

    Qwen2's use_sliding_window too. None: full causal attention."""
    sliding_window_layers: int | None = None
    """how many layers use the sliding window

    None: every layer, where sliding_window_tokens is given."""
    unmodelled: tuple[str, ...] = ()
    """one line each about what the model's source declares and paraplan does not price; shown
    with every plan

    Shown by cost/model_notes.py, never dropped."""
    moe: MoeSpec | None = None
    """mixture-of-experts layers (`model.moe`, below; [moe.md](moe.md))

    None: a dense model; `ffn` is then the dense layers' width."""
    expert_bias: bool = False
    """biases on the routed experts' MLPs and the router (gpt-oss); needs `moe`; counted as
    parameters, their element-wise FLOPs not priced

    gpt-oss's GptOssExperts gate_up_proj_bias and down_proj_bias, GptOssTopKRouter.bias: per
    MoE layer experts x (n_in x expert_ffn + hidden) + experts parameters."""
    mla: MlaSpec | None = None
    """multi-head latent attention (`model.mla`, below)

    None: multi-head or grouped-query attention of head_dim."""
    mtp_layers: int = 0
    """DeepSeek-V3's multi-token-prediction depth: extra layers on the last stage

    DeepSeek-V3: 1; Megatron-core's --mtp-num-layers. Per micro-batch the last stage runs that
    many more layers, each with its input projection and the shared output head and loss
    (cost/coefficients.build)."""

    def __post_init__(self) -> None:
        for broken, message in MODEL_RULES:  # in order: the first broken rule is named
            if broken(self):
                raise ConfigError(message(self) if callable(message) else message)

    @property
    def head_dim(self) -> int:
        """Width of one attention head: `attention_head_dim`, else hidden // heads."""
        return self.hidden // self.heads if self.attention_head_dim is None else self.attention_head_dim

    @property
    def q_hidden(self) -> int:
        """Width of the Q projection and of the attention output: heads * head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        """Width of the K (or V) projection: kv_heads * head_dim (GQA; == hidden for MHA)."""
        return self.kv_heads * self.head_dim

    # Widths of the attention's tensors, per token over all heads: what the projections write,
    # the attention core reads and the output projection reads. Multi-head / grouped-query
    # attention: Q and the output heads * head_dim, K and V kv_heads * head_dim. Latent
    # attention (MlaSpec): Q and K heads * (nope + rope), V and the output heads * v_head_dim.
    @property
    def attention_widths(self) -> tuple[int, int, int, int]:
        """(Q, K, V, output) widths at once, for the pricing loops."""
        if self.mla is None:  # q_hidden and kv_hidden, written out: pricing asks per layer
            hd = self.hidden // self.heads if self.attention_head_dim is None else self.attention_head_dim
            kv = self.kv_heads * hd
            return self.heads * hd, kv, kv, self.heads * hd
        qk, v = self.heads * self.mla.qk_head_dim, self.heads * self.mla.v_head_dim
        return qk, qk, v, v

    @property
    def q_width(self) -> int:
        return self.attention_widths[0]

    @property
    def attn_out_width(self) -> int:
        return self.attention_widths[3]

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention is limited to a sliding window shorter than the sequence."""
        if self.sliding_window_tokens is None or self.sliding_window_tokens >= self.seq_len:
            return 0
        return self.layers if self.sliding_window_layers is None else self.sliding_window_layers


def _small_field(m: ModelSpec) -> str | None:
    return next((name for name in ("layers", "hidden", "heads", "kv_heads", "vocab", "seq_len",
                                   "norms_per_layer") if getattr(m, name) < 1), None)


# ModelSpec's invariants as (broken(model), message or message(model)), checked in order
MODEL_RULES = (
    (lambda m: m.mtp_layers < 0, "model.mtp_layers must be >= 0"),
    (lambda m: _small_field(m) is not None, lambda m: f"model.{_small_field(m)} must be >= 1"),
    # ffn 0 is a layer without an MLP: only the attention part of an MoE layer, which
    # cost/moe.py prices beside its experts (the loader's range refuses it in a file)
    (lambda m: m.ffn < 0 or m.ffn == 0 and m.moe is not None, "model.ffn must be >= 1"),
    (lambda m: m.moe is not None and m.moe.dense_layers >= m.layers,
     "model.moe.dense_layers must be fewer than the model's layers"),
    (lambda m: not 0.0 <= m.dropout < 1.0, "model.dropout must lie in [0, 1)"),
    (lambda m: m.attention_head_dim is None and m.hidden % m.heads and m.mla is None,
     "model.hidden must be divisible by model.heads (or give model.head_dim)"),
    (lambda m: m.mla is not None and (m.kv_heads != m.heads or m.attention_head_dim is not None
                                      or m.qkv_bias or m.parallel_blocks),
     "model.mla: latent attention has a key and value per head (kv_heads = heads), head widths of"
     " its own (no head_dim), no Q/K/V biases and sequential blocks"),
    (lambda m: m.expert_bias and m.moe is None,
     "model.expert_bias needs model.moe (it adds the routed experts' and the router's biases)"),
    (lambda m: m.qk_norm and m.mla is not None,
     "model.qk_norm: latent attention normalises its latents instead (model.mla); remove qk_norm"),
    (lambda m: m.attention_head_dim is not None and m.attention_head_dim < 1,
     "model.head_dim must be >= 1"),
    (lambda m: m.heads % m.kv_heads, "model.heads must be divisible by model.kv_heads"),
    (lambda m: m.position_embeddings < 0, "model.position_embeddings must be >= 0"),
    (lambda m: m.sliding_window_tokens is not None and m.sliding_window_tokens < 1,
     "model.sliding_window_tokens must be >= 1"),
    (lambda m: m.sliding_window_layers is not None and m.sliding_window_tokens is None,
     "model.sliding_window_layers needs model.sliding_window_tokens"),
    (lambda m: m.sliding_window_layers is not None and not 0 <= m.sliding_window_layers <= m.layers,
     "model.sliding_window_layers must lie in [0, layers]"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU type: datasheet numbers plus the fitted achieved-efficiency parameters.

    Efficiency model (cost/efficiency.py): a matmul of F FLOPs runs at
    `peak_flops_per_s * matmul_eff_max * F / (F + matmul_half_flops)`.
    """

    name: str
    peak_flops_per_s: float
    """dense bf16 tensor-core peak

    fp16 runs at the same peak."""
    hbm_bytes: float
    """device memory"""
    hbm_bw_bytes_per_s: float
    """device-memory bandwidth"""
    matmul_eff_max: float = 0.75
    """largest achieved fraction of the peak, reached by large matmuls (fitted per die:
    cost/fit.py)"""
    matmul_half_flops: float = 2e9
    """matmul size at which half of matmul_eff_max is reached"""
    memory_eff: float = 0.7
    """achieved fraction of memory bandwidth in element-wise kernels"""
    attention_eff: float = 0.4
    """achieved fraction of the peak in the fused attention core (causal FLOPs)"""
    peak_fp8_flops_per_s: float | None = None
    """dense FP8 tensor-core peak; left out, the GPU refuses precision: fp8

    None: the GPU has no FP8 tensor cores (V100, A100)."""
    fp8_matmul_eff_max: float = 0.6
    """as matmul_eff_max, for FP8 GEMMs against the FP8 peak"""
    cudnn_attention_speedup: float = 1.0
    """cuDNN's fused attention over FlashAttention-2 on this GPU, where Transformer Engine runs
    cuDNN (job.cudnn_attention); measured, not fitted

    The throughput ratio applies where the framework runs attention through Transformer Engine
    (Behaviour.te_fused_attention) and that runs cuDNN (JobSpec.cudnn_attention); 1: not
    measured, or no faster cuDNN path."""
    fa2_benchmark_flops_per_s: float | None = None
    """FlashAttention-2's own benchmark (forward + backward, causal, head dim 128, 8k tokens): the
    speed of attention where Transformer Engine calls the kernel

    In FLOP/s; cost/gpus.yaml cites it. The speed of the benchmarked kernel when a framework
    calls it directly (Behaviour.te_fused_attention; times cudnn_attention_speedup where it runs
    cuDNN's). None: no published benchmark, and such a framework's attention runs at
    attention_eff like the others'."""
    cudnn_attention_flops_per_s_by_keys: tuple[tuple[int, float], ...] = ()
    """cuDNN's fused attention measured per call length (keys: forward + backward TFLOP/s,
    causal); where given, Transformer Engine's cuDNN path runs at it, interpolated in log keys,
    instead of cudnn_attention_speedup

    Stored as (keys, forward + backward FLOP/s of a causal call of that many keys) in increasing
    keys (cost/gpus.yaml cites the rows), interpolated by cost/coefficients.attention_efficiency.
    One factor cannot follow it: on Blackwell cuDNN's lead over FlashAttention-2 grows with
    length (B200 1.9x at 2k, 3.0x at 8k). Empty: not measured."""
    host_link_bw_bytes_per_s: float | None = None
    """one direction of the link to host memory (PCIe or NVLink-C2C): what activation offloading
    copies over; left out, offloading is refused

    PCIe, or NVLink-C2C on Grace superchips; what job.offload_modules copies over. None: not in
    the catalogue, and offloading is refused on this GPU."""

    def __post_init__(self) -> None:
        if min(self.peak_flops_per_s, self.hbm_bytes, self.hbm_bw_bytes_per_s) <= 0:
            raise ConfigError(f"gpu {self.name}: peak FLOP/s, HBM size and bandwidth must be > 0")
        if not all(0 < e <= 1 for e in (self.matmul_eff_max, self.memory_eff, self.attention_eff,
                                        self.fp8_matmul_eff_max)):
            raise ConfigError(f"gpu {self.name}: efficiencies must lie in (0, 1]")
        if self.cudnn_attention_speedup <= 0:
            raise ConfigError(f"gpu {self.name}: cudnn_attention_speedup must be > 0")
        if self.fa2_benchmark_flops_per_s is not None and not 0 < self.fa2_benchmark_flops_per_s <= self.peak_flops_per_s:
            raise ConfigError(f"gpu {self.name}: FlashAttention-2's benchmark must lie in (0, peak]")
        if self.host_link_bw_bytes_per_s is not None and self.host_link_bw_bytes_per_s <= 0:
            raise ConfigError(f"gpu {self.name}: the host link's bandwidth must be > 0")
        measured = self.cudnn_attention_flops_per_s_by_keys
        keys = [k for k, _ in measured]
        if any(k < 1 for k in keys) or keys != sorted(set(keys)):
            raise ConfigError(f"gpu {self.name}: cuDNN's attention curve needs distinct key lengths >= 1")
        if not all(0 < f <= self.peak_flops_per_s for _, f in measured):
            raise ConfigError(f"gpu {self.name}: cuDNN's measured attention must lie in (0, peak]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A point-to-point path as seen by one GPU: unidirectional bandwidth and per-message latency.

    For a group's effective link (cost/comm.group_link) `latency_s` is the mean latency of one
    ring hop and `tree_latency_s` the depth latency of NCCL's tree over the group's nodes (None:
    no tree, the group sits in one node)."""

    bw_bytes_per_s: float
    """bandwidth per GPU, one direction"""
    latency_s: float
    """latency of one message

    Of a group's effective link: the mean latency of one ring hop."""
    tree_latency_s: float | None = None

    def __post_init__(self) -> None:
        if self.bw_bytes_per_s <= 0 or self.latency_s < 0:
            raise ConfigError("link bandwidth must be > 0 and latency >= 0")


# What a job that states no job.grad_reduce_dtype reduces in: fp32, except where the framework
# (or the optimizer, whose layout is its own) reduces in the training's 16-bit dtype.
#   megatron    fp32. Megatron-LM's megatron/training/arguments.py (NVIDIA/Megatron-LM d98e8a6)
#               turns accumulate_allreduce_grads_in_fp32 on for bf16 training unless
#               --grad-reduce-in-bf16 (core_v0.12.0 on) says otherwise, and Megatron-core's DDP
#               then allocates main_grad in fp32 (param_and_grad_buffer.py
#               group_params_for_buffers: grad_dtype fp32 if grad_reduce_in_fp32, else the
#               parameter's dtype). Megatron-core's own DistributedDataParallelConfig defaults
#               grad_reduce_in_fp32 to False: a launcher that builds it directly decides, e.g.
#               Megatron-Bridge's performance recipes set it False (perf_recipes/_common.py
#               _benchmark_common, NVIDIA-NeMo/Megatron-Bridge 067f987), which their rows state.
#               Megatron-LM leaves fp16 training at a 16-bit reduction; fp16 jobs are still
#               priced at fp32 unless they say otherwise (docs/cost-model.md says why).
#   torchtitan  fp32: training.mixed_precision_reduce is Literal["float32"] (torchtitan/config/
#               configs.py at b5bcd76; job_config.py at v0.1.0 and v0.2.2), FSDP2's reduce_dtype.
#   deepspeed   the training dtype: gradients are reduced in the model's dtype unless
#               communication_data_type says otherwise (deepspeed.ai/docs/config-json).
#   composer    the training dtype: llm-foundry's recipes run FSDP mixed_precision PURE
#               (reduce_dtype bf16; cost/framework.py).
#   NeMo's distributed_fused_adam (apex_distributed_adam[_bf16]): optim.grad_sync_dtype bf16, as
#               every NeMo-Framework-Launcher 24.07 training example sets it (Optimizer above).
REDUCES_IN_TRAINING_DTYPE = frozenset({Framework.DEEPSPEED, Framework.COMPOSER,
                                       Optimizer.APEX_DISTRIBUTED_ADAM,
                                       Optimizer.APEX_DISTRIBUTED_ADAM_BF16})


@dataclass(frozen=True, slots=True)
class GradReduceRefusal:
    """A job.grad_reduce_dtype that `who` (a framework or an optimizer) cannot run, or that
    cost/ does not price for it: the reduce dtype's width, the problem, the fix."""

    who: Framework | Optimizer
    fp32: bool  # True: refused in fp32; False: refused in 16 bits
    problem: str
    fix: str


GRAD_REDUCE_REFUSALS = (
    GradReduceRefusal(Framework.TORCHTITAN, False, "torchtitan reduces FSDP gradients in fp32 only"
                      " (training.mixed_precision_reduce accepts only float32: torchtitan/config/"
                      "configs.py at b5bcd76, job_config.py at v0.1.0-v0.2.2)",
                      "leave grad_reduce_dtype out, or write fp32"),
    GradReduceRefusal(Framework.DEEPSPEED, True, "DeepSpeed reduces in fp32 only through"
                      " communication_data_type, which casts each reduce bucket to an fp32 copy"
                      " beside the 16-bit gradients, a buffer cost/ does not price",
                      "leave grad_reduce_dtype out (DeepSpeed reduces in the training dtype)"),
    GradReduceRefusal(Optimizer.APEX_DISTRIBUTED_ADAM, True, "NeMo's distributed_fused_adam is"
                      " priced with optim.grad_sync_dtype bf16 (a 16-bit gradient buffer and"
                      " shard); grad_sync_dtype fp32 is not priced",
                      "leave grad_reduce_dtype out, or use optimizer: adam (Megatron-core's fp32"
                      " main gradients)"),
    GradReduceRefusal(Optimizer.APEX_DISTRIBUTED_ADAM_BF16, True, "NeMo's distributed_fused_adam"
                      " is priced with optim.grad_sync_dtype bf16 (a 16-bit gradient buffer and"
                      " shard); grad_sync_dtype fp32 is not priced",
                      "leave grad_reduce_dtype out, or use optimizer: adam (Megatron-core's fp32"
                      " main gradients)"),
)


# Megatron-LM releases (cost/releases.py) whose launcher cannot reduce bf16 training's gradients
# in bf16: v1.0 and v2.0 train no bf16 at all (megatron/arguments.py at those tags has no
# --bf16); at v2.6 and 23.04 --bf16 turns accumulate_allreduce_grads_in_fp32 on (arguments.py),
# and the opt-out --grad-reduce-in-bf16 came with core_v0.12.0. NeMo 24.07 builds Megatron-core's
# DDP config itself (grad_reduce_in_fp32 from its optim.grad_sync_dtype).
FP32_REDUCE_ONLY_RELEASES = {Framework.MEGATRON: ("v1.0", "v2.0", "v2.6", "23.04")}


def training_half_dtype(precision: Precision) -> GradReduceDtype:
    """The 16-bit dtype a job's gradients are in before any fp32 accumulation: fp16 for fp16
    training, bf16 otherwise (FP8 linears keep bf16 parameters and gradients)."""
    return GradReduceDtype.FP16 if precision is Precision.FP16 else GradReduceDtype.BF16


def grad_reduce_refusal(framework: Framework, optimizer: Optimizer, precision: Precision,
                        dtype: GradReduceDtype | None,
                        version: str | None = None) -> tuple[str, str] | None:
    """(problem, fix) where a stated job.grad_reduce_dtype cannot run, or is not priced, with
    this framework, optimizer, precision and release (`version`, None: the current one;
    GRAD_REDUCE_REFUSALS, FP32_REDUCE_ONLY_RELEASES); None where it can, or where none is
    stated. The loaders name the file and field around it."""
    if dtype is None:
        return None
    half = training_half_dtype(precision)
    if dtype is not GradReduceDtype.FP32 and dtype is not half:
        return (f"{dtype.value} is not the 16-bit dtype of a {precision.value} job: its"
                f" gradients are {half.value} before any fp32 accumulation",
                f"write {half.value} or fp32")
    for r in GRAD_REDUCE_REFUSALS:
        if r.who in (framework, optimizer) and r.fp32 == (dtype is GradReduceDtype.FP32):
            return f"{dtype.value} with {r.who.value}: {r.problem}", r.fix
    if dtype is GradReduceDtype.BF16 and version in FP32_REDUCE_ONLY_RELEASES.get(framework, ()):
        return (f"bf16 with {framework.value} {version}: that release reduces bf16 training's"
                " gradients in fp32 only (--grad-reduce-in-bf16 came with core_v0.12.0)",
                "write fp32, or a later job.framework_version")
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """The training job: batch, precision, optimizer, framework, and what the search may choose."""
    global_batch: int
    """sequences per optimizer step"""
    precision: Precision = Precision.BF16
    """training precision; fp8: FP8 linears (attention, norms and the optimizer stay in
    bf16/fp32)"""
    optimizer: Optimizer = Optimizer.ADAM
    """the optimizer and its state's layout (cost/memory.state_layout): the apex ones are NeMo's
    distributed Adam, adam_bf16_moments keeps fp32 master weights and bf16 moments (megatron,
    ZeRO-1)"""
    attention: Attention = Attention.FLASH
    """flash: a fused kernel, no s x s scores stored; standard: the scores stored for backward"""
    framework: Framework = Framework.MEGATRON
    """the training framework: what can run (cost/framework_rules.py) and how ZeRO, overlap and
    context parallelism behave (cost/framework.py)"""
    framework_version: str | None = None
    """the framework's release (cost/releases.py lists them): what it could run, and which release
    the plan's time is for

    As its project tags it (e.g. core_v0.19.0 for megatron). None: the framework's current
    release (`release`). Plan, --json, report and export name it, and cost/trust.py widens the
    band of a release fewer than three published rows validate."""
    tp_comm_overlap: bool = False
    """Transformer Engine's tensor-parallel communication/GEMM overlap (megatron; used where
    tp > 1 inside a node with sequence parallelism)

    Transformer Engine userbuffers: tensor-parallel all-gathers / reduce-scatters pipelined with
    the GEMMs beside them (Megatron-LM --tp-comm-overlap, NeMo ub_tp_comm_overlap), the only case
    Transformer Engine runs it (cost/coefficients.tp_overlap_exposed)."""
    cudnn_attention: bool = True
    """Transformer Engine runs cuDNN's fused attention (NVTE_FUSED_ATTN=1); false:
    FlashAttention-2 (megatron)

    cuDNN's fused attention is TE's default where the GPU has it (TE prefers it to
    FlashAttention on Hopper and newer); false is Dao's FlashAttention-2 (NVTE_FUSED_ATTN=0, as
    NeMo's 24.07 launcher set it). Megatron only (Behaviour.te_fused_attention); priced by
    cost/coefficients.attention_efficiency."""
    moe_a2a_overlap: bool = False
    """Megatron-core's --overlap-moe-expert-parallel-comm (megatron; used where ep > 1 and pp = 1
    or interleaved; needs `search.full_recompute: false`)

    An MoE model's expert-parallel all-to-alls of one micro-batch's forward run under another's
    backward compute (combined 1F1B), where Megatron-core runs it
    (cost/moe.a2a_overlap_applies)."""
    moe_shared_expert_overlap: bool = False
    """Megatron-core's --moe-shared-expert-overlap: the shared expert under the all-to-alls
    (ep > 1)

    The shared expert's MLP runs on its own stream while the dispatch and combine all-to-alls
    are in flight (a shared expert; not with moe_a2a_overlap, which Megatron-core refuses beside
    it)."""
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    """1f1b (interleaved where virtual_stages > 1) or DeepSeek-V3's dualpipe (one GPU type;
    cost/dualpipe.py)

    DualPipe is planned over the configurations it runs."""
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    """alltoall: Megatron-core's NCCL all-to-all; deepep: one copy per destination node, FP8
    dispatch in FP8 jobs (cost/moe.py)"""
    recompute_early_stop: bool | None = None
    """torchtitan and composer: a full recompute stops before MLP-out (torch.utils.checkpoint
    non-reentrant, PyTorch >= 2.1); false for older PyTorch

    It stops once every tensor saved for backward is rebuilt, as torch.utils.checkpoint's
    non-reentrant implementation does by default from PyTorch 2.1
    (cost/framework.recompute_stops_early). None: the framework's own behaviour; megatron and
    deepspeed replay whole layers."""
    grad_reduce_overlap: bool | None = None
    """megatron with optimizer adam or adam_bf16_moments: the data-parallel gradient reduction
    hides behind the backward (--overlap-grad-reduce); plans with pp 1, no interleaving and
    ZeRO-0 always overlap (torch DDP)

    Megatron-LM's own DDP and distributed optimizer. None: as the job's release ran it
    (cost/framework.grad_reduce_overlaps: from 2023-08 on); false: reduced after the backward,
    as every release before it did."""
    recompute_modules: tuple[RecomputeModule, ...] = ()
    """megatron: module outputs recomputed in backward (--recompute-modules); needs
    `search.full_recompute: false`

    Beyond the plan's recompute; priced in memory (cost/memory.job_activation_savings_bytes,
    cost/moe.expert_act_bytes) and time (the recomputed work in backward,
    cost/coefficients.module_recompute_s)."""
    offload_modules: tuple[OffloadModule, ...] = ()
    """megatron, MoE: the experts' inputs stashed in host memory (--offload-modules); needs the
    GPU's host_link_gbytes_per_s

    Megatron-core's fine-grained activation offloading: the listed inputs live in host memory
    between forward and backward, priced in memory (cost/moe.expert_act_bytes) and in the copies
    over the GPU's host link that the layer's expert compute does not hide
    (cost/moe.offload_exposed_s)."""
    activation_fp8_input_store: bool = False
    """megatron: SwiGLU inputs stashed in fp8

    Stored in 1 byte and cast back before backward (Megatron-core's TransformerConfig
    activation_func_fp8_input_store; DeepSeek-V3 Sec. 3.3.3 (2) stores the MoE SwiGLU inputs in
    FP8); every SwiGLU MLP."""
    attention_output_e5m6: bool = False
    """fp8 jobs: DeepSeek-V3's 12-bit stash of the attention output

    DeepSeek-V3's customised E5M6 format for the input of the linear after attention (arXiv
    2412.19437 Sec. 3.3.3 (1)): the attention output stashed once, 12 bits with a power-of-two
    scale per 128 elements, for both the attention's backward and the output projection's weight
    gradient, instead of a bf16 copy and an fp8 copy. No framework paraplan exports to has it
    (the exports list it)."""
    grad_reduce_dtype: GradReduceDtype | None = None
    """what gradients are kept and reduced in; never searched, since it changes numerics; fp16
    only in fp16 training

    Megatron-core's grad_reduce_in_fp32 / --grad-reduce-in-bf16, FSDP's reduce_dtype. None: the
    framework's default (`grad_reduce`)."""
    train_tokens: float | None = None
    """tokens to train on: every plan then gives the time, GPU-hours and cost to train
    (cost/train_cost.py); changes no plan. Write the exponent's sign (15.0e+12): YAML reads
    15.0e12 as text

    The run's whole budget. None: not given. A float, as budgets are written."""
    usd_per_gpu_s: tuple[tuple[str, float], ...] = ()
    """needs train_tokens: the price of a GPU of every GPU type of the cluster (each one, no
    other), for the cost to train

    Stored per GPU-second, ((gpu type, USD per GPU-second), ...) sorted by type
    (job.usd_per_gpu_hour / 3600). Empty: no price. The loaders check that it names exactly the
    cluster's GPU types."""

    def __post_init__(self) -> None:
        """Check the job's fields, in the order that fixes which error a bad file sees first."""
        self._check_batch()
        self._check_train_tokens()
        self._check_prices()
        self._check_release()
        self._check_optimizer()
        self._check_megatron_only_options()
        self._check_module_lists()
        self._check_attention_output_e5m6()
        self._check_recompute_early_stop()
        self._check_grad_reduce_overlap()
        self._check_moe_a2a_overlap()
        self._check_grad_reduce_dtype()
        self._check_dualpipe()

    def _check_batch(self) -> None:
        """Refuse a global batch below one sequence."""
        if self.global_batch < 1:
            raise ConfigError("job.global_batch must be >= 1")

    def _check_train_tokens(self) -> None:
        """Refuse a token budget that is given but not positive."""
        if self.train_tokens is not None and not self.train_tokens > 0:
            raise ConfigError("job.train_tokens must be > 0")

    def _check_prices(self) -> None:
        """Refuse a non-positive GPU price, or prices without a token budget to price."""
        if any(not usd > 0 for _, usd in self.usd_per_gpu_s):
            raise ConfigError("job.usd_per_gpu_hour: every price must be > 0")
        if self.usd_per_gpu_s and self.train_tokens is None:
            raise ConfigError("job.usd_per_gpu_hour prices a run of job.train_tokens tokens:"
                              " add train_tokens, or remove usd_per_gpu_hour")

    def _check_release(self) -> None:
        """Refuse a framework_version that is not a known release of the framework."""
        if self.framework_version is not None and self.release.version != self.framework_version:
            raise ConfigError(f"job.framework_version {self.framework_version!r} is not a known"
                              f" {self.framework.value} release: use one of "
                              + ", ".join(known_versions(self.framework)))

    def _check_optimizer(self) -> None:
        """Refuse a Megatron-only optimizer under another framework."""
        if self.optimizer is not Optimizer.ADAM and self.framework is not Framework.MEGATRON:
            what = ("Megatron-core's precision-aware optimizer" if self.optimizer is Optimizer.ADAM_BF16_MOMENTS
                    else "NeMo's Apex optimizer")
            raise ConfigError(f"job.optimizer {self.optimizer.value} is {what} and runs only"
                              f" with framework megatron, not {self.framework.value}: use optimizer adam")

    def _check_megatron_only_options(self) -> None:
        """Refuse what only Megatron-LM runs (Megatron-core's module options and expert
        all-to-all overlap, Transformer Engine's userbuffers and attention kernel) under another
        framework."""
        if self.framework is Framework.MEGATRON:
            return
        core = "a Megatron-core option"
        for key, on, what in (
                ("recompute_modules", bool(self.recompute_modules), core),
                ("offload_modules", bool(self.offload_modules), core),
                ("activation_fp8_input_store", self.activation_fp8_input_store, core),
                ("tp_comm_overlap", self.tp_comm_overlap, "Transformer Engine's userbuffers overlap"),
                ("cudnn_attention", not self.cudnn_attention, "a choice of Transformer Engine's attention kernel"),
                ("moe_a2a_overlap", self.moe_a2a_overlap, "Megatron-core's --overlap-moe-expert-parallel-comm")):
            if on:
                raise ConfigError(f"job.{key} is {what}, which only framework megatron runs (job.framework:"
                                  f" {self.framework.value}); remove {key}, or set framework: megatron")

    def _check_module_lists(self) -> None:
        """Refuse repeated modules, and offloading inside a recomputed MoE block."""
        if len(set(self.recompute_modules)) != len(self.recompute_modules):
            raise ConfigError("job.recompute_modules lists a module twice: list each once")
        if len(set(self.offload_modules)) != len(self.offload_modules):
            raise ConfigError("job.offload_modules lists a module twice: list each once")
        if self.offload_modules and RecomputeModule.MOE in self.recompute_modules:
            # Megatron-core's TransformerConfig refuses offloading inside a recomputed MoE
            # block (transformer_config.py, offload_inside_moe, d98e8a6): nothing is stashed
            raise ConfigError("job.offload_modules: the routed experts' inputs are not stashed when"
                              " recompute_modules has moe (the block is rerun): remove one of the two")

    def _check_attention_output_e5m6(self) -> None:
        """Refuse the E5M6 attention-output store outside FP8 training."""
        if self.attention_output_e5m6 and self.precision is not Precision.FP8:
            raise ConfigError("job.attention_output_e5m6 is DeepSeek-V3's FP8 training's storage of the"
                              f" attention output, and the job's precision is {self.precision.value}:"
                              " remove attention_output_e5m6, or set precision: fp8")

    def _check_recompute_early_stop(self) -> None:
        """Refuse recompute_early_stop for frameworks that replay whole layers."""
        if self.recompute_early_stop and self.framework in (Framework.MEGATRON, Framework.DEEPSPEED):
            raise ConfigError(f"job.recompute_early_stop: framework {self.framework.value} recomputes"
                              f" whole layers with its own reentrant checkpoint function; remove"
                              f" recompute_early_stop or set framework: torchtitan or composer")

    def _check_grad_reduce_overlap(self) -> None:
        """Refuse grad_reduce_overlap outside Megatron-LM's own gradient reduction."""
        if self.grad_reduce_overlap is not None and (self.framework is not Framework.MEGATRON
                                                     or self.optimizer in APEX_OPTIMIZERS):
            raise ConfigError(f"job.grad_reduce_overlap is Megatron-LM's own gradient reduction"
                              f" (job.framework: {self.framework.value}, job.optimizer:"
                              f" {self.optimizer.value}); remove grad_reduce_overlap, or set"
                              f" framework: megatron with optimizer adam or adam_bf16_moments")

    def _check_moe_a2a_overlap(self) -> None:
        """Refuse moe_a2a_overlap beside the shared-expert overlap."""
        if self.moe_a2a_overlap and self.moe_shared_expert_overlap:
            raise ConfigError("job.moe_a2a_overlap and job.moe_shared_expert_overlap: Megatron-core"
                              " refuses --moe-shared-expert-overlap with"
                              " --overlap-moe-expert-parallel-comm; keep one")

    def _check_grad_reduce_dtype(self) -> None:
        """Refuse a grad_reduce_dtype the framework, optimizer or release does not run."""
        refusal = grad_reduce_refusal(self.framework, self.optimizer, self.precision,
                                      self.grad_reduce_dtype, self.framework_version)
        if refusal is not None:
            raise ConfigError(f"job.grad_reduce_dtype {refusal[0]}: {refusal[1]}")

    def _check_dualpipe(self) -> None:
        """Refuse moe_a2a_overlap under DualPipe, which overlaps the all-to-alls itself."""
        if self.pipeline_schedule is PipelineSchedule.DUALPIPE and self.moe_a2a_overlap:
            raise ConfigError("job.pipeline_schedule dualpipe overlaps the all-to-alls itself"
                              " (forward/backward chunk pairs); remove moe_a2a_overlap")

    @property
    def grad_reduce(self) -> GradReduceDtype:
        """The dtype the job's gradients are kept and reduced in: the stated one, else the
        framework's (or its optimizer's) default (REDUCES_IN_TRAINING_DTYPE)."""
        if self.grad_reduce_dtype is not None:
            return self.grad_reduce_dtype
        if self.framework in REDUCES_IN_TRAINING_DTYPE or self.optimizer in REDUCES_IN_TRAINING_DTYPE:
            return training_half_dtype(self.precision)
        return GradReduceDtype.FP32

    @property
    def release(self) -> Release:
        """The framework release the job runs: the stated one, else the current release (an
        unknown stated version yields the current one here and is refused by __post_init__)."""
        return find_release(self.framework, self.framework_version) or current_release(self.framework)


MAX_CLASSES_PER_GROUP = 4  # search.classes_per_group (cost/ranges.py says why)
# search.memory_reserve_gib when the instance does not give one (SearchSpace.memory_reserve_bytes)
DEFAULT_MEMORY_RESERVE_GIB = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """The declared plan space. CP-SAT, MILP and exhaustive search all optimise over exactly
    this set (enumerated in solver/space.py), so "optimal" always means optimal over it.

    A field left as None means "every value the instance and its framework admit" (e.g. tp:
    powers of two that divide the heads and fit in a node; micro_batch: the divisors of the
    per-replica batch whose memory lower bound fits the GPU; virtual_stages: every v that
    splits each stage's layers evenly). The `max_*` limits are optional narrowing on top of
    that (None: no cap); none of them is needed to keep the space finite.
    """

    tp: tuple[int, ...] | None = None
    """tensor-parallel degrees"""
    pp: tuple[int, ...] | None = None
    """pipeline-parallel degrees"""
    cp: tuple[int, ...] | None = None
    """context-parallel degrees"""
    micro_batch: tuple[int, ...] | None = None
    """sequences per micro-batch"""
    max_micro_batch: int | None = None
    """a cap on the micro-batch"""
    max_pp: int | None = None
    """a cap on pp"""
    max_cp: int | None = None
    """a cap on cp"""
    sequence_parallel: tuple[bool, ...] = (False, True)
    """Megatron's sequence parallelism"""
    zero: tuple[int, ...] = (0, 1, 2, 3)
    """ZeRO stages; which combine with pp > 1 is the framework's rule (Megatron-LM and DeepSpeed
    0-1, torchtitan 0 and 3)"""
    virtual_stages: tuple[int, ...] | None = None
    """interleaved model chunks per stage"""
    recompute: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE)
    """recomputation of the layers not fully recomputed"""
    full_recompute: bool = True
    """search per-stage counts of fully recomputed layers"""
    # False: every layer of every stage fully recomputed, or none (RecomputePattern.ALL_OR_NONE),
    # as a framework release without partial recomputation ran it (not a YAML key: the job's
    # release sets it, cost/framework_rules.release_space)
    partial_recompute: bool = True
    uniform_split: bool = False
    """only the even layer split

    For comparisons."""
    tp_across_nodes: bool = False
    """tensor parallelism may span nodes"""
    tp_per_group: bool = True
    """mixed clusters: a pipeline across node groups may run a tp per group

    E.g. tp 4 on A100 stages and tp 2 on H100 stages (solver/space.py)."""
    classes_per_group: int = 1
    """group format: replica classes one node group may host

    1: a class per group; more lets replicas of different pipeline depths, or of different
    micro-batch counts, share a group (solver/space.py; a homogeneous file is planned as its one
    group then: plans of several classes are written in the group format, several_classes)."""
    idle_gpus: bool = False
    """group format: a used group may leave GPUs idle

    E.g. 2 of a group's 3 nodes, where a pipeline or the batch does not divide all 3
    (solver/space.py; written in the group format as classes_per_group)."""
    mixed_families: bool = False
    """group format: a pipeline across groups beside replica classes on the GPUs it leaves

    solver/space.py; two node groups or more."""
    asymmetric_pipelines: bool = False
    """group format: a pipeline across groups may give each stage its own data-parallel degree
    ([mixed-clusters.md](mixed-clusters.md))

    cost/asymmetric.py, solver/asymmetric_search.py; two node groups or more, objective mean."""
    memory_reserve_bytes: float = DEFAULT_MEMORY_RESERVE_GIB * GIB_BYTES
    """kept free on every GPU when planning, for the caching allocator's reserved-but-unallocated
    memory (why 2: below); 0 plans to the HBM limit

    On top of the runtime allowance cost/memory.py prices (CUDA context, NCCL buffers, 5%
    allocator fragmentation of the activations): the caching allocator's
    reserved-but-unallocated memory measured at peak in public runs, which that allowance does
    not fully cover (docs/schema.md cites the figures). The published rows of `paraplan
    accuracy` ran, so they are simulated without it (cost/calibration.py)."""
    tensor_partitions: tuple[str, ...] = ("megatron",)
    """megatron: 1-D tensor parallelism; spatial_temporal adds per-operator partitions
    ([partitions.md](partitions.md))

    With "spatial_temporal" every layer's operators each choose a partition, PrimePar's
    P(q x q) included (cost/partition.py)."""
    ep: tuple[int, ...] | None = None
    """expert-parallel degrees (MoE only)

    None: every divisor of the experts that divides tp x dp x cp / etp
    (cost/space_rules.ep_values); dense models run ep = 1 only."""
    etp: tuple[int, ...] | None = None
    """expert tensor-parallel degrees (MoE only)

    None: each configuration's tp and 1 (Megatron-core's parallel folding, cost/moe.py;
    cost/space_rules.etp_values); dense models: tp only."""
    objective: str = DEFAULT_OBJECTIVE
    """what the planner minimises: mean (the predicted time) or pNN, its NN-th percentile under
    the cost model's out-of-sample error (cost/trust.py); `--objective`

    cost/objective.py parses it."""
    # the largest fraction of each GPU's HBM a plan may fill (its priced peak memory, besides
    # memory_reserve_bytes' cap). Not an instance key: the planner's memory tiers set it
    # (solver/memory_tiers.py) to search the plans within the memory fill the published runs of
    # their scale reach apart from the fuller ones, whose quantile band is wider (cost/trust.py)
    memory_fill_cap: float = 1.0
    # the memory fill at which the quantile objective's factor is read (None: memory_fill_cap,
    # the fullest a plan of the search may be). Not an instance key: the planner's relaxation
    # (solver/memory_tiers.py) reads every plan at the emptier tier's factor, uncapped
    factor_memory_fill: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.memory_fill_cap <= 1.0:
            raise ConfigError(f"search.memory_fill_cap must be in (0, 1], got {self.memory_fill_cap}")
        if self.factor_memory_fill is not None and not 0.0 < self.factor_memory_fill <= 1.0:
            raise ConfigError(f"search.factor_memory_fill must be in (0, 1], got {self.factor_memory_fill}")
        try:
            parse_objective(self.objective)
        except ValueError as e:
            raise ConfigError(f"search.{e}") from None
        for name in ("tp", "pp", "cp", "micro_batch", "virtual_stages", "ep", "etp"):
            vals = getattr(self, name)
            if vals is not None and (not vals or min(vals) < 1):
                raise ConfigError(f"search.{name} needs a non-empty list of integers >= 1")
        if not set(self.zero) <= {0, 1, 2, 3} or not self.zero:
            raise ConfigError("search.zero must list stages among 0, 1, 2, 3")
        for name in ("max_micro_batch", "max_pp", "max_cp"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"search.{name} must be >= 1 (or left out: no cap)")
        if not 1 <= self.classes_per_group <= MAX_CLASSES_PER_GROUP:
            raise ConfigError(f"search.classes_per_group must be 1 to {MAX_CLASSES_PER_GROUP}: the"
                              " micro-batch splits between classes grow as a power of their number")
        if self.memory_reserve_bytes < 0:
            raise ConfigError("search.memory_reserve_gib must be >= 0")
        if not self.tensor_partitions or not set(self.tensor_partitions) <= {"megatron", "spatial_temporal"}:
            raise ConfigError("search.tensor_partitions must list megatron and/or spatial_temporal")

    @property
    def several_classes(self) -> bool:
        """The space holds plans of more than one replica class, or leaving GPUs idle: plans
        written in the group format (cost/readers/plan_writer.py) even on a one-group cluster."""
        return self.classes_per_group > 1 or self.idle_gpus

    @property
    def layout_options(self) -> bool:
        """One of the three layout options is on (classes_per_group > 1, idle_gpus,
        mixed_families): the search then sets up the replica and mixed families' layouts under a
        bound (solver/option_families.py)."""
        return self.classes_per_group > 1 or self.idle_gpus or self.mixed_families


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    """A named group of nodes of one GPU type on one site: its nodes, their GPUs and the links
    between them. A flat cluster is one such group (`Cluster.of`)."""
    name: str = ""
    """unique among the groups

    "" takes the default, as a flat instance file's one group does: the group is named after
    its GPU."""
    site: str = ""
    """the site the group is at; links may name it

    Racks or data centres: groups on one site share its links to other sites. "" takes the
    default, the group's own name."""
    gpu: GpuSpec
    """a GPU type of cost/gpus.yaml or of `gpu_types`"""
    nodes: int
    """nodes of the cluster, or of the node group"""
    gpus_per_node: int
    """GPUs per node"""
    intra_node: Link  # NVLink/NVSwitch or PCIe, per GPU, one direction
    inter_node: Link  # NIC share of one GPU, one direction
    intra_node_kind: str = "nvlink"
    """the link inside a node"""
    nvlink_domain_gpus: int | None = None
    """an NVLink domain spanning nodes (GB200 NVL72 with gpus_per_node 4): a multiple of
    gpus_per_node dividing the GPUs

    GB200 NVL72: 72 GPUs on 18 trays of 4. None: the node. Groups inside it use the intra_node
    link (cost/comm.py)."""
    # switch tiers above the NIC, innermost (leaf) first, each block a whole number of the one
    # below (cost/fabric.py); (): one non-blocking fabric
    tiers: tuple[FabricTier, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ConfigError("cluster.nodes and cluster.gpus_per_node must be >= 1")
        d = self.nvlink_domain_gpus
        if d is not None and (d % self.gpus_per_node or self.num_gpus % d):
            raise ConfigError(f"cluster.nvlink_domain_gpus={d} must be a multiple of gpus_per_node"
                              f" ({self.gpus_per_node}) that divides the {self.num_gpus} GPUs")
        below = max(1, self.domain_gpus // self.gpus_per_node)
        for tier in self.tiers:
            if tier.nodes % below:
                raise ConfigError(f"a switch tier of {tier.nodes} nodes must hold a whole number"
                                  f" of the {below}-node blocks below it")
            below = tier.nodes
        if not self.name:
            object.__setattr__(self, "name", self.gpu.name)
        if not self.site:
            object.__setattr__(self, "site", self.name)

    @property
    def domain_gpus(self) -> int:
        """GPUs reachable over NVLink from any GPU: the NVLink domain, by default the node."""
        return self.gpus_per_node if self.nvlink_domain_gpus is None else self.nvlink_domain_gpus

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """`between[a][b]`: the path one GPU of group a sees to a GPU of group b (a != b), per GPU
    and one direction; the diagonal repeats the group's own NIC and is not used."""

    groups: tuple[NodeGroup, ...]
    """one or more node groups, each homogeneous"""
    between: tuple[tuple[Link, ...], ...]

    def __post_init__(self) -> None:
        g = len(self.groups)
        if g < 1:
            raise ConfigError("cluster.groups needs at least one group")
        if len({x.name for x in self.groups}) != g:
            raise ConfigError("cluster.groups names must be unique")
        if len(self.between) != g or any(len(row) != g for row in self.between):
            raise ConfigError(f"the group link matrix must be {g} x {g}")

    @property
    def num_gpus(self) -> int:
        return sum(x.num_gpus for x in self.groups)

    @classmethod
    def of(cls, group: NodeGroup) -> "Cluster":
        """The one-group cluster of `group` (what a flat instance file writes)."""
        return cls(groups=(group,), between=((group.inter_node,),))

    # --- the one-group case: a one-group cluster reads as its group's GPU, nodes and NIC (what
    # code reads of it); the rest through one_group -------------------------------------------

    @property
    def one_group(self) -> NodeGroup:
        """The cluster's only node group (ValueError for a cluster of several)."""
        if len(self.groups) != 1:
            raise ValueError(f"a cluster of {len(self.groups)} node groups has no single GPU type,"
                             " node count or link: read its groups")
        return self.groups[0]

    @property
    def gpu(self) -> GpuSpec:
        return self.one_group.gpu

    @property
    def nodes(self) -> int:
        return self.one_group.nodes

    @property
    def gpus_per_node(self) -> int:
        return self.one_group.gpus_per_node

    @property
    def inter_node(self) -> Link:
        return self.one_group.inter_node


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A network state: its cluster (links changed), and how likely or when it holds."""

    name: str
    """unique, not "nominal"

    "nominal" names the declared network, Instance.scenarios[0]."""
    cluster: Cluster
    probability: float | None = None
    """for `--expected`: either every scenario gives one or none does; the nominal one gets 1
    minus their sum"""
    window_h: tuple[float, float] | None = None
    """hours of the day it holds, informational"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Period:
    """One period of a timeline: which scenario holds, and for how long."""
    scenario: int
    """"nominal" or a declared scenario's name

    Stored as its index into Instance.scenarios."""
    duration_s: float
    """how long the period lasts"""

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ConfigError("timeline period durations must be > 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Switching:
    """What a change of plan costs: save the checkpoint, restart, load and reshard it.

    `storage_bw_bytes_per_s` is the aggregate checkpoint-storage bandwidth of the cluster (each
    of save and load moves the whole model state once); `restart_s` is the fixed cost of
    stopping and relaunching the job."""

    storage_bw_bytes_per_s: float = 10e9
    """aggregate checkpoint-storage bandwidth"""
    restart_s: float = 120.0
    """time to stop and relaunch the job"""

    def __post_init__(self) -> None:
        if self.storage_bw_bytes_per_s <= 0 or self.restart_s < 0:
            raise ConfigError("switching: storage bandwidth must be > 0 and restart time >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    """What to plan: a model, a job and its declared search over a cluster of node groups. A
    flat instance file writes the one-group case (`flat`). `scenarios[0]` is the nominal
    network (`cluster`); the rest are the declared changes."""

    name: str
    """the instance's name, shown with every plan"""
    model: ModelSpec
    """the transformer to train"""
    cluster: Cluster
    """the GPUs: one GPU type, or node groups and the links between them (`cluster.groups`, the
    group format)"""
    job: JobSpec
    """what one training step is and how the framework runs it"""
    search: SearchSpace = field(default_factory=SearchSpace)
    """narrows the planner's declared space (solver/space.py); left out, every value the
    instance and its framework admit"""
    scenarios: tuple[Scenario, ...] = ()
    """network scenarios besides the declared one, "nominal" (`--robust`, `--expected`)

    Stored after the nominal one, scenarios[0], which is `cluster`."""
    timeline: tuple[Period, ...] = ()
    """periods in order, each a scenario for some hours (`paraplan timeline`)"""
    switching: Switching = field(default_factory=Switching)
    """what switching plans costs"""
    source: str = "<memory>"  # file the instance came from, for messages

    def __post_init__(self) -> None:
        if not self.scenarios:
            object.__setattr__(self, "scenarios", (Scenario(name="nominal", cluster=self.cluster),))
        elif self.scenarios[0].cluster is not self.cluster and self.scenarios[0].cluster != self.cluster:
            # the nominal scenario is the cluster: a record copied with another cluster
            # (dataclasses.replace) prices its nominal network on that one
            nominal = replace(self.scenarios[0], cluster=self.cluster)
            object.__setattr__(self, "scenarios", (nominal, *self.scenarios[1:]))

    @property
    def written_as_groups(self) -> bool:
        """Whether only the node-group file format writes this instance: several node groups,
        network scenarios or a timeline (a flat instance file writes one group on one network)."""
        return len(self.cluster.groups) > 1 or len(self.scenarios) > 1 or bool(self.timeline)

    @property
    def flat(self) -> bool:
        """Whether a flat instance file writes this instance and a flat plan file its plans:
        one group on one network, and a search of one replica class on every GPU
        (SearchSpace.several_classes)."""
        return not self.written_as_groups and not self.search.several_classes

    def group_alone(self, g: int, cluster: Cluster | None = None) -> "Instance":
        """Group `g` of `cluster` (default: the nominal one) alone, same name, model, job and
        search: the one-group instance its stages are priced on (cost/coefficients.build reads
        one group's hardware, and cost/partition.py a tp group's links from it)."""
        group = (self.cluster if cluster is None else cluster).groups[g]
        return Instance(name=self.name, model=self.model, job=self.job, search=self.search,
                        cluster=Cluster.of(group),
                        source=self.source)

    def with_cluster(self, cluster: Cluster) -> "Instance":
        """The same job on another network (scenarios dropped: the cluster is the nominal one)."""
        return Instance(name=self.name, model=self.model, cluster=cluster, job=self.job,
                        search=self.search, switching=self.switching, source=self.source)


def moe_fold_problem(model, tp: int, ranks: int, sp: bool, ep: int, etp: int) -> str | None:
    """Why an MoE layer cannot run expert parallel `ep` x expert tensor parallel `etp` on a
    stage whose attention runs tp x `ranks` (data x context parallel) GPUs, or None.

    Megatron-core's parallel folding (Megatron-LM d98e8a64dd, megatron/core/parallel_state.py
    initialize_model_parallel: the expert rank generator lays etp x ep x edp over the same GPUs
    of a pipeline stage, and refuses a world size etp x ep x pp does not divide): etp x ep must
    divide tp x ranks; each expert's ffn is split over etp (tensor_parallel/layers.py divides
    its output size by the group size); and with tp > 1 the attention's tokens reach the
    dispatcher split over tp by sequence parallelism (moe/moe_layer.py refuses tp > 1 without
    it in training), which is what the expert layout's token count assumes (cost/moe.py)."""
    moe = model.moe
    if moe is None:
        return (f"ep={ep}, etp={etp} need a mixture-of-experts model (model.moe)"
                if ep > 1 or etp != tp else None)
    if moe.experts % ep:
        return f"ep={ep} must divide the {moe.experts} experts"
    if moe.expert_ffn % etp:
        return f"etp={etp} must divide the experts' ffn width {moe.expert_ffn}"
    if (tp * ranks) % (ep * etp):
        return (f"ep*etp = {ep * etp} must divide the stage's tp*dp*cp = {tp * ranks} GPUs (the"
                " expert layout etp x ep x edp folds over the attention's tp x cp x dp)")
    if etp != tp and tp > 1 and not sp:
        return (f"etp={etp} differs from tp={tp}: Megatron-core runs MoE with tp > 1 only with"
                " sequence parallelism")
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outer:
    """The part of a plan fixed before the layer split: degrees, batching and modes.

    The simulator turns one Outer into per-stage coefficients; the layer split and the
    per-stage full-recompute counts are then chosen over those coefficients.
    """

    tp: int
    pp: int
    """pipeline stages"""
    dp: int
    """data-parallel replicas"""
    cp: int = 1
    micro_batch: int
    num_micro_batches: int
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    zero: int = 0  # 0 none, 1 optimizer states (Megatron distributed optimizer), 2 +grads, 3 +params
    virtual_stages: int = 1  # interleaved 1F1B model chunks per stage
    # expert parallel degree (MoE models): the experts are sharded over ep ranks of the stage's
    # tp x dp x cp GPUs, etp apart (cost/moe.py); 1 for dense models
    ep: int = 1
    # expert tensor parallel degree (MoE models, Megatron-core's --expert-tensor-parallel-size):
    # each expert's GEMMs split over etp consecutive GPUs; None: = tp (Megatron-core's
    # default). Stored canonically: an etp equal to tp is None, so a plan file without etp and
    # one naming etp = tp are the same plan. Read it through `expert_tp`.
    etp: int | None = None
    # Megatron-core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-
    # split: the embedding (loss) counts as a layer slot of stage 0's first (stage pp-1's last)
    # model chunk, which then holds one decoder layer fewer (cost/pipeline_split.py). A mode of
    # the outer configuration, like v: it decides which layer counts each stage may hold.
    embedding_in_split: bool = False
    loss_in_split: bool = False
    # torch's zero-bubble schedule the plan runs (torchtitan); None: 1F1B, interleaved with
    # virtual_stages > 1. A mode like v: it changes the stage terms (cost/zero_bubble.py)
    zero_bubble: ZeroBubble | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "micro_batch", "num_micro_batches", "virtual_stages",
                     "ep"):
            if getattr(self, name) < 1:
                raise ConfigError(f"plan.{name} must be >= 1")
        if self.etp is not None:
            if self.etp < 1:
                raise ConfigError("plan.etp must be >= 1 (or left out: etp = tp)")
            if self.etp == self.tp:
                object.__setattr__(self, "etp", None)
        if self.zero not in (0, 1, 2, 3):
            raise ConfigError("plan.zero must be 0, 1, 2 or 3")
        if self.virtual_stages > 1 and self.pp == 1:
            raise ConfigError("virtual_stages > 1 needs pp > 1")
        if self.zero_bubble is not None and self.virtual_stages < 2:
            raise ConfigError(f"plan.zero_bubble {self.zero_bubble.value} runs two or more model"
                              " chunks per stage (virtual_stages >= 2)")

    @property
    def expert_tp(self) -> int:
        """The expert tensor parallel degree: etp, or tp where the plan leaves it out."""
        return self.tp if self.etp is None else self.etp
