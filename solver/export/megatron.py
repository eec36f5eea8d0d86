"""A plan as Megatron-LM arguments: a bash snippet with the environment the arguments need and
a `MEGATRON_ARGS=(...)` array, one flag per line, for `pretrain_gpt.py "${MEGATRON_ARGS[@]}"`.

Flag names, values and the constraints `validate_args` enforces were read from NVIDIA/Megatron-LM
main, megatron/training/arguments.py (and the TransformerConfig / ModelParallelConfig fields it
turns into flags) at commit d98e8a64ddf3 (2026-08-22): `MEGATRON_VERSION`. The ones this module
relies on:
- `--num-layers-per-virtual-pipeline-stage`, `--num-virtual-stages-per-pipeline-rank` and
  `--pipeline-model-parallel-layout` are mutually exclusive; uneven first/last stages with
  interleaving need `--num-virtual-stages-per-pipeline-rank`.
- `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split` count the
  embedding / loss as a layer: num_layers plus those must divide by pp, and each rank's share by
  the virtual stages (TransformerConfig); they exclude the first/last counts and the layout.
  cost/pipeline_split.py states the placement rules (R1-R6) these flags select.
- `--overlap-param-gather` needs `--overlap-grad-reduce` and the distributed optimizer or
  Megatron-FSDP.
- Megatron-FSDP (`--use-megatron-fsdp`, version 1) runs with the distributed optimizer, needs
  `--ckpt-format fsdp_dtensor` and CUDA_DEVICE_MAX_CONNECTIONS unset or > 1; without FSDP,
  tensor or context parallelism before Blackwell needs CUDA_DEVICE_MAX_CONNECTIONS=1.
- `--data-parallel-sharding-strategy`: optim (ZeRO-1), optim_grads (ZeRO-2), optim_grads_params
  (ZeRO-3). `--use-torch-fsdp2` refuses pipeline parallelism, as Megatron-FSDP is used here.
- seq_length must be a multiple of 2 * context-parallel-size (load-balanced causal chunks).
- Megatron's defaults that differ from what paraplan prices, and so are always written out:
  hidden/attention dropout 0.1, biases on every linear, learned absolute positions, LayerNorm,
  tied embeddings, GELU, full attention (num_query_groups = heads), DDP buckets of
  max(40M, 1M x dp) parameters, vocabulary padded to a multiple of 128 x tp.
"""

from __future__ import annotations

from paraplan.cost.errors import ConfigError
from paraplan.cost.framework import behaviour
from paraplan.cost.moe import a2a_overlap_applies, ep_links, shared_overlap_applies
from paraplan.cost.pipeline_split import megatron_split
from paraplan.cost.specs import (Attention, Framework, GradReduceDtype, Instance, JobSpec, Mlp,
                                 MoeDispatcher, Optimizer, Precision, Recompute,
                                 RecomputeModule)
from paraplan.cost.plan_specs import Plan
from paraplan.solver.export.common import (Deviations, Emitted, ExportRefused, exporter, model_chunks,
                                          refuse_dualpipe)

MEGATRON_VERSION = "Megatron-LM main, commit d98e8a64ddf3 (2026-08-22)"
# cost/framework.py prices Megatron's gradient buckets at this many parameters
_DDP_BUCKET_PARAMS = int(behaviour(Framework.MEGATRON).grad_bucket_params)
_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def runnable(inst: Instance, plan: Plan) -> Emitted:
    """The closest configuration Megatron-LM runs (module docstring of common.py)."""
    refuse_dualpipe(inst, Framework.MEGATRON)
    d = Deviations(inst, plan, Framework.MEGATRON)
    p = d.plan
    if p.zero >= 2 and p.pp > 1 and p.dp * p.cp > 1:
        d.deviate(f"ZeRO-{p.zero} with pipeline parallelism: Megatron-LM runs ZeRO-2/3 only as"
                  " FSDP, which refuses pp > 1 (arguments.py); emitted ZeRO-1, the distributed"
                  " optimizer (more memory than planned)", zero=1)
    if p.cp > 1 and d.inst.model.seq_len % (2 * p.cp):
        raise ExportRefused(f"seq_len {d.inst.model.seq_len} with context parallel degree {p.cp}:"
                            " Megatron-LM needs seq_len divisible by 2 * cp (validate_args)")
    _recompute(d)
    _vocab(d)
    _deepseek_options(d)
    _memory_options(d)
    if d.inst.job.precision is Precision.FP8:
        d.note("FP8 runs through Transformer Engine (--fp8-format hybrid, delayed per-tensor"
               " scaling): install it with Megatron-LM")
    return d.done()


def _deepseek_options(d: Deviations) -> None:
    """DeepSeek-V3's options as Megatron-LM runs them (its DualPipe schedule is refused before,
    common.refuse_dualpipe: Megatron-LM has no DualPipe). Its dispatcher (deepep) is
    Megatron-core's flex token dispatcher with the DeepEP backend, and node-limited routing its
    group-limited routing with one group per NVLink domain of the ep group (_moe_flags).
    Node-limited routing that Megatron's groups cannot express (top-k not a multiple of the
    node limit) is named in a note and left out."""
    moe = d.inst.model.moe
    if moe is not None and moe.max_nodes_per_token is not None and moe.top_k % moe.max_nodes_per_token:
        d.note(f"model.moe.max_nodes_per_token {moe.max_nodes_per_token}: Megatron-core's group-limited"
               f" routing takes top_k / group_topk experts per group, so it needs the top-k"
               f" ({moe.top_k}) a multiple of the node limit; routing flags not emitted")


def _routing_groups(inst: Instance, p: Plan) -> int | None:
    """Megatron-core's moe_router_num_groups for node-limited routing (model.moe.
    max_nodes_per_token): one group per NVLink domain the ep group spans, as cost/moe.py counts
    them (ep / ep_links.per_domain; TransformerConfig.moe_router_num_groups: "Node-limited
    routing: set to the number of nodes in the EP group", Megatron-LM d98e8a6). Megatron-core
    lays experts out in order over the ep ranks, so each group's experts are one domain's. None
    where the limit cannot bind (no more domains than it allows) or cannot be expressed."""
    moe = inst.model.moe
    M = moe.max_nodes_per_token
    if M is None or moe.top_k % M:
        return None
    groups = p.ep // ep_links(inst.cluster.one_group, p.ep, p.expert_tp).per_domain
    return groups if groups > M else None


def _memory_options(d: Deviations) -> None:
    """DeepSeek-V3's memory savings (cost/specs.JobSpec) as Megatron-LM runs them: the E5M6
    attention output exists in no framework; the fp8 activation input is a TransformerConfig
    field without a command-line flag; the layernorm and moe_act recomputes Megatron-core
    refuses under the delayed FP8 recipe the export writes (TransformerConfig at d98e8a6:
    "Delayed scaling does not support moe_act and layernorm recompute for fp8"). The bf16
    moments and the other recomputes are emitted."""
    job = d.inst.job
    if job.activation_fp8_input_store:
        d.deviate("job.activation_fp8_input_store: Megatron-core's TransformerConfig field"
                  " activation_func_fp8_input_store has no command-line flag in Megatron-LM at"
                  " d98e8a6 (arguments.py excludes it); emitted the bf16 activation input (more"
                  " memory than planned)")
        d.set_job(activation_fp8_input_store=False)
    if job.attention_output_e5m6:
        d.deviate("job.attention_output_e5m6: DeepSeek-V3's E5M6 attention output is in no"
                  " framework; emitted Transformer Engine's bf16 output and fp8 copy (more memory"
                  " than planned)")
        d.set_job(attention_output_e5m6=False)
    refused = [x for x in job.recompute_modules
               if x in (RecomputeModule.LAYERNORM, RecomputeModule.MOE_ACT)]
    if refused and job.precision is Precision.FP8:
        d.deviate("job.recompute_modules " + " ".join(x.value for x in refused) + ": Megatron-core"
                  " refuses them with the delayed FP8 recipe the export writes; emitted without"
                  " them (more memory than planned)")
        d.set_job(recompute_modules=tuple(x for x in job.recompute_modules if x not in refused))
    if job.optimizer is Optimizer.ADAM_BF16_MOMENTS:
        d.note("job.optimizer adam_bf16_moments: Megatron-core's precision-aware optimizer keeps"
               " only the 16-bit remainder of each fp32 master weight by default"
               " (store_param_remainders), 2 bytes per parameter fewer than priced")


def _recompute(d: Deviations) -> None:
    p = d.plan
    n, r, v = p.layers_per_stage, p.full_recompute_layers, p.virtual_stages
    if not any(r):
        return
    # --recompute-method block recomputes the first N layers of every model chunk (one chunk
    # per stage, v with interleaving), so stage s gets the sum over its chunks of min(N, chunk
    # layers). A plan made for Megatron-LM holds such counts (cost/recompute_patterns.py; a plan
    # file that does not is refused by check_against), and the least N that gives them is
    # emitted as planned. Only a plan made for another framework (DeepSpeed's per-stage counts,
    # torchtitan's every k-th block) can need more: the least N that reaches every stage's count.
    per_chunk = _recompute_per_chunk(p)
    got = tuple(sum(min(per_chunk, c) for c in row) for row in p.chunk_layers)
    if got != r:
        where = "per model chunk on every pipeline stage" if v > 1 else "to every pipeline stage"
        d.deviate(f"the per-stage full-recompute counts {list(r)}: Megatron-LM applies one"
                  f" --recompute-num-layers {where}; emitted {per_chunk}, which fully recomputes"
                  f" {list(got)} layers per stage (slower than planned, not more memory)",
                  full_recompute_layers=got)
    if p.recompute is Recompute.SELECTIVE and got != n:
        d.deviate("selective recompute of the layers not fully recomputed: Megatron-LM's"
                  " --recompute-granularity takes one value and full was emitted, so those"
                  " layers keep all their activations", recompute=Recompute.NONE)


def _recompute_per_chunk(p: Plan) -> int:
    """The least --recompute-num-layers N for which every stage fully recomputes at least its
    planned count: sum over its chunks of min(N, chunk layers) >= full_recompute_layers[s]."""
    chunks = p.chunk_layers
    return next(N for N in range(max(max(row) for row in chunks) + 1)
                if all(sum(min(N, c) for c in row) >= r for row, r in zip(chunks, p.full_recompute_layers)))


def vocab_divisor(vocab: int, tp: int) -> int | None:
    """The largest --make-vocab-size-divisible-by (a power of two up to Megatron's default 128)
    for which Megatron pads `vocab` to itself: vocab divisible by divisor * tp. None if none."""
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return None


def _vocab(d: Deviations) -> None:
    m, tp = d.inst.model, d.plan.tp
    if vocab_divisor(m.vocab, tp) is None:
        multiple = 128 * tp
        padded = -(-m.vocab // multiple) * multiple
        d.note(f"Megatron-LM pads the {m.vocab}-token vocabulary to a multiple of"
               f" --make-vocab-size-divisible-by x tp; {m.vocab} is not divisible by tp = {tp},"
               f" so it becomes {padded} (the default 128 x {tp}); priced with {padded}")
        d.set_model(vocab=padded)


# --- rendering -----------------------------------------------------------------------------

Flag = tuple[str, object, str | None]  # (flag, value or None, comment or None)


def _model_flags(m, p: Plan) -> list[Flag]:
    """The model's shape, as cost/flops.py prices it."""
    model: list[Flag] = [
        ("--num-layers", m.layers, None), ("--hidden-size", m.hidden, None),
        ("--ffn-hidden-size", m.ffn, None), ("--num-attention-heads", m.heads, None),
    ]
    if m.mla is not None:  # Megatron-core's MLASelfAttention, as cost/flops.py prices it
        a = m.mla
        model += [("--multi-latent-attention", None, None)]
        if a.q_lora_rank is not None:
            model.append(("--q-lora-rank", a.q_lora_rank, None))
        model += [("--kv-lora-rank", a.kv_lora_rank, None), ("--qk-head-dim", a.qk_nope_head_dim, None),
                  ("--qk-pos-emb-head-dim", a.qk_rope_head_dim, None), ("--v-head-dim", a.v_head_dim, None),
                  ("--qk-layernorm", None, "the latents' RMSNorms, priced")]
    else:
        model.append(("--kv-channels", m.head_dim, "head dimension"))
    if m.kv_heads != m.heads:
        model += [("--group-query-attention", None, None), ("--num-query-groups", m.kv_heads, None)]
    model += [("--seq-length", m.seq_len, None), ("--max-position-embeddings", m.seq_len, None)]
    if m.mlp is Mlp.SWIGLU:
        model.append(("--swiglu", None, None))
    if not m.tied_embeddings:
        model.append(("--untie-embeddings-and-output-weights", None, None))
    if m.mtp_layers:  # Megatron-core runs the MTP modules on the last pipeline stage, as priced
        model.append(("--mtp-num-layers", m.mtp_layers, "multi-token prediction depth"))
    model += [
        ("--normalization", "RMSNorm" if m.mlp is Mlp.SWIGLU else "LayerNorm",
         "not in the instance: RMSNorm for SwiGLU models, LayerNorm for GELU ones; match your checkpoint"),
        ("--position-embedding-type", "rope", "paraplan prices no position-embedding weights"),
        ("--disable-bias-linear", None, "paraplan prices no linear biases"),
        ("--hidden-dropout", m.dropout, "Megatron's default is 0.1"),
        ("--attention-dropout", m.dropout, None),
        ("--vocab-size", m.vocab, "your tokenizer's vocabulary"),
    ]
    divisor = vocab_divisor(m.vocab, p.tp)
    model.append(("--make-vocab-size-divisible-by", divisor or 128,
                  f"padded vocabulary: {m.vocab} with tp = {p.tp}"))
    return model


def _parallel_flags(m, p: Plan, job) -> list[Flag]:
    """The degrees (the layer split's flags follow them: _split_flags)."""
    par: list[Flag] = [
        ("--tensor-model-parallel-size", p.tp, None),
        ("--pipeline-model-parallel-size", p.pp, None),
        ("--context-parallel-size", p.cp, None),
    ]
    if p.cp > 1:
        par.append(("--cp-comm-type", "p2p", "ring exchange of K/V blocks, as paraplan prices it"))
    if m.moe is not None:
        par += [("--expert-model-parallel-size", p.ep, "experts sharded over ep ranks of tp x dp x cp,"
                 " etp apart"),
                ("--expert-tensor-parallel-size", p.expert_tp,
                 "each expert split like a dense MLP, as priced" if p.etp is None else
                 "parallel folding: each expert split over etp GPUs, the ep group folded over the"
                 " attention's tp x cp x dp ranks, as priced")]
    if p.sequence_parallel:
        par.append(("--sequence-parallel", None, None))
        if job.tp_comm_overlap and p.tp > 1:
            par.append(("--tp-comm-overlap", None, "job.tp_comm_overlap: Transformer Engine"
                        " userbuffers pipeline the tp collectives with the GEMMs, as priced"))
    return par


def _precision_flags(job) -> list[Flag]:
    """Precision and the attention kernel, as cost/ prices them."""
    prec: list[Flag] = []
    if job.precision is Precision.FP16:
        prec.append(("--fp16", None, None))
    else:
        prec.append(("--bf16", None, None))
    if job.precision is Precision.FP8:
        prec += [("--fp8-format", "hybrid", "e4m3 forward, e5m2 gradients"),
                 ("--fp8-recipe", "delayed", "per-tensor scaling (Transformer Engine)")]
    prec.append(("--attention-backend", "flash" if job.attention is Attention.FLASH else "unfused",
                 None if job.attention is Attention.FLASH else "job.attention: standard stores the s x s scores"))
    return prec


def render(inst: Instance, e: Emitted) -> str:
    m, p, job = e.inst.model, e.plan, e.inst.job
    fsdp = p.zero >= 2 and p.dp * p.cp > 1
    sections: list[tuple[str, list[Flag]]] = [("model", _model_flags(m, p))]
    if m.moe is not None:
        flags = _moe_flags(m, job, _routing_groups(e.inst, p))
        if a2a_overlap_applies(job, p.flat_outer):
            flags.append(("--overlap-moe-expert-parallel-comm", None,
                          "job.moe_a2a_overlap: the all-to-alls run under the paired"
                          " micro-batch's compute (combined 1F1B), as priced"))
        if shared_overlap_applies(job, p.flat_outer):
            flags.append(("--moe-shared-expert-overlap", None,
                          "job.moe_shared_expert_overlap: the shared expert runs under the"
                          " all-to-alls, as priced"))
        sections.append(("mixture of experts", flags))

    par = _parallel_flags(m, p, job) + _split_flags(p)
    sections.append(("parallelism (data parallel size = world size / (tp * pp * cp) ="
                     f" {p.dp})", par))

    sections.append(("batch", [("--micro-batch-size", p.micro_batch, None),
                               ("--global-batch-size", job.global_batch,
                                f"{p.num_micro_batches} micro-batches per step")]))
    rec = _recompute_flags(p, job)
    if rec:
        sections.append(("activation recompute", rec))
    zero = _zero_flags(p, fsdp, job)
    if job.optimizer is Optimizer.ADAM_BF16_MOMENTS:
        if not any(flag == "--use-distributed-optimizer" for flag, _, _ in zero):
            zero.append(("--use-distributed-optimizer", None, "the precision-aware optimizer runs only in it"))
        zero += [("--use-precision-aware-optimizer", None, "job.optimizer adam_bf16_moments"),
                 ("--exp-avg-dtype", "bf16", "Adam's first moment in bf16, as priced"),
                 ("--exp-avg-sq-dtype", "bf16", "Adam's second moment in bf16, as priced")]
    sections.append((_zero_title(p), zero))

    sections.append(("precision and kernels", _precision_flags(job)))

    lines = [f"# Megatron-LM arguments for {inst.name} (paraplan export; plan made for"
             f" {inst.job.framework.value}).",
             f"# Flags and constraints as in megatron/training/arguments.py of {MEGATRON_VERSION}.",
             '# Run: torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" plus your data, tokenizer,'
             " optimizer and learning-rate arguments."]
    if fsdp:
        lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP needs it unset or > 1"
                     " (validate_args)")
    elif p.tp > 1 or p.cp > 1:
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1  # validate_args: tensor/context"
                     " parallelism before Blackwell, so communication is issued in order")
    if not inst.job.cudnn_attention:
        lines.append("export NVTE_FUSED_ATTN=0  # job.cudnn_attention: false: Transformer Engine runs"
                     " FlashAttention-2, not cuDNN's fused attention")
    lines.append("MEGATRON_ARGS=(")
    for title, flags in sections:
        lines.append(f"  # {title}")
        for flag, value, comment in flags:
            text = flag if value is None else f"{flag} {value}"
            lines.append(f"  {text}" + (f"  # {comment}" if comment else ""))
    lines.append(")")
    return "\n".join(lines) + "\n"


def _moe_flags(m, job, routing_groups: int | None) -> list[tuple[str, object, str | None]]:
    """The MoE layers as cost/moe.py prices them: Megatron-core's all-to-all token dispatcher,
    or with job.moe_dispatcher deepep its flex dispatcher on the DeepEP backend
    (TransformerConfig.moe_token_dispatcher_type / moe_flex_dispatcher_backend, Megatron-LM
    d98e8a6); node-limited routing over `routing_groups` groups (_routing_groups); dropless
    unless a capacity factor is given; the local experts as one grouped GEMM (priced per expert
    on the size-dependent matmul curve, an upper bound on its time)."""
    moe = m.moe
    flags: list[tuple[str, object, str | None]] = [
        ("--num-experts", moe.experts, None), ("--moe-router-topk", moe.top_k, None),
        ("--moe-ffn-hidden-size", moe.expert_ffn, None)]
    if moe.shared_ffn:
        flags.append(("--moe-shared-expert-intermediate-size", moe.shared_ffn, None))
    if moe.dense_layers:
        flags.append(("--moe-layer-freq", f"'([0]*{moe.dense_layers}+[1]*{m.layers - moe.dense_layers})'",
                      "dense layers first"))
    if job.moe_dispatcher is MoeDispatcher.DEEPEP:
        flags += [("--moe-token-dispatcher-type", "flex", "job.moe_dispatcher deepep, as priced"),
                  ("--moe-flex-dispatcher-backend", "deepep", None)]
    else:
        flags.append(("--moe-token-dispatcher-type", "alltoall", "the all-to-all paraplan prices"))
    if routing_groups is not None:
        flags += [("--moe-router-num-groups", routing_groups,
                   "node-limited routing: one group per NVLink domain of the ep group"),
                  ("--moe-router-group-topk", m.moe.max_nodes_per_token, "model.moe.max_nodes_per_token")]
    flags += [("--moe-grouped-gemm", None, None),
              ("--moe-router-dtype", "fp32", "fp32 router probabilities, as priced"),
              ("--moe-router-load-balancing-type", "aux_loss", None)]
    if moe.capacity_factor is not None:
        flags.append(("--moe-expert-capacity-factor", moe.capacity_factor, None))
    return flags


def _split_flags(p: Plan) -> list[tuple[str, object, str | None]]:
    """The flags that make Megatron-core build the plan's split (cost/pipeline_split.py's rules
    R2-R6): the embedding/loss accounting where the plan counts them and its split is the one
    that accounting builds, else the even split, the first/last counts, or the layout."""
    n, v = p.layers_per_stage, p.virtual_stages
    if p.embedding_in_split or p.loss_in_split:
        try:
            accounted = megatron_split(sum(n), p.pp, v, embedding=p.embedding_in_split,
                                       loss=p.loss_in_split)
        except ConfigError:
            accounted = None
        if accounted != n:  # only the layout places these chunk counts
            return [("--pipeline-model-parallel-layout", f'"{megatron_layout(p)}"',
                     f"layers per stage {list(n)}, the embedding/loss in a chunk's layer slot")]
        flags = [(f"--account-for-{part}-in-pipeline-split", None,
                  f"the {part} takes one layer slot of its stage's " + ("first" if part == "embedding" else "last")
                  + f" chunk: layers per stage {list(n)}")
                 for part, on in (("embedding", p.embedding_in_split), ("loss", p.loss_in_split)) if on]
        if v > 1:
            flags.append(("--num-virtual-stages-per-pipeline-rank", v, None))
        return flags
    if len(set(n)) == 1:
        return [("--num-layers-per-virtual-pipeline-stage", n[0] // v, None)] if v > 1 else []
    middle = n[1:-1]
    if len(set(middle)) > 1:
        # only the layout expresses unequal middle stages; it also fixes the virtual stages
        return [("--pipeline-model-parallel-layout", f'"{megatron_layout(p)}"',
                 f"layers per stage {list(n)}")]
    flags: list[tuple[str, object, str | None]] = []
    # Megatron-core gives the remaining layers evenly to the stages between the first and the
    # last; with pp = 2 there are none, so the first stage's count fixes the split.
    if not middle or n[0] != middle[0]:
        flags.append(("--decoder-first-pipeline-num-layers", n[0], None))
    if middle and n[-1] != middle[0]:
        flags.append(("--decoder-last-pipeline-num-layers", n[-1], None))
    if v > 1:
        flags.append(("--num-virtual-stages-per-pipeline-rank", v, None))
    return flags


def megatron_layout(plan: Plan) -> str:
    """The split as a --pipeline-model-parallel-layout string: one '|'-separated entry per
    model chunk in the order k = c*pp + s; E = embedding, t = transformer layer, L = loss."""
    chunks = model_chunks(plan)
    out = []
    for k, (_, _, count) in enumerate(chunks):
        parts = ["E"] if k == 0 else []
        if count:  # (0: a chunk of the embedding or loss alone, embedding_in_split / loss_in_split)
            parts.append("t" if count == 1 else f"t*{count}")
        if k == len(chunks) - 1:
            parts.append("L")
        out.append(",".join(parts))
    return "|".join(out)


def _recompute_flags(p: Plan, job) -> list[tuple[str, object, str | None]]:
    r = p.full_recompute_layers
    if not any(r):
        modules = (["core_attn"] if p.recompute is Recompute.SELECTIVE else []) + [
            x.value for x in job.recompute_modules]
        if job.recompute_modules:  # (the loader refuses them beside full recomputation)
            return [("--recompute-granularity", "selective", None),
                    ("--recompute-modules", " ".join(modules), "job.recompute_modules, as priced")]
        if p.recompute is Recompute.SELECTIVE:
            return [("--recompute-granularity", "selective", "the attention core (core_attn)")]
        return []
    per_chunk = _recompute_per_chunk(p)
    return [("--recompute-granularity", "full", None), ("--recompute-method", "block", None),
            ("--recompute-num-layers", per_chunk,
             f"fully recomputed layers per stage: {list(r)}")]


def _zero_title(p: Plan) -> str:
    if p.dp * p.cp == 1:
        return "data parallel: none (dp * cp = 1), so no optimizer sharding"
    return {0: "data parallel: DDP (ZeRO-0)", 1: "data parallel: distributed optimizer (ZeRO-1)",
            2: "data parallel: Megatron-FSDP, gradients and optimizer sharded (ZeRO-2)",
            3: "data parallel: Megatron-FSDP, weights, gradients and optimizer sharded (ZeRO-3)"}[p.zero]


def _grad_dtype_flags(job: JobSpec, fsdp: bool, what: str) -> list[tuple[str, object, str | None]]:
    """The dtype main_grad is kept and reduced in, as priced (job.grad_reduce). fp32 is written
    out as before (Megatron-LM's default for bf16, not for fp16); a 16-bit reduction of a bf16
    job needs --grad-reduce-in-bf16 (megatron/training/arguments.py otherwise turns fp32
    accumulation on for bf16), and fp16's 16-bit reduction is Megatron-LM's own default.
    Megatron-FSDP's main-gradient buffer has a flag of its own, written explicitly."""
    if job.grad_reduce is GradReduceDtype.FP32:
        flags = [("--accumulate-allreduce-grads-in-fp32", None, f"fp32 {what}, as priced")]
    elif job.grad_reduce is GradReduceDtype.BF16:
        flags = [("--grad-reduce-in-bf16", None, f"job.grad_reduce_dtype bf16: bf16 {what}, as priced"
                  " (Megatron-LM accumulates bf16 training's gradients in fp32 otherwise)")]
    else:
        flags = []  # fp16 training reduces in fp16 unless told otherwise
    if fsdp:
        flags.append(("--megatron-fsdp-main-grads-dtype", job.grad_reduce.value,
                      "Megatron-FSDP's main-gradient buffer, as priced"))
    return flags


def _zero_flags(p: Plan, fsdp: bool, job: JobSpec) -> list[tuple[str, object, str | None]]:
    """ZeRO mode and the overlap cost/coefficients.py assumes: the data-parallel gradient
    reduction hides behind backward (--overlap-grad-reduce); ZeRO-3 weight gathers are
    prefetched behind compute (--overlap-param-gather); the distributed optimizer's all-gather
    of updated weights is priced as exposed after the step, so it is not overlapped."""
    if p.dp * p.cp == 1:
        return _grad_dtype_flags(job, False, "main gradients")
    flags: list[tuple[str, object, str | None]] = []
    if fsdp:
        flags += [("--use-megatron-fsdp", None, None),
                  ("--data-parallel-sharding-strategy", _FSDP_STRATEGY[p.zero], None),
                  ("--use-distributed-optimizer", None, "Megatron-FSDP version 1 runs on it"),
                  ("--ckpt-format", "fsdp_dtensor", "required by Megatron-FSDP")]
    elif p.zero == 1:
        flags.append(("--use-distributed-optimizer", None, None))
    flags += _grad_dtype_flags(job, fsdp, "gradient reduction")
    flags.append(("--overlap-grad-reduce", None, "gradient reduction hidden behind backward"))
    if p.zero == 3:
        flags.append(("--overlap-param-gather", None, "weight gathers prefetched behind compute"))
    if not fsdp:
        flags.append(("--ddp-bucket-size", _DDP_BUCKET_PARAMS,
                      "parameters per gradient bucket, as priced (default max(40M, 1M x dp))"))
    return flags


to_megatron = exporter(runnable, render)
