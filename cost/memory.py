"""Peak memory per GPU as the training frameworks allocate it.

Model state, Adam with mixed precision (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: K = 12 bytes of
optimizer state per parameter), per framework (`STATE_BYTES`):
    Megatron-LM   2 bf16 weight + 4 fp32 main gradient (its --accumulate-allreduce-grads-in-fp32
                  buffer) + 12 (fp32 master weight, momentum, variance)              = 18
    DeepSpeed     2 fp16/bf16 weight + 2 gradient + 12 (ZeRO paper's accounting)    = 16
The gradient of these two is kept in the dtype it is reduced in (job.grad_reduce_dtype,
`state_layout`): Megatron-core allocates main_grad in fp32 only with grad_reduce_in_fp32,
else in the parameter's bf16 (megatron/core/distributed/param_and_grad_buffer.py
group_params_for_buffers, NVIDIA/Megatron-LM d98e8a6): 2 + 2 + 12 = 16 with a bf16 reduction.
Its optimizers then cast the gradient to fp32 at the step (distrib_optimizer.py copy_group_grads:
shard_model_grad.float(), 4 bytes per parameter of the rank's shard; optimizer.py
_copy_model_grads_to_main_grads: main_grad.float(), 4 per parameter without the distributed
optimizer); that copy lives from the step to the next zero_grad, when no activation is stored,
so it is not part of the backward's peak this module prices. The precision-aware optimizer
hands the bf16 shard over as decoupled_grad and copies nothing.
    PyTorch FSDP  (torchtitan FSDP2, Composer FSDP1): the sharded parameter *is* the fp32 master
                  (MixedPrecisionPolicy param_dtype=bf16 only for the gathered copy), fp32
                  gradients (the sharded parameter's dtype, whatever FSDP reduces in:
                  reduce_dtype only sets the reduce-scatter's), 8 bytes of Adam moments
                                                                                   = 4 + 4 + 8 = 16
ZeRO stage k shards over the data-parallel group (dp*cp ranks): 1 the optimizer state, 2 also the
gradients, 3 also the weights.

NeMo's `distributed_fused_adam` (job.optimizer apex_distributed_adam[_bf16]; `OPTIMIZER_STATE_BYTES`)
replaces Megatron's layout. NeMo 24.07 (r2.0.0rc1, whose Dockerfile pins Apex 810ffae) builds it in
megatron_base_model.py MegatronBaseModel.setup_optimization: param_sync_dtype = the bf16 model dtype
(megatron_amp_O2), store_params False and store_param_remainders True when optim.dtype is fp32, and
store_params False when optim.dtype equals the model dtype (bf16). In Apex
contrib/optimizers/distributed_fused_adam.py:
    weights   2  the bf16 model parameters, views into the contiguous param buffer of
                 param_sync_dtype (init_param_buffer); not sharded
    gradients 2  _init_grad_buffer: one contiguous buffer over all local parameters in
                 grad_sync_dtype (bf16 as the launcher's examples run it); not sharded
    sharded   StateBucket.__init__: param_remainders_shard (int16, 2) with fp32 state, exp_avg_shard
              and exp_avg_sq_shard (optim.dtype: 4 + 4, or 2 + 2 in bf16); and the reduce-scattered
              gradient shard that _finish_bucket_grad_sync keeps in grads_shard until the step
              (grad_sync_dtype, 2): 12 (fp32 state) or 6 (bf16 state) bytes per parameter over the
              data-parallel group (the optimizer's process group is the dp group with context
              parallel ranks, NeMo distributed_adam.py MegatronDistributedFusedAdam.__init__).

FSDP inside a pipeline (ZeRO-3 with pp > 1; cost/framework_rules.py admits it for torchtitan only)
is gathered once per step, not per micro-batch (`pipeline_state_layout`). torchtitan v0.2.0
(29624e37fa, torchtitan/models/llama3/infra/parallelize.py apply_fsdp) resolves its default
reshard_after_forward_policy to `reshard_after_forward = not pp_enabled` ("For PP, by default do
not reshard after forward to avoid per-microbatch all-gathers"), and torch.distributed.pipelining
(torch/distributed/pipelining/stage.py, backward_maybe_with_nosync and perform_reduce_grad)
turns off resharding after backward and the gradient reduction for every micro-batch's backward
and runs FSDP's post-backward (the reduce-scatters, then resharding) in one REDUCE_GRAD action
"scheduled after all microbatches W, B actions". So from the first forward of the step to its
end a stage holds its parameters unsharded in the bf16 param_dtype (2 bytes per parameter) and,
from its first backward, their gradients unsharded: FSDP2 accumulates them in the reduce_dtype
when it differs from param_dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
to_accumulated_grad_if_needed: unsharded_accumulated_grad = grad.to(reduce_dtype)), fp32 in
torchtitan (4). The sharded fp32 parameter, gradient and Adam moments stay as above (16 / dp).
The one transient left is the block's bf16 gradient before it is added into the fp32 buffer.

ZeRO-3 / FSDP keeps some units unsharded at the peak (`zero3_gathered_bytes`):
    FSDP (torchtitan, Composer, Megatron-core FSDP): one unit per transformer block; the block
        being computed and the one prefetched (FSDP2 prefetches one block ahead; FSDP1
        limit_all_gathers allows two in flight), bf16; plus the root unit (embedding, output
        layer, final norm: torchtitan parallelize_llama.apply_fsdp wraps the model with
        reshard_after_forward=not pp), which stays gathered from the start of backward until its
        gradients are reduced at the end; and the reduce-scatter of one block's gradients: the
        unsharded bf16 gradients plus their fp32 reduce_dtype copy.
    DeepSpeed ZeRO-3: the current layer plus the prefetch bucket (stage3_prefetch_bucket_size,
        default 5e7 parameters) in 16 bits; gradients reduced in buckets of reduce_bucket_size
        (default 5e8 elements) 16-bit values. Source: DeepSpeed config-json docs (zero_optimization).

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", Sec. 4, Table 2), written tensor by tensor (`_stashed_tensors`) so that each
framework's choices can be priced: per layer and micro-batch
    s*b*h*(34 + 5*a*s/h)                       no parallelism, standard attention, dropout > 0
    s*b*h*(10 + 24/t + 5*a*s/(h*t))            tensor parallel t
    s*b*h/t*(34 + 5*a*s/h)                     tensor + sequence parallel
generalised to GQA (K, V of kv_hidden width), any ffn width and SwiGLU, multi-head latent
attention (its latents and widths: layer_activation_bytes) and context parallelism (s -> s/cp). The three dropout masks (1 byte per element: residual dropouts after the
attention and MLP blocks, 2*s*b*h, and the attention-probability dropout, a*s*s*b) and the dropout
output (2*a*s*s*b) exist only when the model trains with dropout > 0; without it the attention
multiplies V by the stored softmax output. FlashAttention (Dao et al. 2022, Sec. 3.1) stores no
s x s matrix (it regenerates its dropout mask from the RNG state), only its output and the
log-sum-exp statistics (fp32, one per head and token).

FP8 linears: Transformer Engine (Megatron-LM, Composer amp_fp8) stores each linear's input cast
to fp8 for the weight gradient (TE Linear/LayerNormLinear save the fp8 input), 1 byte instead of
2, and keeps an fp8 copy of every GEMM weight and of its transpose across micro-batches
(`fp8_weight_bytes`): TE 1.8 (7d576ed, the TE_TAG of NeMo r2.0.0rc1's Dockerfile)
module/linear.py Linear.forward casts a bf16 weight through get_fp8_workspace(cache_name="weight",
with_transpose=torch.is_grad_enabled()) whenever is_first_microbatch is not None, and
module/base.py get_fp8_workspace keeps that Float8Tensor (data and transpose) in
self._fp8_workspaces for the module's lifetime; Megatron-core (338af51, NeMo's MCORE_TAG)
custom_layers/transformer_engine.py TELinear.forward passes is_first_microbatch unless
config.disable_parameter_transpose_cache (default False). With fp8_params (TE fp8_model_init)
the parameter itself would be the fp8 tensor; none of the NeMo 24.07 launcher configs of the
published FP8 runs sets it (conf/training/{gpt3,llama,nemotron}/*.yaml at tag 24.07). torchao float8 (torchtitan) saves the high-precision input and weight
(`matmul_with_hp_or_float8_args.forward`: ctx.save_for_backward(input_hp, weight_hp_t)) and casts
to fp8 inside each matmul: no extra stored bytes.

Selective recomputation per framework (`Recompute.SELECTIVE`):
    Megatron-LM / DeepSpeed: the attention core is recomputed (Korthikanti Sec. 4.2): no s x s
        tensors and no flash statistics are stored.
    torchtitan `op` selective AC (parallelize_llama._apply_ac_to_transformer_block, the default
        of its llama3 configs): inside each block, outputs of every other aten.mm (the 1st, 3rd,
        ...), of scaled-dot-product attention and of reduce-scatters are saved, the block input
        is kept, everything else is recomputed in backward.
    Composer has no selective mode (its activation checkpointing is full recompute per block);
        a selective plan is priced as Megatron's.

Loss over the logits, bytes per logit at the start of backward (`LOGITS_BYTES`), per framework:
    Megatron-LM (tensor_parallel/cross_entropy.py): the bf16 logits cast to fp32, softmax computed
        in place and saved (4); backward turns it into the gradient in place, then casts to a bf16
        gradient (2): 6.
    torchtitan (train.py loss_fn: cross_entropy(pred.float(), labels)): log_softmax saves its fp32
        output (4); in backward nll_loss's fp32 gradient (4) and log_softmax's fp32 input gradient
        (4) are alive at once: 12.
    Composer / llm-foundry (MPT default loss_fn 'fused_crossentropy', flash-attn's Triton cross
        entropy): saves the bf16 logits (2) and writes a bf16 gradient (2): 4.

Transformer Engine's tp comm-overlap userbuffers (`userbuffers_bytes`), with job.tp_comm_overlap.

Runtime outside the tensors above (`runtime_bytes`): the CUDA context and NCCL's buffers are
allocated outside PyTorch's caching allocator; the allocator's fragmentation grows with the
dynamic (activation) memory it recycles (`ALLOCATOR_FRAGMENTATION`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.cost.flops import (BF16_BYTES, embedding_params, input_extra_params, latent_width,
                        layer_params, linear_weight_params, memoised_by_model, norm_params,
                        output_params, replicated_layer_params, torchtitan_block_mms)
from paraplan.cost.specs import Framework, JobSpec, Mlp, ModelSpec, Optimizer, Precision, RecomputeModule

FP32_BYTES = 4
FP8_BYTES = 1
MASK_BYTES = 1  # a dropout mask stores one byte per element (torch.bool / uint8)


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state before any sharding."""

    weight: float
    grad: float
    optimizer: float
    # held unsharded whatever the ZeRO stage: FSDP inside a pipeline keeps its gathered bf16
    # weights and its accumulated gradients through the step (pipeline_state_layout)
    weight_whole: float = 0.0
    grad_whole: float = 0.0


STATE_BYTES = {
    Framework.MEGATRON: StateBytes(weight=2, grad=4, optimizer=12),
    Framework.DEEPSPEED: StateBytes(weight=2, grad=2, optimizer=12),
    Framework.TORCHTITAN: StateBytes(weight=4, grad=4, optimizer=8),
    Framework.COMPOSER: StateBytes(weight=4, grad=4, optimizer=8),
}

# Optimizers whose layout is their own, whatever the framework (module docstring)
OPTIMIZER_STATE_BYTES = {
    Optimizer.APEX_DISTRIBUTED_ADAM: StateBytes(weight=2, grad=2, optimizer=2 + 4 + 4 + 2),
    Optimizer.APEX_DISTRIBUTED_ADAM_BF16: StateBytes(weight=2, grad=2, optimizer=2 + 2 + 2),
    # Megatron's layout with bf16 moments: fp32 master weight (4) + momentum (2) + variance (2);
    # DeepSeek-V3 Sec. 3.3.3 keeps master weights and gradients in fp32. (Megatron-core's
    # precision-aware optimizer may keep only the master weight's 16-bit remainder,
    # store_param_remainders: 2 bytes fewer; the Megatron export notes it.)
    Optimizer.ADAM_BF16_MOMENTS: StateBytes(weight=2, grad=4, optimizer=FP32_BYTES + 2 * BF16_BYTES),
}


# Frameworks whose gradient buffer is in the reduce dtype (module docstring); the FSDP ones keep
# the reduced shard in the fp32 parameter's dtype
GRAD_IN_REDUCE_DTYPE = frozenset({Framework.MEGATRON, Framework.DEEPSPEED})


def state_layout(job: JobSpec) -> StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state, before sharding: the
    framework's (or its optimizer's) layout with the gradient in job.grad_reduce's dtype where
    the framework keeps it so."""
    return _state_layout(job.optimizer, job.framework, job.grad_reduce.bytes)


@lru_cache(maxsize=64)
def _state_layout(optimizer: Optimizer, framework: Framework, reduce_bytes: float) -> StateBytes:
    """state_layout of a job by the three fields it reads: pricing asks once per configuration,
    and a dataclass replace costs more than the rest of a stage's memory (issue 33)."""
    sb = OPTIMIZER_STATE_BYTES.get(optimizer) or STATE_BYTES[framework]
    if framework in GRAD_IN_REDUCE_DTYPE:
        return replace(sb, grad=reduce_bytes)
    return sb


def gathered_per_step(zero: int, pp: int) -> bool:
    """Whether ZeRO-3 gathers each stage's parameters once per step rather than per micro-batch:
    FSDP inside a pipeline, as torchtitan runs it (module docstring). The frameworks that do
    not run it refuse such a plan (cost/framework_rules.py), so no other behaviour is priced."""
    return zero == 3 and pp > 1


def pipeline_state_layout(sb: StateBytes, zero: int, pp: int, reduce_bytes: float) -> StateBytes:
    """`sb` with what FSDP inside a pipeline holds unsharded through the step (module
    docstring): the bf16 gathered weight and the gradient accumulated in the reduce dtype
    (`reduce_bytes`, job.grad_reduce); `sb` itself otherwise."""
    if not gathered_per_step(zero, pp):
        return sb
    return _held_whole(sb, reduce_bytes)


@lru_cache(maxsize=64)
def _held_whole(sb: StateBytes, reduce_bytes: float) -> StateBytes:
    return replace(sb, weight_whole=BF16_BYTES, grad_whole=reduce_bytes)


# Megatron-LM with Adam and fp32 gradients: the layout of a job that states nothing
MEGATRON_ADAM = STATE_BYTES[Framework.MEGATRON]


LOGITS_BYTES = {
    Framework.MEGATRON: FP32_BYTES + BF16_BYTES,
    Framework.DEEPSPEED: FP32_BYTES + BF16_BYTES,  # Megatron-DeepSpeed keeps Megatron's loss
    Framework.TORCHTITAN: 3 * FP32_BYTES,
    Framework.COMPOSER: 2 * BF16_BYTES,
}

# DeepSpeed ZeRO-3 defaults (deepspeed.ai/docs/config-json, zero_optimization):
DEEPSPEED_PREFETCH_BUCKET_PARAMS = 5e7  # stage3_prefetch_bucket_size
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 5e8  # reduce_bucket_size

# CUDA context with the CUDA libraries' kernels loaded (cuBLAS, cuDNN, NCCL): about 0.5 GiB on
# current GPUs with lazy module loading (CUDA_MODULE_LOADING=LAZY, CUDA >= 11.7); not counted in
# torch.cuda.memory_reserved().
CUDA_CONTEXT_BYTES = 0.5 * 1024**3
# NCCL: per communicator, channels x peers x NCCL_BUFFSIZE (default 4 MiB, NCCL environment
# variable docs) for the SIMPLE protocol plus the smaller LL/LL128 buffers; with 16 channels and
# two ring peers about 2 * 16 * 4 MiB = 128 MiB per communicator with more than one rank.
NCCL_BYTES_PER_COMMUNICATOR = 2 * 16 * 4 * 1024**2
# Caching-allocator fragmentation (PyTorch CUDACachingAllocator: blocks rounded to 512 B / 2 MiB,
# split blocks of varying size reused across layers): an allowance of 5% of the activation and
# transient bytes, an assumption of this model, not a published figure.
ALLOCATOR_FRAGMENTATION = 0.05


def state_bytes_per_param(zero: int, shard: int, sb: StateBytes = MEGATRON_ADAM) -> float:
    """Bytes per parameter on one GPU for weights + gradients + optimizer state (`sb`:
    state_layout of the job)."""
    w = sb.weight / (shard if zero >= 3 else 1)
    g = sb.grad / (shard if zero >= 2 else 1)
    o = sb.optimizer / (shard if zero >= 1 else 1)
    return w + g + o + sb.weight_whole + sb.grad_whole


def layer_state_bytes(m: ModelSpec, tp: int, zero: int, shard: int,
                      sb: StateBytes = MEGATRON_ADAM) -> float:
    return layer_params(m) / tp * state_bytes_per_param(zero, shard, sb)


def mtp_stage_params(m: ModelSpec, pp: int) -> float:
    """Parameters the last stage holds for multi-token prediction besides its m.mtp_layers
    transformer layers (DeepSeek-V3, arXiv 2412.19437 Sec. 2.2): per depth the projection M_k
    (2h -> h) and the two RMSNorms of its inputs; and, where the stage holds no embedding table
    yet (pp > 1, untied), the copy every depth embeds its shifted tokens with (Megatron-core
    shares it with the first stage's, as it shares a tied one)."""
    if not m.mtp_layers:
        return 0.0
    per_depth = 2 * m.hidden * m.hidden + 2 * m.hidden
    copy = embedding_params(m) if pp > 1 and not m.tied_embeddings else 0.0
    return m.mtp_layers * per_depth + copy


@memoised_by_model(maxsize=256)  # build asks per configuration for its first and last stages
def embedding_stage_params(m: ModelSpec, first: bool, last: bool) -> float:
    """Parameters of the input embedding (first stage: the token table, a learned position
    table, an embedding norm) and output layer (last stage); a copy of a tied embedding lives
    on the last stage too when they differ, as in Megatron-LM."""
    n = 0
    if first:
        n += embedding_params(m) + input_extra_params(m)
    if last:
        n += output_params(m) if (first or not m.tied_embeddings) else embedding_params(m) + norm_params(m)
    return n


def embedding_state_bytes(m: ModelSpec, tp: int, zero: int, shard: int, first: bool, last: bool,
                          sb: StateBytes = MEGATRON_ADAM) -> float:
    return (embedding_stage_params(m, first, last) / tp * state_bytes_per_param(zero, shard, sb))


def fp8_weight_bytes(m: ModelSpec, tp: int, precision: Precision, framework: Framework) -> float:
    """Transformer Engine's cached fp8 weight and its transpose, per layer: 2 bytes per GEMM
    weight parameter; torchao float8 casts weights inside each matmul and caches nothing."""
    if precision is not Precision.FP8 or framework is Framework.TORCHTITAN:
        return 0.0
    rep = replicated_layer_params(m)
    return 2 * FP8_BYTES * ((linear_weight_params(m) - rep) / tp + rep)


def fp8_expert_weight_bytes(expert_params: float, precision: Precision, framework: Framework) -> float:
    """Transformer Engine's cached fp8 weight and transpose of a GPU's routed experts, per MoE
    layer: 2 bytes per expert weight parameter it holds (`expert_params`, its local experts'
    1/etp share), as fp8_weight_bytes for the dense GEMMs: Megatron-core's TEGroupedLinear passes
    is_first_microbatch to Transformer Engine's GroupedLinear like TELinear, which keeps the fp8
    workspaces for the module's lifetime (cost/moe.expert_fp8_cast_elements prices their cast
    once per iteration)."""
    return 2 * FP8_BYTES * expert_params if _te_fp8(precision, framework) else 0.0


def _te_fp8(precision: Precision, framework: Framework) -> bool:
    return precision is Precision.FP8 and framework is not Framework.TORCHTITAN


def linear_input_bytes(precision: Precision, framework: Framework) -> float:
    """Bytes per element of a linear's input stashed for its weight gradient: fp8 where
    Transformer Engine saves its fp8 cast (module docstring), else bf16."""
    return FP8_BYTES if _te_fp8(precision, framework) else BF16_BYTES


def activation_input_bytes(job: JobSpec) -> float:
    """Bytes per element of an MLP activation function's stashed input: bf16, or fp8 with
    job.activation_fp8_input_store (Megatron-core fusions/fused_bias_swiglu.py: the input is
    saved as torch.float8_e4m3fn and cast back in backward; no scale is kept)."""
    return FP8_BYTES if job.activation_fp8_input_store else BF16_BYTES


# DeepSeek-V3's E5M6 (1 sign + 5 exponent + 6 mantissa bits) attention output, with one
# power-of-two scale per 1 x 128 tile (arXiv 2412.19437 Sec. 3.3.3 (1)), the scale counted as
# an fp32 word as DeepEP counts its FP8 tiles' scales (cost/moe.FP8_DISPATCH_BYTES_PER_ELEMENT)
E5M6_BYTES_PER_ELEMENT = 12 / 8 + FP32_BYTES / 128


def job_activation_savings_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool, job: JobSpec) -> float:
    """Bytes of one layer's stash (layer_activation_bytes) that the job's storage options
    remove, one micro-batch (cost/coefficients.megatron_layer subtracts them):

    recompute_modules layernorm   the norms' outputs: the linear inputs that are norm outputs
        (QKV's, or latent attention's down projections' with the second copy Transformer
        Engine fp8 keeps, and MLP-in's), linear_inputs x th/r at their stashed bytes; the
        norms' inputs stay (the recompute reads them). Megatron-core discards the norm output
        (CheckpointWithoutOutput) and, in FP8, has Transformer Engine save the linear's
        original input (set_save_original_input), so no fp8 copy outlives the forward.
    recompute_modules mla_up_proj  latent attention's Q, K, V (2t(q + k + v)/tp) and the up
        projections' normed-latent inputs (t*l/r at their stashed bytes): the checkpoint keeps
        only its inputs, the latents already stashed as the latent norms' inputs, plus the
        rotary key's r_e columns before rotation (2t*r_e/r), which it also reads.
    activation_fp8_input_store     the SwiGLU input, 2 x tf/tp, 1 byte instead of 2.
    attention_output_e5m6          the attention output and the output projection's fp8 copy
        (2 + 1 bytes x t*o/tp) become one E5M6 tensor (E5M6_BYTES_PER_ELEMENT)."""
    t = b * m.seq_len / cp
    h = m.hidden
    r = tp if sp else 1
    lin_in = linear_input_bytes(job.precision, job.framework)
    q, k, v, o = m.attention_widths
    saved = 0.0
    if RecomputeModule.LAYERNORM in job.recompute_modules:
        linear_inputs = 1 if (m.parallel_blocks and m.norms_per_layer == 1) else 2
        saved += linear_inputs * lin_in * t * h / r
        if m.mla is not None and lin_in == FP8_BYTES:
            saved += FP8_BYTES * t * h / r
    if RecomputeModule.MLA_UP_PROJ in job.recompute_modules and m.mla is not None:
        lat = latent_width(m) - m.mla.qk_rope_head_dim
        saved += BF16_BYTES * t * (q + k + v) / tp + lin_in * t * lat / r
        saved -= BF16_BYTES * t * m.mla.qk_rope_head_dim / r
    if job.activation_fp8_input_store and m.mlp is Mlp.SWIGLU:
        saved += (BF16_BYTES - FP8_BYTES) * 2 * t * m.ffn / tp
    if job.attention_output_e5m6:
        fp8_copy = FP8_BYTES if _te_fp8(job.precision, job.framework) else 0.0
        saved += (BF16_BYTES + fp8_copy - E5M6_BYTES_PER_ELEMENT) * t * o / tp
    return saved


def layer_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool, flash: bool,
                           framework: Framework = Framework.MEGATRON,
                           precision: Precision = Precision.BF16) -> float:
    """Stashed activations of one layer for one micro-batch, nothing recomputed.

    Tensor by tensor (t tokens of the micro-batch on this rank, r = tp with sequence parallel
    else 1, q = heads*head_dim; Korthikanti Sec. 4.1): the norms' inputs 2*th/r each (two in a
    sequential block; one, the layer input, shared by every norm of a parallel block); QKV and
    MLP linear inputs 2*2th/r (one shared tensor when a parallel block has a single norm; 1 byte
    each with Transformer Engine fp8); two residual dropout masks 2*th/r if dropout; Q, K, V
    2t(q + 2hk)/tp; attention output 2tq/tp (+ its fp8 copy for the output projection with TE);
    MLP activation-function input 2t*f(x2 SwiGLU)/tp and output 2tf/tp (fp8 with TE); standard
    attention: softmax output 2*a*s*t/tp (+ mask a*s*t/tp and dropout output 2*a*s*t/tp if
    dropout); flash: log-sum-exp 4*a*t/tp. A sliding window stores nothing less: flash keeps no
    score matrix at all, and the unfused kernel materialises the whole masked s x s one.

    Latent attention (ModelSpec.mla, Megatron-core's MLASelfAttention; widths per token,
    l = q_lora_rank + kv_lora_rank, r_e = qk_rope_head_dim), on the down projections' tokens
    (t/r, as the norms: the sequence shard with sp, else all t on every rank): the layer norm's
    output, the down projections' input, 2*th/r as QKV's input (under Transformer Engine fp8 each
    of the two linears reading it saves its own fp8 copy: one more th/r); the latents' RMSNorm inputs, which are
    the down projections' outputs, 2*t*l/r; the up projections' inputs (the normed latents,
    saved sharded by the fused norm-linear and gathered again in backward) 2*t*l/r (1 byte with
    fp8). The rotary key's r_e columns are rotated and concatenated onto every head's key, which
    the core saves. Without query compression the query projection reads the layer norm's
    output too. Q and K are heads x (nope + rope) wide, V and the core's output heads x
    v_head_dim (Q, K, V and the output as above with those widths). The up projections'
    outputs are split and concatenated into Q, K and V, and rotary embedding saves nothing
    (its backward is the inverse rotation), so nothing else is stored; Megatron-core's
    optional recomputation of the up projections (recompute_modules "mla_up_proj") is not in
    the declared space."""
    t = b * m.seq_len / cp
    h, f = m.hidden, m.ffn
    r = tp if sp else 1
    lin_in = FP8_BYTES if _te_fp8(precision, framework) else BF16_BYTES
    dropout = m.dropout > 0
    norm_inputs = 1 if m.parallel_blocks else m.norms_per_layer
    linear_inputs = 1 if (m.parallel_blocks and m.norms_per_layer == 1) else 2
    replicated = norm_inputs * BF16_BYTES * t * h + linear_inputs * lin_in * t * h
    if dropout:
        replicated += 2 * MASK_BYTES * t * h
    if m.mla is not None:
        lat = latent_width(m) - m.mla.qk_rope_head_dim
        replicated += BF16_BYTES * t * lat + lin_in * t * lat
        if lin_in == FP8_BYTES:  # the second linear reading the norm's output keeps its own fp8 copy
            replicated += FP8_BYTES * t * h
    q, k, v, o = m.attention_widths
    split = BF16_BYTES * t * (q + k + v) + BF16_BYTES * t * o
    if _te_fp8(precision, framework):
        split += FP8_BYTES * t * o  # output projection's fp8 input beside the attention output
    split += BF16_BYTES * t * f * (2 if m.mlp is Mlp.SWIGLU else 1) + lin_in * t * f
    total = replicated / r + split / tp
    total += _attention_core_bytes(m, t, tp, flash)
    return total


def _attention_core_bytes(m: ModelSpec, t: float, tp: int, flash: bool) -> float:
    """What the attention core itself stores beyond Q, K, V and its output."""
    if flash:
        return FP32_BYTES * m.heads * t / tp
    per_score = BF16_BYTES + (MASK_BYTES + BF16_BYTES if m.dropout > 0 else 0)
    return per_score * m.heads * m.seq_len * t / tp


def selective_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool,
                               framework: Framework = Framework.MEGATRON,
                               precision: Precision = Precision.BF16) -> float:
    """Stashed activations of one layer under the framework's selective recomputation."""
    if framework is Framework.TORCHTITAN:
        return torchtitan_op_sac_bytes(m, b, tp, cp, sp)
    t = b * m.seq_len / cp
    # Megatron: the attention core is recomputed from Q, K, V: nothing of its own is stored
    return (layer_activation_bytes(m, b, tp, cp, sp, True, framework, precision)
            - _attention_core_bytes(m, t, tp, flash=True))


def torchtitan_op_sac_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """torchtitan's op-level selective AC: block input, every other mm output (1st, 3rd, ...
    in call order wq, wk, wv, wo, w1, [w3,] w2), the SDPA output and log-sum-exp, and with tensor
    parallelism the reduce-scatter outputs. Row-parallel mm outputs (wo, w2) are full-width
    partial sums on every rank. Float8 linears still dispatch aten.mm (on Float8Tensor
    arguments, under the checkpoint's dispatch mode), so the policy is the same for fp8."""
    t = b * m.seq_len / cp
    h, q = m.hidden, m.q_hidden
    r = tp if sp else 1
    # the saved mm outputs: the calls cost/flops.torchtitan_sac_recomputed_flops does not rerun
    saved_mm = sum(n for i, (_, n) in enumerate(torchtitan_block_mms(m, tp)) if i % 2 == 0)
    total = BF16_BYTES * t * h / r  # block input
    total += BF16_BYTES * t * saved_mm
    total += BF16_BYTES * t * q / tp + FP32_BYTES * m.heads * t / tp  # SDPA output + lse
    if tp > 1:
        total += 2 * BF16_BYTES * t * h / tp  # reduce-scatter outputs after wo and w2
    return total


def checkpoint_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int, sp: bool) -> float:
    """A fully recomputed layer keeps only its input."""
    return BF16_BYTES * b * m.seq_len / cp * m.hidden / (tp if sp else 1)


def logits_activation_bytes(m: ModelSpec, b: int, tp: int, cp: int,
                            framework: Framework = Framework.MEGATRON) -> float:
    """Last stage: the logits' bytes alive at the start of backward (LOGITS_BYTES)."""
    return b * m.seq_len / cp * m.vocab / tp * LOGITS_BYTES[framework]


def backward_workspace_bytes(m: ModelSpec, b: int, tp: int, cp: int) -> float:
    """Transient gradient buffers while one layer runs backward: the widest intermediate
    (the MLP's ffn-wide activation, or the QKV output) and its gradient, in bf16."""
    t = b * m.seq_len / cp
    q, k, v, _ = m.attention_widths
    widest = max(m.ffn * (2 if m.mlp is Mlp.SWIGLU else 1), q + k + v) / tp
    return 2 * BF16_BYTES * t * widest


def zero3_gathered_bytes(m: ModelSpec, tp: int, framework: Framework, sb: StateBytes, first: bool,
                         last: bool, expert_params: float = 0.0) -> float:
    """ZeRO-3 / FSDP: unsharded parameters and gradients alive at a stage's peak (module
    docstring). `sb`: the job's state_layout. `first`/`last`: the stage holds the embedding /
    output layer. `expert_params`: an MoE layer's routed-expert weights on one GPU (its experts
    / ep, 1/etp each), gathered with the block they belong to. Inside a pipeline
    (sb.weight_whole: everything is gathered already, pipeline_state_layout) only the block's
    bf16 gradient before FSDP adds it into the accumulated one."""
    block = layer_params(m) / tp + expert_params
    if sb.weight_whole:
        return BF16_BYTES * block
    if framework is Framework.DEEPSPEED:
        params = block + DEEPSPEED_PREFETCH_BUCKET_PARAMS
        grads = min(DEEPSPEED_REDUCE_BUCKET_ELEMENTS, m.layers * block)
        return BF16_BYTES * params + sb.grad * grads
    root = embedding_stage_params(m, first, last) / tp
    reduce_bytes = sb.grad  # the reduce_dtype copy (Megatron-FSDP: its main grads)
    return BF16_BYTES * (2 * block + root) + (BF16_BYTES + reduce_bytes) * block


# Transformer Engine's tp-overlap userbuffers (TE 1.8, module/base.py initialize_ub): one buffer
# per overlapped GEMM of a layer type, of the sample shape its caller passes (NeMo r2.0.0rc1
# megatron_gpt_model.py initialize_ub_func: [seq_length * micro_batch / cp, hidden]). The six
# all-gather overlaps (qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop, fc1_dgrad, fc2_dgrad) hold
# fp8 (uint8) under an fp8 recipe, bf16 otherwise; the four reduce-scatter ones (proj_fprop,
# fc2_fprop, qkv_wgrad, fc1_wgrad) hold bf16. With the default methods (those of the NeMo 24.07
# launcher's tp_overlap configs) each buffer is exactly the sample's bytes
# (csrc/comm_gemm_overlap.h: UbufCommOverlap and, for all-gathers, UbufP2PCommOverlap register
# sample.numel() * element_size()); registered outside PyTorch's caching allocator.
UB_ALL_GATHER_BUFFERS = 6
UB_REDUCE_SCATTER_BUFFERS = 4


def userbuffers_bytes(m: ModelSpec, b: int, cp: int, precision: Precision) -> float:
    """Bytes of Transformer Engine's tp comm-overlap buffers on every GPU (job.tp_comm_overlap)."""
    sample = b * m.seq_len / cp * m.hidden
    ag_bytes = FP8_BYTES if precision is Precision.FP8 else BF16_BYTES
    return sample * (UB_ALL_GATHER_BUFFERS * ag_bytes + UB_REDUCE_SCATTER_BUFFERS * BF16_BYTES)


def communicators(tp: int, cp: int, dp: int, pp: int) -> int:
    """Process groups with more than one rank that a GPU joins (tp, cp, dp*cp, pp)."""
    return (tp > 1) + (cp > 1) + (dp * cp > 1) + (pp > 1)


def runtime_bytes(tp: int, cp: int, dp: int, pp: int) -> float:
    """Memory outside the caching allocator: CUDA context and NCCL buffers."""
    return CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * communicators(tp, cp, dp, pp)
