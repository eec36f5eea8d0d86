"""One line per thing about a model that its plan's time or memory does not price exactly.

Shown with every plan (`paraplan plan` and `simulate`, text and --json), so that nothing a
model's source declares is dropped silently. The lines come from two places:

- `ModelSpec.unmodelled`: what the model's source declares and the cost model does not price
  (cost/hf_layout.py: e.g. Gemma-2's logit soft-capping, a config key it does not know);
- the plan: features priced exactly for the model as a whole but not per pipeline stage or not
  under every tensor-parallel layout (below).
"""

from __future__ import annotations

from dataclasses import replace

from paraplan.cost.flops import CAUSAL_ATTENTION_FRACTION, causal_score_fraction

from paraplan.cost.moe import a2a_overlap_applies, shared_overlap_applies
from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance, MoeDispatcher, PipelineSchedule, RecomputeModule


def model_warnings(inst: Instance, plan: Plan | None = None) -> list[str]:
    """Lines for `inst`'s model, and for `plan` of any shape (None: every plan of the space):
    the model's own `unmodelled` lines, then one line per rule of NOTES that applies to any of
    the plan's replica classes. A rule reads one class at a time (the plan with that class
    alone: its pp, its layer plans, its Outer), since classes differ in exactly what the rules
    read; a line two classes give alike is said once."""
    views = [None] if plan is None else [replace(plan, classes=(c,)) for c in plan.classes]
    lines = list(inst.model.unmodelled)
    for rule in NOTES:
        for view in views:
            line = rule(inst.model, inst, view)
            if line is not None and line not in lines:
                lines.append(line)
    return lines


# Each rule: (model, instance, plan or None) -> its line, or None where it does not apply.

def _window_share(m, inst, plan) -> str | None:
    n = m.windowed_layers
    if not (0 < n < m.layers and (plan is None or plan.pp > 1)):
        return None
    share = causal_score_fraction(m.seq_len, m.sliding_window_tokens) / CAUSAL_ATTENTION_FRACTION
    return (f"{n} of {m.layers} layers attend to a {m.sliding_window_tokens}-token"
            f" window ({share:.0%} of full causal attention's scores): every layer is"
            " priced as their mean, exact for the model, not for a pipeline stage"
            " holding more or fewer windowed layers than its share")


def _window_ring(m, inst, plan) -> str | None:
    if not (m.windowed_layers and plan is not None and plan.cp > 1):
        return None
    return (f"context parallel cp={plan.cp} with a sliding window: the K/V ring is priced"
            " as passing every block (cp - 1 steps), as for full attention, although a"
            " windowed query needs only the blocks its window reaches")


def _parallel_block_reduces(m, inst, plan) -> str | None:
    if not (m.parallel_blocks and (plan is None or max(plan.tp_degrees) > 1)):
        return None
    return ("parallel attention/MLP blocks: tensor-parallel all-reduces are priced as"
            " two per direction, as Megatron-LM issues them (GPT-NeoX sums the two"
            " branches before one forward all-reduce)")


def _parallel_block_partitions(m, inst, plan) -> str | None:
    partitioned = ("spatial_temporal" in inst.search.tensor_partitions if plan is None
                   else any(layer_plan for _, layer_plan in plan.one_class.partitions))
    if not (m.parallel_blocks and partitioned):
        return None
    return ("per-operator partitions price a parallel block's MLP as reading the"
            " attention output's layout, as in a sequential block")


def _mla_stash(m, inst, plan) -> str | None:
    if m.mla is None or RecomputeModule.MLA_UP_PROJ in getattr(inst.job, "recompute_modules", ()):
        return None
    return ("multi-head latent attention: the up projections' outputs are stashed;"
            " Megatron-core's recomputation of them (DeepSeek-V3's memory saving) is"
            " job.recompute_modules: [mla_up_proj], off in this job")


def _dense_prefix(m, inst, plan) -> str | None:
    if m.moe is None or not m.moe.dense_layers:
        return None
    return (f"the first {m.moe.dense_layers} of {m.layers} layers are dense, priced on"
            " the first pipeline stage (which must hold them in its first model chunk);"
            " full recompute there is priced per MoE layer, and on mixed clusters they"
            " are priced as MoE layers")


def _a2a_overlap_off(m, inst, plan) -> str | None:
    if not (m.moe is not None and inst.job.moe_a2a_overlap and plan is not None
            and not a2a_overlap_applies(inst.job, plan.flat_outer)):
        return None
    return ("job.moe_a2a_overlap: this plan runs without it (Megatron-core overlaps"
            " the all-to-all only with ep > 1 and pp = 1 or interleaving), so its"
            " all-to-alls are priced exposed")


def _shared_overlap_off(m, inst, plan) -> str | None:
    if not (m.moe is not None and inst.job.moe_shared_expert_overlap and plan is not None
            and not shared_overlap_applies(inst.job, plan.flat_outer)):
        return None
    return ("job.moe_shared_expert_overlap: this plan has ep = 1, so there is no"
            " all-to-all to run the shared expert under")


def _node_limit_without_deepep(m, inst, plan) -> str | None:
    if (m.moe is None or m.moe.max_nodes_per_token is None
            or getattr(inst.job, "moe_dispatcher", None) is MoeDispatcher.DEEPEP):
        return None
    return ("model.moe.max_nodes_per_token changes no traffic with Megatron-core's"
            " all-to-all dispatcher (every routed copy travels to its expert's GPU);"
            " it counts with job.moe_dispatcher: deepep, which sends a token once per"
            " node (cost/moe.py)")


def _dualpipe_stages(m, inst, plan) -> str | None:
    if not (getattr(inst.job, "pipeline_schedule", None) is PipelineSchedule.DUALPIPE
            and plan is not None):
        return None
    return ("DualPipe: the stages listed are devices (device d holds stages d and"
            " pp - 1 - d); the bubble is DualPipe's formula for equal chunks, and"
            " its memory counts both stages' transient buffers (cost/dualpipe.py)")


NOTES = (_window_share, _window_ring, _parallel_block_reduces, _parallel_block_partitions, _mla_stash,
         _dense_prefix, _a2a_overlap_off, _shared_overlap_off, _node_limit_without_deepep, _dualpipe_stages)
