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


def stage_columns(rows: list[list[float]], at: np.ndarray) -> np.ndarray:
    """stage_values of each of `rows` (per distinct site, one value each), as the rows of one
    (rows, stages) array gathered at once: the same floats in two numpy calls rather than two
    per row (a layer plan's build reads eight such columns; 21,419 builds on the three-type,
    two-site row, issue 33). Each row is a contiguous view of that array."""
    return np.array(rows, float)[:, at]


@dataclass(frozen=True)
class MemoryBase:
    """What stage_memory reads of the configuration alone, the same for every layer plan priced
    on it (build prices a configuration's plans on one base, cost/coefficients.py): per distinct
    site the layer state's plan-free terms, per stage the embedding state, the transient and
    runtime allowances and the capacity."""

    where: list[int]
    at: np.ndarray
    stage_tps: list[int]
    sb: memory.StateBytes
    # per distinct site: (the 1/tp share's state bytes, state bytes per replicated parameter,
    # cached fp8 weight bytes), the three terms of a layer's state beside its plan's parameters
    site_state: list[tuple[float, float, float]]
    edp_state_per_param: float  # state bytes per routed-expert parameter (an MoE layer's)
    embedding_state: np.ndarray
    z3_dense: list[float] | None  # ZeRO-3's gathered bytes per stage of a layer holding no experts
    logits_bytes: float  # the last stage's logits
    runtime: float | np.ndarray
    userbuffers: np.ndarray | None
    capacity: np.ndarray
    inflight: np.ndarray


def memory_base(inst: Instance, o: Outer, where: list[int], tps: list[int], hbm_bytes: list[float], dp_n: int,
                inflight: np.ndarray, reserve_bytes: float = 0.0) -> MemoryBase:
    """stage_memory's terms that read no layer plan (its arguments but the layer terms)."""
    m, pp = inst.model, o.pp
    b, cp = o.micro_batch, o.cp
    at = np.array(where, np.int64)
    stage_tps = [tps[i] for i in where]
    tp, tp_last = stage_tps[0], stage_tps[-1]
    fw = inst.job.framework
    sb = memory.pipeline_state_layout(memory.state_layout(inst.job), o.zero, pp, inst.job.grad_reduce.bytes)
    # per GPU: the layer's 1/tp share plus the weights its token-split ops replicate, plus
    # Transformer Engine's cached fp8 weight copies
    site_state = [(memory.layer_state_bytes(m, ts, o.zero, dp_n, sb), memory.state_bytes_per_param(o.zero, dp_n, sb),
                   memory.fp8_weight_bytes(m, ts, inst.job.precision, fw)) for ts in tps]
    emb = np.zeros(pp)
    emb[0] = memory.embedding_state_bytes(m, tp, o.zero, dp_n, True, pp == 1, sb)
    if pp > 1:
        emb[-1] = memory.embedding_state_bytes(m, tp_last, o.zero, dp_n, False, True, sb)
    z3 = None
    if o.zero == 3:  # gathered units, prefetch and the gradients being reduce-scattered
        z3 = [memory.zero3_gathered_bytes(m, stage_tps[s], fw, sb, s == 0, s == pp - 1, 0.0) for s in range(pp)]
    distinct_tp = set(stage_tps)
    # the gradient ring's communicator spans every replica of the plan (dp_n / cp ranks, as
    # many as ZeRO shards over): on a mixed cluster more than this class's own o.dp
    runtime = {t: memory.runtime_bytes(t, cp, dp_n // cp, pp) for t in distinct_tp}
    ub = None
    if inst.job.tp_comm_overlap and o.sequence_parallel:  # TE allocates them at start-up
        one = memory.userbuffers_bytes(m, b, cp, inst.job.precision)
        ub = np.array([one if t > 1 else 0.0 for t in stage_tps])
    return MemoryBase(
        where=where, at=at, stage_tps=stage_tps, sb=sb, site_state=site_state,
        edp_state_per_param=memory.state_bytes_per_param(o.zero, moe.edp_ranks(dp_n, o), sb),
        embedding_state=emb, z3_dense=z3, logits_bytes=memory.logits_activation_bytes(m, b, tp_last, cp, fw),
        runtime=runtime[tp] if len(distinct_tp) == 1 else np.array([runtime[t] for t in stage_tps]),
        userbuffers=ub, capacity=stage_values([h - reserve_bytes for h in hbm_bytes], at), inflight=inflight)


def stage_memory(inst: Instance, o: Outer, terms: list, where: list[int], tps: list[int],
                 hbm_bytes: list[float], dp_n: int, inflight: np.ndarray, reserve_bytes: float = 0.0) -> StageMemory:
    """The memory coefficients of `o` (pp stages), without an MoE model's dense prefix layer
    (plan_memory's dense_terms). `terms`: the layer's LayerTerms on each distinct site, `tps`
    and `hbm_bytes` that site's tp and GPU memory; `where[s]`: stage s's site among them;
    `dp_n`: the gradient ring's ranks (Placement.dp_ranks); `inflight`: the micro-batches each
    stage holds at its peak."""
    base = memory_base(inst, o, where, tps, hbm_bytes, dp_n, inflight, reserve_bytes)
    return plan_memory(inst, o, base, terms, dp_n, None)


def _site_state(inst: Instance, base: MemoryBase, terms: list) -> list[float]:
    """Each distinct site's per-layer state bytes from its layer terms."""
    fw, prec = inst.job.framework, inst.job.precision
    uniq_state = []
    for x, (share, per_param, fp8) in zip(terms, base.site_state):
        st = share + x.replicated_params * per_param + fp8
        if x.expert_params:  # sharded over the expert-data-parallel group
            st += x.expert_params * base.edp_state_per_param
            st += memory.fp8_expert_weight_bytes(x.expert_params, prec, fw)
        uniq_state.append(st)
    return uniq_state


def plan_memory(inst: Instance, o: Outer, base: MemoryBase, terms: list, dp_n: int,
                dense_terms=None) -> StageMemory:
    """stage_memory of one layer plan (`terms`, `dense_terms` as there) on the configuration's
    `base` (memory_base)."""
    m, pp = inst.model, o.pp
    where, at, stage_tps = base.where, base.at, base.stage_tps
    tp = stage_tps[0]
    fw, sb = inst.job.framework, base.sb
    # each stage's layer state, workspace, stashed and checkpointed activations, from its site's
    state, transient, act, ckpt = stage_columns([_site_state(inst, base, terms), [x.workspace_bytes for x in terms],
                                                 [x.act_bytes for x in terms], [x.ckpt_bytes for x in terms]], at)
    stage_mem = base.embedding_state.copy()
    if dense_terms is not None:  # the first stage's largest layer sets its workspace
        transient[0] = max(transient[0], dense_terms.workspace_bytes)
    if o.zero == 3:  # gathered units, prefetch and the gradients being reduce-scattered
        z3 = (base.z3_dense if not any(x.expert_params for x in terms) else
              [memory.zero3_gathered_bytes(m, stage_tps[s], fw, sb, s == 0, s == pp - 1,
                                           terms[where[s]].expert_params) for s in range(pp)])
        if dense_terms is not None:  # the first stage gathers its dense prefix layers too: the larger block
            z3 = list(z3)
            z3[0] = max(z3[0], memory.zero3_gathered_bytes(moe_dense_view(m), tp, fw, sb, True, pp == 1))
        transient += z3
    transient[-1] += base.logits_bytes
    stage_mem += transient * (1 + memory.ALLOCATOR_FRAGMENTATION)
    stage_mem += base.runtime
    if base.userbuffers is not None:
        stage_mem += base.userbuffers

    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    inflight = base.inflight
    act = act * inflight * frag
    ckpt = ckpt * inflight * frag
    min_chunk = 1
    stage_act = np.zeros(pp)
    stage_state = np.zeros(pp)
    if dense_terms is not None:
        min_chunk = _dense_prefix_memory(inst, o, base, dense_terms, dp_n, state, act, stage_mem, stage_act,
                                         stage_state)
    if m.mtp_layers:
        _mtp_memory(inst, o, base, dp_n, state, act, stage_mem, stage_act, stage_state)
    return StageMemory(layer_state_bytes=state, layer_act_bytes=act, layer_ckpt_bytes=ckpt,
                       stage_mem_bytes=stage_mem, capacity_bytes=base.capacity.copy(), stage_act_bytes=stage_act,
                       stage_state_bytes=stage_state, first_chunk_min_layers=min_chunk)


def _dense_prefix_memory(inst: Instance, o: Outer, base: MemoryBase, dense_terms, dp_n: int, state, act,
                         stage_mem, stage_act, stage_state) -> int:
    """An MoE model's first d layers are dense (DeepSeek-V3: 3, FFN 18,432). The split prices
    every layer alike, so the first stage, which holds them in its first model chunk
    (first_chunk_min_layers, enforced by every backend), pays d x (dense layer - MoE layer) as
    a stage extra, as it pays the embedding: time, sync and step (build), state and stashed
    activations (added to the first stage's entries of the arrays given). Full recompute on
    that stage is priced per MoE layer (cost/model_notes.py says so). Returns d."""
    m, tp, sb = inst.model, base.stage_tps[0], base.sb
    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    d = m.moe.dense_layers
    dv = moe_dense_view(m)
    dense_state = (memory.layer_state_bytes(dv, tp, o.zero, dp_n, sb)
                   + dense_terms.replicated_params * memory.state_bytes_per_param(o.zero, dp_n, sb)
                   + memory.fp8_weight_bytes(dv, tp, inst.job.precision, inst.job.framework))
    stage_state[0] = d * (dense_state - state[0])
    stage_act[0] = d * (dense_terms.act_bytes * base.inflight[0] * frag - act[0])
    stage_mem[0] += stage_state[0] + stage_act[0]
    return d


def _mtp_memory(inst: Instance, o: Outer, base: MemoryBase, dp_n: int, state, act, stage_mem, stage_act,
                stage_state) -> None:
    """Multi-token prediction on the last stage (ModelSpec.mtp_layers), added to the last
    stage's entries of the arrays given: per depth one more layer's state and stashed
    activations, the projection's input (2h) and its two norms' (h each) stashed per
    micro-batch in flight, and its logits beside the main head's; the projections and an
    embedding copy as parameter state (memory.mtp_stage_params). Not recomputed with full
    recomputation (the split's counts cover the main layers)."""
    m, pp = inst.model, o.pp
    b, cp, sp = o.micro_batch, o.cp, o.sequence_parallel
    tp_last = base.stage_tps[-1]
    frag = 1 + memory.ALLOCATOR_FRAGMENTATION
    tokens = b * m.seq_len / cp
    d_mtp = m.mtp_layers
    p_mtp = memory.mtp_stage_params(m, pp) / tp_last
    stash = 4 * tokens * m.hidden * BF16_BYTES / (tp_last if sp else 1)
    mtp_state = d_mtp * state[-1] + p_mtp * memory.state_bytes_per_param(o.zero, dp_n, base.sb)
    mtp_act = d_mtp * (act[-1] + stash * base.inflight[-1] * frag)
    stage_state[-1] += mtp_state
    stage_act[-1] += mtp_act
    stage_mem[-1] += (mtp_state + mtp_act
                      + d_mtp * memory.logits_activation_bytes(m, b, tp_last, cp, inst.job.framework) * frag)
