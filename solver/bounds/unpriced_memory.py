"""A bound before pricing that reads memory: the tight bound (one_class.py) of each replica
class on coefficients whose times are floors and whose memory is exact.

solver/search.py prices configurations in the order of the layer-time floors' bound
(unpriced.py), which reads no memory. Near the optimum of a mixed cluster, memory is what
decides most of those it prices: on Llama-3 70B over three GPU types, of the 979
configurations that fit, the priced bound was above the optimum for 528 and the tight bound
(memory caps and the recompute they force) for 826 of the 910 lone classes (issue 33). This
module computes that bound before pricing, for the chunk about to be priced, and the search
leaves unpriced every configuration it proves unable to win.

Per class and scenario, stage s on group g_s gets
    a_s    the floors' stage terms (unpriced.stage_floor_terms: the output layer on the last
           stage, an MoE model's dense prefix on the first: 0 for a dense model)
    t_s    the layer-time floor (coefficients.layer_time_floor_s)
    u_s    (1 + slow) rc_fwd, the forward a full recompute replays, as build prices it without
           ZeRO-3 (build: rc_fwd + z3_b_rc - z3_b with both ZeRO-3 windows 0); 0 with ZeRO-3
           (recompute time is >= 0: one_class.py's docstring)
    d_s = g_s = 0 (syncs and gathers are >= 0)
and memory as build gives it (cost/stage_memory.stage_memory, the layer's memory terms from
the same pricing of the group alone: memory reads no link, so they are build's own numbers, at
the in-flight count build prices the class with, class_coefficients.class_outers). Every time
coefficient is at most build's and the memory ones are equal, and one_class.tight_class_terms'
tau* (slowest stage) and sigma* (sum of stage times) over the splits that fit grow with every
time coefficient (tau_s(n) = a_s + n t_s + u_s rho_s(n), rho_s reads only memory): they are at
most the priced class's, which are at most its slowest stage and its sum in any plan that
fits. They enter the pipeline's relaxation over micro-batch vectors as the memory-free
A_k, S_k do (batched.relaxed_s, exact for one class: (m - 1/v) tau* + sigma* / v), per
scenario, aggregated as the objective does (max, or weighted: each scenario's bound is at most
that scenario's time in the optimum), times the quantile objective's factor. Where a class fits
no split it is inf: a proof as build's no_split_fits after pricing.

Read for dense models (an MoE layer's memory terms come from cost/moe.py's pricing, and its
dense prefix's from a view of the model: not read here), without the embedding / loss as layer
slots, zero-bubble schedules or per-operator partitions; elsewhere 0 (no bound).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from paraplan.cost import scale
from paraplan.cost.class_coefficients import class_outers, group_site
from paraplan.cost.coefficients import in_flight_micro_batches, megatron_layer, stage_outer
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.stage_memory import stage_memory
from paraplan.cost.trust import objective_factors
from paraplan.solver.bounds.batched import relaxed_s
from paraplan.solver.bounds.one_class import TIGHT_ARRAYS, tight_class_terms
from paraplan.solver.bounds.unpriced import floor_layer_terms, stage_floor_terms


def applies(inst, o) -> bool:
    """Whether the module's bound reads outer `o` (else it is 0)."""
    return (inst.model.moe is None and not o.embedding_in_split and not o.loss_in_split
            and o.zero_bubble is None)


def memory_floor_bounds_s(inst, outers: list, idx: list[int], agg: str, weights, memo: dict,
                          layer_memo: dict) -> np.ndarray:
    """The module's bound of each of `outers` (0 where it does not apply), on scenarios `idx`
    aggregated as `agg` with `weights` (solver/search.scenario_weights). `memo`: the stage
    floors' (unpriced.floor_bounds_s), `layer_memo`: the layers' terms, both kept by the caller
    for `inst`."""
    out = np.zeros(len(outers))
    net = NetEfficiency()
    slow = scale.slowest_rank_fraction(inst.cluster.num_gpus, net.rank_jitter_rel)
    reserve = inst.search.memory_reserve_bytes
    L = inst.model.layers
    rows: dict[tuple[int, int], list] = defaultdict(list)  # (pp, v) -> [(j, scenario, class, arrays)]
    used = [j for j, o in enumerate(outers) if applies(inst, o)]
    for j in used:
        o = outers[j]
        for k, co in enumerate(class_outers(inst.job, o)):
            for i, arrays in zip(idx, _class_rows(inst, o, k, co, idx, memo, layer_memo, net, slow, reserve)):
                rows[co.pp, co.virtual_stages].append((j, i, k, arrays))
    if not used:
        return out
    K = max(len(outers[j].classes) for j in used)
    A = np.zeros((len(outers), len(inst.scenarios), K))
    S = np.zeros_like(A)
    for (pp, v), items in rows.items():
        stacked = {f: np.stack([x[3][f] for x in items]) for f in TIGHT_ARRAYS}
        tau, sigma, _, fits = tight_class_terms(stacked, L, v, inst.search.full_recompute)
        at = ([x[0] for x in items], [x[1] for x in items], [x[2] for x in items])
        A[at] = np.where(fits, tau, np.inf)
        S[at] = np.where(fits, sigma, np.inf)
    total = inst.job.global_batch
    for j in used:
        o = outers[j]
        cs, v = o.classes, o.virtual_stages
        a, s = A[j][idx][:, :len(cs)][None], S[j][idx][:, :len(cs)][None]
        if np.isinf(a).any():  # some class fits no split: nor does the configuration
            out[j] = np.inf
            continue
        pp = np.array([c.pp for c in cs], float)
        # MultiClassProblem.min_micro_batches, as unpriced.floor_bounds_s (a dense model: unpaired)
        lo = np.where(v > 1, pp, 1.0) if len(cs) == 1 else np.where(v > 1, 2 * pp, pp)
        x = np.array([c.replicas for c in cs], float)
        b = relaxed_s(a, s, np.zeros((1, len(idx), 1)), x, lo, float(total // o.micro_batch), v, False)[0]
        out[j] = b.max() if agg == "max" else float(b @ np.asarray(weights, float))
    out[used] *= objective_factors(inst, [outers[j] for j in used])
    return out


def _class_rows(inst, o, k: int, co, idx: list[int], memo: dict, layer_memo: dict, net, slow: float,
                reserve: float) -> list[dict]:
    """Per scenario of `idx`, the tight bound's arrays (one_class.TIGHT_ARRAYS) of class k of
    `o`, priced as `co` (class_coefficients.class_outers): the module docstring's floors and
    build's memory."""
    c = o.classes[k]
    groups = sorted(set(c.stage_groups))
    where = [groups.index(g) for g in c.stage_groups]

    def terms(i: int, g: int):
        """(the layer's LayerTerms on group g, scenario i, its tp): megatron_layer on the
        group's site as the floors price it (group_site without rings)."""
        key = (i, g, o.tp_of(g), o.cp, o.micro_batch, o.sequence_parallel, o.recompute, o.group_tp)
        hit = layer_memo.get(key)
        if hit is None:  # the floors' own pricing of it, where they priced it (most do)
            hit = floor_layer_terms(memo, i, o, g)
            if hit is not None:
                layer_memo[key] = hit
        if hit is None:
            site = group_site(inst.scenarios[i].cluster, o, g, rings=False)
            hit = layer_memo[key] = (megatron_layer(inst, stage_outer(co, site), site, net), site.tp or co.tp)
        return hit
    first = [terms(idx[0], g) for g in groups]
    hbm = [inst.scenarios[idx[0]].cluster.groups[g].gpu.hbm_bytes for g in groups]
    inflight = in_flight_micro_batches(co.pp, co.num_micro_batches, co.virtual_stages)
    mem = stage_memory(inst, co, [x for x, _ in first], where, [t for _, t in first], hbm,
                       o.replicas * o.cp, inflight, reserve)
    zeros = np.zeros(co.pp)
    out = []
    for i in idx:
        floors = [stage_floor_terms(inst, i, o, k, g, False, memo) for g in groups]
        a = np.zeros(co.pp)
        a[0] = floors[where[0]][1]
        a[-1] += floors[where[-1]][2]
        u = (zeros if o.zero == 3 else
             np.array([terms(i, groups[w])[0].rc_fwd_s for w in where]) * (1 + slow))
        out.append(dict(stage_time_s=a, layer_time_s=np.array([floors[w][0] for w in where]),
                        recompute_time_s=u, stage_sync_time_s=zeros, layer_sync_time_s=zeros,
                        layer_state_bytes=mem.layer_state_bytes, layer_act_bytes=mem.layer_act_bytes,
                        layer_ckpt_bytes=mem.layer_ckpt_bytes, stage_mem_bytes=mem.stage_mem_bytes,
                        capacity_bytes=mem.capacity_bytes))
    return out
