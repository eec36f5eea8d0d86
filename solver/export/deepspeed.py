"""A plan as a DeepSpeed JSON config (plus, as notes, the Megatron-DeepSpeed launcher flags
for the model-parallel degrees, which are not DeepSpeed config keys).

Keys and defaults: deepspeedai/DeepSpeed v0.19 (`DEEPSPEED_VERSION`),
deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig: stage, overlap_comm, reduce_scatter,
contiguous_gradients, reduce_bucket_size, allgather_bucket_size, and the stage3_* aliases) and
deepspeed/runtime/config.py (batch keys, bf16/fp16, communication_data_type). Every value that
cost/framework.py prices is written out rather than left to a default:
- reduce_bucket_size = allgather_bucket_size = 5e8 elements: gradient reduction and the ZeRO-1/2
  weight all-gather in buckets of that many parameters (grad_bucket_params);
- stage3_prefetch_bucket_size = 5e7 parameters (prefetch_params) and stage3_max_reuse_distance
  = 1e9 parameters (DeepSpeed's default: how far ahead a parameter gathered for a recompute pass
  stays gathered for the backward after it, the distance cost/framework.py prices);
- overlap_comm true: gradient reduction hidden behind backward (DeepSpeed's default is true only
  for stage 3);
- communication_data_type in the training precision: the 2-byte gradient reduction priced
  (JobSpec.grad_reduce; a stated fp32 reduction is refused for deepspeed, cost/specs.py).
DeepSpeed's PipelineEngine accepts ZeRO stages 0 and 1 only (deepspeed/runtime/pipe/engine.py)
and runs one model chunk per stage; its sequence parallelism is Ulysses (all-to-all over heads),
not the K/V ring that cost/ prices. Mixture-of-experts layers are deepspeed.moe.layer.MoE
modules whose expert parallel size is a constructor argument (ep_size), not a config key: the
export names their arguments in a note (_experts).
"""

from __future__ import annotations

import json

from paraplan.cost.framework import behaviour
from paraplan.cost.specs import Framework, Instance, Precision, Recompute
from paraplan.cost.plan_specs import Plan
from paraplan.solver.export.common import (Deviations, Emitted, ExportRefused, exporter, fold_cp_into_dp,
                                          moe_note, refuse_dualpipe, refuse_latent_attention,
                                          unrestricted_routing)

DEEPSPEED_VERSION = "0.19"
_B = behaviour(Framework.DEEPSPEED)


def runnable(inst: Instance, plan: Plan) -> Emitted:
    refuse_dualpipe(inst, Framework.DEEPSPEED)
    refuse_latent_attention(inst, Framework.DEEPSPEED)
    d = Deviations(inst, plan, Framework.DEEPSPEED)
    fold_cp_into_dp(d, "DeepSpeed has no ring context parallelism (its Ulysses sequence"
                       " parallelism is an all-to-all over heads)")
    p = d.plan
    if p.virtual_stages > 1:
        d.deviate(f"interleaved 1F1B with virtual_stages = {p.virtual_stages}: DeepSpeed's"
                  " pipeline engine runs one model chunk per stage; emitted 1 (a larger bubble)",
                  virtual_stages=1)
    if p.zero >= 2 and p.pp > 1 and p.dp > 1:
        d.deviate(f"ZeRO-{p.zero} with pipeline parallelism: DeepSpeed's PipelineEngine accepts"
                  " ZeRO stages 0 and 1 only; emitted ZeRO-1 (more memory than planned)", zero=1)
    _experts(d)
    if d.inst.job.precision is Precision.FP8:
        d.deviate("fp8 precision: DeepSpeed's config has no FP8 training mode; emitted bf16")
        d.set_job(precision=Precision.BF16)
    p = d.plan
    if p.tp > 1 or p.pp > 1:
        flags = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}"]
        if p.sequence_parallel:
            flags.append("--sequence-parallel")
        d.note("model parallel degrees are launcher arguments, not DeepSpeed config keys: pass "
               + " ".join(flags) + f" to Megatron-DeepSpeed (layers per stage {list(p.layers_per_stage)};"
               f" or build deepspeed.pipe.PipelineModule(num_stages={p.pp}) partitioned that way)")
    if any(p.full_recompute_layers) or p.recompute is Recompute.SELECTIVE:
        d.note(f"which layers are recomputed ({list(p.full_recompute_layers)} of"
               f" {list(p.layers_per_stage)} per stage fully, recompute mode of the others:"
               f" {p.recompute.value}) is the training script's choice: the"
               " activation_checkpointing section only configures deepspeed.checkpointing")
    if p.zero == 0 and p.dp > 1:
        d.note("ZeRO-0: DeepSpeed all-reduces gradients after backward (engine.allreduce_gradients),"
               " while cost/ hides the reduction behind backward: expect it slower than predicted"
               " by up to the exposed all-reduce")
    return d.done()


def _experts(d: Deviations) -> None:
    """The MoE layers as deepspeed.moe.layer.MoE runs them (deepspeed/moe/layer.py,
    sharded_moe.py, utils/groups.py of v0.19): its expert parallel groups are ep_size ranks of
    the data-parallel group (so ep divides dp, the cp ranks already folded into dp above), each
    expert split over the tensor-parallel ranks with enable_expert_tensor_parallelism (etp = tp)
    or whole on each of them; top-k gating for any k (topkgating); with drop_tokens false no
    token is dropped; the engine refuses MoE under ZeRO-3 ("MoE not supported with Stage 3").
    Megatron-core's expert layout folded over the tp ranks (etp < tp) has no DeepSpeed knob."""
    moe = d.inst.model.moe
    if moe is None:
        return
    p = d.plan
    etp = p.expert_tp
    if etp != p.tp and p.tp > 1:
        raise ExportRefused(f"etp = {etp} with tp = {p.tp}: DeepSpeed's MoE layer splits each expert"
                            " over all the tp ranks (enable_expert_tensor_parallelism) or keeps it"
                            " whole on each, and forms its ep groups inside the data-parallel"
                            " group only; it has no expert layout folded over the tp ranks",
                            fix="plan with search: etp: [tp], or export to megatron")
    if p.dp % p.ep:
        raise ExportRefused(f"ep = {p.ep} does not divide dp = {p.dp}: DeepSpeed forms its expert"
                            " parallel groups inside the data-parallel group (utils/groups.py)")
    if p.zero == 3 and p.dp > 1:
        d.deviate("ZeRO-3 with MoE layers: DeepSpeed's engine refuses MoE under stage 3 (\"MoE"
                  " not supported with Stage 3\"); emitted ZeRO-2 (more memory than planned)",
                  zero=2)
    unrestricted_routing(d, "DeepSpeed's gating has no node-limited routing")
    moe = d.inst.model.moe
    p = d.plan
    cf = "drop_tokens=False" if moe.capacity_factor is None else f"capacity_factor={moe.capacity_factor}"
    shared = (f", plus the shared expert ({moe.shared_ffn} wide) as a dense MLP beside it"
              if moe.shared_ffn else "")
    if moe.dense_layers:
        shared += f", the first {moe.dense_layers} layers dense"
    d.note("expert parallelism is a model argument, not a DeepSpeed config key: build each MoE"
           f" layer as deepspeed.moe.layer.MoE(hidden_size={d.inst.model.hidden},"
           f" num_experts={moe.experts}, ep_size={p.ep}, k={moe.top_k}, {cf},"
           f" enable_expert_tensor_parallelism={p.tp > 1}){shared}, and pass its parameters through"
           " deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer")
    moe_note(d, "DeepSpeed's MoE layer also dispatches by all-to-all over the ep ranks, but runs"
                " its local experts one after another (expect it slower than predicted where"
                " each rank holds many small experts)")


def render(inst: Instance, e: Emitted) -> str:
    p, job = e.plan, e.inst.job
    bf16 = job.precision is Precision.BF16
    zero: dict[str, object] = {"stage": p.zero}
    if p.zero >= 1:
        zero.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True,
                     "reduce_bucket_size": int(_B.grad_bucket_params),
                     "allgather_bucket_size": int(_B.grad_bucket_params)})
    if p.zero == 3:
        zero.update({"stage3_prefetch_bucket_size": int(_B.prefetch_params),
                     "stage3_max_reuse_distance": int(1e9)})
    config: dict[str, object] = {
        # train_batch_size = micro * gradient_accumulation_steps * data-parallel size (dp)
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": p.micro_batch,
        "gradient_accumulation_steps": p.num_micro_batches,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": not bf16},
        "communication_data_type": "bf16" if bf16 else "fp16",
    }
    if any(p.full_recompute_layers):
        config["activation_checkpointing"] = {
            # Partitioning the saved layer inputs across the tensor-parallel ranks is what
            # sequence parallelism gives the plan's fully recomputed layers.
            "partition_activations": p.sequence_parallel,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    return json.dumps(config, indent=2) + "\n"


to_deepspeed = exporter(runnable, render)
