"""Peak memory of one GPU of each pipeline stage by category, for `paraplan memory`.

The categories (the split `accelerate estimate-memory` reports, plus what training adds):

    weights      bf16/fp32 weights as the framework keeps them (cost/memory.state_layout),
                 sharded by ZeRO-3, plus Transformer Engine's cached fp8 weight copies
    grads        gradients (the fp32 main-gradient buffer in Megatron-LM), sharded by ZeRO-2/3
    optimizer    Adam state (fp32 master weight, momentum, variance), sharded by ZeRO-1/2/3
    activations  stashed activations of the micro-batches in flight, checkpoints of fully
                 recomputed layers (cost/memory.py, Korthikanti et al. 2022)
    logits       the loss's logits buffers on the last stage (cost/memory.LOGITS_BYTES)
    workspace    one layer's backward workspace, and with ZeRO-3 the gathered units and the
                 gradients being reduce-scattered; Transformer Engine's tp-overlap userbuffers
    runtime      CUDA context and NCCL buffers (cost/memory.runtime_bytes)

Everything but `runtime` includes the allocator-fragmentation allowance where
cost/coefficients.py applies it (activations and transient bytes). The state terms are all
(parameters x bytes per parameter), so they split exactly by the sharded per-parameter bytes
of weights, gradients and optimizer state. `workspace` is what remains of the stage's fixed
term after the embedding state, logits and runtime, so the categories sum to
cost/schedule.stage_mem_bytes exactly; tests check each category against its own formula.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from paraplan.cost import asymmetric, flops, memory, moe, schedule
from paraplan.cost.coefficients import StageCoefficients, homogeneous_placement
from paraplan.cost.flops import expert_params
from paraplan.cost.class_coefficients import class_placement
from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance, Outer

CATEGORIES = ("weights", "grads", "optimizer", "activations", "logits", "workspace", "runtime")


def _state_shares(zero: int, shard: int, sb: memory.StateBytes) -> tuple[float, float, float]:
    """Bytes per parameter of (weights, grads, optimizer) on one GPU after ZeRO sharding."""
    return (sb.weight / (shard if zero >= 3 else 1) + sb.weight_whole,
            sb.grad / (shard if zero >= 2 else 1) + sb.grad_whole,
            sb.optimizer / (shard if zero >= 1 else 1))


def stage_categories_bytes(inst: Instance, plan: Plan, c: StageCoefficients) -> list[dict[str, float]]:
    """Per stage of a flat instance's plan, bytes per category (CATEGORIES); they sum to
    schedule.stage_mem_bytes."""
    o = plan.flat_outer
    return _categories(inst, (o,) * o.pp, homogeneous_placement(inst.cluster.one_group, o).dp_ranks,
                       plan.layers_per_stage, plan.full_recompute_layers, c)


def class_categories_bytes(inst: Instance, plan: Plan,
                           coeffs: list[StageCoefficients]) -> list[list[dict[str, float]]]:
    """Per replica class and stage of a plan on node groups, bytes per category, from the
    class's coefficients (cost/class_coefficients.class_coefficients): each stage with its own
    group's tp, the state sharded over the gradient ring of every replica (class_placement)."""
    out = []
    for k, (rc, c) in enumerate(zip(plan.classes, coeffs)):
        stage_outers = tuple(replace(c.outer, tp=plan.tp_of(g)) for g in rc.stage_groups)
        shard = class_placement(inst.cluster, plan.outer, k).dp_ranks
        out.append(_categories(inst, stage_outers, shard, rc.layers_per_stage, rc.full_recompute_layers, c))
    return out


def asymmetric_categories_bytes(inst: Instance, plan: Plan, reserve_bytes: float) -> list[dict[str, float]]:
    """Per stage of an asymmetric pipeline, bytes per category: stage s's are those of stage s
    of the symmetric plan with stage_dp[s] replicas (asymmetric.stage_plan: its state sharded
    over stage s's own ranks) priced on the coefficients whose row s holds h_s micro-batches'
    activations (asymmetric.stage_coefficients); they sum to asymmetric.mem_bytes."""
    per = asymmetric.stage_coefficients(inst, plan.outer, reserve_bytes=reserve_bytes)
    return [class_categories_bytes(inst, asymmetric.stage_plan(plan, s), [c])[0][s] for s, c in enumerate(per)]


def _categories(inst, stage_outers: tuple[Outer, ...], shard: int, layers_per_stage,
                full_recompute_layers, c: StageCoefficients) -> list[dict[str, float]]:
    """Per stage, bytes per category of one pipeline whose stage s is priced by
    `stage_outers[s]` (its own tp on a mixed cluster, cost/coefficients.stage_outer), its
    state sharded over `shard` data x context parallel ranks (Placement.dp_ranks)."""
    m, fw = inst.model, inst.job.framework
    o, last = stage_outers[0], stage_outers[-1]
    pp, cp = o.pp, o.cp
    layout = memory.pipeline_state_layout(memory.state_layout(inst.job), o.zero, pp, inst.job.grad_reduce.bytes)
    w, g, opt_share = _state_shares(o.zero, shard, layout)
    spp = w + g + opt_share
    n = np.array(layers_per_stage, float)
    r = np.array(full_recompute_layers, float)
    uneven = schedule.uneven_chunk_mem_bytes(c, n, r)  # included in stage_mem_bytes
    total = schedule.stage_mem_bytes(c, n, r)
    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    # an MoE model's dense prefix (first stage): d dense layers in place of d MoE layers, whose
    # difference the coefficients carry as stage extras (stage_state_bytes, stage_act_bytes)
    d = m.moe.dense_layers if m.moe is not None else 0
    stage_state = c.stage_state_bytes if c.stage_state_bytes.size else np.zeros(pp)
    stage_act = c.stage_act_bytes if c.stage_act_bytes.size else np.zeros(pp)
    # multi-token prediction (last stage): its layers as more layers of the stage, its
    # projections and embedding copy as parameter state (cost/coefficients.build)
    mtp_params = memory.mtp_stage_params(m, pp) / last.tp
    out = []
    for s, os in enumerate(stage_outers):
        tp = os.tp
        fp8 = memory.fp8_weight_bytes(m, tp, inst.job.precision, fw)
        # the gradient ring's communicator spans every replica: shard / cp of them
        runtime = memory.runtime_bytes(tp, cp, shard // cp, pp)
        # MoE: a GPU's experts (experts / ep, each 1/etp) are sharded over the expert-data-
        # parallel group (moe.edp_ranks: shard * tp / (ep * etp) ranks), so their state splits
        # by that group's shares (cost/moe.py)
        ex = (m.moe.experts // os.ep) * expert_params(m) / os.expert_tp if m.moe is not None else 0.0
        ex_fp8 = memory.fp8_expert_weight_bytes(ex, inst.job.precision, fw)  # the experts' fp8 copies
        ew, eg, eo = _state_shares(os.zero, moe.edp_ranks(shard, os), layout)
        embed = memory.embedding_state_bytes(m, tp, o.zero, shard, s == 0, s == pp - 1, layout)
        mtp = m.mtp_layers if s == pp - 1 else 0
        mtp_state = mtp * c.layer_state_bytes[s] + (mtp_params * spp if s == pp - 1 else 0.0)
        moe_layers = n[s] + mtp - (d if s == 0 else 0)
        dense_fp8 = memory.fp8_weight_bytes(flops.moe_dense_view(m), tp, inst.job.precision, fw) if s == 0 and d else 0.0
        # (parameters x spp) terms: the MoE layers' non-expert state, the dense layers' state
        param_state = moe_layers * (c.layer_state_bytes[s] - fp8 - ex_fp8 - ex * (ew + eg + eo)) + embed
        if s == pp - 1:
            param_state += mtp_params * spp
        if s == 0 and d:
            param_state += d * (c.layer_state_bytes[0] + (stage_state[0] - mtp_state) / d - dense_fp8)
        logits = memory.logits_activation_bytes(m, o.micro_batch, tp, cp, fw) * frag if s == pp - 1 else 0.0
        acts = (n[s] * c.layer_act_bytes[s] - r[s] * (c.layer_act_bytes[s] - c.layer_ckpt_bytes[s])
                + stage_act[s] + uneven[s])
        workspace = c.stage_mem_bytes[s] - embed - logits - runtime - stage_state[s] - stage_act[s]
        cats = {"weights": (param_state * w / spp + moe_layers * (fp8 + ex_fp8 + ex * ew)
                            + (d * dense_fp8 if s == 0 else 0.0)),
                "grads": param_state * g / spp + moe_layers * ex * eg,
                "optimizer": param_state * opt_share / spp + moe_layers * ex * eo, "activations": float(acts),
                "logits": logits, "workspace": float(workspace), "runtime": runtime}
        assert abs(sum(cats.values()) - total[s]) <= 1e-6 * total[s], "categories must sum to the total"
        out.append({k: float(v) for k, v in cats.items()})
    return out
