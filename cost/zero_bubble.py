"""The stage terms of torch.distributed.pipelining's zero-bubble schedules (cost/specs.ZeroBubble),
which torchtitan runs by name (parallelism.pipeline_parallel_schedule).

Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), split each backward into B, the
gradient of the stage's input, and W, the gradient of its weights. Only B is on the pipeline's
critical path, so W fills the fill and drain. With per-micro-batch times F, B, W on p uniform
stages the paper's fill/drain ("bubble") is
    1F1B                    (p - 1)(F + B + W)                   Sec. 2, Fig. 2
    ZB-H1                   (p - 1)(F + B - W)                   Sec. 2.1: 1/3 of 1F1B at F = B = W
    ZB-H2                   (p - 1)(F + B - 2W), 0 at F = B = W  Sec. 2.2, (2p - 1) micro-batches held
    ZB-V (2 chunks, V)      0 at F = B = W                       Sec. 6, held like 1F1B
so each other stage's pass costs T_s - k W_s (T = F + B + W): k = 2 for ZB-H1 (torch's
ScheduleInterleavedZeroBubble, interleaved ZB-H1) and k = 3 for ZB-V (ScheduleZBVZeroBubble:
ZB-H2's F + B - 2W on its half-size chunks), divided by the v chunks as interleaving divides it
(cost/schedule.pipeline_time_s has the pipeline term). ZB-H2 has no torch schedule.

W_s = w n_s t_s: a layer's time splits into F, B and W as its FLOPs do (weight_grad_share); the
embedding, output layer and full-recompute forwards count no W (the output layer's weight
gradient is left on the critical path: a slight overestimate of the bubble). The coefficients
carry k w t_s as `layer_drain_saving_s`, the time one layer of stage s takes out of that
stage's pass through the fill/drain. k w <= 3 * 1/3 = 1, so with non-negative stage and
recompute terms a pass T_s - k W_s never goes below zero.

Memory (v_in_flight; coefficients.build): InterleavedZeroBubble holds what Interleaved1F1B holds (Sec. 2.1:
ZB-H1 holds no more than 1F1B; torch's ZB1P warms up with fewer chunks, and a W's inputs live
only until the W right after its B); ZBVZeroBubble holds 2 pp half-stage chunks on every rank
(Sec. 6: "the same peak memory as 1F1B", balanced over the ranks; torch's order warms rank s up
with 2 pp - s - 1 chunk-0 and s chunk-1 forwards, then adds one chunk before each B): pp
micro-batches on every stage, at most m. Its V puts the last model chunk (norm, output layer,
loss) on rank 0 beside the first (v_shaped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from paraplan.cost.flops import layer_matmuls, moe_dense_view
from paraplan.cost.specs import ModelSpec, ZeroBubble

# W passes each stage's fill/drain pass loses (module docstring)
W_PASSES_SAVED = {ZeroBubble.INTERLEAVED: 2, ZeroBubble.V: 3}


def weight_grad_share(m: ModelSpec, b: int, tp: int, cp: int, sp: bool = False) -> float:
    """W / (F + B + W) of one transformer layer, from its FLOPs (cost/flops.layer_matmuls).

    A linear layer's backward is two GEMMs of its forward's size, the input gradient (B) and the
    weight gradient (W); the attention core (QK^T, softmax, PV) has no weights, so its backward
    (twice its forward) is all B. With G the linear and A the attention-core forward FLOPs:
    F = G + A, B = G + 2A, W = G, so W / (F + B + W) = G / (3 (G + A)), 1/3 without attention
    (the paper's F = B = W). An MoE layer is taken as its dense view (its experts are linear too)."""
    view = m if m.moe is None else moe_dense_view(m)
    mm = layer_matmuls(view, b, tp, cp, sp)
    linear = sum(mm.linear_calls)
    return linear / (3 * (linear + mm.attention_core))


def v_in_flight(pp: int, m: int) -> np.ndarray:
    """ZBVZeroBubble's micro-batches held at the peak, in whole-stage units (module docstring)."""
    return np.full(pp, float(min(pp, m)))


def v_shaped(c):
    """StageCoefficients `c` with ZBVZeroBubble's placement of the output layer: the V puts the
    last model chunk (norm, output layer, loss) on rank 0 beside the first (embedding), and rank
    pp - 1 holds two middle chunks. The last stage's per-stage terms beyond a middle stage's (the
    output layer's time, weights, gradients, optimizer state, logits and its gradient sync) move
    to stage 0; the last stage keeps a middle stage's (stage pp - 2's). Needs pp >= 3."""
    assert c.pp >= 3, "a middle stage prices the bare rank"
    mid, last = c.pp - 2, c.pp - 1

    def moved(a: np.ndarray) -> np.ndarray:
        a = np.array(a, float)
        extra = a[last] - a[mid]
        a[0] += extra
        a[last] = a[mid]
        return a

    return replace(c, stage_time_s=moved(c.stage_time_s), stage_sync_time_s=moved(c.stage_sync_time_s),
                   stage_mem_bytes=moved(c.stage_mem_bytes), stage_act_bytes=moved(c.stage_act_bytes),
                   stage_state_bytes=moved(c.stage_state_bytes), stage_parts=_VShapedParts(c.stage_parts))


class _VShapedParts(Sequence):
    """Each stage's named time extras (StageCoefficients.stage_parts) moved as v_shaped moves
    stage_time_s, so that they still sum to it; read on demand, as the parts they wrap."""

    __slots__ = ("_parts",)

    def __init__(self, parts):
        self._parts = parts

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, s: int) -> dict[str, float]:
        pp = len(self._parts)
        s = s % pp
        mid, last = self._parts[pp - 2], self._parts[pp - 1]
        if s == pp - 1:
            return dict(mid)
        own = dict(self._parts[s])
        if s == 0:
            for name in set(last) | set(mid):
                own[name] = own.get(name, 0.0) + last.get(name, 0.0) - mid.get(name, 0.0)
        return own


def shaped(c, model: ModelSpec):
    """StageCoefficients `c` of an outer running c.outer.zero_bubble: the per-layer drain saving
    k w t_s, and for ZBVZeroBubble the V's placement (its in-flight count is build's)."""
    o = c.outer
    w = weight_grad_share(model, o.micro_batch, o.tp, o.cp, o.sequence_parallel)
    saving = W_PASSES_SAVED[o.zero_bubble] * w * np.asarray(c.layer_time_s, float)
    assert (saving <= c.layer_time_s).all(), "k w <= 1: a pass never goes below zero"
    c = replace(c, layer_drain_saving_s=saving)
    return v_shaped(c) if o.zero_bubble is ZeroBubble.V else c
