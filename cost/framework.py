"""How each training framework runs the parts of a plan that the cost model prices differently:
ZeRO/FSDP parameter gathers and gradient reductions, their granularity and overlap.

One record per framework (`behaviour(framework)`); cost/coefficients.py reads only these
fields, so a new framework is a new row, not a new code path. Defaults are each framework's
own defaults (sources inline); what a framework cannot run at all is cost/framework_rules.py.

Granularity matters because every collective call pays NCCL's latency (cost/comm.py): a
layer's parameters gathered as k separate calls over n ranks pay k * (n - 1) ring hops.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.framework_rules import MEGATRON_FEATURE_MONTHS
from paraplan.cost.specs import APEX_OPTIMIZERS, Framework, JobSpec, Precision


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What a framework does that cost/ prices: its sharding, prefetch and overlap habits."""
    framework: Framework
    # --- ZeRO-3 / FSDP full sharding
    # parameter all-gathers per transformer layer: FSDP wraps each transformer block as one
    # unit (one flat all-gather, per_tensor False); DeepSpeed ZeRO-3 fetches parameter by
    # parameter (cost/flops.layer_param_tensors calls per layer)
    gather_per_tensor: bool
    # how far ahead parameters are prefetched, in parameters: FSDP prefetches the whole next
    # block (None: unlimited); DeepSpeed prefetches up to stage3_prefetch_bucket_size
    prefetch_params: float | None
    # parameters gathered for the recompute pass of a fully recomputed layer stay gathered for
    # the backward right after it only if their next use is near: DeepSpeed keeps a parameter
    # whose next use lies within stage3_max_reuse_distance parameters of traversal (default
    # 1e9; partitioned_param_coordinator.__params_to_release walks the trace from the next
    # module and keeps the parameters of modules it reaches before 1e9 parameters are
    # traversed) and re-gathers the rest (`recompute_regather_params`). FSDP runs the
    # recompute inside the block's backward, after its one pre-backward gather (None: always
    # reused)
    max_reuse_distance_params: float | None
    # (the bytes per element of the gradient reduction are the job's: JobSpec.grad_reduce)
    # reduce-scatter of ZeRO-3 gradients: bucket size in parameters (one call each); None:
    # one call per FSDP unit (transformer block)
    scatter_bucket_params: float | None
    # --- data-parallel gradient sync of ZeRO 0-2: bucket size in parameters (one call each);
    # None: one call per FSDP unit (FSDP's SHARD_GRAD_OP / reshard_after_forward=False)
    grad_bucket_params: float | None
    grad_bucket_params_zero2: float | None
    # --- FP8: scales from the tensor's own amax (torchao dynamic tensorwise) rather than from
    # an amax history (Transformer Engine's delayed scaling): cost/flops.fp8_cast_elements
    fp8_dynamic_scaling: bool = False
    # Transformer Engine's LayerNormLinear / LayerNormMLP write the FP8 inputs of QKV, MLP-in
    # and MLP-out from the norm and activation kernels; plain te.Linear casts each input alone
    fp8_fused_input_casts: bool = True
    # FP8 weight copies cast once per iteration and reused by every micro-batch (Megatron-core
    # passes is_first_microbatch to its TE modules) rather than cast again each micro-batch
    fp8_weight_cache: bool = False
    # tensor parallelism's backward collectives overlapped with the weight/input-gradient GEMMs
    # (Megatron-LM's async tensor-model-parallel all-reduce: cost/coefficients.tp_backward_exposed);
    # False: every backward collective on the critical path (torchtitan's DTensor TP without
    # its compile-only async TP)
    tp_backward_async: bool = False
    # --- HBM bytes per logit element, each micro-batch, of the memory-bound kernels run on the
    # logits (the loss forward and backward, and anything else the framework evaluates on
    # them; not the logits GEMM's own output store); derived in the comment before _TABLE.
    loss_bytes_per_logit: float = 12.0
    # --- full recomputation through torch.utils.checkpoint's non-reentrant implementation,
    # which by default stops a layer's recompute once every tensor its backward saved has
    # been rebuilt (torch/utils/checkpoint.py, set_checkpoint_early_stop: "By default,
    # non-reentrant checkpoint stops recomputation as soon as it has computed all needed
    # Tensors"). A pre-norm block's last saved tensor is the MLP-out linear's input, so the
    # MLP-out GEMM (with its tensor-parallel collective) and the residual add after it are not
    # replayed. Megatron-LM and DeepSpeed replay whole layers with their own reentrant
    # CheckpointFunction.
    recompute_early_stop: bool = False
    # --- attention through Transformer Engine's DotProductAttention, which on Hopper and newer
    # prefers cuDNN's fused attention to FlashAttention ("Disabling FlashAttention to give
    # FusedAttention preference on Hopper+ for performance reasons": get_attention_backend in
    # transformer_engine/pytorch/attention.py, TE 1.x); on Ampere it runs FlashAttention-2.
    # TE runs the kernel it calls (cuDNN's, or Dao's FlashAttention-2 with NVTE_FUSED_ATTN=0:
    # JobSpec.cudnn_attention) at that kernel's benchmark, as NeMo's and Megatron-core's
    # published runs measure (cost/coefficients.attention_efficiency). The others' training
    # steps reach a fitted fraction of FlashAttention-2's benchmark, whatever kernel they call
    # (llm-foundry's attn_impl 'triton' or 'flash'; torchtitan and DeepSpeed through torch's
    # scaled_dot_product_attention).
    te_fused_attention: bool = False


# Loss traffic per logit element (`Behaviour.loss_bytes_per_logit`), counted per kernel, each
# reading its inputs once and writing its output once (a lower bound: PyTorch's softmax
# kernels read a row again when it is too long for shared memory):
#   Megatron-LM / DeepSpeed, torchtitan: the logits cast to fp32 for the loss and the fp32
#     gradient cast back, with the loss's own passes over them in between; itemised as two
#     passes of bf16 read + fp32 write (12), the count this model has always used for them.
#   Composer / llm-foundry MPT: the loss is flash-attn's fused cross entropy
#     (ComposerMPTCausalLM loss_fn 'fused_crossentropy'): forward reads the bf16 logits (2),
#     backward reads them again and writes the bf16 gradient (4). After every micro-batch's
#     backward Composer also updates the model's train metrics on that micro-batch's logits
#     (composer/trainer/trainer.py, _train_microbatch -> _eval_train_metrics, under the run's
#     autocast precision context); MPT's are LanguageCrossEntropy and LanguagePerplexity
#     (llmfoundry/models/mpt/modeling_mpt.py), each a torch CrossEntropyLoss, which autocast
#     runs in fp32: the cast (read 2, write 4) and log_softmax (read 4, write 4), 14 each.
#     6 + 2 x 14 = 34.
LOSS_BYTES_FUSED_CE = 2 + 2 + 2
LOSS_BYTES_TORCH_CE_METRIC_FP32 = (2 + 4) + (4 + 4)
COMPOSER_MPT_TRAIN_METRICS = 2

_TABLE = {
    # Megatron-core DDP: buckets of max(40M, 1M x dp) parameters
    # (--ddp-bucket-size), overlapped with backward (--overlap-grad-reduce, set by NeMo);
    # Megatron-FSDP gathers per transformer block like torch FSDP.
    Framework.MEGATRON: Behaviour(Framework.MEGATRON, gather_per_tensor=False, prefetch_params=None,
                                  max_reuse_distance_params=None, scatter_bucket_params=None,
                                  grad_bucket_params=40e6, grad_bucket_params_zero2=40e6,
                                  fp8_weight_cache=True, tp_backward_async=True,
                                  te_fused_attention=True),
    # torchtitan: FSDP2 per transformer block, reshard after forward; full AC wraps each block in
    # ptd_checkpoint_wrapper, whose default is the non-reentrant checkpoint; DDP (dp_replicate)
    # buckets of 25 MB (torch DistributedDataParallel's bucket_cap_mb default) of fp32
    # gradients. Float8 linears are torchao's Float8Linear with its default dynamic tensorwise
    # recipe.
    Framework.TORCHTITAN: Behaviour(Framework.TORCHTITAN, gather_per_tensor=False, prefetch_params=None,
                                    max_reuse_distance_params=None, scatter_bucket_params=None,
                                    grad_bucket_params=25e6 / 4, grad_bucket_params_zero2=None,
                                    fp8_dynamic_scaling=True, recompute_early_stop=True),
    # DeepSpeed ZeRO-3: stage3_prefetch_bucket_size 5e7 parameters, one all-gather per
    # parameter tensor ("ZeRO3 launches too many all_gathers", deepspeedai/DeepSpeed#5047;
    # gathers dominating the forward even on NVLink, #1174), reduce_bucket_size 5e8 elements.
    Framework.DEEPSPEED: Behaviour(Framework.DEEPSPEED, gather_per_tensor=True, prefetch_params=5e7,
                                   max_reuse_distance_params=1e9, scatter_bucket_params=5e8,
                                   grad_bucket_params=5e8, grad_bucket_params_zero2=5e8),
    # Composer (llm-foundry): torch FSDP1, one unit per block, BACKWARD_PRE prefetch; the MPT
    # recipes train with mixed_precision PURE (bf16 reduce: cost/specs.REDUCES_IN_TRAINING_DTYPE). FP8 (amp_fp8) swaps the
    # linears for plain te.Linear (`fc_type: te`, scripts/train/benchmarking/submit_benchmarks.py
    # on H100), which MPT calls without is_first_microbatch: every input and every weight is
    # cast in a kernel of its own, each micro-batch. Activation checkpointing is non-reentrant
    # (submit_benchmarks.py sets fsdp_config.activation_checkpointing_reentrant = False).
    Framework.COMPOSER: Behaviour(Framework.COMPOSER, gather_per_tensor=False, prefetch_params=None,
                                  max_reuse_distance_params=None, scatter_bucket_params=None,
                                  grad_bucket_params=25e6 / 2, grad_bucket_params_zero2=None,
                                  fp8_fused_input_casts=False, recompute_early_stop=True,
                                  loss_bytes_per_logit=LOSS_BYTES_FUSED_CE
                                  + COMPOSER_MPT_TRAIN_METRICS * LOSS_BYTES_TORCH_CE_METRIC_FP32),
}


def behaviour(framework: Framework) -> Behaviour:
    return _TABLE[framework]


def recompute_stops_early(job: JobSpec) -> bool:
    """Whether a full recompute stops before MLP-out (Behaviour.recompute_early_stop): the job's
    own setting where it gives one, else the framework's, except Composer in FP8: llm-foundry
    switches activation checkpointing to the reentrant implementation for te.Linear layers
    (scripts/train/train.py of its FP8 benchmark release, October 2023: "`te.Linear` layers do
    not support activation_checkpointing with `activation_checkpointing_reentrant = False`"),
    and the reentrant one replays the whole block."""
    if job.recompute_early_stop is not None:
        return job.recompute_early_stop
    if job.framework is Framework.COMPOSER and job.precision is Precision.FP8:
        return False
    return behaviour(job.framework).recompute_early_stop


def grad_reduce_overlaps(job: JobSpec, pp: int, v: int, zero: int) -> bool:
    """Whether the data-parallel gradient reduction of a ZeRO 0-2 plan can hide behind the last
    micro-batch's backward (cost/coefficients prices it so) rather than run after it.

    Megatron-LM's own reduction (its local DDP and distributed optimizer; not NeMo's Apex
    optimizers, which overlap their own) overlaps from --overlap-grad-reduce on (2023-08,
    framework_rules.MEGATRON_FEATURE_MONTHS), or as job.grad_reduce_overlap states. Before it
    Megatron-LM reduced after the backward, except through PyTorch's DistributedDataParallel
    (--DDP-impl torch), whose bucket hooks overlap the backward: Megatron-LM ran that only
    without pipelining, interleaving or a sharded optimizer (megatron/training.py at v2.6 asserts
    local DDP for pp > 1 or several model chunks; the distributed optimizer is its own), so a
    plan with pp = v = 1 and ZeRO-0 overlaps in every release. Other frameworks: overlapped."""
    if job.framework is not Framework.MEGATRON or job.optimizer in APEX_OPTIMIZERS:
        return True
    if pp == 1 and v == 1 and zero == 0:
        return True
    if job.grad_reduce_overlap is not None:
        return job.grad_reduce_overlap
    r = job.release
    return (r.year, r.month) >= MEGATRON_FEATURE_MONTHS["overlap_grad_reduce"]


def gather_calls(b: Behaviour, layer_tensors: int) -> int:
    """All-gather calls for one layer's parameters."""
    return layer_tensors if b.gather_per_tensor else 1


def bucket_calls(bucket_params: float | None, params: float) -> float:
    """Collective calls for `params` parameters reduced in buckets of `bucket_params` (a layer's
    share of the calls when buckets span layers); one per FSDP unit when None."""
    return 1.0 if bucket_params is None else params / bucket_params


def recompute_regather_params(b: Behaviour, weight_sizes: tuple[float, ...]) -> float:
    """Parameters of one fully recomputed layer gathered a second time for its backward.

    The recompute forward uses the weights w_1..w_k in order; the backward then uses them in
    reverse. After w_j's recompute use, the modules up to its backward use carry
    2 * (w_{j+1} + ... + w_k) parameters, so w_j is released (and re-gathered) when that reaches
    the reuse distance D. GPT-3 175B (h = 12288): QKV, out and fc1 (1.21e9 of 1.81e9
    parameters) are re-gathered at D = 1e9; a 1.3B model's layers (5e7) keep everything.
    """
    if b.max_reuse_distance_params is None:
        return 0.0
    total, after = 0.0, 0.0
    for w in reversed(weight_sizes):
        if 2 * after >= b.max_reuse_distance_params:
            total += w
        after += w
    return total
