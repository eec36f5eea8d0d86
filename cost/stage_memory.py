"""The memory half of a stage's coefficients (cost/coefficients.build): per stage, what a layer
holds (state, stashed activations, checkpoint) and what the stage holds besides its layers,
against the capacity of its GPU.

build prices a configuration's layers on each distinct site and then calls `stage_memory` with
the layers' memory terms; the planner calls it before pricing
(solver/bounds/unpriced_memory.py) with the same terms from the layer-time floors' pricing of
each group alone. Memory reads nothing of the links a placement chooses: a layer's memory
terms (coefficients.LayerTerms' act_bytes, ckpt_bytes, workspace_bytes, replicated_params,
expert_params) read its tp, cp, micro-batch size, modes and the model; the rest here reads
each stage's tp and GPU, the ring size dp_n over which ZeRO shards, and the in-flight
micro-batches. So both callers get the same numbers, float for float
(tests/mixed/test_unpriced_memory.py checks them against build's).

In the module's names (per stage s, bytes, in-flight micro-batches f_s included):
    layer_state_bytes   a layer's weights, gradients and optimizer state (cost/memory.py)
    layer_act_bytes     its stashed activations, f_s micro-batches, allocator fragmentation
    layer_ckpt_bytes    its input checkpoint when fully recomputed, the same way
    stage_mem_bytes     embedding / output-layer state, workspace, logits, runtime, buffers,
                        an MoE model's dense prefix and multi-token-prediction extras
    capacity_bytes      the GPU's HBM less the reserve
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost import memory, moe
from paraplan.cost.flops import BF16_BYTES, moe_dense_view
from paraplan.cost.specs import Instance, Outer


@dataclass(frozen=True)
class StageMemory:
    """Per stage (shape (pp,)), the memory coefficients of cost/coefficients.py's docstring."""

    layer_state_bytes: np.ndarray
    layer_act_bytes: np.ndarray
    layer_ckpt_bytes: np.ndarray
    stage_mem_bytes: np.ndarray
    capacity_bytes: np.ndarray
    # the first stage's stashed activations and state beyond its layers' (an MoE model's dense
    # prefix) and the last stage's (multi-token prediction): StageCoefficients' fields
    stage_act_bytes: np.ndarray
    stage_state_bytes: np.ndarray
    first_chunk_min_layers: int


def stage_values(values: list[float], at: np.ndarray) -> np.ndarray:
    """Each stage's value from its site's: values[at[s]] as floats. A homogeneous cluster has
    one site, whose value every stage takes (one array, not a gather from another)."""
    if len(values) == 1:
        out = np.empty(len(at))  # (np.full is a Python function around these two C calls)
        out.fill(values[0])
        return out
    return np.array(values, float)[at]


def stage_memory(inst: Instance, o: Outer, terms: list, where: list[int], tps: list[int],
                 hbm_bytes: list[float], dp_n: int, inflight: np.ndarray, reserve_bytes: float = 0.0,
                 dense_terms=None) -> StageMemory:
    """The memory coefficients of `o` (pp stages). `terms`: the layer's LayerTerms on each
    distinct site, `tps` and `hbm_bytes` that site's tp and GPU memory; `where[s]`: stage s's
    site among them; `dp_n`: the gradient ring's ranks (Placement.dp_ranks); `inflight`: the
    micro-batches each stage holds at its peak; `dense_terms`: an MoE model's dense prefix
    layer on the first stage's site (None: none)."""
    m, pp = inst.model, o.pp
    b, cp, sp = o.micro_batch, o.cp, o.sequence_parallel
    at = np.array(where, np.int64)
    stage_tps = [tps[i] for i in where]
    tp, tp_last = stage_tps[0], stage_tps[-1]
    fw = inst.job.framework
    sb = memory.pipeline_state_layout(memory.state_layout(inst.job), o.zero, pp, inst.job.grad_reduce.bytes)
    # per GPU: the layer's 1/tp share plus the weights its token-split ops replicate, plus
    # Transformer Engine's cached fp8 weight copies
    uniq_state = []  # once per distinct site
    for x, ts in zip(terms, tps):
        st = (memory.layer_state_bytes(m, ts, o.zero, dp_n, sb)
              + x.replicated_params * memory.state_bytes_per_param(o.zero, dp_n, sb)
              + memory.fp8_weight_bytes(m, ts, inst.job.precision, fw))
        if x.expert_params:  # sharded over the expert-data-parallel group
            st += x.expert_params * memory.state_bytes_per_param(o.zero, moe.edp_ranks(dp_n, o), sb)
            st += memory.fp8_expert_weight_bytes(x.expert_params, inst.job.precision, fw)
        uniq_state.append(st)
    state = stage_values(uniq_state, at)
    stage_mem = np.zeros(pp)
    stage_mem[0] = memory.embedding_state_bytes(m, tp, o.zero, dp_n, True, pp == 1, sb)
    if pp > 1:
        stage_mem[-1] = memory.embedding_state_bytes(m, tp_last, o.zero, dp_n, False, True, sb)
    transient = stage_values([x.workspace_bytes for x in terms], at)
    if dense_terms is not None:  # the first stage's largest layer sets its workspace
        transient[0] = max(transient[0], dense_terms.workspace_bytes)
    if o.zero == 3:  # gathered units, prefetch and the gradients being reduce-scattered
        z3 = [memory.zero3_gathered_bytes(m, stage_tps[s], fw, sb, s == 0, s == pp - 1,
                                          terms[where[s]].expert_params) for s in range(pp)]
        if dense_terms is not None:  # the first stage gathers its dense prefix layers too: the larger block
            z3[0] = max(z3[0], memory.zero3_gathered_bytes(moe_dense_view(m), tp, fw, sb, True, pp == 1))
        transient += z3
    transient[-1] += memory.logits_activation_bytes(m, b, tp_last, cp, fw)
    stage_mem += transient * (1 + memory.ALLOCATOR_FRAGMENTATION)
    distinct_tp = set(stage_tps)
    # the gradient ring's communicator spans every replica of the plan (dp_n / cp ranks, as
    # many as ZeRO shards over): on a mixed cluster more than this class's own o.dp
    runtime = {t: memory.runtime_bytes(t, cp, dp_n // cp, pp) for t in distinct_tp}
    stage_mem += runtime[tp] if len(distinct_tp) == 1 else np.array([runtime[t] for t in stage_tps])
    if inst.job.tp_comm_overlap and o.sequence_parallel:  # TE allocates them at start-up
        ub = memory.userbuffers_bytes(m, b, cp, inst.job.precision)
        stage_mem += np.array([ub if t > 1 else 0.0 for t in stage_tps])

    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    act = stage_values([x.act_bytes for x in terms], at) * inflight * frag
    ckpt = stage_values([x.ckpt_bytes for x in terms], at) * inflight * frag
    min_chunk = 1
    stage_act = np.zeros(pp)
    stage_state = np.zeros(pp)
    if dense_terms is not None:
        # An MoE model's first d layers are dense (DeepSeek-V3: 3, FFN 18,432). The split
        # prices every layer alike, so the first stage, which holds them in its first model
        # chunk (first_chunk_min_layers, enforced by every backend), pays d x (dense layer -
        # MoE layer) as a stage extra, as it pays the embedding: time, sync and step (build),
        # state and stashed activations. Full recompute on that stage is priced per MoE layer
        # (cost/model_notes.py says so).
        d = m.moe.dense_layers
        dv = moe_dense_view(m)
        dense_state = (memory.layer_state_bytes(dv, tp, o.zero, dp_n, sb)
                       + dense_terms.replicated_params * memory.state_bytes_per_param(o.zero, dp_n, sb)
                       + memory.fp8_weight_bytes(dv, tp, inst.job.precision, fw))
        stage_state[0] = d * (dense_state - state[0])
        stage_act[0] = d * (dense_terms.act_bytes * inflight[0] * frag - act[0])
        stage_mem[0] += stage_state[0] + stage_act[0]
        min_chunk = d
    if m.mtp_layers:
        # multi-token prediction on the last stage (ModelSpec.mtp_layers): per depth one more
        # layer's state and stashed activations, the projection's input (2h) and its two norms'
        # (h each) stashed per micro-batch in flight, and its logits beside the main head's;
        # the projections and an embedding copy as parameter state (memory.mtp_stage_params).
        # Not recomputed with full recomputation (the split's counts cover the main layers).
        tokens = b * m.seq_len / cp
        d_mtp = m.mtp_layers
        p_mtp = memory.mtp_stage_params(m, pp) / tp_last
        stash = 4 * tokens * m.hidden * BF16_BYTES / (tp_last if sp else 1)
        mtp_state = d_mtp * state[-1] + p_mtp * memory.state_bytes_per_param(o.zero, dp_n, sb)
        mtp_act = d_mtp * (act[-1] + stash * inflight[-1] * frag)
        stage_state[-1] += mtp_state
        stage_act[-1] += mtp_act
        stage_mem[-1] += mtp_state + mtp_act + d_mtp * memory.logits_activation_bytes(m, b, tp_last, cp, fw) * frag
    capacity = stage_values([h - reserve_bytes for h in hbm_bytes], at)
    return StageMemory(layer_state_bytes=state, layer_act_bytes=act, layer_ckpt_bytes=ckpt,
                       stage_mem_bytes=stage_mem, capacity_bytes=capacity, stage_act_bytes=stage_act,
                       stage_state_bytes=stage_state, first_chunk_min_layers=min_chunk)
