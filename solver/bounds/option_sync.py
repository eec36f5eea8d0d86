"""The least data-parallel gradient sync a class layout of an option family pays after its last
backward (issue 33: on 32 A100 + 32 H100 with the three layout options the families' throughput
bound, solver/option_families.py, started at 7.3 s against an optimum of 11.1 s, as it priced
no gradient sync, which a plan spanning both GPU types runs over the 200 Gbit/s group link).

A plan's iteration time is its slowest replica's pipeline plus its slowest stage's sync,
    T = max_k pipeline_k + max_(k, s) D_(k, s),   D_(k, s) = stage_sync + n_(k, s) layer_sync_s
(cost/class_coefficients.iteration_time_s, cost/coefficients.build). Every term is >= 0, so
D_(k, s) >= n_(k, s) layer_sync_s, and the stage of class k holding the most layers holds at
least L / pp_k of its L: max D >= max_k L / pp_k * min_g y_g, y_g a floor of layer_sync on a
group g the layout uses. The sum of this and a floor of the pipeline part is a floor of T.

**The floor of one layer's sync** (cost/coefficients._layer_costs). A layer of lp >= layer_params
/ tp parameters per GPU (token-split ops only add replicated ones) reduces its gradients, of
`grad_reduce.bytes` per element (a job field, never searched), over the ring of every replica
of the plan times cp (n ranks), then with ZeRO 1/2 all-gathers its bf16 weights:
    layer_sync = g_exposed + kappa g_hidden + ag_after + step + per-iteration terms,
with g_exposed = max(0, g - bwd) where the framework overlaps the reduction
(cost/framework.grad_reduce_overlaps), else g; g_hidden = g - g_exposed; kappa the overlap
slowdown (>= 0). The step and the per-iteration terms are >= 0 and left out. In g's ring and
tree prices (cost/comm) the latencies are >= 0 and left out, and a ring or tree of n ranks moves
at least (n - 1) / n of the bytes per all-gather or reduce-scatter and 2 (n - 1) / n per
all-reduce, at bandwidth at most bw eff (eff the network efficiency the ring runs at):
    ZeRO 0:   g >= 2 q G / bw,  ag_after = 0
    ZeRO 1/2: g >= q G / bw,    ag_after >= q W / bw      (q = (n - 1) / n, G, W: bytes)
    ZeRO 3: 0 (without a pipeline its traffic is in the layer time: zero3_layer_s below
            raises the floors of such a layout instead; torch's per-step reduce-scatter in a
            pipeline is not read).
Where the reduction overlaps, g_exposed + kappa g_hidden = max(kappa g, g - (1 - kappa) bwd)
(bwd >= g or not), which grows with g and falls with bwd, so it is read at g's floor and at the
largest backward a layout at that micro-batch size runs (of every sp flag and recompute mode);
where it may not overlap in some
configuration of the stage, it is read as if it did. The least over the ZeRO stages the layouts
may run is a floor of every layout's.

**The link.** With several classes a layer's ring joins a copy from every class
(class_coefficients._ring_link), so on a layout using groups U (>= 2) its bandwidth is at most
the least group link between them, on the network (eff = inter_node). A layout on one group is
given no sync floor (0): its ring may stay inside NVLink; nor is a layout of an MoE model.

**Per-operator partitions** (search.tensor_partitions). A layer plan's GPU holds lp =
layer_params / tp + replicated_params >= layer_params / tp parameters, and its token splits'
group all-reduce (grad_sync_s >= 0) adds to g (coefficients._layer_costs), so g is at least the
floor above under every plan; the exposed part falls with the backward, so it is read at the
largest backward of Megatron's layer and every plan (solver/bounds/plan_range.py). The floor
then holds for every layer-plan combination.

**The ranks.** q grows with n, so the floor is read at the fewest ranks the layout can have:
cp times its replicas (solver/option_families.py counts them, at least one per class).
"""

from __future__ import annotations

import itertools

import numpy as np

from paraplan.cost.comm import NetEfficiency
from paraplan.cost.flops import BF16_BYTES, layer_params
from paraplan.cost.framework import grad_reduce_overlaps
from paraplan.solver.bounds.plan_range import plan_range


def _may_overlap(job, zero: int) -> bool:
    """Whether some stage of some layout at this ZeRO stage overlaps its gradient reduction."""
    return any(grad_reduce_overlaps(job, pp, v, zero) for pp in (1, 2) for v in (1, 2))


class SyncFloor:
    """Per option family (groups used, tp, cp), the floor y of one layer's sync (module
    docstring) per micro-batch size and scenario, at any number of ranks."""

    def __init__(self, fb) -> None:
        self.fb = fb
        self.inst = fb.inst
        self.net = NetEfficiency()
        self.memo: dict = {}

    def _backward_s(self, g: int, tp: int, cp: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): the largest backward of one layer on group g at a
        micro-batch size, of every sp flag and recompute mode, of Megatron's layer and every
        layer plan (plan_range.py)."""
        key = ("bwd", g, tp, cp)
        got = self.memo.get(key)
        if got is None:
            inst, fb = self.inst, self.fb
            sps = [sp for sp in inst.search.sequence_parallel
                   if not (sp and (tp == 1 or inst.model.seq_len % (tp * cp)))] or [False]
            got = np.zeros((len(fb.mbs), len(fb.idx)))
            for bi, b in enumerate(fb.mbs.astype(int).tolist()):
                for sp, rc in itertools.product(sps, fb.recompute):
                    for si, i in enumerate(fb.idx):
                        got[bi, si] = max(got[bi, si], plan_range(inst, i, g, tp, cp, b, sp, rc,
                                                                  self.memo).most_bwd_s)
            self.memo[key] = got
        return got

    def _bw(self, used: tuple[int, ...]) -> np.ndarray:
        """(scenarios,): the most bandwidth a ring across the groups `used` runs at, bytes/s."""
        out = []
        for i in self.fb.idx:
            between = self.inst.scenarios[i].cluster.between
            out.append(min(between[a][b].bw_bytes_per_s for a in used for b in used if a != b))
        return np.array(out) * self.net.inter_node

    def per_layer_s(self, used: tuple[int, ...], tp: int, cp: int, zeros: tuple[int, ...],
                    ranks: int) -> np.ndarray:
        """(micro-batch sizes, scenarios): y, the least sync of one layer on any group of
        `used` at any ZeRO stage of `zeros`, on a ring of at least `ranks` ranks."""
        key = ("y", used, tp, cp, zeros, ranks)
        got = self.memo.get(key)
        if got is not None:
            return got
        inst = self.inst
        if len(used) < 2 or ranks < 2 or not zeros or inst.model.moe is not None:
            got = self.memo[key] = np.zeros((len(self.fb.mbs), len(self.fb.idx)))
            return got
        q = (ranks - 1) / ranks
        params = layer_params(inst.model) / tp
        grads_s = q * params * inst.job.grad_reduce.bytes / self._bw(used)  # (scenarios,)
        weights_s = q * params * BF16_BYTES / self._bw(used)
        bwd = np.maximum.reduce([self._backward_s(g, tp, cp) for g in used])
        kappa = self.net.overlap_slowdown
        best = np.full((len(self.fb.mbs), len(self.fb.idx)), np.inf)
        for z in zeros:
            if z == 3:
                y = np.zeros_like(best)
            else:
                g = (2.0 if z == 0 else 1.0) * grads_s
                after = 0.0 if z == 0 else weights_s
                exposed = np.maximum(kappa * g, g - (1 - kappa) * bwd) if _may_overlap(inst.job, z) else g
                y = exposed + after
            best = np.minimum(best, np.broadcast_to(y, best.shape))
        got = self.memo[key] = best
        return got

    def zero3_layer_s(self, used: tuple[int, ...], tp: int, ranks: int) -> np.ndarray:
        """(scenarios,): the least time one layer of a class without a pipeline takes per
        micro-batch at ZeRO-3 on a ring across `used` of at least `ranks` ranks (0 on one
        group). cost/coefficients._layer_costs prices its forward as fwd + exposed + kappa
        hidden of the gather ag (exposed >= ag - fwd), its backward as bwd + the same of the
        gather and reduce-scatter rs (>= ag + rs - bwd; with a full recompute, of a gather at
        least ag beside bwd + the recompute's forward), so a layer takes at least
        max(fwd, ag) + max(bwd, ag + rs) >= 2 ag + rs, with ag >= q W / bw and rs >= q G / bw
        (the module docstring's q, W, G, bw). Every layer plan holds at least the 1/tp share of
        the parameters, which its gathers and reduce-scatter move (token splits, which add
        replicated ones, are not offered with ZeRO-3), so this holds for every plan."""
        if len(used) < 2 or ranks < 2 or self.inst.model.moe is not None:
            return np.zeros(len(self.fb.idx))
        inst = self.inst
        params = layer_params(inst.model) / tp
        q = (ranks - 1) / ranks
        return q * params * (2 * BF16_BYTES + inst.job.grad_reduce.bytes) / self._bw(used)
