"""A plan as a torchtitan 0.2.x TOML job config.

Section and key names: torchtitan v0.2.0, torchtitan/config/job_config.py (`TORCHTITAN_VERSION`);
behaviour cited from the same release:
- torchtitan/distributed/parallel_dims.py: FSDP over the dp_shard x cp ranks whenever
  dp_shard > 1 or cp > 1; DDP only for replicate-only data parallelism, and its DDP refuses a
  mesh of more than one dimension ("DDP has not supported > 1D parallelism"); seq_len must be
  divisible by tp * 2 * cp.
- `parallelism.fsdp_reshard_after_forward`: "always" reshards each block's weights after
  forward (ZeRO-3), "never" keeps them gathered until backward (ZeRO-2); "default" picks by
  pipeline parallelism ("always" without one, "never" with one), so it is written only for
  ZeRO-3 inside a pipeline, where the planner priced the gathers once per step.
- `parallelism.context_parallel_rotate_method`: "alltoall" passes each K/V shard to the next
  rank (torch's _AllToAllRotater: permute_tensor to rank + 1), the ring cost/ prices;
  "allgather" (the default) gathers every shard at once.
- `training.mixed_precision_reduce = "float32"`: its only value, the fp32 reduction priced
  (JobSpec.grad_reduce; a stated bf16 reduction is refused for torchtitan, cost/specs.py).
- `model.converters = ["quantize.linear.float8"]` with `[quantize.linear.float8]`
  recipe_name "tensorwise": torchao's per-tensor scaled float8 linears; FSDP all-gathers stay
  in bf16 (enable_fsdp_float8_all_gather false), as cost/ prices them.
- torchtitan's dense models are llama3 and qwen3, both SwiGLU with RMSNorm: a GELU model has no
  torchtitan model and is refused. A mixture-of-experts model without latent attention is
  emitted as llama4 (models/llama4: interleave_moe_layer_step = 1 makes every layer an MoE
  layer; without auto_scale_hidden_dim the expert width is llama3's FeedForward rule; it
  derives head_dim = dim / n_heads; pipelining_fn pipeline_llm), or as qwen3 with moe_enabled
  (models/qwen3: its own head_dim, every layer MoE, but pipelining_fn None: pp = 1 only) where
  a qwen3 flavor matches or the head width is not dim / n_heads (_moe_model).
  `parallelism.expert_parallel_degree` and `expert_tensor_parallel_degree` carry ep and etp
  (_experts gives ParallelDims' bounds). Module names (`module_fqns_per_model_part`) are
  llama3's, llama4's and deepseek_v3's: tok_embeddings, layers.<i>, norm, output.
- A mixture-of-experts model with multi-head latent attention is emitted as deepseek_v3
  (models/deepseek_v3, read at v0.2.0, commit 29624e37fa6d): DeepSeekV3ModelArgs takes the
  latent sizes (q_lora_rank, 0 for no query compression; kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim), n_dense_layers leading dense layers of width inter_dim, then
  MoE layers of moe_inter_dim with MoEArgs' shared experts of that width; pipelining_fn
  pipeline_llm. Its named flavors (16B, 236B, 671B) attend with FlexAttention, which its
  context parallelism refuses (args.py update_from_config: "CP support for FlexAttention is
  still in progress"), so with cp > 1 a flavor with scaled-dot-product attention is registered.
  Its MoE layer is not given n_expert_groups / n_limited_groups (args.py: "node-limited routing
  is not supported yet"). A dense latent-attention model has no torchtitan model.
- `parallelism.pipeline_parallel_schedule`: a name of torch.distributed.pipelining's
  get_schedule_class (distributed/pipeline_parallel.py, pipeline_llm). pipeline_module_split
  builds the stages of `module_fqns_per_model_part` (one list per stage, in stage order) on rank
  s as s, s + pp, ... ("loop"), or for ScheduleZBVZeroBubble as s and 2 pp - 1 - s ("v": two
  stages per rank); multi-stage schedules want two stages per rank or more. The schedule written
  is the plan's for a torchtitan job (searched with it), else the fastest that torch runs for
  the plan and that fits memory (cost/torch_schedules.py).
- `activation_checkpoint.mode`: "full" wraps every block, "selective" with an integer
  `selective_ac_option` k wraps every k-th block of a rank (a per-process counter, so
  floor(n_s / k) on stage s), "selective" with "op" is the op-level policy cost/memory.py
  prices as torchtitan's selective recompute.
"""

from __future__ import annotations

import json

from paraplan.cost.schedule import TorchSchedule
from paraplan.cost.specs import Attention, Framework, Instance, Mlp, Precision, Recompute
from paraplan.cost.plan_specs import Plan
from paraplan.cost.torch_schedules import fastest_fitting, schedule_prices
from paraplan.cost.units import bytes_to_gib
from paraplan.solver.export.common import (Deviations, Emitted, ExportRefused, dropless_moe, exporter,
                                          model_chunks, moe_note, refuse_dualpipe, unrestricted_routing)

TORCHTITAN_VERSION = "0.2.x (read from v0.2.0)"

# llama3 flavors of torchtitan v0.2.0 (torchtitan/models/llama3/__init__.py), with the ffn width
# its FeedForward derives: int(2 * 4 * dim / 3), times ffn_dim_multiplier, rounded up to
# multiple_of.
_LLAMA3_FLAVORS = {
    "8B": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn=14336, vocab=128256),
    "70B": dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn=28672, vocab=128256),
    "405B": dict(dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn=53248, vocab=128256),
}

# qwen3 MoE flavors of torchtitan v0.2.0 (torchtitan/models/qwen3/__init__.py): every layer an MoE layer
# of num_experts routed experts of width moe_inter_dim, top_k per token, no shared expert,
# softmax routing; attention with head_dim per head and RMS-normed queries and keys (qk_norm)
_QWEN3_MOE_FLAVORS = {
    "30B-A3B": dict(dim=2048, n_layers=48, n_heads=32, n_kv_heads=4, head_dim=128, vocab=151936,
                    moe_inter_dim=768, num_experts=128, top_k=8),
    "235B-A22B": dict(dim=4096, n_layers=94, n_heads=64, n_kv_heads=4, head_dim=128,
                      vocab=151936, moe_inter_dim=1536, num_experts=128, top_k=8),
}

# deepseek_v3 flavors of torchtitan v0.2.0 (torchtitan/models/deepseek_v3/__init__.py at
# commit 29624e37fa6d): n_dense_layers dense layers of width inter_dim, then MoE layers of
# num_experts routed experts of width moe_inter_dim, top_k per token, num_shared_experts shared
# experts of that width; latent attention (q_lora_rank 0: queries not compressed). All three
# attend with FlexAttention (use_flex_attn=True, attn_mask_type "block_causal").
_DEEPSEEK_V3_FLAVORS = {
    "16B": dict(dim=2048, n_layers=27, n_dense_layers=1, n_heads=16, vocab=102400, inter_dim=10944,
                moe_inter_dim=1408, num_experts=64, num_shared_experts=2, top_k=6, q_lora_rank=0,
                kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    "236B": dict(dim=5120, n_layers=60, n_dense_layers=1, n_heads=128, vocab=102400,
                 inter_dim=12288, moe_inter_dim=1536, num_experts=160, num_shared_experts=2,
                 top_k=6, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                 qk_rope_head_dim=64, v_head_dim=128),
    "671B": dict(dim=7168, n_layers=61, n_dense_layers=3, n_heads=128, vocab=129280,
                 inter_dim=18432, moe_inter_dim=2048, num_experts=256, num_shared_experts=1,
                 top_k=8, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                 qk_rope_head_dim=64, v_head_dim=128),
}


# ZeRO-3 inside a pipeline is torchtitan's "default" policy, which keeps the parameters gathered
# after forward when pp > 1 (reshard_after_forward = not pp_enabled: v0.2.0 29624e37fa,
# torchtitan/models/llama3/infra/parallelize.py apply_fsdp) and is what cost/memory.py prices
# (gathered_per_step); "always" would gather again every micro-batch
_RESHARD_NOTE = {False: "ZeRO-3: reshard after forward; ZeRO-2: keep gathered until backward",
                 True: "ZeRO-3 inside a pipeline: the default policy keeps parameters gathered"
                       " through the step (one all-gather and one reduce-scatter per step)"}


def _reshard_policy(zero: int, pp: int) -> str:
    if zero == 3:
        return "default" if pp > 1 else "always"
    return "never"


def _deepseek_v3_args(m) -> dict:
    """`m` in the keys of _DEEPSEEK_V3_FLAVORS (DeepSeekV3ModelArgs' names)."""
    moe, mla = m.moe, m.mla
    return dict(dim=m.hidden, n_layers=m.layers, n_dense_layers=moe.dense_layers, n_heads=m.heads,
                vocab=m.vocab, inter_dim=m.ffn, moe_inter_dim=moe.expert_ffn,
                num_experts=moe.experts, num_shared_experts=moe.shared_ffn // moe.expert_ffn,
                top_k=moe.top_k, q_lora_rank=mla.q_lora_rank or 0, kv_lora_rank=mla.kv_lora_rank,
                qk_nope_head_dim=mla.qk_nope_head_dim, qk_rope_head_dim=mla.qk_rope_head_dim,
                v_head_dim=mla.v_head_dim)


def _deepseek_v3_flavor(m, cp: int) -> str | None:
    """The named deepseek_v3 flavor of `m`'s shape, or None; None with cp > 1 too: the named
    flavors' FlexAttention does not run under torchtitan's context parallelism."""
    if cp > 1:
        return None
    args = _deepseek_v3_args(m)
    return next((name for name, f in _DEEPSEEK_V3_FLAVORS.items() if f == args), None)


def _shared_experts_whole(m) -> None:
    moe = m.moe
    if moe.shared_ffn % moe.expert_ffn:
        raise ExportRefused(
            f"model {m.name}'s shared expert width {moe.shared_ffn} is not a multiple of the"
            f" routed experts' {moe.expert_ffn}: torchtitan's MoEArgs.num_shared_experts counts"
            " shared experts of the routed width")


def _moe_model(m, pp: int) -> str:
    """torchtitan's model for an MoE model (module docstring): deepseek_v3 with latent
    attention; otherwise qwen3 where one of its flavors matches or the head width is not
    hidden / heads, else llama4; refused where none runs it. All take shared experts as whole
    experts of the routed width (MoEArgs.num_shared_experts: a FeedForward of
    num_shared_experts x the width)."""
    moe = m.moe
    _shared_experts_whole(m)
    if m.mla is not None:
        return "deepseek_v3"
    if moe.dense_layers:
        raise ExportRefused(
            f"model {m.name} has {moe.dense_layers} dense layers before its MoE layers:"
            " torchtitan's llama4 and qwen3 MoE models make every layer an MoE layer (or every"
            " k-th: interleave_moe_layer_step), and its deepseek_v3 model, which has leading"
            " dense layers, runs latent attention only")
    if m.head_dim * m.heads == m.hidden and (pp > 1 or _qwen3_flavor(m) is None):
        return "llama4"
    if pp > 1:
        raise ExportRefused(
            f"model {m.name} with pp = {pp}: its head width {m.head_dim} is not hidden / heads"
            f" = {m.hidden // m.heads}, which torchtitan {TORCHTITAN_VERSION}'s llama4 model"
            " derives, and its qwen3 model, which takes it, has no pipeline parallelism"
            " (pipelining_fn None)", fix="plan with search: pp: [1], or export to megatron")
    return "qwen3"


def _qwen3_flavor(m) -> str | None:
    moe = m.moe
    for name, f in _QWEN3_MOE_FLAVORS.items():
        if (f["dim"], f["n_layers"], f["n_heads"], f["n_kv_heads"], f["head_dim"], f["vocab"],
                f["moe_inter_dim"], f["num_experts"], f["top_k"]) == (
                m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.vocab, moe.expert_ffn,
                moe.experts, moe.top_k) and not moe.shared_ffn:
            return name
    return None


def llama3_ffn(dim: int, ffn_dim_multiplier: float | None, multiple_of: int) -> int:
    """torchtitan llama3 FeedForward's hidden width (models/llama3/model/model.py)."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def runnable(inst: Instance, plan: Plan) -> Emitted:
    refuse_dualpipe(inst, Framework.TORCHTITAN)
    if inst.model.mla is not None and inst.model.moe is None:
        raise ExportRefused(
            f"model {inst.model.name} has multi-head latent attention and no mixture-of-experts"
            f" layers: torchtitan {TORCHTITAN_VERSION}'s one latent-attention model, deepseek_v3,"
            " makes every layer after its leading dense ones an MoE layer",
            fix="export it to megatron")
    if inst.model.moe is not None:
        _moe_model(inst.model, plan.pp)
    if inst.model.mlp is not Mlp.SWIGLU:
        raise ExportRefused(
            f"model {inst.model.name} uses a GELU MLP, and torchtitan {TORCHTITAN_VERSION} has no"
            " GELU model (its dense models, llama3 and qwen3, use SwiGLU); export it to megatron"
            " or deepspeed instead")
    d = Deviations(inst, plan, Framework.TORCHTITAN)
    job, m = d.inst.job, d.inst.model
    if job.precision is Precision.FP16:
        d.deviate("fp16 precision: torchtitan's training.mixed_precision_param is bfloat16 or"
                  " float32; emitted bfloat16")
        d.set_job(precision=Precision.BF16)
    if job.attention is Attention.STANDARD:
        d.deviate("job.attention = standard (s x s scores stored): torchtitan's models use fused"
                  " scaled-dot-product attention; emitted that (less memory than planned)")
        d.set_job(attention=Attention.FLASH)
    if m.tied_embeddings:
        d.deviate("tied input and output embeddings: torchtitan's llama3 model has a separate"
                  " output layer; emitted untied (more weights than planned)")
        d.set_model(tied_embeddings=False)
    p = d.plan
    if p.tp > 1 and not p.sequence_parallel:
        d.deviate("tensor parallelism without sequence parallelism: torchtitan's TP plan always"
                  " shards the norms along the sequence (SequenceParallel in"
                  " models/llama3/infra/parallelize.py); emitted sequence parallelism on",
                  sequence_parallel=True)
    _data_parallel(d)
    _experts(d)
    _activation_checkpoint(d)
    divisor = 2 * d.plan.tp * d.plan.cp
    if m.seq_len % divisor:
        raise ExportRefused(f"seq_len {m.seq_len}: torchtitan requires it divisible by tp * 2 * cp"
                            f" = {divisor} (ParallelDims.seq_len_divisor)")
    if d.plan.pp > 1 and d.plan.virtual_stages == 1 and d.plan.num_micro_batches < d.plan.pp:
        d.note("torchtitan's 1F1B schedule wants at least as many micro-batches as stages")
    _choose_schedule(d)
    flavor = _flavor(m, d.plan.pp, d.plan.cp)
    if flavor is None:
        name = _model_name(m, d.plan.pp)
        args = {"qwen3": "Qwen3ModelArgs", "deepseek_v3": "DeepSeekV3ModelArgs"}.get(
            name, "TransformerModelArgs")
        d.note(f"model shape: torchtitan builds models from named flavors; register the {args}"
               f" written in the file as {name} flavor \"{_CUSTOM}\" (torchtitan/models/{name}/"
               f"__init__.py, {name.replace('_', '')}_args)")
    if d.inst.job.precision is Precision.FP8 and m.moe is not None:
        d.deviate("fp8 precision with MoE layers: torchtitan's quantize.linear.float8 converts"
                  " nn.Linear modules only, and float8 for the experts' grouped GEMMs"
                  " (quantize.grouped_mm.float8) is a prototype needing torchao nightly, which"
                  " paraplan does not price; emitted bf16")
        d.set_job(precision=Precision.BF16)
    if d.inst.job.precision is Precision.FP8:
        d.note("float8 linears need torchao installed beside torchtitan")
    if m.mla is not None:
        d.note("the latent attention is priced as Megatron-core's MLASelfAttention runs it"
               " (cost/flops.py); torchtitan's deepseek_v3 Attention has the same projections"
               " (wq or wq_a/wq_b, wkv_a, wkv_b, wo: models/deepseek_v3/model/model.py), so the"
               " same FLOPs and weights")
    if _model_name(m, d.plan.pp) == "deepseek_v3" and flavor is not None:
        d.note(f"deepseek_v3 flavor {flavor} attends with FlexAttention and block_causal masks"
               " (each document attends within itself: no more work than the causal attention"
               " planned)")
    return d.done()


_CUSTOM = "paraplan"


def _choose_schedule(d: Deviations) -> None:
    """The schedule the emitted plan runs (its zero_bubble mode, written as
    pipeline_parallel_schedule). A torchtitan job's plan keeps the schedule it was planned with
    (the planner searches them: solver/space.zero_bubble_modes). A plan made for another
    framework, whose space has none of torch's zero-bubble schedules, runs the fastest that torch
    runs for it and that fits memory, priced on its split (cost/torch_schedules.py); where that
    is a zero-bubble one, a note says by how much and what it needs."""
    p = d.plan
    if p.pp == 1 or d.source_framework is Framework.TORCHTITAN:
        return
    prices = {x.kind: x for x in schedule_prices(d.inst, p, reserve_bytes=d.inst.search.memory_reserve_bytes)}
    best, planned = fastest_fitting(list(prices.values())), TorchSchedule.of(p)
    if best is None or best.kind is planned or planned not in prices:
        return
    new, old = best, prices[planned]
    d.plan = p.replace_flat(zero_bubble=best.kind.mode)
    d.note(f"pipeline_parallel_schedule {best.kind.value}: torch's zero-bubble schedule splits each"
           " backward into input and weight gradients and fills the pipeline's fill and drain"
           " with the weight gradients (Qi et al., ICLR 2024); on this split it is priced at"
           f" {new.iter_time_s:.4g} s per iteration against {old.iter_time_s:.4g} s as"
           f" {planned.value} ({100 * (new.iter_time_s / old.iter_time_s - 1):+.1f}%), peak"
           f" {bytes_to_gib(new.peak_mem_bytes):.1f} of {bytes_to_gib(new.capacity_bytes):.1f} GiB"
           " usable; it does not run under torch.compile (leave compile.enable off), and"
           f" pipeline_parallel_schedule = \"{planned.value}\" runs the plan as priced")


def _model_name(m, pp: int) -> str:
    return "llama3" if m.moe is None else _moe_model(m, pp)


def _flavor(m, pp: int, cp: int) -> str | None:
    """The named flavor of the model torchtitan builds for `m`, or None: a flavor to register
    (no llama4 flavor of v0.2.0 is an every-layer MoE without a shared expert of llama3's
    width rule, so MoE models on llama4 are always registered)."""
    if m.moe is not None:
        name = _model_name(m, pp)
        if name == "deepseek_v3":
            return _deepseek_v3_flavor(m, cp)
        return _qwen3_flavor(m) if name == "qwen3" else None
    for name, f in _LLAMA3_FLAVORS.items():
        if (f["dim"], f["n_layers"], f["n_heads"], f["n_kv_heads"], f["ffn"], f["vocab"]) == (
                m.hidden, m.layers, m.heads, m.kv_heads, m.ffn, m.vocab):
            return name
    return None


def _data_parallel(d: Deviations) -> None:
    """torchtitan's data parallelism: DDP (ZeRO-0) alone, or FSDP2 with weights resharded after
    forward (ZeRO-3) or kept until backward (ZeRO-2); it has no ZeRO-1."""
    p = d.plan
    if p.dp * p.cp == 1:
        return  # no data-parallel group: the ZeRO stage shards nothing
    if p.zero == 0 and p.ep > 1:
        d.deviate(f"ZeRO-0 (plain data parallelism) with expert parallelism ep = {p.ep}:"
                  " torchtitan's expert parallel group is carved out of FSDP's dp_shard ranks;"
                  " emitted FSDP with fsdp_reshard_after_forward = \"never\" (ZeRO-2: less"
                  " memory than planned)", zero=2)
        return
    if p.zero == 1:
        d.deviate("ZeRO-1: torchtitan has no optimizer-only sharding; emitted FSDP with"
                  " fsdp_reshard_after_forward = \"never\" (ZeRO-2: gradients sharded too, less"
                  " memory than planned)", zero=2)
    elif p.zero == 0 and (p.tp > 1 or p.pp > 1 or p.cp > 1):
        d.deviate("ZeRO-0 (plain data parallelism) with tensor, pipeline or context parallelism:"
                  " torchtitan's DDP is one-dimensional only, and with cp > 1 it shards over the"
                  " cp ranks anyway; emitted FSDP with fsdp_reshard_after_forward = \"never\""
                  " (ZeRO-2: less memory than planned)", zero=2)


def _experts(d: Deviations) -> None:
    """The MoE layers as torchtitan runs them (torchtitan/distributed/parallel_dims.py,
    ParallelDims._validate): `expert_tensor_parallel_degree` is tp or 1; with ep > 1 the expert
    parallel group takes every cp rank and part of dp_shard (etp = tp), or every cp and tp rank
    and part of dp_shard (etp = 1), so ep must be a multiple of cp (cp * tp) that divides
    dp_shard * cp (dp_shard * cp * tp). Megatron-core's folding lays ep over the same ranks in
    the same order (tp innermost, then cp, then dp), so a plan within these bounds has the
    planned expert layout. Routing is dropless (no capacity factor) and unrestricted."""
    moe = d.inst.model.moe
    if moe is None:
        return
    p = d.plan
    etp = p.expert_tp
    if p.ep == 1 and etp != p.tp:
        raise ExportRefused(f"ep = 1 with etp = {etp}, tp = {p.tp}: torchtitan splits the experts"
                            " over the tp ranks when there is no expert parallelism"
                            " (expert_tensor_parallel_degree applies with ep > 1 only)")
    if p.ep > 1:
        if etp not in (p.tp, 1):
            raise ExportRefused(f"etp = {etp} with tp = {p.tp}: torchtitan's"
                                " expert_tensor_parallel_degree is tp or 1 (ParallelDims:"
                                " \"Currently we only support ETP=TP or ETP=1\")")
        borrowed = p.cp * (p.tp if etp == 1 else 1)
        ranks = p.dp * borrowed  # dp_shard = dp: _data_parallel moved ep > 1 to FSDP
        if p.ep % borrowed or ranks % p.ep:
            raise ExportRefused(f"ep = {p.ep} with etp = {etp}, tp = {p.tp}, cp = {p.cp}, dp = {p.dp}:"
                                " torchtitan's expert parallel group takes every cp"
                                + (" and tp" if etp == 1 else "") + " rank and part of dp_shard,"
                                f" so ep must be a multiple of {borrowed} dividing {ranks}"
                                " (ParallelDims._validate)")
    dropless_moe(d, "torchtitan's MoE layer routes every token (it has no capacity factor)")
    unrestricted_routing(d, "node-limited routing is not in torchtitan's MoE layer (llama4, qwen3;"
                            " deepseek_v3 takes n_expert_groups and n_limited_groups but does not"
                            " route by them)")
    moe_note(d, "torchtitan's MoE layer also dispatches tokens by all-to-all over the ep ranks"
                " and runs its experts as grouped GEMMs")


def _activation_checkpoint(d: Deviations) -> None:
    p = d.plan
    n, r = p.layers_per_stage, p.full_recompute_layers
    selective = p.recompute is Recompute.SELECTIVE
    if selective and d.source_framework is not Framework.TORCHTITAN:
        # paraplan's selective recompute is the framework's own: for Megatron-LM and DeepSpeed
        # the attention core alone, for torchtitan its op-level policy (cost/memory.py)
        d.deviate("selective recompute of the attention core alone (Korthikanti et al. 2022):"
                  " torchtitan's selective modes recompute more (every second matmul, or whole"
                  " blocks); emitted no selective recompute (fused attention already recomputes"
                  " its scores)", recompute=Recompute.NONE)
        selective = False
    if not any(r) or r == n:
        return
    # a plan made for torchtitan holds every k-th block's counts (cost/recompute_patterns.py;
    # check_against refuses a plan file that does not); one made for another framework may not
    for k in range(2, max(n) + 1):
        if all(x // k == y for x, y in zip(n, r)):
            if selective:
                d.deviate(f"op-level selective recompute beside every {k}-th block fully"
                          " recomputed: torchtitan applies one activation-checkpoint mode;"
                          " emitted the block-wise one", recompute=Recompute.NONE)
            return
    d.deviate(f"the per-stage full-recompute counts {list(r)} of {list(n)} layers: torchtitan"
              " checkpoints every block (mode = \"full\") or every k-th block of each rank, and"
              " no k gives these counts; emitted mode = \"full\" (slower than planned, not more"
              " memory)", full_recompute_layers=n, recompute=Recompute.NONE)


# --- rendering -----------------------------------------------------------------------------

def render(inst: Instance, e: Emitted) -> str:
    m, p, job = e.inst.model, e.plan, e.inst.job
    flavor = _flavor(m, p.pp, p.cp)
    name = _model_name(m, p.pp)
    model: list[tuple[str | None, object]] = [("name", name), ("flavor", flavor or _CUSTOM)]
    if job.precision is Precision.FP8:
        model.append(("converters", ["quantize.linear.float8"]))

    # local_batch_size is what one data-parallel rank takes per step. With pp > 1 it is split
    # into pipeline micro-batches (local / pipeline_parallel_microbatch_size of them); with
    # pp = 1 it is one micro-batch and global_batch_size / (local * dp) gives the gradient
    # accumulation steps. Either way num_micro_batches micro-batches per optimizer step.
    local = p.micro_batch * (p.num_micro_batches if p.pp > 1 else 1)
    training = [("local_batch_size", local), ("global_batch_size", job.global_batch),
                ("seq_len", m.seq_len), ("mixed_precision_param", "bfloat16"),
                ("mixed_precision_reduce", "float32")]

    replicate, shard = _degrees(p)
    parallelism: list[tuple[str | None, object]] = [
        ("data_parallel_replicate_degree", replicate),
        ("data_parallel_shard_degree", shard),
        (None, _RESHARD_NOTE[p.zero == 3 and p.pp > 1]),
        ("fsdp_reshard_after_forward", _reshard_policy(p.zero, p.pp)),
        ("tensor_parallel_degree", p.tp),
        ("context_parallel_degree", p.cp),
    ]
    if p.cp > 1:
        parallelism += [(None, "pass K/V shards round the ring (permute to the next rank), as"
                               " paraplan prices context parallelism"),
                        ("context_parallel_rotate_method", "alltoall")]
    if m.moe is not None:
        parallelism += [(None, "routed experts sharded over ep ranks, each expert split over etp"
                               " ranks (tp or 1)"),
                        ("expert_parallel_degree", p.ep),
                        ("expert_tensor_parallel_degree", p.expert_tp)]
    parallelism.append(("pipeline_parallel_degree", p.pp))
    if p.pp > 1:
        kind = TorchSchedule.of(p)
        v_shape = kind is TorchSchedule.ZBV_ZERO_BUBBLE
        parts = []
        for k, (_, first, count) in enumerate(model_chunks(p, v_shape=v_shape)):
            names = [f"layers.{i}" for i in range(first, first + count)]
            parts.append((["tok_embeddings"] if k == 0 else []) + names)
        parts[-1] += ["norm", "output"]
        placement = ("rank s runs chunks s and 2*pp-1-s (a V)" if v_shape
                     else "rank s runs chunks s, s+pp, ...")
        parallelism += [
            ("pipeline_parallel_schedule", kind.value),
            ("pipeline_parallel_microbatch_size", p.micro_batch),
            (None, f"one list per model chunk; {placement}"),
            ("module_fqns_per_model_part", parts),
        ]
    ac = _ac_keys(p)

    lines = [
        f"# torchtitan {TORCHTITAN_VERSION} job config for {inst.name} (paraplan export; plan made"
        f" for {inst.job.framework.value}).",
        "# Targets torchtitan 0.2.x: section and key names as in torchtitan/config/job_config.py"
        " of v0.2.0; other releases spell some of them differently.",
        "# Add optimizer, lr_scheduler, data and checkpoint settings yourself.",
    ]
    if flavor is None and m.moe is not None:
        moe = m.moe
        experts = (f"moe_args=MoEArgs(num_experts={moe.experts}, num_shared_experts="
                   f'{moe.shared_ffn // moe.expert_ffn}, top_k={moe.top_k}, score_func="softmax",'
                   " route_norm=True, score_before_experts=False)")
        lines += ["#", f"# Register this flavor in torchtitan/models/{name}/__init__.py"
                       f" ({name.replace('_', '')}_args):"]
        if name == "deepseek_v3":
            a = _deepseek_v3_args(m)
            lines.append(f'#   "{_CUSTOM}": DeepSeekV3ModelArgs(vocab_size={m.vocab}, dim={m.hidden},'
                         f" inter_dim={m.ffn}, moe_inter_dim={moe.expert_ffn}, n_layers={m.layers},"
                         f" n_dense_layers={moe.dense_layers}, n_heads={m.heads}, {experts},"
                         f" q_lora_rank={a['q_lora_rank']}, kv_lora_rank={a['kv_lora_rank']},"
                         f" qk_nope_head_dim={a['qk_nope_head_dim']},"
                         f" qk_rope_head_dim={a['qk_rope_head_dim']}, v_head_dim={a['v_head_dim']},"
                         ' use_flex_attn=False, attn_mask_type="causal"),'
                         "  # scaled-dot-product attention: runs under context parallelism")
        elif name == "qwen3":
            lines.append(f'#   "{_CUSTOM}": Qwen3ModelArgs(vocab_size={m.vocab}, max_seq_len={m.seq_len},'
                         f" head_dim={m.head_dim}, dim={m.hidden}, n_layers={m.layers},"
                         f" n_heads={m.heads}, n_kv_heads={m.kv_heads}, qk_norm=False,"
                         f" hidden_dim={m.ffn}, moe_enabled=True, moe_inter_dim={moe.expert_ffn},"
                         f" {experts}),")
        else:
            base = int(8 * m.hidden / 3)
            mult = None if moe.expert_ffn >= base else moe.expert_ffn / base
            assert llama3_ffn(m.hidden, mult, moe.expert_ffn) == moe.expert_ffn
            lines.append(f'#   "{_CUSTOM}": TransformerModelArgs(dim={m.hidden}, n_layers={m.layers},'
                         f" n_heads={m.heads}, n_kv_heads={m.kv_heads}, vocab_size={m.vocab},"
                         f" ffn_dim_multiplier={mult!r}, multiple_of={moe.expert_ffn},"
                         " interleave_moe_layer_step=1, auto_scale_hidden_dim=False,"
                         f" {experts}),  # expert width {moe.expert_ffn}, every layer MoE")
    elif flavor is None:
        ffn_mult = None if m.ffn >= int(8 * m.hidden / 3) else m.ffn / int(8 * m.hidden / 3)
        assert llama3_ffn(m.hidden, ffn_mult, m.ffn) == m.ffn
        lines += ["#", "# Register this flavor in torchtitan/models/llama3/__init__.py (llama3_args):",
                  f'#   "{_CUSTOM}": TransformerModelArgs(dim={m.hidden}, n_layers={m.layers},'
                  f" n_heads={m.heads}, n_kv_heads={m.kv_heads}, vocab_size={m.vocab},"
                  f" ffn_dim_multiplier={ffn_mult!r}, multiple_of={m.ffn}),"
                  f"  # ffn width {m.ffn}"]
    lines += ["", "[model]", *_toml_lines(model), "", "[training]", *_toml_lines(training), "",
              "[parallelism]", *_toml_lines(parallelism), "", "[activation_checkpoint]",
              *_toml_lines(ac)]
    if job.precision is Precision.FP8:
        lines += ["", "[quantize.linear.float8]",
                  *_toml_lines([("recipe_name", "tensorwise"),
                                (None, "paraplan prices bf16 FSDP all-gathers"),
                                ("enable_fsdp_float8_all_gather", False),
                                ("precompute_float8_dynamic_scale_for_fsdp", False)])]
    return "\n".join(lines) + "\n"


def _degrees(p: Plan) -> tuple[int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree)."""
    if p.dp * p.cp == 1:
        return 1, 1
    if p.zero == 0:
        return p.dp, 1  # DDP, alone (runnable() moved every other ZeRO-0 case to FSDP)
    return 1, p.dp  # FSDP over dp (x cp: torchtitan shards over the dp_shard x cp mesh)


def _ac_keys(p: Plan) -> list[tuple[str | None, object]]:
    n, r = p.layers_per_stage, p.full_recompute_layers
    if r == n:
        return [("mode", "full")]
    if any(r):
        k = next(k for k in range(2, max(n) + 1) if all(x // k == y for x, y in zip(n, r)))
        return [(None, f"full recompute of every {k}-th block: {list(r)} of {list(n)} layers"),
                ("mode", "selective"), ("selective_ac_option", str(k))]
    if p.recompute is Recompute.SELECTIVE:
        return [("mode", "selective"), ("selective_ac_option", "op")]
    return [("mode", "none")]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for these plain ASCII values
    assert isinstance(value, list), value
    if value and isinstance(value[0], list):
        return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def _toml_lines(pairs: list[tuple[str | None, object]]) -> list[str]:
    """`key = value` lines; a None key makes the value a comment line."""
    return [f"# {value}" if key is None else f"{key} = {_toml_value(value)}"
            for key, value in pairs]


to_torchtitan = exporter(runnable, render)
